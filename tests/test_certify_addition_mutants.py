"""Tests that kill the mutants of the Theorem 5.1 addition certificate
(constructions/addition/certify/margins.py and ffn.py) that its other tests let survive
(docs/certificate.md, "Mutation testing"). Each expectation comes from outside the certificate:
a float64 forward pass of the model (tests/forward_oracle.py) that finds a wrong answer, the
classes and local configurations of the construction worked out by hand (docs/theorem-5-1.md),
or P = ⌊(d − 17)/2⌋."""
from __future__ import annotations

import copy
import dataclasses
import re

import numpy as np
import pytest
import torch

from constructions.addition import START_ID, build_model
from constructions.addition.certify.margins import certify
from lengthgen.model import Transformer
from lengthgen.tasks import ADDITION
from forward_oracle import addition_passes, forward64

N = 3
# carry chains, all 9s, and the inputs where the M = 2.8 model below answers wrong
PAIRS = [("999", "001"), ("999", "999"), ("000", "897"), ("007", "884"), ("555", "445"), ("090", "910")]


def _model(M: float | None = None, n: int = N) -> Transformer:
    return build_model(n_digits=n, dtype="float64", M=M)[0]


def _passes(model: Transformer, a: str, b: str) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    """The float64 pass, the hard-max pass on the attended sets measured from it, the answer rows
    and their targets (:func:`forward_oracle.addition_passes`)."""
    f, _, hm, q, want, _, _ = addition_passes(model, a, b, START_ID)
    return f, hm, q, want


def test_a_model_that_answers_wrong_through_the_softmax_leak_fails() -> None:
    """M = 2.8 at n = 3: the hard-max limit is right everywhere, but the float64 forward pass
    answers 000 + 897 wrong. The leak moves the FFN inputs by less than 1 (so a check that skipped
    radii below 1, or read only the first hidden unit, would see nothing): the ReLU stability
    check is what must FAIL it."""
    model = _model(M=2.8)
    wrong = 0
    for a, b in PAIRS:
        f, hm, q, want = _passes(model, a, b)
        assert np.array_equal(hm["logits"][q].argmax(1), want)
        wrong += int(np.any(f["logits"][q].argmax(1) != want))
        assert np.abs(f["pre"] - hm["pre"])[q].max() < 1  # the measured deviation stays below 1
    assert wrong >= 2
    cert = certify(model, N, "real")
    assert cert.passed is False and cert.reason == "leak", cert.message
    assert "ReLU" in cert.message and "needs more than its margin allows" in cert.message
    assert "the requirement is mostly leak (leak " in cert.message and 0 < cert.slack < 1
    # the binding class and unit: t moves in steps of 0.1 and the trapezoid of digit 1 has its
    # breakpoint at 1 + 0.15, so its pre-activation stays 0.05 from the kink, on, at c_{n-1}
    assert cert.message.startswith("query c_2: head 1 -> {$}; head 2 -> {$, c_2, b_2, a_2}: ReLU trap_m1_+0.15 "
                                   "stays on (min |pre-activation| 0.05) needs more than its margin allows")
    mlp = model.blocks[0].mlp
    with torch.no_grad():  # the same function with the hidden units in reverse order
        mlp.W_in.copy_(mlp.W_in.flip(1)), mlp.b_in.copy_(mlp.b_in.flip(0)), mlp.W_out.copy_(mlp.W_out.flip(0))
    reversed_units = certify(model, N, "real")
    assert reversed_units.passed is False and reversed_units.slack == pytest.approx(cert.slack, rel=1e-12)


def test_a_readout_tie_that_the_leak_tips_fails() -> None:
    """The built model's logits do not move with small FFN-input deviations (its units sit on
    plateaus). With W_U reading PRE_SUM / 40 into the '$' logit they do; b_U['$'] is then raised so
    that, at the digit row where the float64 pass brings '$' closest, '$' beats the right digit
    while the hard-max limit still prefers the digit on every row measured (PRE_SUM is at most 18,
    reached by 999 + 999): the forward pass answers wrong, so the logit-gap check (each gap's
    sensitivity to the residual deviation, ReLU stability still holding) must FAIL it."""
    model = _model()
    with torch.no_grad():
        model.unembed.W_U[model.annotations.residual.index("PRE_SUM"), ADDITION.EOS] += 0.025
    rows = []
    for a, b in PAIRS:
        f, hm, q, want = _passes(model, a, b)
        digit = want != ADDITION.EOS
        g_act = f["logits"][q][digit, want[digit]] - f["logits"][q][digit, ADDITION.EOS]
        g_hm = hm["logits"][q][digit, want[digit]] - hm["logits"][q][digit, ADDITION.EOS]
        rows += list(zip(g_act, g_hm))
    g_act, g_hm = np.array(rows).T
    lift = float(g_act.min() + 0.25 * (g_hm.min() - g_act.min()))
    assert g_act.min() < lift < g_hm.min()  # wrong in the forward pass, right at the hard-max limit
    with torch.no_grad():
        model.unembed.b_U[ADDITION.EOS] += lift
    f, hm, q, want = _passes(model, *PAIRS[int(np.argmin(g_act)) // (N + 1)])
    assert np.any(f["logits"][q].argmax(1) == ADDITION.EOS) and np.array_equal(hm["logits"][q].argmax(1), want)
    # in float32 the readout's own rounding term (float_terms.logit_error) outweighs the leak's share
    for dtype, mostly in (("real", "leak"), ("float32", "float")):
        cert = certify(model, N, dtype)
        assert cert.passed is False and cert.reason == mostly, cert.message
        assert ": logit gap to '$' (gap " in cert.message and f"the requirement is mostly {mostly} (leak " in cert.message
        checks = [check for *_, check in cert.classes if check.where.startswith("logit gap to '$'")]
        assert checks and min(check.slack for check in checks) == cert.slack < 1
        for check in checks:  # leak, spread and float parts; in float32 the float part holds the readout term
            assert list(check.parts) == ["leak", "spread", "float"] and check.parts["leak"] > 0
            assert check.parts["float"] >= cert.float_terms.logit_error >= 0
        for *_, check in cert.classes:  # slack = printed margin (4 digits) / the parts' sum, each check
            margin = float(re.search(r"\((?:gap|min \|pre-activation\|) ([-0-9.e+]+)\)", check.where).group(1))
            assert check.slack == pytest.approx(margin / sum(check.parts.values()), rel=1e-3), (check.where, check.parts)
            if check.where.startswith("ReLU"):  # the ReLU checks carry each unit's pre-activation float term
                assert check.parts["float"] >= cert.float_terms.pre_error.min() >= 0
                assert (dtype == "real") == (cert.float_terms.pre_error.max() == 0)


def test_the_classes_of_a_three_digit_adder_are_worked_out_by_hand() -> None:
    """docs/theorem-5-1.md: head 1 of query c_k reads a_{k+1}, b_{k+1} (of '=': a_0, b_0), head 2
    reads a_k, b_k, c_k (of '=': '=' and '+', of c_n: c_n alone). The local configurations are
    the digits of the significances read (100 per significance) times the carry into the lowest
    one when it is not 0. Every field of PASS, with P = ⌊(23 − 17)/2⌋ = 3."""
    cert = certify(_model(), N, "real")
    assert cert.passed is True and cert.reason == "" and cert.message == "PASS"
    assert (cert.n, cert.d_model, cert.P, cert.dtype) == (3, 23, 3, "real")
    assert [(c[0], c[1], c[2]) for c in cert.classes] == [
        ("query '=': head 1 -> {$, b_0, a_0}; head 2 -> {$, =, +}", 1, 100),
        ("query c_0: head 1 -> {$, b_1, a_1}; head 2 -> {$, c_0, b_0, a_0}", 1, 100**2),
        ("query c_1: head 1 -> {$, b_2, a_2}; head 2 -> {$, c_1, b_1, a_1}", 1, 100**2 * 2),
        ("query c_2: head 1 -> {$}; head 2 -> {$, c_2, b_2, a_2}", 1, 100 * 2),
        ("query c_3: head 1 -> {$}; head 2 -> {$, c_3}", 1, 100 * 2)]
    assert [h["sizes"] for h in cert.heads] == [[1, 3], [2, 3, 4]]
    # at n = 6, c_1 … c_4 share one class; c_0 (no carry in) has the same key pattern relative to
    # its query but is a class of its own, and so are c_5 (nothing above it) and c_6
    six = certify(_model(n=6), 6, "real")
    assert [(c[0], c[1], c[2]) for c in six.classes] == [
        ("query '=': head 1 -> {$, b_0, a_0}; head 2 -> {$, =, +}", 1, 100),
        ("query c_0: head 1 -> {$, b_1, a_1}; head 2 -> {$, c_0, b_0, a_0}", 1, 100**2),
        ("query c_1: head 1 -> {$, b_2, a_2}; head 2 -> {$, c_1, b_1, a_1}", 4, 100**2 * 2),
        ("query c_5: head 1 -> {$}; head 2 -> {$, c_5, b_5, a_5}", 1, 100 * 2),
        ("query c_6: head 1 -> {$}; head 2 -> {$, c_6}", 1, 100 * 2)]
    assert cert.slack == min(c[3].slack for c in cert.classes) > 1
    assert cert.float_terms.score_error == 0 and not cert.float_terms.overflow
    assert set(cert.deltas) == {"PRE_SUM", "PRE_CARRY", "PRE_EOS"}  # the coordinates the heads write
    assert all(set(d) == {"leak", "spread", "float"} and d["leak"] > 0 for d in cert.deltas.values())
    # real arithmetic: the float part is only the outward rounding of leak and spread, never below 0
    assert all(0 <= d["float"] <= 1e-9 * (d["leak"] + d["spread"]) for d in cert.deltas.values())


def _failed(model: Transformer, n: int, dtype: str | None) -> None:
    cert = certify(model, n, dtype)
    assert cert.passed is False and cert.reason and cert.message != "PASS"
    return cert


def test_a_failed_certificate_names_its_model_and_arithmetic() -> None:
    """FAIL keeps n, d, P = ⌊(d − 17)/2⌋ and the arithmetic (the model's dtype when none is
    given), and the float terms once they are computed, on every path to FAIL."""
    model = _model()
    two = Transformer(dataclasses.replace(model.cfg, n_layers=2))  # outside the covered shape
    cert = _failed(two, N, None)
    assert (cert.reason, cert.n, cert.d_model, cert.P, cert.dtype) == ("structure", 3, 23, 3, "float64")
    assert cert.message == "the certificate covers 1-layer, ReLU, LayerNorm-free models with learned positions"
    far = _model(n=6)
    with torch.no_grad():  # IDs 2 and 7 swap position rows: a head reads digits five places apart
        far.pos_embed.W_pos[[2, 7]] = far.pos_embed.W_pos[[7, 2]]
    cert = _failed(far, 6, "real")
    assert (cert.reason, cert.n, cert.d_model, cert.P, cert.dtype) == ("structure", 6, 23, 3, "real")
    assert cert.message.startswith("query ") and " reads significances " in cert.message
    assert cert.float_terms is not None and cert.float_terms.score_error == 0  # real arithmetic: zero terms
    wrong = _model()
    with torch.no_grad():  # '$' beats every digit by 10 at the hard-max limit
        wrong.unembed.b_U[ADDITION.EOS] += 1e3
    cert = _failed(wrong, N, "float32")
    assert (cert.reason, cert.n, cert.d_model, cert.P, cert.dtype) == ("hardmax", 3, 23, 3, "float32")
    assert cert.float_terms is not None and cert.float_terms.score_error > 0
    assert "instead of '" in cert.message and "local configurations not provably right" in cert.message
    wide = build_model(n_digits=2, d_model=201, dtype="bfloat16")[0]
    cert = _failed(wide, 2, None)
    assert (cert.reason, cert.n, cert.d_model, cert.P, cert.dtype) == ("float", 2, 201, 92, "bfloat16")
    assert cert.float_terms is not None


def test_operands_beyond_the_position_table_are_refused() -> None:
    model = _model()  # IDs 0 .. 5: the 3-digit operands use 2 .. 5 (s = 2), one more digit would need 6
    with pytest.raises(ValueError, match="4-digit operands need position IDs up to 6; the model's table stops at 5"):
        certify(model, 4, "real")


def _towards_eos(m: Transformer) -> torch.Tensor:
    """A residual vector that lifts the '$' logit by 1000 through W_U."""
    w = m.unembed.W_U[:, ADDITION.EOS]
    return w * 1e3 / w.norm() ** 2


# each makes the 1-digit model wrong at the hard-max limit (a fresh certificate FAILs it)
EDITS = {
    **{name: (lambda name: lambda m: dict(m.named_parameters())[name].add_(0.5))(name) for name in (
        "embed.W_E", "pos_embed.W_pos", "blocks.0.attn.W_V", "blocks.0.attn.b_V", "blocks.0.attn.W_O",
        "blocks.0.attn.b_O", "blocks.0.mlp.W_in", "blocks.0.mlp.b_in", "blocks.0.mlp.W_out")},
    "unembed.W_U": lambda m: m.unembed.W_U.mul_(-1),
    "unembed.b_U": lambda m: m.unembed.b_U.__setitem__(ADDITION.EOS, m.unembed.b_U[ADDITION.EOS] + 1e3),
    "blocks.0.mlp.b_out": lambda m: m.blocks[0].mlp.b_out.add_(_towards_eos(m)),
}


@pytest.mark.parametrize("which", list(EDITS))
def test_a_shared_cache_never_carries_a_verdict_to_other_weights(which: str) -> None:
    """The cache keeps the FFN tables and the classes between calls; it must be keyed by every
    weight they read: after the built 1-digit model passed with it, a model with one weight
    changed gets the certificate it gets with a fresh cache (it fails there)."""
    cache: dict = {}
    assert certify(_one_digit(), 1, "real", cache=cache).passed
    model = _one_digit()
    with torch.no_grad():
        EDITS[which](model)
    fresh = certify(model, 1, "real")
    assert not fresh.passed, which
    shared = certify(model, 1, "real", cache=cache)
    assert (shared.passed, shared.reason, shared.message) == (fresh.passed, fresh.reason, fresh.message)


def _one_digit() -> Transformer:
    return build_model(n_digits=1, d_model=21, dtype="float64")[0]


def test_a_hidden_unit_that_reads_no_moving_coordinate_needs_no_margin() -> None:
    """One more hidden unit, W_in column 0, bias 0.05, W_out row 0: the function is the 1-digit
    model's, and no residual deviation can move this unit (radius 0), so its 0.05 from the kink is
    no requirement: PASS with the same slack as without it."""
    model = _one_digit()
    big = Transformer(dataclasses.replace(model.cfg, d_mlp=model.cfg.d_mlp + 1))
    state = model.state_dict()
    for key, pad in (("blocks.0.mlp.W_in", (0, 1)), ("blocks.0.mlp.W_out", (0, 0, 0, 1))):
        state[key] = torch.nn.functional.pad(state[key], pad)
    state["blocks.0.mlp.b_in"] = torch.cat([state["blocks.0.mlp.b_in"], torch.tensor([0.05], dtype=torch.float64)])
    big.load_state_dict(state)
    big.annotations = model.annotations
    cert, plain = certify(big, 1, "real"), certify(model, 1, "real")
    assert cert.passed is True and plain.passed is True and cert.slack == plain.slack


def test_biases_that_cancel_out_keep_the_certificate() -> None:
    """Every bias set, with shifts that cancel exactly: b_V[h] += w_h (the head output moves by
    w_h·W_O[h], attention sums to 1), b_O += v − Σ_h w_h·W_O[h] (net residual shift v),
    b_in −= v·W_in, b_out += z, b_U −= (v + z)·W_U. The float64 forward pass is unchanged, so in
    real arithmetic the certificate must PASS with the same slack; a bias read with the wrong
    sign, or not read, breaks the cancellation by far more than the margins."""
    model, shifted = _one_digit(), _one_digit()
    rng = np.random.default_rng(3)
    a, mlp = shifted.blocks[0].attn, shifted.blocks[0].mlp
    d, d_head = model.cfg.d_model, a.W_V.shape[-1]
    v, z = (torch.tensor(rng.normal(0, 3, d)) for _ in range(2))
    with torch.no_grad():
        for h in range(a.W_V.shape[0]):
            w = torch.tensor(rng.normal(0, 3, d_head))
            a.b_V[h] += w
            a.b_O -= w @ a.W_O[h]
        a.b_O += v
        mlp.b_in -= v @ mlp.W_in
        mlp.b_out += z
        shifted.unembed.b_U -= (v + z) @ shifted.unembed.W_U
    for x, y in [("9", "1"), ("9", "9"), ("0", "0"), ("4", "5")]:
        inst = ADDITION.instance(x, y, start=START_ID)
        tok, pos = inst.tokens[:-1], inst.pos_ids[:-1]
        assert np.allclose(forward64(shifted, tok, pos)["logits"], forward64(model, tok, pos)["logits"], atol=1e-9)
    cert, plain = certify(shifted, 1, "real"), certify(model, 1, "real")
    assert cert.passed is True and plain.passed is True
    assert cert.slack == pytest.approx(plain.slack, rel=1e-6)


def test_an_exact_tie_at_the_hard_max_limit_fails_there() -> None:
    """The 1-digit model's right digit beats '$' by exactly 1 at the hard-max limit on digit rows
    (float64 pass below); b_U['$'] += 1 makes it an exact tie, which is not a right prediction:
    FAIL with reason "hardmax", not a zero margin found later."""
    model = _one_digit()
    inst = ADDITION.instance("4", "5", start=START_ID)
    logits = forward64(model, inst.tokens[:-1], inst.pos_ids[:-1])["logits"][inst.prompt_len - 1]
    assert logits[ADDITION.vocabulary["9"]] - logits[ADDITION.EOS] == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        model.unembed.b_U[ADDITION.EOS] += 1.0
    cert = certify(model, 1, "real")
    assert cert.passed is False and cert.reason == "hardmax", cert.message


def test_the_total_variation_moves_by_the_score_error_on_both_sides() -> None:
    """Each score may move by s = float_terms.score_error: the mass outside S over the mass on S
    then grows by at most e^s / e^−s = e^{2s}, and the spread η by 2s, so per head
    TV = λ·e^{2s} + (e^{η + 2s} − 1)/4 at the class with the largest TV, between the values with
    η = 0 and with the largest η (float32, built 3-digit model, λ and η as printed: maxima)."""
    cert = certify(build_model(n_digits=N, dtype="float32")[0], N, "float32")
    s = cert.float_terms.score_error
    assert s > 0
    for head in cert.heads:
        low, high = (head["leak"] * np.exp(2 * s) + np.expm1(eta + 2 * s) / 4 for eta in (0.0, head["eta"]))
        assert low * (1 - 1e-9) <= head["tv"] <= high * (1 + 1e-9), (low, head["tv"], high)


def test_a_leak_above_one_is_clamped_at_one() -> None:
    """M = 0.05: almost no attention on S, λ = mass outside / mass on S far above 1; the total
    variation is at most 1 whatever λ is, so the printed leak is 1 (and the certificate FAILs)."""
    cert = certify(build_model(n_digits=1, d_model=21, dtype="float64", M=0.05)[0], 1, "real")
    assert cert.passed is False
    assert [head["leak"] for head in cert.heads] == [1.0, 1.0]
    assert all(1.0 <= head["tv"] <= 1.0 + 1e-9 + (np.expm1(head["eta"]) / 4) for head in cert.heads)  # no float share


@pytest.mark.parametrize("k", [-1, 0, 1, 2])
def test_the_local_configurations_are_every_digit_combination(k: int) -> None:
    """ffn._configs at n = 3, for the attended sets of each class of the built model that reads
    digits (the classes above, as (role, significance, ID); roles 1, 2, 3, 4, 5, 6 are a, b, c,
    '+', '=', '$'): every combination of the digits read once (times the carry into the lowest
    significance when it is not 0), the query token '=' for the first class, and the target
    c_0 = (a_0 + b_0) mod 10 there, by Python integer arithmetic."""
    from constructions.addition.certify.ffn import ClassSpec, _configs

    spec_members = {-1: (((6, -1, 0), (2, 0, 0), (1, 0, 0)), ((6, -1, 0), (5, -1, 0), (4, -1, 0))),
                    0: (((6, -1, 0), (2, 1, 0), (1, 1, 0)), ((6, -1, 0), (3, 0, 0), (2, 0, 0), (1, 0, 0))),
                    1: (((6, -1, 0), (2, 2, 0), (1, 2, 0)), ((6, -1, 0), (3, 1, 0), (2, 1, 0), (1, 1, 0))),
                    2: (((6, -1, 0),), ((6, -1, 0), (3, 2, 0), (2, 2, 0), (1, 2, 0)))}[k]
    tokens, query, target, _ = _configs(ClassSpec(N, k, 0, spec_members))
    sigs = sorted({s for mem in spec_members for r, s, _ in mem if r in (1, 2)} | ({k} if 0 <= k < N else set()))
    lo = sigs[0] if sigs else N - 1
    rows = set()
    for i in range(len(query)):
        a = {s: int(tokens[(1, s)][i]) for s in sigs if (1, s) in tokens}
        b = {s: int(tokens[(2, s)][i]) for s in sigs if (2, s) in tokens}
        carry = None
        for s in range(lo, N):  # the carry into lo is what makes c_lo differ from (a_lo + b_lo) mod 10
            if (3, s) in tokens and s in a:
                carry = (int(tokens[(3, s)][i]) - a[s] - b[s]) % 10
                break
        rows.add((tuple(sorted(a.items())), tuple(sorted(b.items())), carry, int(query[i]), int(target[i])))
    assert len(rows) == len(query)  # no configuration twice
    width = max(1, len(sigs))
    carries = 2 if lo >= 1 else 1
    assert len(query) == 100**width * carries
    if k == -1:
        assert set(query.tolist()) == {ADDITION.EQUALS}
        assert all(t == (dict(a)[0] + dict(b)[0]) % 10 for a, b, _, _, t in rows)


def test_the_positional_effect_is_the_hard_max_residual_of_the_position_rows() -> None:
    """position_effect encloses the part of the hard-max residual that comes from the position rows:
    W_pos[query] plus, per head, the mean over its attended set of W_pos[key]·W_V·W_O (``$`` among
    them). The built model's values read no position coordinate, so W_V is given some here
    (0.3·POS_1[0] and −0.2·POS_2[1] into value coordinate 4, which W_O writes to PRE_SUM and
    PRE_CARRY), and the row of ID 0 (``$``'s) a NUM of 0.5 that the values read; the oracle is the
    float64 hard-max pass on the sets the model attends, run with W_E and every bias zeroed."""
    from constructions.addition.certify.margins import Layout, Weights, position_effect
    from forward_oracle import hardmax64
    from lengthgen.proof.attention import head_bounds

    model = _model()
    names = model.annotations.residual
    with torch.no_grad():
        for h, (dim, w) in enumerate((("POS_1[0]", 0.3), ("POS_2[1]", -0.2))):
            model.blocks[0].attn.W_V[h, names.index(dim), 4] += w
        model.pos_embed.W_pos[0, names.index("NUM")] = 0.5
    W = Weights.from_model(model)
    L = Layout.build(N, START_ID)
    table, m_max = L.positions_by_id()
    effect = position_effect(W, L, [head_bounds(W, L, h, table, m_max, {}) for h in range(W.W_Q.shape[0])])
    bare = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in bare.named_parameters():
            if name == "embed.W_E" or ".b_" in name or name.startswith("b_"):
                p.zero_()
    moved = 0.0
    for a, b in PAIRS:
        _, S, _, q, _, tok, pos = addition_passes(model, a, b, START_ID)
        want = hardmax64(bare, tok, pos, S)["resid_mid"][q]
        assert np.all(effect.lo - 1e-12 <= want) and np.all(want <= effect.hi + 1e-12), (a, b)
        moved = max(moved, float(np.abs(want - W.W_pos[L.ids[L.queries]]).max()))
    assert moved > 0.1  # the value path of the position rows is really there


def test_each_overflow_path_fails_with_reason_float_and_keeps_its_terms(monkeypatch) -> None:
    """Both ways a float term can leave the finite range end in FAIL (reason "float"), naming the
    model, the arithmetic and the message of their path, with the float terms kept: float16
    scores beyond a quarter of its largest value (M = 10^4), and a float term that is not finite
    although nothing in the forward pass overflowed (made so here by hand)."""
    big, _ = build_model(n_digits=2, M=1e4, dtype="float16")
    cert = _failed(big, 2, None)
    assert (cert.reason, cert.n, cert.d_model, cert.P, cert.dtype) == ("float", 2, 21, 2, "float16")
    assert re.fullmatch(r"float16 overflow: magnitudes up to 4e\+04 come within 4x of the largest finite "
                        r"float16 \(6\.55e\+04\)", cert.message), cert.message
    assert cert.float_terms is not None and cert.float_terms.overflow

    import constructions.addition.certify.margins as margins
    real = margins.attention_float_terms

    def unbounded(*args, **kwargs):
        terms = real(*args, **kwargs)
        terms.resid_error = np.full_like(terms.resid_error, np.inf)
        return terms

    monkeypatch.setattr(margins, "attention_float_terms", unbounded)
    cert = _failed(_model(), N, "float32")
    assert (cert.reason, cert.n, cert.d_model, cert.P, cert.dtype) == ("float", 3, 23, 3, "float32")
    assert cert.message == "a bound is not finite (overflow in the float term)"
    assert cert.float_terms is not None and np.isinf(cert.float_terms.resid_error).all()


def test_the_spread_part_is_a_quarter_of_expm1_eta_clamped_at_one() -> None:
    """tv_parts on two classes by hand: η = 0.5 gives (e^0.5 − 1)/4 (rounded up, never less);
    η = 3 gives (e^3 − 1)/4 = 4.77, clamped at 1 (a total variation is at most 1), and a score
    perturbation then adds nothing to the spread part: the float part is the leak's growth only."""
    from types import SimpleNamespace

    from constructions.addition.certify.margins import tv_parts

    hb = SimpleNamespace(log_leak=np.array([-5.0, 1.0]), eta=np.array([0.5, 3.0]))
    cls = np.array([0, 1])
    exact = tv_parts(hb, cls, 2, 0.0)
    quarter = np.expm1(0.5) / 4
    assert quarter <= exact["spread"][0] <= quarter * (1 + 1e-12)
    assert exact["spread"][1] == 1.0 and exact["leak"][1] == 1.0
    assert np.exp(-5.0) <= exact["leak"][0] <= np.exp(-5.0) * (1 + 1e-12)
    assert exact["float"][1] == 0.0 and 0.0 <= exact["float"][0] <= 1e-15   # outward rounding only
    moved = tv_parts(hb, cls, 2, 0.1)
    grown = np.exp(-5.0 + 0.2) - np.exp(-5.0) + np.expm1(0.7) / 4 - quarter
    assert grown <= moved["float"][0] <= grown * (1 + 1e-9)
    assert moved["float"][1] == 0.0


SMALL_EDITS = ("embed.W_E", "pos_embed.W_pos", "blocks.0.attn.W_V", "blocks.0.attn.b_V", "blocks.0.attn.W_O",
               "blocks.0.attn.b_O", "blocks.0.mlp.W_in", "blocks.0.mlp.b_in", "blocks.0.mlp.W_out",
               "blocks.0.mlp.b_out", "unembed.W_U", "unembed.b_U")


def _numbers(cert) -> tuple:
    return (cert.passed, cert.reason, cert.message, cert.slack, repr(cert.heads), repr(cert.deltas),
            [(c[0], c[1], c[2], repr(c[3])) for c in cert.classes])


@pytest.mark.parametrize("which", SMALL_EDITS)
def test_a_shared_cache_gives_the_fresh_numbers_after_a_small_change(which: str) -> None:
    """As above, with a change small enough that both models pass (each weight scaled by 1.01, a
    bias moved by 0.01): every printed number, not only the verdict, is the fresh one. A cache
    keyed without that weight would hand the second model the first one's positional effect,
    classes or tables."""
    cache: dict = {}
    certify(_model(n=2), 2, "real", cache=cache)
    model = _model(n=2)
    with torch.no_grad():
        param = dict(model.named_parameters())[which]
        if which.rsplit(".", 1)[1].startswith("b_"):
            param.add_(0.01)
        else:
            param.mul_(1.01)
    fresh = certify(model, 2, "real")
    assert _numbers(certify(model, 2, "real", cache=cache)) == _numbers(fresh), which


def _with_tail_base(monkeypatch, value: float) -> None:
    """attention_float_terms, with the (F2) tail's scale set to ``value`` on every coordinate."""
    import constructions.addition.certify.margins as margins
    real = margins.attention_float_terms

    def scaled(*args, **kwargs):
        terms = real(*args, **kwargs)
        terms.tail_base = np.full_like(terms.tail_base, value)
        return terms

    monkeypatch.setattr(margins, "attention_float_terms", scaled)


def test_the_float_tail_term_reaches_the_deviation_of_every_class(monkeypatch) -> None:
    """The (F2) tail 2·min(2λ, cap)·tail_base is part of each class's float deviation: with an
    infinite tail scale the certificate must FAIL (a bound is not finite), not PASS on the
    deviations without it."""
    assert certify(_model(), N, "float32").passed  # the unchanged float32 certificate passes
    _with_tail_base(monkeypatch, np.inf)
    cert = _failed(_model(), N, "float32")
    assert (cert.reason, cert.message) == ("float", "a bound is not finite (overflow in the float term)")


def test_every_coordinate_the_float_tail_can_move_is_checked(monkeypatch) -> None:
    """The FFN tables check the residual coordinates that attention's ranges, the residual's
    rounding or the (F2) tail can move. A tail scale of 10^6 on every coordinate (far above the
    other two) must put every coordinate into the check."""
    import constructions.addition.certify.margins as margins
    seen: list[np.ndarray] = []
    real = margins.ffn_tables

    def recording(W, spec, pos_in, pos_logit, coords):
        seen.append(np.asarray(coords).copy())
        return real(W, spec, pos_in, pos_logit, coords)

    monkeypatch.setattr(margins, "ffn_tables", recording)
    _with_tail_base(monkeypatch, 1e6)
    model = _model()
    certify(model, N, "float32")
    assert seen and all(c.tolist() == list(range(model.cfg.d_model)) for c in seen)
