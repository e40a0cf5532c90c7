"""The certificate's interval arithmetic (src/lengthgen/proof/interval.py) checked where mutation
testing (make mutate PART=interval) found it unchecked: enclosures must not only contain the exact
value (tests/test_certify_interval.py) but be tight, keep exact zeros exact, cover underflow, take
float32 input without rounding it in float32, and the helpers that the certificates call must give
the hand-computed answers. Every expected value is an exact rational (``Fraction``) or worked out by
hand, never the module's own output."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv

U = Fraction(1, 2**53)
TINY = 2.0**-1074


def F(x) -> Fraction:
    return Fraction(float(x))


def gamma_exact(n: int) -> Fraction:
    return n * U / (1 - n * U)


def _data(seed: int, shape: tuple) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))


def _tight(got: Iv, exact: np.ndarray, rel: Fraction, absolute: Fraction = Fraction(0)) -> bool:
    """lo ≤ exact ≤ hi, and each end within ``rel·|exact| + absolute`` of it."""
    for lo, hi, e in zip(np.ravel(got.lo), np.ravel(got.hi), np.ravel(exact)):
        slack = rel * abs(e) + absolute
        if not (e - slack <= F(lo) <= e <= F(hi) <= e + slack):
            return False
    return True


def test_gamma_is_higham_gamma_rounded_once() -> None:
    for n in (1, 3, 40, 10**6):
        for arg in (n, np.int64(n), np.float32(n), np.array([n, n])):
            got = np.ravel(I.gamma(arg))
            assert all(abs(F(g) - gamma_exact(n)) <= gamma_exact(n) * U for g in got), (n, type(arg))


def test_outward_steps_are_one_or_two_spacings() -> None:
    for x in (1.0, -1.0, 1.5, 3e-300, -2.5e300, 7.0):
        assert F(x) - abs(F(x)) * Fraction(2, 2**52) <= F(I.down(x)) < F(x) < F(I.up(x)) <= F(x) + abs(F(x)) * Fraction(2, 2**52)
    x32 = np.float32(1.5)  # a float32 end point is stepped in float64, not rounded back to itself
    assert I.down(x32).dtype == np.float64 and I.up(x32).dtype == np.float64
    assert F(I.down(x32)) < Fraction(3, 2) < F(I.up(x32))


def test_up_sum_factor_bounds_one_over_one_minus_gamma() -> None:
    for n in (0, 1, 2, 5, 1000):
        bound = 1 / (1 - gamma_exact(n)) if n else Fraction(1)
        assert bound <= F(I.up_sum_factor(n)) <= 1 + 8 * gamma_exact(n + 2)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # 0·inf, taken as an exact 0
def test_up_matmul_nonneg_is_tight_exact_at_zero_and_covers_underflow() -> None:
    a, b = np.abs(_data(0, (6, 9))), np.abs(_data(1, (9, 4)))
    exact = np.array([[sum(F(a[i, k]) * F(b[k, j]) for k in range(9)) for j in range(4)] for i in range(6)])
    got = I.up_matmul_nonneg(a, b)
    assert all(e <= F(g) <= e * (1 + 64 * U) for g, e in zip(got.ravel(), exact.ravel()))
    assert I.up_matmul_nonneg(np.array([[2.0]]), np.array([[3.0]]))[0, 0] >= 6.0
    zeros, ones = np.zeros((2, 3)), np.ones((3, 2))
    assert np.array_equal(I.up_matmul_nonneg(zeros, ones), np.zeros((2, 2)))
    assert np.array_equal(I.up_matmul_nonneg(ones.T, zeros.T), np.zeros((2, 2)))
    assert I.up_matmul_nonneg(np.array([[np.inf]]), np.array([[0.0]]))[0, 0] == 0.0  # 0·inf is an exact 0
    # eight products of 2^-1075 each: every one underflows to 0 in float64, their exact sum is 2^-1072
    small = I.up_matmul_nonneg(np.full((1, 8), 2.0**-537), np.full((8, 1), 2.0**-538))
    assert F(small[0, 0]) >= Fraction(8, 2**1075)
    assert F(I.up_matmul_nonneg(np.array([[2.0**-537]]), np.array([[2.0**-538]]))[0, 0]) >= Fraction(1, 2**1075)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # 0·inf, taken as an exact 0
def test_up_add_and_up_mul_bound_exact_values_from_above() -> None:
    third = 1 / 3
    assert F(I.up_mul(3.0, third)) >= 3 * F(third) and F(I.up_mul(3.0, third)) <= 3 * F(third) * (1 + 4 * U)
    assert np.array_equal(I.up_mul([0.0, 2.0, np.inf], [np.inf, 0.0, 0.0]), [0.0, 0.0, 0.0])
    assert F(I.up_mul(2.0**-537, 2.0**-538)) >= Fraction(1, 2**1075)
    assert I.up_mul(np.ones((2, 1)), np.ones(3)).shape == (2, 3)
    assert F(I.up_add(0.1, 0.2, 0.3)) >= F(0.1) + F(0.2) + F(0.3)
    assert F(I.up_add(np.float32(1.0), np.float32(2.0**-30))) >= 1 + Fraction(1, 2**30)


def test_elementwise_enclosures_are_a_few_ulps_wide() -> None:
    a, b = _data(2, (300,)), _data(3, (300,))
    fa, fb = np.array([F(v) for v in a]), np.array([F(v) for v in b])
    A, B = Iv.exact(a), Iv.exact(b)
    rel = 8 * U
    assert _tight(A + B, fa + fb, rel)
    assert _tight(A - B, fa - fb, rel)
    assert _tight(5.0 - A, 5 - fa, rel)
    assert _tight(A * B, fa * fb, rel)
    assert _tight(A / 3.0, fa / 3, rel)
    assert _tight(-A, -fa, Fraction(0))


def test_float32_input_is_exact_in_float64() -> None:
    one, small = np.float32([1.0]), np.float32([2.0**-30])
    A = Iv.exact(one)
    assert A.lo.dtype == np.float64
    assert _tight(A + Iv.exact(small), np.array([1 + Fraction(1, 2**30)]), 4 * U)
    assert _tight(Iv.exact(np.float32([1 + 2.0**-20])) * Iv.exact(np.float32([1 + 2.0**-20])),
                  np.array([(1 + Fraction(1, 2**20)) ** 2]), 4 * U)


def test_products_with_zero_and_infinity() -> None:
    x = Iv.exact(np.array([1.0, 3.0, -2.0, 0.0]))
    zero = x * 0.0
    assert np.array_equal(zero.lo, np.zeros(4)) and np.array_equal(zero.hi, np.zeros(4))
    one = x * 1.0
    assert _tight(one, np.array([1, 3, -2, 0]), 4 * U)
    z = Iv(np.zeros(1), np.zeros(1)) * Iv(np.ones(1), np.full(1, np.inf))
    assert z.lo[0] == 0.0 and z.hi[0] == 0.0
    big = Iv.exact(1e300) * Iv.exact(1e300)
    assert big.hi == np.inf and F(big.lo) <= F(1e300) ** 2


def test_division_only_by_positive_numbers_and_zero_stays_zero() -> None:
    for k in (0.0, -1.0, np.array([2.0, 0.0])):
        with pytest.raises(ValueError, match=r"^Iv division only by positive numbers$"):
            Iv.exact([1.0, 2.0]) / k
    for k in (1.0, 0.5, 3):
        q = Iv(np.array([0.0, 1.0, -2.0]), np.array([0.0, 1.0, 0.0])) / k
        assert q.lo[0] == 0.0 and q.hi[0] == 0.0 and q.hi[2] == 0.0
        assert _tight(Iv(q.lo[1:2], q.hi[1:2]), np.array([1 / Fraction(k)]), 4 * U)


def test_sums_are_tight_per_row_and_exact_for_zeros() -> None:
    x = _data(4, (7, 50))
    exact = np.array([sum(F(v) for v in row) for row in x])
    scale = np.array([sum(abs(F(v)) for v in row) for row in x])
    s = Iv.exact(x).sum(1)
    assert s.lo.shape == (7,) and s.hi.shape == (7,)
    # the documented radius: 2·γ_{n+2}·Σ|terms| (times a little for its own rounding)
    for lo, hi, e, m in zip(s.lo, s.hi, exact, scale):
        assert e - Fraction(5, 2) * gamma_exact(52) * m <= F(lo) <= e <= F(hi) <= e + Fraction(5, 2) * gamma_exact(52) * m
    zero = Iv.exact(np.zeros((3, 4))).sum(1)
    assert np.array_equal(zero.lo, np.zeros(3)) and np.array_equal(zero.hi, np.zeros(3))
    mixed = Iv.exact(np.array([[0.0, 0.0], [1.0, 2.0]])).sum(1)
    assert mixed.lo[0] == 0.0 and mixed.hi[0] == 0.0 and F(mixed.lo[1]) <= 3 <= F(mixed.hi[1])


def test_center_radius_encloses_and_halves_the_width() -> None:
    lo, hi = np.array([1.0, -3.0, 0.0, -1e10]), np.array([2.0, 5.0, 0.0, 1e10])
    c, r = Iv(lo, hi).center_radius()
    for a, b, cc, rr in zip(lo, hi, c, r):
        assert F(cc) - F(rr) <= F(a) and F(b) <= F(cc) + F(rr)
        assert F(rr) <= (F(b) - F(a)) / 2 * (1 + 8 * U)
    c, r = Iv(np.array([1.0]), np.array([np.inf])).center_radius()
    assert np.isfinite(c[0]) and r[0] == np.inf


def test_matmul_encloses_every_point_of_interval_operands_tightly() -> None:
    x, W = np.abs(_data(5, (5, 30))), np.abs(_data(6, (30, 4)))
    fx = np.vectorize(F, otypes=[object])(x)
    fW = np.vectorize(F, otypes=[object])(W)
    Wlo, Whi = W, I.up(W + W * 1e-3)
    xlo, xhi = x, I.up(x + x * 1e-3)
    fWhi = np.vectorize(F, otypes=[object])(Whi)
    fxhi = np.vectorize(F, otypes=[object])(xhi)
    k = 30
    doc_radius = Fraction(5, 2) * gamma_exact(k + 2) * (fx @ fW)  # 2·γ_{k+2}·Σ|terms| (docs) + fl error
    exact_W = I.matmul(x, Iv(Wlo, Whi))  # an interval right operand: both corners are covered
    assert all(F(lo) <= e for lo, e in zip(exact_W.lo.ravel(), (fx @ fW).ravel()))
    assert all(e <= F(hi) for hi, e in zip(exact_W.hi.ravel(), (fx @ fWhi).ravel()))
    both = I.matmul(Iv(xlo, xhi), Iv(Wlo, Whi))
    assert all(e <= F(hi) for hi, e in zip(both.hi.ravel(), (fxhi @ fWhi).ravel()))
    assert all(F(lo) <= e for lo, e in zip(both.lo.ravel(), (fx @ fW).ravel()))
    point = I.matmul(x, W)
    for lo, hi, e, r in zip(point.lo.ravel(), point.hi.ravel(), (fx @ fW).ravel(), doc_radius.ravel()):
        assert e - r <= F(lo) <= e <= F(hi) <= e + r
    # a 1-D left operand (one row vector), zeros, and products that underflow
    v = I.matmul(x[0], W)
    assert v.lo.shape == (4,) and all(F(lo) <= e <= F(hi) for lo, hi, e in zip(v.lo, v.hi, (fx[0] @ fW)))
    z = I.matmul(np.zeros((2, 3)), np.ones((3, 2)))
    assert np.array_equal(z.lo, np.zeros((2, 2))) and np.array_equal(z.hi, np.zeros((2, 2)))
    u = I.matmul(np.full((1, 8), 2.0**-537), np.full((8, 1), 2.0**-538))
    assert F(u.lo[0, 0]) <= Fraction(8, 2**1075) <= F(u.hi[0, 0])
    u1 = I.matmul(np.array([[2.0**-537]]), np.array([[2.0**-538]]))
    assert F(u1.lo[0, 0]) <= Fraction(1, 2**1075) <= F(u1.hi[0, 0])


def test_point_intervals_one_ulp_wide_still_cover_the_centre_product_rounding() -> None:
    x, W = _data(7, (20, 40)), _data(8, (40, 6))
    X = Iv(x, np.nextafter(x, np.inf))
    got = I.matmul(X, W)
    fx = np.vectorize(F, otypes=[object])(x)
    fW = np.vectorize(F, otypes=[object])(W)
    assert all(F(lo) <= e <= F(hi) for lo, hi, e in zip(got.lo.ravel(), got.hi.ravel(), (fx @ fW).ravel()))


def test_affine_adds_the_bias() -> None:
    x, W, b = _data(9, (3, 5)), _data(10, (5, 2)), np.array([1.0, -2.0])
    exact = np.vectorize(F, otypes=[object])(x) @ np.vectorize(F, otypes=[object])(W) + np.array([1, -2], dtype=object)
    out = I.affine(x, W, b)
    assert all(F(lo) <= e <= F(hi) for lo, hi, e in zip(out.lo.ravel(), out.hi.ravel(), exact.ravel()))
    plain = I.affine(x, W)
    exact = exact - np.array([1, -2], dtype=object)
    assert all(F(lo) <= e <= F(hi) for lo, hi, e in zip(plain.lo.ravel(), plain.hi.ravel(), exact.ravel()))


def test_transcendentals_are_tight_keep_ranges_and_map_infinities() -> None:
    e = I.exp(Iv(np.array([[-np.inf, 0.0], [1.0, 2.0]]), np.array([[0.0, np.inf], [1.0, 2.0]])))
    assert e.lo.shape == (2, 2)
    assert e.lo[0, 0] == 0.0 and e.hi[0, 1] == np.inf and e.lo[0, 1] <= 1.0 <= e.hi[0, 0]
    assert 2.718281828 < e.lo[1, 0] <= e.hi[1, 0] < 2.718281829
    # e^-100 < 2^-113: mpmath's lower end is -1 itself, and one step down would leave expm1's range
    m = I.expm1(Iv.exact(np.array([-50.0, -100.0, -800.0, -np.inf])))
    assert np.all(m.lo >= -1.0) and np.all(m.hi <= -0.99)
    lg = I.log(Iv(np.array([2.0, 0.5, -1.0, -2.0, 0.0]), np.array([2.0, 0.5, 2.0, -1.0, 1.0])))
    assert 0.6931 < lg.lo[0] <= lg.hi[0] < 0.6932 and -0.6932 < lg.lo[1] <= lg.hi[1] < -0.6931
    assert lg.lo[2] == -np.inf and 0.6931 < lg.hi[2] < 0.6932
    assert lg.lo[3] == -np.inf and lg.hi[3] == -np.inf and lg.lo[4] == -np.inf and lg.hi[4] >= 0.0
    p = I.log1p(Iv(np.array([0.0, 1.0]), np.array([np.inf, 1.0])))
    assert p.lo[0] <= 0.0 and p.hi[0] == np.inf and 0.6931 < p.lo[1] <= p.hi[1] < 0.6932


def test_small_helpers_give_hand_computed_values() -> None:
    x = Iv(np.array([-1.0, -3.0, 1.0, -2.0]), np.array([2.0, -1.0, 4.0, -2.0]))
    assert x[1:3].lo.tolist() == [-3.0, 1.0] and x[1:3].hi.tolist() == [-1.0, 4.0]
    assert x.mag().tolist() == [2.0, 3.0, 4.0, 2.0]
    assert x.mig().tolist() == [0.0, 1.0, 1.0, 2.0]
    assert Iv(np.array([-1.0, -0.5]), np.array([0.5, 0.0])).mig().tolist() == [0.0, 0.0]
    r = x.relu()
    assert r.lo.tolist() == [0.0, 0.0, 1.0, 0.0] and r.hi.tolist() == [2.0, 0.0, 4.0, 0.0]
    assert x.key().tolist() == [[-1.0, 2.0], [-3.0, -1.0], [1.0, 4.0], [-2.0, -2.0]]
    m = Iv(np.array([[1.0, -5.0], [0.0, 2.0]]), np.array([[3.0, 0.0], [1.0, 6.0]]))
    assert m.key().tolist() == [[[1.0, 3.0], [-5.0, 0.0]], [[0.0, 1.0], [2.0, 6.0]]]
    assert m.max(0).lo.tolist() == [1.0, 2.0] and m.max(0).hi.tolist() == [3.0, 6.0]
    assert m.min(1).lo.tolist() == [-5.0, 0.0] and m.min(1).hi.tolist() == [0.0, 1.0]
    a, b = Iv(np.array([1.0, -2.0]), np.array([2.0, 3.0])), Iv(np.array([0.0, -1.0]), np.array([5.0, 1.0]))
    assert I.maximum(a, b).lo.tolist() == [1.0, -1.0] and I.maximum(a, b).hi.tolist() == [5.0, 3.0]
    assert I.minimum(a, b).lo.tolist() == [0.0, -2.0] and I.minimum(a, b).hi.tolist() == [2.0, 1.0]
    u, idx = Iv(np.array([1.0, 2.0, 1.0, 1.0]), np.array([3.0, 3.0, 3.0, 4.0])).unique()
    assert u.lo.tolist() == [1.0, 1.0, 2.0] and u.hi.tolist() == [3.0, 4.0, 3.0] and idx.tolist() == [0, 2, 0, 1]
