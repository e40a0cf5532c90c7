"""The float32 rounding bounds of rasp/certify/floats.py, each against a value worked out by hand.

``u = 2^-24`` and Higham's ``gamma_n = n u / (1 - n u)``. Each bound is evaluated in float64 and
inflated (a factor ``1 + 2^-20`` and one step up) at most three times along the way, so a computed
bound ``b`` of a value ``v`` worked out here must satisfy ``v <= b <= v (1 + 2^-17)``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lengthgen.proof import interval as I
from rasp.certify import floats
from rasp.certify.state import Fail

U = 2.0 ** -24


def g(n: int) -> float:
    return n * U / (1 - n * U)


def close(bound, value) -> bool:
    bound, value = np.asarray(bound, dtype=float), np.asarray(value, dtype=float)
    return bool(np.all(value <= bound) and np.all(bound <= value * (1 + 2.0 ** -17)))


def residual(X, eps=None, group=None, exact=None) -> floats.Residual:
    d = len(X)
    return floats.Residual(np.array(X, dtype=float), np.zeros(d) if eps is None else np.array(eps, dtype=float),
                           np.full(d, -1) if group is None else np.array(group),
                           np.ones(d, dtype=bool) if exact is None else np.array(exact))


def test_a_projection_counts_a_one_hot_group_once_and_rounds_by_gamma_n():
    """Dimensions 1 and 2 are one one-hot s-op; dimension 4 holds 0 (X = 0), so its coefficient
    9 adds nothing. Column 0, ``2 x0 + 3 x1 - 4 x2 + 0.5 x3 + 9 x4 + 1`` with X = (1, 1, 1, 5, 0):
    magnitude 2 + max(3, 4) + 2.5 + 1 = 9.5 (not 12.5), five non-zero terms, 0.5 is not an
    integer: rounding gamma_5 * 9.5. Column 1, ``2 x0 + 3 x1 - 4 x2``: 6, all integers on exact
    integer coordinates below 2^24: no rounding. Column 2, the same with eps = 0.25 on x1 (no
    longer exact): 6 + 0.25 * 3 = 6.75 and gamma_3 * 6.75."""
    r = residual([1, 1, 1, 5, 0], group=[-1, 7, 7, -1, -1])
    W = np.array([[2.0, 2.0], [3.0, 3.0], [-4.0, -4.0], [0.5, 0.0], [9.0, 0.0]])
    p = floats._projection(r, W, np.array([1.0, 0.0]), U)
    assert close(p.mag, [9.5, 6.0]) and close(p.err[0], g(5) * 9.5) and p.err[1] == 0
    r2 = residual([1, 1.25, 1, 5, 0], eps=[0, 0.25, 0, 0, 0], group=[-1, 7, 7, -1, -1],
                  exact=[True, False, True, True, True])
    p2 = floats._projection(r2, W[:, 1:], np.zeros(1), U)
    assert close(p2.mag, [6.75]) and close(p2.err, [g(3) * 6.75])


def test_integer_arithmetic_past_2_to_the_24_rounds():
    """``2^23 x0`` with ``|x0| <= 5``: integers, but 5 * 2^23 > 2^24, so gamma_1 times it."""
    p = floats._projection(residual([5.0]), np.array([[2.0 ** 23]]), np.zeros(1), U)
    assert close(p.mag, [5 * 2.0 ** 23]) and close(p.err, [g(1) * 5 * 2.0 ** 23])


def test_the_score_error_of_a_head_written_by_hand():
    """Query ``3 x0`` (exact integer: no rounding), key ``0.5 x1`` with ``|x1| <= 2`` (one term:
    gamma_1), BOS's row 0. ``score_bounds``: the product's magnitude 3 (1 + gamma_1), one
    product (``u`` times it), the key's error times 3, and (F3) ``8 u (S + ln 5)``."""
    r = residual([1.0, 2.0], exact=[True, False])
    WQ, WK = np.array([[3.0], [0.0]]), np.array([[0.0], [0.5]])
    bos = I.Iv.exact(np.zeros(2))
    ds = floats.score_error(r, bos, WQ, np.zeros(1), WK, np.zeros(1), U, 5)
    s = 3 * (1 + g(1))
    assert close(ds, U * s + 3 * g(1) + 8 * U * (s + math.log(5)))
    assert floats.score_error(r, bos, WQ, np.zeros(1), WK, np.zeros(1), 0.0, 5) == 0.0


def test_bos_keys_count_with_their_own_magnitude():
    """The same key map on BOS's row (x1 = 40): the key magnitude is 20, not 1."""
    r = residual([1.0, 2.0], exact=[True, False])
    WQ, WK = np.array([[3.0], [0.0]]), np.array([[0.0], [0.5]])
    bos = I.Iv.exact(np.array([0.0, 40.0]))
    ds = floats.score_error(r, bos, WQ, np.zeros(1), WK, np.zeros(1), U, 5)
    s = 3 * 20 * (1 + g(1))
    assert close(ds, U * s + 3 * 20 * g(1) + 8 * U * (s + math.log(5)))


def test_the_head_output_error_of_one_value_dimension():
    """V = 2 on one head dimension, W_O = (3, 0), 4 keys: theta = gamma_19 (4 + 2 + 1 + 12), the
    weighted sum errs by dz = 2 (theta + gamma_16 (1 + theta)), then z W_O adds gamma_1 3 (2 + dz)
    in the first column; the second column reads nothing."""
    out = floats.output_error(np.array([2.0]), np.array([[3.0, 0.0]]), U, 4)
    theta = g(19)
    dz = 2 * (theta + g(16) * (1 + theta))
    assert close(out[0], 3 * dz + g(1) * 3 * (2 + dz)) and out[1] == 0


def test_the_mlp_error_of_one_unit():
    """``ReLU(2 x + 0.5) 4`` with ``|x| <= 3`` (not exact): the pre-activation's magnitude 6.5 and
    rounding gamma_2 6.5; the output moves by 4 times that and rounds by gamma_1 4 (6.5 + it)."""
    dp = g(2) * 6.5
    err = floats.mlp_error(residual([3.0], exact=[False]), np.array([[2.0]]), np.array([0.5]),
                           np.array([[4.0]]), np.zeros(1), U)
    assert close(err, [4 * dp + g(1) * 4 * (6.5 + dp)])


def test_logits_and_additions_and_bos_rows():
    r = residual([1.0, 3.0], exact=[True, False])
    assert close(floats.logit_error(r, np.array([[1.0], [0.5]]), np.array([2.0]), U), [g(3) * 4.5])
    assert close(floats.add_error(I.Iv(np.array([-7.0]), np.array([5.0])), U), [7 * U])
    bos = I.Iv(np.array([-1.0, 2.0]), np.array([1.0, 3.0]))
    assert close(floats.affine_error(bos, np.array([[1.0], [2.0]]), np.array([0.5]), U), [g(3) * 7.5])
    assert not np.any(floats.logit_error(r, np.array([[1.0], [0.5]]), np.zeros(1), 0.0))


def test_widen_is_outward_and_leaves_exact_enclosures_alone():
    x = I.Iv(np.array([1.0]), np.array([2.0]))
    assert floats.widen(x, np.zeros(1)) is x
    y = floats.widen(x, np.array([0.5]))
    assert y.lo[0] < 0.5 and y.hi[0] > 2.5 and y.hi[0] - y.lo[0] < 2 + 1e-12


def test_magnitudes_that_could_overflow_float32_fail():
    with pytest.raises(Fail) as info:
        floats._projection(residual([1e38]), np.array([[4.0]]), np.zeros(1), U)
    assert info.value.kind == "float" and "overflow" in info.value.message


def test_bos_through_one_head():
    """BOS's row (1, 2), one head with W_V = (1, 1) and W_O = (1, 0): v = 3 rounds by
    a = gamma_2 * 3; the one-key weighted sum and W_O by oe = dz + gamma_1 (3 + a + dz), with
    dz = (3 + a)(theta_1 + gamma_13 (1 + theta_1)), theta_1 = gamma_16; then the residual
    addition by u |x + out|: u (4 + a + oe) on the written coordinate, 2u on the other."""
    x = I.Iv.exact(np.array([1.0, 2.0]))
    y = floats.bos_attention(x, np.array([[[1.0], [1.0]]]), np.array([[[1.0, 0.0]]]), U)
    a = g(2) * 3
    theta = g(16)
    dz = (3 + a) * (theta + g(13) * (1 + theta))
    oe = dz + g(1) * (3 + a + dz)
    assert close(y.hi[0] - 4, a + oe + U * (4 + a + oe)) and close(4 - y.lo[0], a + oe + U * (4 + a + oe))
    assert close(y.hi[1] - 2, 2 * U) and close(2 - y.lo[1], 2 * U)
    exact = floats.bos_attention(x, np.array([[[1.0], [1.0]]]), np.array([[[1.0, 0.0]]]), 0.0)
    assert np.all(exact.lo <= [4.0, 2.0]) and np.all(exact.hi >= [4.0, 2.0]) and np.all(exact.hi - exact.lo < 1e-14)


def test_bos_through_an_mlp():
    """BOS's row (1, -2); unit 0 is ReLU(x1 + x2 + 0.5) = ReLU(-0.5 +- gamma_3 3.5) = 0 exactly,
    unit 1 is ReLU(x1 + 0.25) = 1.25 +- p, p = gamma_2 1.25. W_out = ((2, 0), (1, 0)) and
    b_out = (0.25, 0): the first output 1.5 moves by p and rounds by gamma_2 (1.25 + p + 0.25);
    then the addition by u (2.5 + those) and 2u."""
    x = I.Iv.exact(np.array([1.0, -2.0]))
    y = floats.bos_mlp(x, np.array([[1.0, 1.0], [1.0, 0.0]]), np.array([0.5, 0.25]),
                       np.array([[2.0, 0.0], [1.0, 0.0]]), np.array([0.25, 0.0]), U)
    p = g(2) * 1.25
    b = p + g(2) * (1.5 + p)
    assert close(y.hi[0] - 2.5, b + U * (2.5 + b)) and close(2.5 - y.lo[0], b + U * (2.5 + b))
    assert close(y.hi[1] + 2, 2 * U) and close(-2 - y.lo[1], 2 * U)
