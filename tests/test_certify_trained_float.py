"""``python -m lengthgen.certify --dtype float32``: the bound for the model's own float32 forward pass.

The oracle is that forward pass itself (teacher-forced in float32 on every operand pair, scored
with the decision margin against Python-integer sums), never the certificate's numbers: every
float32 logit difference lies in the float32 enclosure of its configuration, every pair the
float32 model gets wrong is unproven, and the bound is at most the exhaustive float32 exact match.
The float32 enclosures also contain the real ones (they are the real ones widened), and a model
whose real margin clears the decision margin by less than its float32 rounding is proven in real
arithmetic but not in float32.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from constructions.addition.model import build_model
from lengthgen import certify as cli
from lengthgen.runs import load_checkpoint
from tests.test_certify_trained import START, all_pairs, assert_sound, construction_with_a_thin_lead, forward


def test_the_construction_is_proven_exact_in_float32_and_every_float32_pass_is_enclosed():
    """N = 2, all 8100 pairs: PROVEN_EXACT in float32, and every float32 logit difference (which
    differs from the float64 one) lies in its float32 enclosure."""
    n = 2
    model, _ = build_model(n_digits=n)
    pairs = all_pairs(n)
    out = assert_sound(model, n, pairs, exhaustive=True, dtype="float32")
    assert out["verdict"] == "PROVEN_EXACT" and out["accuracy"] == 1.0
    _, d32 = forward(model, pairs, n, torch.float32)
    _, d64 = forward(model, pairs, n)
    assert np.max(np.abs(d32 - d64)) > 1e-7  # the float32 pass really rounds


@pytest.mark.parametrize("name", ["addition_coupled_1l2h_packed", "addition_coupled_1l2h_unscaled"])
def test_trained_checkpoints_float32_enclosures_hold_the_float32_pass(name):
    """N = 1, all 100 pairs, both tails: every float32 logit difference lies inside its float32
    enclosure, which contains the real one, and the float32 statement is PROVEN_EXACT (as
    docs/certificate.md states): the plain pass is far too wide (the worst-case rounding of 128-term
    dot products and of LayerNorm, pushed through LN2, the MLP and the final LN as boxes), but the
    affine tail keeps the fixed keys' mean as one generator per key."""
    n = 1
    model, _, _ = load_checkpoint(f"checkpoints/{name}", n)
    pairs = all_pairs(n)
    out = assert_sound(model, n, pairs, exhaustive=True, dtype="float32")
    real = cli.certify(model, n, START, keep_enclosures=True)
    for f, r in zip(out["results"], real):
        assert f.window == r.window and f.proven <= r.proven
        assert np.all(f.enclosures[3] <= r.enclosures[3]) and np.all(f.enclosures[4] >= r.enclosures[4])
    assert out["accuracy_lower_bound"] <= cli.summarize(n, real, [])["accuracy_lower_bound"]
    assert out["verdict"] == "PROVEN_EXACT"


def test_a_real_margin_thinner_than_the_float32_rounding_is_not_proven_in_float32():
    """The construction at N = 1 with b_U of 7 raised to 10^-6 above the decision margin below the
    smallest real lead over 7: every prediction still wins by more than the margin in real
    arithmetic (PROVEN_EXACT), but the float32 logits alone may move by more than 10^-6, so the
    float32 statement must leave those configurations unproven."""
    n = 1
    pairs = all_pairs(n)
    model = construction_with_a_thin_lead(n, cli.DECISION_MARGIN + 1e-6)
    real = cli.summarize(n, cli.certify(model, n, START), [])
    assert real["verdict"] == "PROVEN_EXACT"
    out = assert_sound(model, n, pairs, exhaustive=True, dtype="float32")
    assert out["verdict"] != "PROVEN_EXACT"


def test_cli_float32_json(capsys):
    """The statement's format is in the report and the JSON; the construction at 4 digits is
    PROVEN_EXACT in float32 through the command."""
    assert cli.main(["--checkpoint", "construction", "--digits", "4", "--dtype", "float32", "--json",
                     "--no-progress"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    assert out["dtype"] == "float32" and out["verdict"] == "PROVEN_EXACT"
    assert cli.main(["--checkpoint", "construction", "--digits", "2", "--dtype", "float32", "--no-progress"]) == 0
    assert "the float32 forward pass under the rounding model" in capsys.readouterr().out


def test_each_statement_is_checked_by_forward_passes_in_its_own_format():
    """Counterexamples and exhaustive checks of a float32 statement run the float32 model (a pair the
    float64 model gets right may be wrong in float32); the real statement's run in float64."""
    assert cli.forward_dtype("real") is torch.float64
    assert cli.forward_dtype("float32") is torch.float32
    assert cli.forward_dtype("float64") is torch.float64
