"""The trained-model certificate (python -m lengthgen.certify) against independent oracles.

The oracle is the real model run teacher-forced in float64 on every operand pair (or on random
ones), scored with the decision margin against the task's Python-integer sums; never the
certificate's own numbers. Two checks per model: the printed bound is at most the exhaustive exact
match, and every (pair, answer position) the model gets wrong lies in a configuration the
certificate left unproven (a proven configuration the model fails is an unsound proof).
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from constructions.addition.model import build_model
from lengthgen import certify as cli
from lengthgen.decode import decided_argmax
from lengthgen.model import Transformer, TransformerConfig
from lengthgen.proof.trained import Layout, PositionCertifier
from lengthgen.proof.trained_tables import OneLayer, Tables
from lengthgen.positions import addition_ids
from lengthgen.proof.counterexamples import wrong_positions
from lengthgen.runs import checkpoint_notes, load_checkpoint, with_notes, write_checkpoint
from lengthgen.tasks import ADDITION
from tests.cli_checks import assert_one_line_error

START = 2
COMMITTED = ["addition_coupled_1l2h", "addition_coupled_1l2h_packed", "addition_coupled_1l2h_packed_scaled",
             "addition_coupled_1l2h_unscaled"]


def all_pairs(n: int) -> list[tuple[int, int]]:
    lo = 10 ** (n - 1) if n > 1 else 0
    return list(itertools.product(range(lo, 10**n), repeat=2))


@torch.inference_mode()
def forward(model: Transformer, pairs: list[tuple[int, int]], n: int, dtype: torch.dtype = torch.float64,
            scheme: str = "coupled") -> tuple[np.ndarray, np.ndarray]:
    """The model in ``dtype`` (float64: its real function to 10^-15 or so) teacher-forced on every
    pair with the IDs of ``scheme``: [pairs, N + 2] True where it misses the true next token
    (decision margin), and [pairs, N + 2, V] logit[true token] − logit[each token] (computed in
    float64 from its logits)."""
    m64 = copy.deepcopy(model).to(dtype)
    rows, diffs = [], []
    for i in range(0, len(pairs), 2048):
        insts = [ADDITION.instance(str(a).zfill(n), str(b).zfill(n), start=START) for a, b in pairs[i:i + 2048]]
        tokens = torch.as_tensor(np.stack([x.tokens for x in insts]))
        pos = torch.as_tensor(np.stack([addition_ids(scheme, n, START) for _ in insts]))
        first = insts[0].prompt_len - 1
        for (a, b), inst in zip(pairs[i:i + 2048], insts):  # the layout's answer is the integer sum
            assert ADDITION.decode(inst.answer_tokens[:-1])[::-1] == str(a + b).zfill(n + 1)
        logits = m64(tokens[:, :-1], pos[:, :-1], logits_from=first)
        target = tokens[:, first + 1:]
        rows.append((decided_argmax(logits) != target).numpy())
        logits = logits.double()
        diffs.append((logits.gather(-1, target[..., None]) - logits).numpy())
    return np.concatenate(rows), np.concatenate(diffs)


def wrong_matrix(model: Transformer, pairs: list[tuple[int, int]], n: int) -> np.ndarray:
    return forward(model, pairs, n)[0]


def config_of(a: int, b: int, n: int, window: tuple[int, int]) -> tuple:
    """The local configuration (a ≤ b per significance, carry into the window) of one pair."""
    lo, hi = window
    da, db = ([(x // 10**j) % 10 for j in range(lo, hi + 1)] for x in (a, b))
    carry = int((a % 10**lo) + (b % 10**lo) >= 10**lo)
    return tuple(min(p) for p in zip(da, db)), tuple(max(p) for p in zip(da, db)), carry


def assert_sound(model: Transformer, n: int, pairs: list[tuple[int, int]], exhaustive: bool, dtype: str = "real",
                 scheme: str = "coupled", **kw) -> dict:
    """Every (pair, position) the model gets wrong is unproven; every real logit difference (or,
    for a float ``dtype``, every one of the forward pass in that format) lies in its
    configuration's enclosure; with all pairs, the bound is at most the exact match."""
    results = cli.certify(model, n, START, keep_enclosures=True, dtype=dtype, scheme=scheme, **kw)
    out = cli.summarize(n, results, [])
    wrong, diffs = forward(model, pairs, n, cli.forward_dtype(dtype), scheme)
    for res in results:
        failed = {(tuple(a), tuple(b), c) for a, b, c in res.failed}
        ca, cb, carry, lo, hi = res.enclosures
        row_of = {(tuple(x), tuple(y), int(c)): i for i, (x, y, c) in enumerate(zip(ca, cb, carry))}
        for k, (a, b) in enumerate(pairs):
            cfg = config_of(a, b, n, res.window)
            i = row_of[cfg]
            real = diffs[k, res.r]
            assert np.all(lo[i] - 1e-8 <= real) and np.all(real <= hi[i] + 1e-8), (a, b, res.r, lo[i], real, hi[i])
            assert not wrong[k, res.r] or cfg in failed, f"proven but wrong: {a} + {b} at position {res.r}"
    accuracy = float(np.mean(~wrong.any(axis=1)))
    if exhaustive:
        assert out["accuracy_lower_bound"] <= accuracy, (out["accuracy_lower_bound"], accuracy)
    return {**out, "accuracy": accuracy, "results": results}


@pytest.mark.parametrize("name,n,tail", [(name, 1, tail) for name in COMMITTED for tail in ("both", "affine")]
                         + [pytest.param("addition_coupled_1l2h_packed", 2, "both", marks=pytest.mark.slow)])
def test_committed_checkpoints_bound_below_exhaustive_accuracy(name, n, tail):
    """N = 2 for the other checkpoints and N = 3 (810 000 pairs): bench/bench_certify_trained.py.
    ``tail="affine"`` sends every configuration through the affine tail alone."""
    model, _, _ = load_checkpoint(f"checkpoints/{name}", n)
    out = assert_sound(model, n, all_pairs(n), exhaustive=True, tail=tail)
    # at N ≤ 2 the window holds every digit: no key is treated pessimally, so the bound is tight
    assert out["accuracy_lower_bound"] >= out["accuracy"] - 0.01


def test_a_coupled_sink_model_is_certified_on_its_own_ids():
    """Under coupled-sink the opening $ is a key at ID s − 1, where the top carry's query reads:
    every real logit difference on every pair (IDs of coupled-sink) lies in its enclosure and the bound
    is at most the exhaustive exact match. The model is one whose $ row differs from ID 0's (a fresh
    initialisation of the coupled-sink recipe, its position table scaled up so the ID matters)."""
    from lengthgen.train import TrainConfig, build_model

    model = build_model(TrainConfig(positions="coupled-sink", max_digits=5, seed=3)).double().eval()
    with torch.no_grad():
        model.pos_embed.W_pos.mul_(40.0)
    assert_sound(model, 1, all_pairs(1), exhaustive=True, scheme="coupled-sink")  # with $ at ID 0 instead: fails


def test_counterexamples_of_a_coupled_sink_model_are_checked_on_its_own_ids():
    """wrong_positions, which decides whether an unproven configuration is a real counterexample,
    must feed a coupled-sink model its own IDs: on them the committed 1-5-digit sink model gets
    40 random 20-digit additions right (measured: 0 wrong); on the paper's IDs ($ at 0) it misses
    the top carry (answer position 20) on most of them (measured 31 of 40), and nothing below it."""
    n = 20
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_sink_1l2h_packed_50", n)
    rng = np.random.default_rng(0)
    pairs = [tuple("".join(map(str, [rng.integers(1, 10), *rng.integers(0, 10, n - 1)])) for _ in range(2))
             for _ in range(40)]
    assert not any(wrong_positions(model, pairs, START, scheme="coupled-sink"))
    paper = wrong_positions(model, pairs, START)
    assert sum(n in wrong for wrong in paper) >= 20 and all(set(wrong) <= {n, n + 1} for wrong in paper)


def extreme_pairs(n: int, rng: np.random.Generator, count: int) -> list[tuple[int, int]]:
    """Every pair whose digits are all extreme (0 or 9; 1 or 9 at the lead), then pairs mixing
    extreme and random digits: the free keys at their extreme tokens."""
    lead = (1, 9) if n > 1 else (0, 9)
    numbers = [int("".join(map(str, ds))) for ds in itertools.product(lead, *[(0, 9)] * (n - 1))]
    pairs = list(itertools.product(numbers, repeat=2))
    for _ in range(count):
        ab = []
        for _ in range(2):
            ds = [int(rng.choice([rng.integers(0, 10), 0, 9])) for _ in range(n)]
            ds[0] = ds[0] if ds[0] > 0 or n == 1 else 9
            ab.append(int("".join(map(str, ds))))
        pairs.append(tuple(ab))
    return pairs


def test_affine_tail_encloses_forward_passes_with_pessimal_keys():
    """N = 3 with a one-significance window: at answer position 0 the keys of the two higher
    significances are free (λ⁺ ≈ 0.4%) and only the affine tail proves anything; every real logit
    difference, on random pairs and on pairs whose free digits are extreme, lies in the affine
    enclosure of its configuration. Positions 3 and 4 (λ⁺ ≈ 4–5%) are left unproven."""
    n = 3
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", n)
    rng = np.random.default_rng(0)
    pairs = extreme_pairs(n, rng, 150) + [(int(a), int(b)) for a, b in zip(*rng.integers(100, 1000, (2, 150)))]
    results = cli.certify(model, n, START, max_width=1, tail="affine", positions=[0], keep_enclosures=True)
    res = results[0]
    assert res.max_free_share > 0 and res.proven == res.configurations  # the free keys are real; all proven
    _, diffs = forward(model, pairs, n)
    ca, cb, carry, lo, hi = res.enclosures
    assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
    row_of = {(tuple(x), tuple(y), int(c)): i for i, (x, y, c) in enumerate(zip(ca, cb, carry))}
    for k, (a, b) in enumerate(pairs):
        i = row_of[config_of(a, b, n, res.window)]
        assert np.all(lo[i] - 1e-8 <= diffs[k, 0]) and np.all(diffs[k, 0] <= hi[i] + 1e-8), (a, b, lo[i], diffs[k, 0], hi[i])
    plain = cli.certify(model, n, START, max_width=1, tail="interval", positions=[0])[0]
    assert plain.proven == 0


def test_construction_proven_exact_through_the_generic_path():
    model, _, _ = load_checkpoint("construction", 6)
    results = cli.certify(model, 6, START)
    out = cli.summarize(6, results, cli.find_counterexamples(model, 6, START, results, 5))
    assert out["verdict"] == "PROVEN_EXACT" and out["accuracy_lower_bound"] == 1.0
    assert out["configurations_failed"] == 0 and out["counterexamples"] == []
    assert out["configurations_proven"] == sum(r.configurations for r in results) > 6 * 10**4


def test_leaky_construction_keys_outside_the_window_are_pessimal():
    """Sharpness M = 3: the heads leak attention to every ID, some sums come out wrong. Every wrong
    (pair, position) must be unproven; the leak to keys outside the window is what breaks them."""
    n = 4
    model, _ = build_model(n_digits=n, M=3.0)
    rng = np.random.default_rng(1)
    pairs = [(int(a), int(b)) for a, b in zip(rng.integers(1000, 10000, 3000), rng.integers(1000, 10000, 3000))]
    out = assert_sound(model, n, pairs, exhaustive=False)
    assert out["accuracy"] < 1 and out["verdict"] != "PROVEN_EXACT"
    examples = cli.find_counterexamples(model, n, START, out["results"], 3)
    check_counterexamples(model, n, examples)


def check_counterexamples(model: Transformer, n: int, examples: list[dict]) -> None:
    assert examples
    for ex in examples:
        a, b, r = int(ex["a"]), int(ex["b"]), ex["answer_position"]
        assert wrong_matrix(model, [(a, b)], n)[0, r]
        truth = str(a + b).zfill(n + 1)[::-1] + "$"
        assert ex["expected"] == truth[r] and ex["predicted"] != truth[r]


def planted_defect(n: int) -> Transformer:
    """The construction with one MLP unit rewired: the unit that fires for the fewest (pair, answer
    position) entries (found by forward passes) now also pushes the logits from the digit it helps
    predict toward 7, so only the sums that unit serves can come out wrong."""
    model, _ = build_model(n_digits=n)
    pairs = all_pairs(n)
    insts = [ADDITION.instance(str(a).zfill(n), str(b).zfill(n), start=START) for a, b in pairs]
    tokens = torch.as_tensor(np.stack([x.tokens for x in insts]))
    pos = torch.as_tensor(np.stack([x.pos_ids for x in insts]))
    first = insts[0].prompt_len - 1
    with torch.inference_mode():
        _, acts = model(tokens[:, :-1], pos[:, :-1], return_cache=True)
    fired = (acts["blocks.0.mlp.hook_post"][:, first:] > 0).flatten(0, 1)
    counts = fired.sum(0).double()
    unit = int(torch.where(counts > 0, counts, torch.inf).argmin())
    helped = int(tokens[:, first + 1:].flatten()[fired[:, unit]].mode().values)
    assert helped != 7
    W_U = model.unembed.W_U.detach()
    push = W_U[:, 7] - W_U[:, helped]
    with torch.no_grad():
        model.blocks[0].mlp.W_out[unit] += 3.0 * push / push.dot(push)
    return model


def test_planted_defect_is_found_with_a_real_counterexample():
    n = 2
    model = planted_defect(n)
    out = assert_sound(model, n, all_pairs(n), exhaustive=True)
    assert 0 < out["accuracy_lower_bound"] < 1 and out["accuracy"] < 1
    examples = cli.find_counterexamples(model, n, START, out["results"], 5)
    check_counterexamples(model, n, examples)
    assert out["accuracy"] > 0.99 and any(ex["predicted"] == "7" for ex in examples)


def test_cli_json_fields_and_counterexamples(tmp_path, capsys):
    model = planted_defect(2)
    with_notes(model, checkpoint_notes(task="addition", positions="coupled", name="planted", kind="construction"))
    write_checkpoint(tmp_path / "planted", model, {"made_by": "test"})
    assert cli.main(["--checkpoint", str(tmp_path / "planted"), "--digits", "2", "--json", "--samples", "50"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"digits", "verdict", "accuracy_lower_bound", "sampled_accuracy", "configurations_proven",
            "configurations_failed", "counterexamples", "seconds"} <= set(out)
    assert out["verdict"] == "LOWER_BOUND" and out["counterexamples"]
    assert set(out["counterexamples"][0]) == {"a", "b", "answer_position", "expected", "predicted"}


def two_layer_checkpoint(tmp_path):
    cfg = TransformerConfig(d_vocab=13, d_model=8, n_layers=2, n_heads=1, d_head=4, d_mlp=8, n_ctx=10)
    model = with_notes(Transformer(cfg), checkpoint_notes(task="addition", positions="coupled"))
    return str(write_checkpoint(tmp_path / "two", model, {}))


@pytest.mark.parametrize("argv,message", [
    (["--checkpoint", "checkpoints/addition_ape_1l2h", "--digits", "3"], "coupled positions"),
    (["--checkpoint", "checkpoints/addition_nope_1l2h", "--digits", "3"], "coupled positions"),
    (["--checkpoint", "checkpoints/multiplication_nx2_coupled_2l4h", "--digits", "3"], "addition"),
    (["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "0"], "at least 1"),
    (["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "16"], "position table"),
    (["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "3", "--dtype", "float64"],
     "holds float32 weights"),
    (["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "3", "--dtype", "bfloat16"], "invalid choice"),
    (["--checkpoint", "no/such/dir", "--digits", "3"], "no such checkpoint"),
    (["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "x"], "expected a whole number in digits 0-9"),
    (["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "3", "--tail", "box"], "invalid choice"),
    (["--checkpoint", "checkpoints/addition_coupled_1l2h", "--digits", "3", "--max-width", "2", "--widen-to", "1"],
     "--widen-to 1 is below --max-width 2"),
])
def test_cli_bad_input_is_one_line(argv, message, capsys):
    assert_one_line_error(cli.main, argv, cli.PROG, message, capsys)


def test_cli_refuses_two_layers_and_corrupt_files(tmp_path, capsys):
    assert_one_line_error(cli.main, ["--checkpoint", two_layer_checkpoint(tmp_path), "--digits", "2"], cli.PROG,
                          "1-layer", capsys)
    cfg = TransformerConfig(d_vocab=13, d_model=8, n_layers=1, n_heads=1, d_head=4, d_mlp=8, n_ctx=10)
    alibi = with_notes(Transformer(cfg), checkpoint_notes(task="addition", positions="hard-alibi"))
    assert_one_line_error(cli.main, ["--checkpoint", str(write_checkpoint(tmp_path / "al", alibi, {})), "--digits", "2"],
                          cli.PROG, "not addition with hard-alibi positions", capsys)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a weight file")
    assert_one_line_error(cli.main, ["--checkpoint", str(bad), "--digits", "2"], cli.PROG, "not a readable", capsys)


def construction_with_a_thin_lead(n: int, lead: float) -> Transformer:
    """The construction with b_U of 7 raised so that the smallest lead any target keeps over 7
    (measured by float64 forward passes on every pair) becomes ``lead``."""
    model, _ = build_model(n_digits=n)
    _, diffs = forward(model, all_pairs(n), n)
    gap = diffs[..., 7]
    with torch.no_grad():
        model.unembed.b_U[7] += float(gap[gap > 0].min()) - lead
    return model


def test_near_ties_within_the_decision_margin_are_not_proven():
    """b_U of 7 raised to 0.0005 below the smallest margin any target keeps over 7 (from forward
    passes): those predictions still win, but by less than the decision margin, so they count wrong."""
    n = 1
    pairs = all_pairs(n)
    model = construction_with_a_thin_lead(n, 0.0005)
    out = assert_sound(model, n, pairs, exhaustive=True)
    assert out["accuracy"] < 1 and out["verdict"] != "PROVEN_EXACT"


def test_a_position_left_unproven_is_certified_again_with_a_wider_window():
    """The unscaled checkpoint at 2 digits with one-significance windows: answer position 0 leaves
    every configuration unproven (mass 1, the other significance's keys are free); widened to two
    significances (no key is free) it is proven whole, the same run as --max-width 2."""
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_unscaled", 2)
    narrow = cli.certify(model, 2, START, max_width=1, positions=[0])[0]
    assert narrow.window == (0, 0) and narrow.proven == 0 and narrow.unproven_mass == 1
    wide = cli.certify(model, 2, START, max_width=1, widen_to=3, positions=[0])[0]
    assert wide.window == (0, 1) and wide.proven == wide.configurations == 8100 and wide.unproven_mass == 0
    direct = cli.certify(model, 2, START, max_width=2, positions=[0])[0]
    assert (direct.window, direct.proven, direct.unproven_mass) == (wide.window, wide.proven, wide.unproven_mass)



def _failed_keys(res) -> set:
    return {(tuple(map(int, x)), tuple(map(int, y)), int(k)) for x, y, k in res.failed}


@pytest.mark.parametrize("r, margin", [(0, 10.0), (2, 11.5)])
def test_widening_certifies_the_unproven_configurations_split_over_the_wider_window(r: int, margin: float) -> None:
    """Widening is a branch and bound: each configuration of the wider window lies inside exactly one
    of the narrower window's, and only those inside an unproven one are certified again. Handed a
    parent result that leaves every other narrow configuration unproven (answer position 0 widens
    upward; position 2 downward, so the carry into the narrow window comes from a digit of the wider
    one), the widened result must leave unproven exactly the operand pairs whose narrow configuration
    is one of those and whose wide configuration the wide run alone leaves unproven, counted over all
    8100 pairs; a parent with the wrong mass is refused."""
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    w = OneLayer.from_model(model)
    lay = Layout(2, START, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
    tables = Tables.build(w)
    narrow_cert, wide_cert = (PositionCertifier(w, tables, lay, max_width=width, margin=margin, tail="interval")
                              for width in (1, 2))
    narrow, wide = narrow_cert.certify(r), wide_cert.certify(r)
    assert (narrow.window[1] - narrow.window[0], wide.window[1] - wide.window[0]) == (0, 1) and wide.failed
    p = narrow_cert.inputs(r)
    chosen = np.flatnonzero(np.arange(len(p.a)) % 2 == 0)
    parent_keys = {(tuple(map(int, p.a[i])), tuple(map(int, p.b[i])), int(p.carry[i])) for i in chosen}
    pairs = all_pairs(2)
    inside = [config_of(a, b, 2, narrow.window) in parent_keys for a, b in pairs]
    parent = dataclasses.replace(narrow, failed=[(p.a[i], p.b[i], int(p.carry[i])) for i in chosen],
                                 unproven_mass=Fraction(sum(inside), len(pairs)))
    refined = wide_cert.certify(r, refine=parent)
    wide_failed = _failed_keys(wide)
    left = [config_of(a, b, 2, wide.window) for (a, b), x in zip(pairs, inside)
            if x and config_of(a, b, 2, wide.window) in wide_failed]
    assert 0 < len(left) < sum(inside) < len(pairs)
    assert refined.unproven_mass == Fraction(len(left), len(pairs))
    assert (refined.configurations, refined.proven) == (len(pairs), len(pairs) - len(left))
    assert _failed_keys(refined) == set(left)
    with pytest.raises(RuntimeError, match="do not carry their mass"):
        wide_cert.certify(r, refine=dataclasses.replace(parent, unproven_mass=parent.unproven_mass + Fraction(1, 8100)))


@pytest.mark.parametrize("name", ["entropy_003", "entropy_001_late", "entropy_001_late_seed2"])
def test_the_entropy_trained_model_is_proven_exact_on_every_5_digit_addition(name):
    """checkpoints/addition_coupled_1l2h_packed_entropy_003, ..._entropy_001_late and its seed 2 (trained
    on 1-10 digits with the attention-entropy penalty 0.03, or 0.01 from three quarters of the steps on,
    docs/training.md "Sharp attention for proofs") are PROVEN_EXACT at N = 5 in real arithmetic with
    the default two-significance window: every one of the 8.1·10^9 five-digit additions. Soundness
    on 3000 random pairs: each real logit difference lies in its configuration's enclosure and the
    model (float64, decision margin) is right on each."""
    model, _, _ = load_checkpoint(f"checkpoints/addition_coupled_1l2h_packed_{name}", 5)
    rng = np.random.default_rng(5)
    pairs = [(int(a), int(b)) for a, b in rng.integers(10**4, 10**5, size=(3000, 2))]
    out = assert_sound(model, 5, pairs, exhaustive=False)
    assert (out["verdict"], out["accuracy_lower_bound"], out["accuracy"]) == ("PROVEN_EXACT", 1.0, 1.0)
    assert out["configurations_failed"] == 0 and out["configurations_proven"] == 108600


def test_the_sink_model_with_a_late_entropy_penalty_is_proven_exact_at_its_trained_length():
    """checkpoints/addition_coupled_sink_1l2h_packed_50_entropy_late (coupled-sink IDs, trained on 1-5
    digits, the attention-entropy penalty 0.01 from three quarters of the steps on; docs/training.md,
    "A sink for the top carry") is PROVEN_EXACT at N = 5 with the default window, the final ``$``
    included: the same recipe without the penalty leaves that position unproven (free share 37%).
    Soundness on 2000 random pairs, on the model's own IDs."""
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_sink_1l2h_packed_50_entropy_late", 5)
    rng = np.random.default_rng(6)
    pairs = [(int(a), int(b)) for a, b in rng.integers(10**4, 10**5, size=(2000, 2))]
    out = assert_sound(model, 5, pairs, exhaustive=False, scheme="coupled-sink")
    assert (out["verdict"], out["accuracy_lower_bound"], out["accuracy"]) == ("PROVEN_EXACT", 1.0, 1.0)
    end = out["results"][-1]
    assert end.r == 6 and end.max_free_share < 0.01  # measured 2.4e-4


def test_the_sink_and_the_penalty_prove_the_top_carry_and_the_end_at_10_digits():
    """checkpoints/addition_coupled_sink_1l2h_pack6_100_entropy_late_seed2 (coupled-sink, six problems
    per packed row, late entropy penalty; trained on 1-10 digits): at N = 10 the two answer positions
    that stopped every earlier 1-10-digit model, the top carry c_10 and the final ``$``, are proven on
    every configuration (bench/results/certify_trained/sink_pack6_entropy_late_seed2_n10.json; the
    positions below are not all proven yet). Soundness on 1000 random pairs, on the model's own IDs."""
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_sink_1l2h_pack6_100_entropy_late_seed2", 10)
    rng = random.Random(11)
    pairs = [(rng.randrange(10**9, 10**10), rng.randrange(10**9, 10**10)) for _ in range(1000)]
    out = assert_sound(model, 10, pairs, exhaustive=False, scheme="coupled-sink", positions=[10, 11])
    assert [(r.r, r.unproven_mass, r.proven == r.configurations) for r in out["results"]] == [(10, 0, True), (11, 0, True)]
