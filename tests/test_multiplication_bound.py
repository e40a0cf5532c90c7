"""The softmax-leak budget of the multiplication construction (docs/multiplication.md, Bound):
the analytic budget certifies the sharpness ``build_model`` picks, refuses a too-blunt one, and
the measured score gaps and value errors lie inside it."""
from __future__ import annotations

import math

import pytest
import torch
from multiplication_checks import expected_sets, model_for

from constructions.multiplication import instance
from constructions.multiplication.bound import error_budget
from constructions.multiplication.layout import required_sharpness, residual_basis


@pytest.mark.parametrize("n_digits", [1, 10, 10**5, 2**60, 2**120])
def test_the_default_sharpness_is_certified(n_digits: int) -> None:
    n_tokens = 2 * n_digits + 8
    budget = error_budget(required_sharpness(n_tokens), n_tokens)
    assert budget["certified"] and budget["dT"] < 36 and budget["delta1"] <= 1.0000001e-9


def test_a_blunt_sharpness_is_not_certified() -> None:
    assert not error_budget(6.0, 208)["certified"]
    assert not error_budget(required_sharpness(10**6), 10**9)["certified"]  # M sized for a shorter input


def test_measured_gaps_and_errors_lie_inside_the_budget() -> None:
    model, meta = model_for(n_digits=12, dtype="float64")
    inst = instance("999999999999", 99)
    n_tokens = len(inst.tokens)
    budget = error_budget(meta["M"], n_tokens)
    M, s = meta["M"], budget["score_shift"]
    _, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
    scores = acts["blocks.1.attn.hook_attn_scores"][0]
    basis = residual_basis(model.cfg.d_model)
    resid = acts["blocks.1.hook_resid_mid"][0]
    digits = [int(c) for c in inst.tokens[1:13][::-1]]  # a_0 .. a_11
    for q in range(inst.prompt_len - 1, n_tokens - 1):
        for head, keys in enumerate(expected_sets(inst.n, q)):
            row = scores[head, q, : q + 1]
            inside = row[sorted(keys)]
            outside = torch.ones(q + 1, dtype=torch.bool)
            outside[sorted(keys)] = False
            assert float(inside.max() - inside.min()) <= 2 * s + 1e-9
            assert float(row[outside].max()) <= float(inside.min()) - (2 * M - 2 * s)
        i = q - (inst.n + 5)
        at = lambda j: digits[j] if 0 <= j < 12 else 0  # noqa: E731
        A0, A1 = 100 * at(i + 1) + 10 * at(i) + at(i - 1), 100 * at(i) + 10 * at(i - 1) + at(i - 2)
        errors = {"B0": 9, "B1": 9, "A0": A0, "A1": A1}
        for name, want in errors.items():
            assert abs(float(resid[q, basis.index(name)]) - want) <= (9 if name[0] == "B" else 1998) * budget["eta"] + 1e-9
    assert math.isfinite(budget["dT"]) and budget["certified"]


def test_proposition_5_2_search_distinguishes_the_construction_and_fools_its_nope_twin() -> None:
    """The construction (coupled IDs, 3 layers) tells every permutation pair of 2-digit prompts
    apart; the same weights without positions — here cut to one layer, Proposition 5.2's setting —
    are fooled."""
    from constructions.copying import nope_twin
    from constructions.nope.search import coupled_pos_ids, find_counterexample, search

    model, _ = model_for(n_digits=2)
    report = search(model, "multiplication_nx2", 2, pos_ids_fn=coupled_pos_ids("multiplication_nx2", start=2))
    assert report.mode == "exhaustive" and report.certificate is None and report.pairs_compared > 0
    twin = nope_twin(model)
    twin.blocks = twin.blocks[:1]
    twin.cfg.n_layers = 1
    cert = find_counterexample(twin, "multiplication_nx2", 2)
    assert cert.verify(twin) and sorted(cert.prompt_a.text) == sorted(cert.prompt_b.text)
