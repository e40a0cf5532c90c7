"""The parts of the trained-model certificate that the end-to-end tests reach only in bulk, each
against an oracle of its own (Python integers, exact fractions, a float64 forward pass):

- :func:`lengthgen.proof.counterexamples.realize`: the operand pairs built from a local
  configuration hold its digits, its carry and the evaluation distribution's leading digits;
- :func:`lengthgen.proof.counterexamples.wrong_positions`: the answer positions a model misses;
- the configurations of a window and their exact probability.
"""
from __future__ import annotations

import copy
from fractions import Fraction
from itertools import product

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from constructions.addition.model import build_model
from lengthgen.proof.counterexamples import realize, wrong_positions
from lengthgen.proof.interval import Iv
from lengthgen.proof.trained import Layout, PositionResult, configurations, propagate, refining
from lengthgen.proof.trained_affine import free_values
from lengthgen.tasks import ADDITION

START = 2
DECISION_MARGIN = 1e-3  # the project's decision margin (docs): a literal, not read from the code


def layout(n: int) -> Layout:
    return Layout(n, START, ADDITION.vocab.index("$"), ADDITION.vocab.index("+"), ADDITION.vocab.index("="))


@st.composite
def windows(draw):
    """(N, lo, window digits of a and b, carry into lo): a window anywhere, the lead included."""
    n = draw(st.integers(1, 7))
    lo = draw(st.integers(0, n - 1))
    width = draw(st.integers(1, n - lo))
    digit = lambda j: st.integers(1 if (j == n - 1 and n > 1) else 0, 9)  # noqa: E731
    a_w = [draw(digit(lo + i)) for i in range(width)]
    b_w = [draw(digit(lo + i)) for i in range(width)]
    carry = draw(st.integers(0, 1)) if lo > 0 else 0
    return n, lo, np.array(a_w), np.array(b_w), carry


@settings(max_examples=300, deadline=None)
@given(windows(), st.integers(0, 2**32 - 1))
def test_realized_pairs_hold_the_window_the_carry_and_the_leading_digit(case, seed):
    n, lo, a_w, b_w, carry = case
    a, b = realize(layout(n), lo, a_w, b_w, carry, np.random.default_rng(seed))
    for text, w in ((a, a_w), (b, b_w)):
        assert len(text) == n and text.isdigit()
        assert n == 1 or text[0] != "0"  # an N-digit operand, as lengthgen.evaluate samples them
        value = int(text)
        assert [(value // 10**(lo + i)) % 10 for i in range(len(w))] == list(w)
    assert int((int(a) % 10**lo) + (int(b) % 10**lo) >= 10**lo) == carry  # Python-integer carry into lo


def test_realized_pairs_vary_outside_the_window():
    """Digits outside the window are random, so that different tries are different pairs."""
    pairs = {realize(layout(6), 2, np.array([3, 4]), np.array([5, 6]), 1, np.random.default_rng(s)) for s in range(20)}
    assert len(pairs) > 10


@torch.inference_mode()
def test_wrong_positions_are_the_positions_the_float64_model_misses():
    """The construction with blunt attention (M = 3: some sums come out wrong): each pair's wrong
    positions are exactly those where the float64 model's top logit is not the true digit of the
    Python sum by more than the margin, with the tokens named."""
    n = 4
    model, _ = build_model(n_digits=n, M=3.0)
    rng = np.random.default_rng(3)
    pairs = [(str(a), str(b)) for a, b in zip(rng.integers(1000, 10**4, 295), rng.integers(1000, 10**4, 295))]
    found = wrong_positions(model, pairs, START, batch=7)  # 295 = 42·7 + 1: a last batch of one pair
    assert len(found) == len(pairs)
    m64 = copy.deepcopy(model).to(torch.float64)
    for (a, b), bad in zip(pairs, found):
        truth = str(int(a) + int(b)).zfill(n + 1)[::-1] + "$"
        inst = ADDITION.instance(a, b, start=START)
        logits = m64(torch.as_tensor(inst.tokens[None, :-1]), torch.as_tensor(inst.pos_ids[None, :-1]))[0]
        answer = logits[inst.prompt_len - 1:].numpy()
        expect = {}
        for r, ch in enumerate(truth):
            row = answer[r]
            t = ADDITION.vocab.index(ch)
            others = np.delete(row, t)
            if not row[t] - others.max() > DECISION_MARGIN:
                top = int(np.argmax(row))
                second = np.sort(row)[-2]
                pred = ADDITION.vocab[top] if row[top] - second > DECISION_MARGIN else "undecided"
                expect[r] = (ch, pred)
        assert bad == expect, (a, b)
    assert sum(map(len, found)) > 0  # the model really misses some


def test_configurations_are_every_window_assignment_with_its_multiplicity():
    """Unordered per significance (a ≤ b), each standing for 1 or 2 ordered ones: the ordered
    expansion is exactly the product of the digit sets (leading digit non-zero) and the carries."""
    for n, lo, hi in ((1, 0, 0), (3, 0, 1), (3, 1, 2), (4, 2, 2)):
        lay = layout(n)
        a, b, carry, mult = configurations(lay, lo, hi)
        seen: dict[tuple, int] = {}
        for x, y, k, m in zip(a, b, carry, mult):
            assert np.all(x <= y)
            key = (tuple(x), tuple(y), int(k))
            assert key not in seen
            seen[key] = int(m)
            assert m == 2 ** int(np.sum(x != y))
        sets = [range(1 if (j == n - 1 and n > 1) else 0, 10) for j in range(lo, hi + 1)]
        ordered = set(product(product(*sets), product(*sets), (0, 1) if lo > 0 else (0,)))
        expanded = {(xa, xb, k) for (x, y, k) in seen
                    for swap in product((0, 1), repeat=len(x))
                    for xa, xb in [(tuple(q if s else p for p, q, s in zip(x, y, swap)),
                                    tuple(p if s else q for p, q, s in zip(x, y, swap)))]}
        assert expanded == ordered
        assert int(mult.sum()) == len(ordered)


def test_propagate_is_school_addition():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10, (50, 4)), rng.integers(0, 10, (50, 4))
    carry = rng.integers(0, 2, 50)
    c, top = propagate(a, b, carry)
    for i in range(50):
        x = sum(int(d) * 10**j for j, d in enumerate(a[i]))
        y = sum(int(d) * 10**j for j, d in enumerate(b[i]))
        total = x + y + int(carry[i])
        assert [(total // 10**j) % 10 for j in range(4)] == list(c[i]) and total // 10**4 == top[i]



def test_realized_pairs_reach_every_digit_outside_the_window():
    """Outside the window (and the digit below it that forces the carry) every digit occurs: 1–9 at
    the lead, 0–9 elsewhere, in both operands."""
    n, lo = 5, 2
    seen = [[set(), set()] for _ in range(n)]
    rng = np.random.default_rng(0)
    for _ in range(400):
        for k, text in enumerate(realize(layout(n), lo, np.array([4]), np.array([4]), 1, rng)):
            for j, ch in enumerate(reversed(text)):
                seen[j][k].add(int(ch))
    for j in (0, 3):
        assert seen[j] == [set(range(10))] * 2, j
    assert seen[n - 1] == [set(range(1, 10))] * 2


def refines_by_integers(parent_failed, pwin, lo, hi, a, b, carry) -> np.ndarray:
    """The oracle of :func:`refining`: rebuild the pair's digits as integers, read the parent's window
    digits and the carry into it with Python arithmetic."""
    plo, phi = pwin
    failed = {(tuple(int(x) for x in fa), tuple(int(x) for x in fb), int(fc)) for fa, fb, fc in parent_failed}
    out = []
    for x, y, k in zip(a, b, carry):
        # significances lo..hi of two integers whose part below lo sums to exactly k·10^lo
        av = sum(int(d) * 10**(lo + i) for i, d in enumerate(x)) + (10**lo - 1 if k else 0)
        bv = sum(int(d) * 10**(lo + i) for i, d in enumerate(y)) + (1 if k else 0)
        digits = lambda v: tuple((v // 10**j) % 10 for j in range(plo, phi + 1))  # noqa: E731
        c_in = int((av % 10**plo) + (bv % 10**plo) >= 10**plo)
        da, db = digits(av), digits(bv)
        out.append((tuple(map(min, zip(da, db))), tuple(map(max, zip(da, db))), c_in) in failed)
    return np.array(out)


@pytest.mark.parametrize("pwin,win", [((2, 2), (1, 3)), ((2, 3), (1, 3)), ((1, 1), (1, 2)), ((3, 3), (1, 3)), ((0, 0), (0, 1))])
def test_refining_selects_exactly_the_configurations_inside_an_unproven_one(pwin, win):
    lay = layout(5)
    rng = np.random.default_rng(sum(pwin) + 7 * sum(win))
    pa, pb, pc, _ = configurations(lay, *pwin)
    pick = rng.choice(len(pa), size=min(25, len(pa)), replace=False)
    parent = PositionResult(0, pwin, len(pa), 0, Fraction(0), [(pa[i], pb[i], int(pc[i])) for i in pick])
    a, b, carry, _ = configurations(lay, *win)
    rows = rng.choice(len(a), size=min(3000, len(a)), replace=False)  # refining works row by row
    a, b, carry = a[rows], b[rows], carry[rows]
    keep = refining(parent, *win, a, b, carry)
    assert keep.dtype == bool and keep.shape == (len(a),)
    assert np.array_equal(keep, refines_by_integers(parent.failed, pwin, *win, a, b, carry))
    assert keep.any()
    none = refining(PositionResult(0, pwin, len(pa), len(pa), Fraction(0), []), *win, a, b, carry)
    assert none.dtype == bool and none.shape == (len(a),) and not none.any()


def test_refining_refuses_a_window_that_does_not_contain_the_parent():
    lay = layout(5)
    a, b, carry, _ = configurations(lay, 1, 2)
    parent = PositionResult(0, (2, 3), 1, 0, Fraction(0), [])
    with pytest.raises(ValueError, match=r"window \[1, 2\] does not contain the window \[2, 3\]"):
        refining(parent, 1, 2, a, b, carry)


@pytest.mark.parametrize("scale,second", [(1.0, "high"), (1e-6, "high"), (1.0, "low")])
def test_free_values_on_a_segment_keep_one_axis_and_no_box(scale, second):
    """Free value vectors on a segment away from the origin, long or very short: the enclosure is the
    segment itself (one generator of half its length, a centre of width ~0 at its midpoint) and
    every vector is inside it; a basis from uncentred points, of the wrong rank or that drops a
    short axis would add a generator or a box. ``second``: where the second free key's values lie
    (their mean above or below the segment's midpoint, so that the midpoint lies on either side of
    the mean whichever way the axis points)."""
    start, step = np.array([3.0, -1.0, 2.0]) * scale, np.array([0.5, 0.25, -0.125]) * scale
    pts = np.zeros((10, 4, 3))
    for tok in range(10):
        for pid in range(4):
            pts[tok, pid] = start + (tok + pid) * step
    W_O = np.eye(3)
    other = (np.arange(3, 7), 3) if second == "high" else (np.arange(1, 5), 0)
    fv = free_values(Iv.exact(pts), [(np.arange(10), 1), other], W_O)
    lo_t, hi_t = 1, 10  # t = tok + pid over [1, 10] (ID 1), and [6, 9] (ID 3) or [1, 4] (ID 0)
    assert fv["gens"].shape[0] == 1
    g = fv["gens"][0]
    assert np.allclose(np.abs(g), np.abs(step) * (hi_t - lo_t) / 2, rtol=1e-12, atol=0)
    mid = start + step * (lo_t + hi_t) / 2
    tol = 1e-12 * scale
    assert np.all(fv["centre"].lo <= mid + tol) and np.all(mid - tol <= fv["centre"].hi)
    assert np.all(fv["centre"].hi - fv["centre"].lo < tol)
    for t in range(lo_t, hi_t + 1):  # each vector = centre + τ·g with |τ| ≤ 1 (up to rounding)
        v = start + t * step
        tau = np.dot(v - mid, g) / np.dot(g, g)
        assert abs(tau) <= 1 + 1e-12 and np.allclose(mid + tau * g, v, rtol=0, atol=tol)
    # the pyramid conv{(−1, 0), (1, τ_k)} of (2μ − 1, μ·τ): the apex, then one row per distinct value
    sign = np.sign(np.dot(step, g))
    taus = sorted({(t - (lo_t + hi_t) / 2) / ((hi_t - lo_t) / 2) for t in range(lo_t, hi_t + 1)})
    vertices = fv["vertices"]
    assert np.array_equal(vertices[0], [-1.0, 0.0]) and np.all(vertices[1:, 0] == 1.0)
    assert np.allclose(sorted(sign * vertices[1:, 1]), taus, rtol=0, atol=1e-12)


def test_free_values_that_are_all_equal_have_no_generator():
    pts = np.broadcast_to(np.array([1.0, 2.0, -3.0]), (10, 4, 3)).copy()
    fv = free_values(Iv.exact(pts), [(np.arange(10), 1), (np.arange(4), 2)], np.eye(3))
    assert fv["gens"].shape[0] == 0
    assert np.all(fv["centre"].lo <= pts[0, 0]) and np.all(pts[0, 0] <= fv["centre"].hi)
    assert np.all(fv["centre"].hi - fv["centre"].lo < 1e-12)


def test_the_tail_of_a_model_without_an_mlp_is_its_layer_norm():
    """No MLP: the forms are LN2 of the residual (which nothing reads) and the residual itself, and
    the logit differences enclose the float64 ones."""
    from tests.test_affine_tail import EPS, assert_inside, points, random_form, random_tail, ref_ln

    from lengthgen.proof import affine as A
    from lengthgen.proof.trained_affine import tail_forms

    w = random_tail(0, "gelu")
    w.W_in = w.b_in = w.W_out = w.b_out = None
    x = random_form(0)
    pts = points(x, 0)
    forms = tail_forms(w, x)
    assert [name for name, _ in forms] == ["ln2", "mlp"]
    for (name, form), ref in zip(forms, (ref_ln(pts, w.ln2), pts)):
        box = form.box()
        assert_inside(box.lo, box.hi, ref, name)
    target = np.arange(len(x.c)) % w.W_U.shape[1]
    logits = ref_ln(pts, w.ln_final) @ w.W_U + w.b_U
    diff = A.differences(forms[-1][1], w.ln_final, EPS, w.W_U, w.b_U, target)
    assert_inside(diff.lo, diff.hi, np.take_along_axis(logits, target[:, None, None], axis=-1) - logits, "differences")


def random_model(seed: int, normalization: str | None = "LN", act: str = "gelu", d_mlp: int = 16,
                 attn_scale: float | None = None) -> torch.nn.Module:
    """A float64 1-layer model of the addition vocabulary with every parameter random (the
    initialisation zeroes some, e.g. biases), LayerNorm gains near 1."""
    from lengthgen.model import Transformer, TransformerConfig

    torch.manual_seed(seed)
    cfg = TransformerConfig(d_vocab=len(ADDITION.vocab), d_model=12, n_heads=2, d_head=6, d_mlp=d_mlp, n_ctx=12,
                            act_fn=act, normalization=normalization, attn_scale=attn_scale, dtype="float64")
    model = Transformer(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.5)
            if name.endswith(".w"):
                p.add_(1.0)
    return model


@pytest.mark.parametrize("normalization,act,d_mlp,attn_scale", [
    ("LN", "gelu", 16, None), (None, "relu", 16, 2.0), ("LN", "relu", 0, None), (None, "gelu", 0, 3.0)])
def test_random_models_of_every_covered_shape_are_enclosed(normalization, act, d_mlp, attn_scale):
    """Random 1-layer models with and without LayerNorm, an MLP (GELU or ReLU) or the 1/sqrt(d_head)
    score scale: every real logit difference of every 1-digit pair (and of random 2-digit pairs)
    lies in its configuration's enclosure, and every miss is unproven (the float64 model is the
    oracle, through tests/test_certify_trained.py's ``assert_sound``). Such models get every sum
    wrong, so what this pins is the enclosures, not what they prove."""
    from tests.test_certify_trained import all_pairs, assert_sound

    model = random_model(int(d_mlp + (attn_scale or 0) * 10), normalization, act, d_mlp, attn_scale)
    for tail in ("interval", "both"):
        assert_sound(model, 1, all_pairs(1), exhaustive=True, tail=tail)
    rng = np.random.default_rng(0)
    pairs = [(int(a), int(b)) for a, b in zip(rng.integers(10, 100, 200), rng.integers(10, 100, 200))]
    assert_sound(model, 2, pairs, exhaustive=False, tail="interval")
    narrow = assert_sound(model, 2, pairs[:60], exhaustive=False, tail="both", max_width=1)  # free keys
    assert max(r.max_free_share for r in narrow["results"]) > 0.5



def test_the_attention_form_holds_free_values_anywhere_in_a_wide_centre_box():
    """The form encloses ``resid + b_O + Σ_h o_fixed + λ·(v_free − v_fixed)·W_O[h]`` for every
    λ ∈ [0, λ⁺] and every v_free in ``free_values``' set: with that set's centre box widened by
    ±0.05 (as a rank the float basis drops would widen it), a real free key's value moved to the
    corner of the box that pushes each output coordinate furthest must stay inside the form's own
    enclosure (without the plain pass's hull, which knows nothing of the widening)."""
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_affine import attention_form
    from lengthgen.proof.trained_tables import OneLayer, Tables
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    w = OneLayer.from_model(model)
    cert = PositionCertifier(w, Tables.build(w), layout(2), max_width=1, tail="affine")
    p = cert.inputs(3, sample=40)  # '$' at 2 digits: both heads give their free keys 1-4%
    widen = 0.05
    heads = []
    for k in p.heads:
        fv = dict(k["free_v"])
        fv["centre"] = Iv(fv["centre"].lo - widen, fv["centre"].hi + widen)
        heads.append({**k, "free_v": fv})
    resid = cert.t.resid[:, p.qid][p.query_tok]
    x = attention_form(cert, heads, p.slots, p.query_tok, resid)
    x.hull = None
    r = x.radius()
    point = resid.center_radius()[0] + w.b_O
    free_tok, free_id = cert._free_slots(3, *p.window)[0]  # one free key and a value it can carry
    for sign in (1, -1):  # both heads at λ⁺, their values at the corner that raises (lowers) output j
        total = point.copy()
        for h, k in enumerate(heads):
            fixed_o, lam = cert.fixed_mean(k, p.slots, p.query_tok, "eo")
            fixed_v, _ = cert.fixed_mean(k, p.slots, p.query_tok, "ev")
            assert lam.max() > 1e-3
            v_k = cert.t.value[h].center_radius()[0][free_tok[0], free_id]
            W = w.W_O[h]
            moved = (v_k[None] - fixed_v.center_radius()[0]) @ W + sign * (np.abs(W) * widen).sum(axis=0)[None]
            total = total + fixed_o.center_radius()[0] + lam[:, None] * moved
        assert np.all(np.abs(total - x.c) <= r + 1e-9), float((np.abs(total - x.c) - r).max())


def test_the_affine_pass_reaches_every_row_it_is_given():
    """``_tighten`` sends every unproven row through the affine tail, chunk after chunk: given 300
    rows with no bound at all (more than two chunks), each comes back finite."""
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_tables import OneLayer, Tables
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    w = OneLayer.from_model(model)
    cert = PositionCertifier(w, Tables.build(w), layout(2), tail="affine")
    p = cert.inputs(1, sample=300)  # c_0 predicts c_1: window (0, 1), no free keys
    assert len(p.a) == 300
    diff = Iv(np.full((300, cert.V), -np.inf), np.full((300, cert.V), np.inf))
    cert._tighten(diff, np.arange(300), p.heads, p.slots, p.query_tok, p.target, p.qid)
    assert np.all(np.isfinite(diff.lo)) and np.all(np.isfinite(diff.hi))


@pytest.mark.parametrize("n,window", [(3, (1, 2)), (3, (2, 2)), (3, (0, 1)), (2, (1, 1))])
def test_the_mass_of_configurations_is_the_share_of_operand_pairs_that_have_them(n, window):
    """The exact probability of a set of configurations (the accuracy bound subtracts these) against
    a count over every N-digit operand pair: all of a window's configurations have mass 1, a random
    subset the share of pairs whose digits and carry fall in it."""
    from lengthgen.proof.trained import PositionCertifier

    lay = layout(n)
    cert = PositionCertifier.__new__(PositionCertifier)
    cert.lay = lay
    lo, hi = window
    a, b, carry, mult = configurations(lay, lo, hi)
    assert cert._mass(lo, hi, carry, mult) == 1
    rng = np.random.default_rng(n + lo)
    pick = rng.random(len(a)) < 0.3
    pick[np.flatnonzero(carry == 1)[:3]] = True  # some carry-1 configurations, where there are any
    def key(x, y, k):  # one integer per (a ≤ b digits, carry)
        return ((x * 10 + y) * 100 ** np.arange(x.shape[1])).sum(axis=1) * 2 + k
    first = 10 ** (n - 1) if n > 1 else 0
    A, B = np.meshgrid(np.arange(first, 10**n), np.arange(first, 10**n), indexing="ij")
    A, B = A.ravel(), B.ravel()
    da = np.stack([(A // 10**j) % 10 for j in range(lo, hi + 1)], axis=1)
    db = np.stack([(B // 10**j) % 10 for j in range(lo, hi + 1)], axis=1)
    c_in = ((A % 10**lo) + (B % 10**lo) >= 10**lo).astype(int)
    hits = int(np.isin(key(np.minimum(da, db), np.maximum(da, db), c_in), key(a[pick], b[pick], carry[pick])).sum())
    assert cert._mass(lo, hi, carry[pick], mult[pick]) == Fraction(hits, len(A))


def test_the_reported_free_share_is_zero_where_the_window_holds_every_key():
    """At 2 digits the windows (width 2) of answer positions 0 and 3 hold both significances: no key
    is free, so the reported share is exactly 0; with width 1 they have free keys and the share is
    a real one, below 5% for this checkpoint."""
    from lengthgen import certify as cli
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    results = cli.certify(model, 2, START, tail="interval", positions=[0, 3])
    assert [r.window for r in results] == [(0, 1), (0, 1)]
    assert all(r.max_free_share == 0.0 for r in results)
    narrow = cli.certify(model, 2, START, max_width=1, tail="interval", positions=[0, 3])
    assert all(0.0 < r.max_free_share < 0.05 for r in narrow)


def test_a_gap_exactly_at_the_decision_margin_is_not_proven():
    """W_U = 0 and b_U one-hot at '$' with 10⁻³: at the last answer position every logit of the
    float64 model is exact and '$' leads by exactly the margin, which lengthgen.evaluate scores as
    undecided (wrong). The certificate's enclosure is exact there up to its outward rounding, and
    it must not prove it."""
    from tests.test_certify_trained import all_pairs, assert_sound

    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 1)
    model = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        model.unembed.W_U.zero_()
        model.unembed.b_U.zero_()
        model.unembed.b_U[ADDITION.EOS] = DECISION_MARGIN
    for tail in ("interval", "both"):
        out = assert_sound(model, 1, all_pairs(1), exhaustive=True, tail=tail)
        last = out["results"][-1]
        assert last.r == 2 and last.proven == 0 and last.unproven_mass == 1
        gaps = np.sort(last.enclosures[3], axis=1)[:, 1]  # the target's own entry is 0
        assert np.all(gaps <= DECISION_MARGIN) and np.all(gaps >= DECISION_MARGIN * (1 - 1e-15))


def test_both_tails_are_the_plain_pass_tightened_by_the_affine_one_where_it_fails():
    """``tail="both"``: the plain enclosure where it proves the configuration, its intersection with
    the affine tail's own enclosure (``tail="affine"``) where it does not; and the smallest margin
    reported is the smallest lower end over the proven configurations' other tokens."""
    from lengthgen import certify as cli
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    runs = {tail: cli.certify(model, 2, START, max_width=1, keep_enclosures=True, tail=tail, positions=[2])
            for tail in ("interval", "affine", "both")}
    for plain, affine, both in zip(*runs.values()):
        target = np.argmin(np.abs(plain.enclosures[3]) + np.abs(plain.enclosures[4]), axis=1)  # its own entry: [0, 0]
        low = plain.enclosures[3].copy()
        low[np.arange(len(low)), target] = np.inf
        proven_plain = low.min(axis=1) > DECISION_MARGIN
        assert proven_plain.any() and not proven_plain.all()  # c_1 at 2 digits, window {1}: 148 of 162
        expect_lo = np.where(proven_plain[:, None], plain.enclosures[3], np.fmax(plain.enclosures[3], affine.enclosures[3]))
        expect_hi = np.where(proven_plain[:, None], plain.enclosures[4], np.fmin(plain.enclosures[4], affine.enclosures[4]))
        assert np.array_equal(both.enclosures[3], expect_lo) and np.array_equal(both.enclosures[4], expect_hi)
        assert not np.array_equal(affine.enclosures[3], both.enclosures[3])  # the affine tail alone, not both
        low_both = both.enclosures[3].copy()
        low_both[np.arange(len(low)), target] = np.inf
        proven = low_both.min(axis=1) > DECISION_MARGIN
        assert both.min_margin == low_both[proven].min()


def test_each_answer_position_needs_the_significances_of_its_query_and_target():
    """Worked out by hand: '=' predicts c_0 (significance 0); c_{r−1} predicts c_r, which reads a_r,
    b_r and the carry from below (r − 1, r); c_{N−1} predicts c_N, the carry out of significance
    N − 1, and c_N predicts '$' (both: N − 1)."""
    for n in range(1, 6):
        lay = layout(n)
        expect = [(0, 0)] + [(r - 1, r) for r in range(1, n)] + [(n - 1, n - 1), (n - 1, n - 1)]
        assert [lay.needed(r) for r in range(n + 2)] == expect, n


def test_the_certifier_defaults_are_the_commands():
    """Built without options (as benchmarks do), a certifier uses python -m lengthgen.certify's
    defaults: window width 2, the decision margin 10⁻³, both tails, no enclosures kept."""
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_tables import OneLayer, Tables
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 1)
    w = OneLayer.from_model(model)
    cert = PositionCertifier(w, Tables.build(w), layout(1))
    assert (cert.max_width, cert.margin, cert.tail, cert.keep) == (2, 1e-3, "both", False)
    assert cert.certify(0).enclosures is None


def test_fixed_and_free_keys_are_the_keys_a_real_input_shows_the_query():
    """For every answer position and window, the certifier's keys are those of a real instance: the
    fixed ones (non-digits, the window's digits, the query) with the instance's tokens, the free
    ones (digits outside the window: an operand's 1-9 at the lead, 0-9 elsewhere and for answer
    digits) at the instance's IDs, as many of each as the prompt and the answer so far hold."""
    from lengthgen.proof.trained import PositionCertifier

    rng = np.random.default_rng(5)
    for n in (1, 3, 4):
        lay = layout(n)
        cert = PositionCertifier.__new__(PositionCertifier)
        cert.lay = lay
        for r in range(n + 2):
            need_lo, need_hi = lay.needed(r)
            for lo in range(0, need_lo + 1):
                for hi in range(need_hi, min(n, lo + 2)):  # widths up to 2
                    a, b, carry, _ = configurations(lay, lo, hi)
                    i = int(rng.integers(len(a)))
                    c, top = propagate(a[i:i + 1], b[i:i + 1], carry[i:i + 1])
                    fixed = sorted((int(t[0]), pid) for t, pid in cert._fixed_slots(r, lo, hi, a[i:i + 1], b[i:i + 1], c, top))
                    free = sorted((pid, tuple(int(x) for x in toks)) for toks, pid in cert._free_slots(r, lo, hi))
                    A, B = realize(lay, lo, a[i], b[i], int(carry[i]), rng)
                    inst = ADDITION.instance(A, B, start=START)
                    shown = range(inst.prompt_len + r)  # the query attends to itself and everything before
                    want_fixed, want_free = [], []
                    for p in shown:
                        tok, pid = int(inst.tokens[p]), int(inst.pos_ids[p])
                        sig = START + n - 1 - pid
                        if tok < 10 and 0 <= sig < n and not lo <= sig <= hi:
                            lead = p < inst.prompt_len and sig == n - 1 and n > 1
                            want_free.append((pid, tuple(range(1 if lead else 0, 10))))
                        else:
                            want_fixed.append((tok, pid))
                    assert fixed == sorted(want_fixed), (n, r, lo, hi)
                    assert free == sorted(want_free), (n, r, lo, hi)


def test_the_window_widens_toward_the_neighbour_whose_digit_keys_score_highest():
    """N = 4, answer position 2 needs significances {1, 2}; with room for one more, the window takes
    0 or 3, whichever ID's digit keys can score higher against some query, in some head; at an edge
    it takes the only neighbour, and it never grows past the width or the operands."""
    from lengthgen.proof.trained import PositionCertifier

    lay = layout(4)
    cert = PositionCertifier.__new__(PositionCertifier)
    cert.lay = lay

    def scores(heavy_id: int, head: int) -> list[Iv]:
        out = []
        for h in range(2):
            hi = np.zeros((13, 13, 12))
            if h == head:
                hi[4, 7, heavy_id] = 5.0  # one query token, one digit key token
                hi[4, 10:, lay.id_of(0) + lay.id_of(3) - heavy_id] = 9.0  # non-digit keys there: ignored
            out.append(Iv(hi - 1.0, hi))
        return out

    for width, heavy, head, want in ((3, 0, 0, (0, 2)), (3, 3, 1, (1, 3)), (2, 0, 0, (1, 2)), (4, 3, 0, (0, 3))):
        cert.max_width = width
        assert cert._window(2, scores(lay.id_of(heavy), head)) == want, (width, heavy)
    cert.max_width = 3
    assert cert._window(0, scores(lay.id_of(3), 0)) == (0, 2)  # {0}: only 1 lies next to it, then 2
    cert.max_width = 9
    assert cert._window(5, scores(lay.id_of(0), 1)) == (0, 3)  # '$' after c_4: at most every significance


def test_a_sample_of_configurations_is_evenly_spaced_from_first_to_last():
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_tables import OneLayer, Tables
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    w = OneLayer.from_model(model)
    cert = PositionCertifier(w, Tables.build(w), layout(2), max_width=1)
    full = cert.inputs(0)
    C = len(full.a)
    assert C == 55
    for k, rows in ((3, [0, 27, 54]), (5, [0, 13, 27, 40, 54]), (1000, list(range(C)))):
        part = cert.inputs(0, sample=k)
        for name in ("a", "b", "carry", "mult", "query_tok", "target"):
            assert np.array_equal(getattr(part, name), getattr(full, name)[rows]), (k, name)


def test_scores_that_underflow_every_fixed_key_are_refused():
    """Queries 1000 times sharper: some configuration's fixed keys all score more than 745 below the
    reference (the best score a fixed key could have), so their softmax weights underflow to 0 in
    floats; the certificate refuses the model instead of dividing by an enclosure of 0."""
    from lengthgen import certify as cli
    from lengthgen.proof.weights import StructureError
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 1)
    model = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        model.blocks[0].attn.W_Q.mul_(1000.0)
    with pytest.raises(StructureError, match=r"^attention scores of one query span more than e\^745: the fixed keys' "
                                             r"softmax weight underflows, which this certificate does not handle$"):
        cli.certify(model, 1, START, tail="interval")


def test_the_free_keys_output_box_is_the_hull_of_their_real_outputs():
    """Answer position 0 at 2 digits with a one-significance window: the free keys are a_1 and b_1
    (1-9 at ID s). Per head, the plain pass's box of their head outputs is the coordinate-wise hull
    of value·W_O over those tokens, computed here from the model's own modules in float64: it
    contains each and is reached on every coordinate (within 10⁻⁹)."""
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_tables import OneLayer, Tables
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    m64 = copy.deepcopy(model).to(torch.float64)
    w = OneLayer.from_model(model)
    cert = PositionCertifier(w, Tables.build(w), layout(2), max_width=1, tail="interval")
    p = cert.inputs(0)
    assert p.window == (0, 0)
    attn = m64.blocks[0].attn
    with torch.no_grad():
        toks = torch.arange(1, 10)
        resid = m64.embed.W_E[toks] + m64.pos_embed.W_pos[START]  # a_1 / b_1: the leading digits, ID s
        x = m64.blocks[0].ln1(resid)
        for h, k in enumerate(p.heads):
            outs = ((x @ attn.W_V[h] + attn.b_V[h]) @ attn.W_O[h]).numpy()
            box = k["box"]
            assert np.all(box.lo <= outs.min(0) + 1e-12) and np.all(outs.max(0) <= box.hi + 1e-12)
            assert np.allclose(box.lo, outs.min(0), atol=1e-9) and np.allclose(box.hi, outs.max(0), atol=1e-9)


@pytest.mark.parametrize("which", ["packed", "random"])
@torch.inference_mode()
def test_each_heads_plain_enclosure_holds_its_real_output_for_every_free_assignment(which):
    """Answer position 0 at 2 digits, window {0}: a_1 and b_1 are free. For every configuration and
    all 81 leading digit pairs, each head's output (hook_z·W_O of the float64 model) lies in the
    plain pass's enclosure of that head; the random model gives its free keys most of the weight
    (λ⁺ > 0.5), the trained one little (its extremes must still be inside)."""
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_tables import OneLayer, Tables
    from lengthgen.runs import load_checkpoint

    model = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)[0] if which == "packed" else random_model(3)
    m64 = copy.deepcopy(model).to(torch.float64)
    w = OneLayer.from_model(model)
    cert = PositionCertifier(w, Tables.build(w), layout(2), max_width=1, tail="interval")
    p = cert.inputs(0)
    pairs = [(10 * x + int(p.a[i, 0]), 10 * y + int(p.b[i, 0])) for i in range(len(p.a))
             for x in range(1, 10) for y in range(1, 10)]
    insts = [ADDITION.instance(str(a), str(b), start=START) for a, b in pairs]
    tokens = torch.as_tensor(np.stack([x.tokens for x in insts]))
    pos = torch.as_tensor(np.stack([x.pos_ids for x in insts]))
    _, cache = m64.run_with_cache(tokens, pos, names_filter="blocks.0.attn.hook_z", return_cache_object=False)
    z = cache["blocks.0.attn.hook_z"][:, insts[0].prompt_len - 1].numpy()  # [pairs, heads, d_head] at '='
    largest = 0.0
    for h, k in enumerate(p.heads):
        real = (z[:, h] @ w.W_O[h]).reshape(len(p.a), 81, -1)
        enc, lam = cert._head(k, p.slots, p.query_tok)
        largest = max(largest, float(lam.max()))
        assert np.all(enc.lo[:, None] - 1e-9 <= real) and np.all(real <= enc.hi[:, None] + 1e-9), h
    assert largest > (0.5 if which == "random" else 1e-3)


@pytest.mark.parametrize("change,message", [
    ({"positional": "none"}, "covers causal models with learned positions and no Hard-ALiBi windows"),
    ({"attn_windows": [3, None]}, "covers causal models with learned positions and no Hard-ALiBi windows"),
    ({"causal": False}, "covers causal models with learned positions and no Hard-ALiBi windows"),
    ({"attn_scale": 0.0}, "attn_scale must be positive, got 0.0"),
    ({"attn_scale": -2.0}, "attn_scale must be positive, got -2.0"),
    ({"n_layers": 2}, "covers 1-layer models; this one has 2"),
])
def test_models_outside_the_covered_shape_are_refused(change, message):
    """Each shape the argument does not cover (no positions, windows that hide keys, keys after the
    query, a zero or negative score divisor, a second layer) is refused, one at a time."""
    from lengthgen.model import Transformer, TransformerConfig
    from lengthgen.proof.trained_tables import OneLayer
    from lengthgen.proof.weights import StructureError

    base = dict(d_vocab=len(ADDITION.vocab), d_model=8, n_heads=2, d_head=4, d_mlp=8, n_ctx=12, normalization="LN")
    with pytest.raises(StructureError, match=message):
        OneLayer.from_model(Transformer(TransformerConfig(**{**base, **change})))
    OneLayer.from_model(Transformer(TransformerConfig(**base)))  # the same model without the change is covered


def test_refining_tells_apart_configurations_whose_digit_codes_could_run_together():
    """Significance by significance (a ≤ b): (9, 9) then (0, 0) is not (0, 8) then (0, 1), although
    a code that gave a digit pair more than 100 values would add them up alike."""
    parent = PositionResult(0, (1, 2), 1, 0, Fraction(0), [(np.array([0, 0]), np.array([8, 1]), 0)])
    a, b, carry = np.array([[9, 0], [0, 0]]), np.array([[9, 0], [8, 1]]), np.array([0, 0])
    assert refining(parent, 1, 2, a, b, carry).tolist() == [False, True]


def test_an_unknown_tail_is_refused_by_name():
    from lengthgen.proof.trained import PositionCertifier

    with pytest.raises(ValueError, match=r"^tail must be one of interval, both, affine, not 'plain'$"):
        PositionCertifier(None, None, layout(1), tail="plain")


def test_free_values_in_a_plane_keep_each_axis_half_range():
    """Free values on a 3 × 5 grid in a plane of R^4 (spacings 1 and 0.25 along orthogonal unit
    vectors): two generators whose lengths are the half-ranges 1 and 0.5, each axis on its own."""
    u = np.array([1.0, 1.0, 0.0, 0.0]) / np.sqrt(2.0)
    v = np.array([0.0, 0.0, 3.0, 4.0]) / 5.0
    pts = np.zeros((15, 1, 4))
    for k, (i, j) in enumerate((i, j) for i in range(3) for j in range(5)):
        pts[k, 0] = np.array([2.0, -1.0, 0.5, 1.0]) + i * 1.0 * u + j * 0.25 * v
    fv = free_values(Iv.exact(pts), [(np.arange(15), 0)], np.eye(4))
    assert fv["gens"].shape[0] == 2
    assert sorted(np.linalg.norm(fv["gens"], axis=1)) == pytest.approx([0.5, 1.0], rel=1e-12)
    assert np.all(fv["centre"].hi - fv["centre"].lo < 1e-12)


def test_the_leading_digit_outside_the_window_is_uniform_on_1_to_9():
    """As lengthgen.evaluate samples N-digit operands: each of 1-9 about 1/9 of the time."""
    rng = np.random.default_rng(11)
    lead = [realize(layout(3), 0, np.array([5]), np.array([7]), 0, rng)[0][0] for _ in range(30000)]
    share = {d: lead.count(str(d)) / len(lead) for d in range(10)}
    assert share[0] == 0 and all(abs(share[d] - 1 / 9) < 0.0075 for d in range(1, 10)), share


def test_the_attention_form_is_never_wider_than_the_plain_pass():
    """Per coordinate, the form's radius is at most the distance from its centre to the ends of the
    plain pass's enclosure of the same residual (both enclose it; the narrower one is kept)."""
    from lengthgen.proof.trained import PositionCertifier
    from lengthgen.proof.trained_affine import attention_form
    from lengthgen.proof.trained_tables import OneLayer, Tables
    from lengthgen.runs import load_checkpoint

    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", 2)
    w = OneLayer.from_model(model)
    cert = PositionCertifier(w, Tables.build(w), layout(2), max_width=1, tail="affine")
    p = cert.inputs(3)
    resid = cert.t.resid[:, p.qid][p.query_tok]
    x = attention_form(cert, p.heads, p.slots, p.query_tok, resid)
    plain = resid + w.b_O
    for k in p.heads:
        plain = plain + cert._head(k, p.slots, p.query_tok)[0]
    assert np.all(x.radius() <= np.maximum(plain.hi - x.c, x.c - plain.lo) * (1 + 1e-15))
