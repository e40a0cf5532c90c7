"""The fixed keys' softmax mean as a convex combination (:func:`lengthgen.proof.trained_affine.fixed_form`).

Oracle: the mean Σ e_k·u_k / Σ e_k in exact rationals, for weights e_k and rows u_k anywhere in
their enclosures (end points and corners included). The form must hold it: there are
coefficients |ε_k| ≤ 1 with the mean inside centre + Σ ε_k·G_k ± box. With as many coordinates as
keys the generators are independent, so where the rows are exact (the box is rounding only) the
coefficients are the least-squares solution, checked again in rationals; where they are not, the
mean must lie in the form's interval hull, and the box must be the rows' largest radius. The
weight ranges must also be reached (a key at the bottom of its enclosure while every other sits
at its top has coefficient −1): generators shrunk by any factor fail the first test, and
generators that do not reach the extremes fail the second. The reference key (the heaviest) has
a zero generator, and the other keys' generators are independent.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lengthgen.proof import affine as A
from lengthgen.proof.interval import Iv
from lengthgen.proof.trained import Layout, PositionCertifier
from lengthgen.proof.trained_affine import attention_form, fixed_form
from lengthgen.proof.trained_tables import Tables
from lengthgen.tasks import ADDITION
from tests.test_trained_float_wiring import N_KEYS, small_model_pair

SLACK = 1e-9  # the least-squares solve in floats: how far outside the box its point may land


def head(e_lo: np.ndarray, e_hi: np.ndarray, rows_c: np.ndarray, rows_r: np.ndarray):
    """One query row and S fixed keys, each at its own ID with token 0: ``k`` (weights e [1, 1, S]),
    the slots, the query tokens and the table [1, S, d]."""
    S = len(e_lo)
    k = {"e": Iv(e_lo[None, None, :], e_hi[None, None, :]), "index": {pid: pid for pid in range(S)}}
    slots = [(np.zeros(1, dtype=np.int64), pid) for pid in range(S)]
    table = Iv(rows_c[None] - rows_r[None], rows_c[None] + rows_r[None])
    return k, slots, np.zeros(1, dtype=np.int64), table


def coefficients(centre: Iv, G: np.ndarray, box: np.ndarray, mean: list[Fraction]) -> tuple[np.ndarray, bool]:
    """Least-squares ε for ``mean − centre ≈ Σ ε_k·G_k`` (0 for a zero generator: the reference
    key's), clipped to [−1, 1], and whether the mean lies within centre ± box (+ SLACK) of that
    point of the form, in rationals. (Where the box alone holds the mean, the least squares may ask
    for a huge ε along a generator of rounding size: clipped, it still lands within the box.)"""
    mid = (centre.lo[0] + centre.hi[0]) / 2
    live = np.flatnonzero(np.any(G[0] != 0, axis=1))
    eps = np.zeros(G.shape[1])
    if len(live):
        eps[live] = np.linalg.lstsq(G[0][live].T, np.array([float(m) for m in mean]) - mid, rcond=None)[0]
    eps = np.clip(eps, -1.0, 1.0)  # a point of the form; a mean the generators cannot reach stays outside
    inside = True
    for i, m in enumerate(mean):
        at = sum((Fraction(float(x)) * Fraction(float(g)) for x, g in zip(eps, G[0][:, i])), Fraction(0))
        lo = Fraction(float(centre.lo[0, i])) + at - Fraction(float(box[0, i])) - Fraction(SLACK)
        hi = Fraction(float(centre.hi[0, i])) + at + Fraction(float(box[0, i])) + Fraction(SLACK)
        inside &= lo <= m <= hi
    return eps, inside


def exact_mean(e: list[Fraction], u: list[list[Fraction]]) -> list[Fraction]:
    z = sum(e, Fraction(0))
    return [sum((ek * uk[i] for ek, uk in zip(e, u)), Fraction(0)) / z for i in range(len(u[0]))]


@st.composite
def cases(draw):
    S = draw(st.integers(1, 4))
    unit = st.floats(0, 1)
    e_lo = np.array([draw(st.floats(1e-6, 1.0)) for _ in range(S)])
    e_hi = e_lo * (1 + np.array([draw(st.sampled_from([0.0, 1e-12, 1e-3, 0.5, 3.0])) for _ in range(S)]))
    rows_c = np.array([[draw(st.floats(-5, 5)) for _ in range(S)] for _ in range(S)])
    exact_rows = draw(st.booleans())
    rows_r = np.array([[0.0 if exact_rows else draw(st.sampled_from([0.0, 1e-9, 0.1])) for _ in range(S)]
                       for _ in range(S)])
    at_e = [draw(st.one_of(st.sampled_from([0.0, 1.0]), unit)) for _ in range(S)]
    at_u = [[draw(st.sampled_from([-1.0, 1.0, 0.0, 0.3])) for _ in range(S)] for _ in range(S)]
    return e_lo, e_hi, rows_c, rows_r, at_e, at_u


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_form_holds_the_exact_mean_anywhere_in_the_enclosures(case):
    e_lo, e_hi, rows_c, rows_r, at_e, at_u = case
    S = len(e_lo)
    centre, G, box = fixed_form(*head(e_lo, e_hi, rows_c, rows_r))
    assert G.shape == (1, S, S) and box.shape == (1, S) and np.all(box >= 0)
    e = [Fraction(float(lo)) + Fraction(t) * (Fraction(float(hi)) - Fraction(float(lo)))
         for lo, hi, t in zip(e_lo, e_hi, at_e)]
    u = [[Fraction(float(c)) + Fraction(t) * Fraction(float(r)) for c, r, t in zip(rows_c[k], rows_r[k], at_u[k])]
         for k in range(S)]
    mean = exact_mean(e, u)
    h = A.from_iv(centre, G, box).box()  # the form's interval hull
    assert all(Fraction(float(h.lo[0, i])) <= m <= Fraction(float(h.hi[0, i])) for i, m in enumerate(mean))
    zero = np.flatnonzero(np.all(G[0] == 0, axis=1))
    assert len(zero) >= 1  # the reference key's generator
    if not rows_r.any() and np.linalg.matrix_rank(G[0]) == S - 1:  # the coefficients are determined
        eps, inside = coefficients(centre, G, box, mean)
        assert inside and np.all(np.abs(eps) <= 1 + SLACK), (eps, mean)


def test_a_key_at_an_end_of_its_weight_range_has_coefficient_one():
    """Three keys with wide weight enclosures and exact, independent rows: key k (not the
    reference) at the bottom of its enclosure while the others are at their tops gives ε_k = −1
    (its least weight), and the other way round +1; so the generators are exactly as long as the
    weights' ranges allow."""
    e_lo, e_hi = np.array([0.2, 0.5, 1.0]), np.array([0.4, 1.5, 1.1])
    rows_c, rows_r = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -3.0]]), np.zeros((3, 3))
    centre, G, box = fixed_form(*head(e_lo, e_hi, rows_c, rows_r))
    u = [[Fraction(float(x)) for x in row] for row in rows_c]
    reference = int(np.flatnonzero(np.all(G[0] == 0, axis=1))[0])
    assert reference == 2  # the heaviest key: its weight range has the largest centre
    for k in (0, 1):
        for sign, own, rest in ((-1, e_lo, e_hi), (1, e_hi, e_lo)):
            e = [Fraction(float(own[j] if j == k else rest[j])) for j in range(3)]
            eps, inside = coefficients(centre, G, box, exact_mean(e, u))
            assert inside and abs(eps[k] - sign) < 1e-12, (k, sign, eps)


def test_the_box_holds_the_rows_radius_and_not_more():
    """Exact weights (one key only, weight 1): the mean is that key's row, anywhere in its
    enclosure, so the box is its radius; the weights leave no generator length."""
    rows_c, rows_r = np.array([[2.0, -1.0]]), np.array([[0.25, 0.0]])
    centre, G, box = fixed_form(*head(np.array([0.7]), np.array([0.7]), rows_c, rows_r))
    assert np.all(np.abs(G) < 1e-15)
    assert np.allclose(box[0], [0.25, 0.0], rtol=1e-12, atol=1e-15)
    assert np.allclose(centre.lo[0], [2.0, -1.0], rtol=1e-15) and np.allclose(centre.hi[0], [2.0, -1.0], rtol=1e-15)


def test_the_attention_form_carries_each_heads_fixed_form():
    """In the tail's residual after attention, each head's fixed keys' mean enters whole: its
    generators among the form's and its box in the form's box (dropped, the rows' radius would be
    lost: no forward pass sees it, since torch rounds far below it). A small random model with two
    heads, N = 2, every key fixed (a window of both significances), the real-number certificate on
    the float32 tables, whose rows carry their rounding: the form's box is then the two heads' boxes
    and the residual's radius (up to the centre's rounding), nothing else."""
    real, flt = small_model_pair()
    lay = Layout(2, 2, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
    cert = PositionCertifier(real, Tables.build(flt, N_KEYS), lay, max_width=2)
    p = cert.inputs(0)
    rows = np.arange(6)
    slots, tq = [(tok[rows], pid) for tok, pid in p.slots], p.query_tok[rows]
    assert all(not np.any(cert.fixed_mean(k, slots, tq)[1]) for k in p.heads)  # no free key
    x = attention_form(cert, p.heads, slots, tq, cert.t.resid[:, p.qid][tq])
    boxes = []
    for h, k in enumerate(p.heads):
        _, G, box = fixed_form(k, slots, tq, cert.t.out[h])
        boxes.append(box)
        for s in range(G.shape[1]):
            assert any(np.array_equal(x.G[:, j], G[:, s]) for j in range(x.G.shape[1])), (h, s)
    both = boxes[0] + boxes[1]
    assert np.all(both > 1e-7)  # the float32 tables' rounding
    _, resid_radius = cert.t.resid[:, p.qid][tq].center_radius()  # the embedding sum's rounding
    assert np.all(x.b >= both + resid_radius)
    assert np.all(x.b <= (both + resid_radius) * (1 + 1e-6) + 1e-12)
