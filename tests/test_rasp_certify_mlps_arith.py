"""The interval arithmetic of rasp.certify's MLP tables (rasp/certify/mlps.py) against exact rationals.

What is pinned, each against ``fractions.Fraction`` computations of the same quantity:

* ``_two_product``: ``p + e == a * b`` exactly;
* ``_sum`` and ``_prefix_sums``: enclosures of exact sums (and prefix sums) that contain them
  and are nearly tight where the float sums cancel (plain float sums would miss by far);
* ``_active_maps``: ``M_r = W_in[:, A_r] W_out[A_r]`` and ``c_r`` for nested active sets (the
  prefix path) and others (the per-row path, in chunks of ``rows``), both enclosing the exact
  sums and nearly tight when large slope changes cancel; weights too large or products too
  small for error-free products go to the plain interval path, which must still enclose;
  exactly at those thresholds the error-free path is kept;
* ``enclose``: the MLP over boxes (more than 64 rows, straddling units, a pre-activation whose
  lower end is exactly 0) contains ``ReLU(x W_in + b_in) W_out + b_out`` at sample points of
  each box, and is as narrow as the function's range where the function is linear on the box.

No expected value comes from the code under test; inputs are chosen so that each enclosure
would be wrong if a term (a rounding error, a unit, a row) were dropped.
"""
from __future__ import annotations

import signal
import threading
from fractions import Fraction as F

import numpy as np
import pytest

from lengthgen.proof.interval import Iv, affine
from rasp.certify import mlps
from rasp.certify.mlps import _active_maps, _prefix_sums, _sum, _two_product, enclose

B = 2.0 ** 40             # the size of the slope changes that cancel


@pytest.fixture(autouse=True)
def _time_limit():
    """Each test here takes milliseconds; a summation loop that never ends fails in 20 s."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(*_):
        raise TimeoutError("a summation did not terminate")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 20.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)


def inside(iv_lo: float, exact: F, iv_hi: float) -> bool:
    return F(float(iv_lo)) <= exact <= F(float(iv_hi))   # F(nan) or F(inf) raises: never inside


def width(lo: float, hi: float) -> float:
    return float(hi) - float(lo)


# ---------------------------------------------------------------------- error-free products and sums
def test_two_product_is_error_free():
    """Dekker's TwoProduct: ``p == fl(a*b)`` and ``p + e == a*b`` exactly, for factors of any
    size (exponents -300..300, so no overflow or underflow) and sign, zeros included."""
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, 300) * 2.0 ** rng.integers(-300, 300, 300)
    b = rng.uniform(-1, 1, 300) * 2.0 ** rng.integers(-300, 300, 300)
    a[:5] = 0.0
    p, e = _two_product(a, b)
    assert np.array_equal(p, a * b)
    assert all(F(x) + F(y) == F(u) * F(v) for x, y, u, v in zip(p, e, a, b))
    assert np.count_nonzero(e) > 200          # the low parts are there to be lost


@pytest.mark.parametrize("K", [1, 2])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_sum_encloses_cancelling_sums_tightly(n, K):
    """``_sum`` of ``x`` ``[rows, n, K]`` along axis 1: terms of size 2^60 that cancel, plus small
    ones. The exact sum (Fraction) lies inside, and the width is at most 1e-9 (1 + |sum|): the
    TwoSum errors (up to 2^8 here) are summed, not dropped; odd ``n`` are padded with one zero."""
    rng = np.random.default_rng(n * 10 + K)
    big = rng.choice([-1.0, 1.0], size=(3, n, K)) * 2.0 ** 60 * rng.integers(1, 4, size=(3, n, K))
    x = np.where(rng.random((3, n, K)) < 0.5, big, rng.normal(size=(3, n, K)))
    x[0, -1] = -x[0, :-1].sum(axis=0)          # a row whose float sum is about the terms' rounding
    out = _sum(x)
    assert out.lo.shape == out.hi.shape == (3, K)
    for r in range(3):
        for k in range(K):
            exact = sum(F(v) for v in x[r, :, k])
            assert inside(out.lo[r, k], exact, out.hi[r, k]), (r, k, float(exact), out.lo[r, k], out.hi[r, k])
            assert width(out.lo[r, k], out.hi[r, k]) <= 1e-9 * (1 + abs(float(exact)))


def test_prefix_sums_enclose_every_prefix_tightly():
    """``_prefix_sums(p, e)``: ``sum_{i<j} (p_i + e_i)`` for j = 0..U (rows), K = 2 columns; the
    p cancel (2^60), so the running TwoSum errors ``t`` matter; every prefix is inside and the
    width is at most 1e-9 (1 + |prefix|)."""
    rng = np.random.default_rng(5)
    U, K = 9, 2
    p = np.where(rng.random((U, K)) < 0.6, rng.choice([-1.0, 1.0], (U, K)) * 2.0 ** 60, rng.normal(size=(U, K)))
    e = rng.normal(size=(U, K)) * 1e-3
    out = _prefix_sums(p, e)
    assert out.lo.shape == (U + 1, K)
    for j in range(U + 1):
        for k in range(K):
            exact = sum((F(p[i, k]) + F(e[i, k]) for i in range(j)), F(0))
            assert inside(out.lo[j, k], exact, out.hi[j, k]), (j, k)
            assert width(out.lo[j, k], out.hi[j, k]) <= 1e-9 * (1 + abs(float(exact)))


def test_prefix_sums_bound_the_rounding_of_the_low_parts():
    """With ``p = 0`` the prefix sums are those of ``e`` alone, summed in float: column 0 is
    1, 2^-60, -1, 2^-70 (float prefixes 1, 1, 0, 2^-70; exact 1, 1 + 2^-60, 2^-60, 2^-60 +
    2^-70), column 1 its negative. The enclosure's radius must cover the rounding of those sums
    (Higham's bound on the running magnitudes, here about 2 * 2u): without it, or with only the
    last term's magnitude, the prefixes j = 3, 4 are missed, above the float in column 0 and
    below it in column 1."""
    e = np.array([[1.0, -1.0], [2.0 ** -60, -(2.0 ** -60)], [-1.0, 1.0], [2.0 ** -70, -(2.0 ** -70)]])
    out = _prefix_sums(np.zeros_like(e), e)
    for j in range(5):
        for k in range(2):
            exact = sum((F(e[i, k]) for i in range(j)), F(0))
            assert inside(out.lo[j, k], exact, out.hi[j, k]), (j, k)
            assert width(out.lo[j, k], out.hi[j, k]) <= 1e-14


# ---------------------------------------------------------------------- the maps of the active units
def exact_maps(act, W_in, b_in, W_out):
    """``M[r][d][j]`` and ``c[r][j]`` in Fraction arithmetic."""
    R, (D, U), K = len(act), W_in.shape, W_out.shape[1]
    M = [[[sum((F(W_in[d, u]) * F(W_out[u, j]) for u in range(U) if act[r, u]), F(0)) for j in range(K)]
          for d in range(D)] for r in range(R)]
    c = [[sum((F(b_in[u]) * F(W_out[u, j]) for u in range(U) if act[r, u]), F(0)) for j in range(K)] for r in range(R)]
    return M, c


def assert_maps(act, W_in, b_in, W_out, rows, rel=1e-9, floor=0.0):
    """``_active_maps`` encloses the exact maps, each entry within ``rel (|exact| + floor)``."""
    M, c = _active_maps(act, W_in, b_in, W_out, rows)
    assert M.lo.shape == (len(act), W_in.shape[0], W_out.shape[1]) and c.lo.shape == (len(act), W_out.shape[1])
    Mx, cx = exact_maps(act, W_in, b_in, W_out)
    for r in range(len(act)):
        for j in range(W_out.shape[1]):
            assert inside(c.lo[r, j], cx[r][j], c.hi[r, j]), ("c", r, j)
            assert width(c.lo[r, j], c.hi[r, j]) <= rel * (abs(float(cx[r][j])) + floor), ("c", r, j)
            for d in range(W_in.shape[0]):
                assert inside(M.lo[r, d, j], Mx[r][d][j], M.hi[r, d, j]), ("M", r, d, j)
                assert width(M.lo[r, d, j], M.hi[r, d, j]) <= rel * (abs(float(Mx[r][d][j])) + floor), ("M", r, d, j)


def paired_units(rng, D: int, pairs: int):
    """Units in pairs reading the same column (so active together) whose ``W_out`` rows are
    ``B + r`` and ``-B``: together they add ``r`` times their input, alone ``B`` times; plus
    one unit writing exactly 1 and -1, and one writing 0 to the second output."""
    cols = rng.normal(size=(D, pairs)) * 4
    W_in = np.concatenate([np.repeat(cols, 2, axis=1), rng.normal(size=(D, 2))], axis=1)
    b_in = np.concatenate([np.repeat(rng.normal(size=pairs), 2), rng.normal(size=2)])
    r = rng.normal(size=(pairs, 2))
    W_out = np.zeros((2 * pairs + 2, 2))
    W_out[0:2 * pairs:2], W_out[1:2 * pairs:2] = B + r, -B
    W_out[-2], W_out[-1] = [1.0, -1.0], [rng.normal(), 0.0]
    return W_in, b_in, W_out


@pytest.mark.parametrize("nested", [True, False])
def test_active_maps_are_exact_sums_and_cancel(nested):
    """Both summation paths (prefix sums of one unit order; per row, in chunks of 7 rows over
    40 rows): every entry of ``M`` and ``c`` encloses its exact sum and is at most
    1e-9 (|sum| + 1) wide, although the slope changes are 2^40 and cancel; interval products would be about
    2^40 u wide, and a dropped low part or unit misses."""
    rng = np.random.default_rng(7 + nested)
    W_in, b_in, W_out = paired_units(rng, 2, 5)
    U = W_in.shape[1]
    if nested:                            # row k: units 0..k-1, prefixes of one order
        act = np.arange(U)[None, :] < np.arange(U + 1)[:, None]
    else:
        act = rng.random((40, U)) < 0.5
        act[:, 1:-2:2] = act[:, 0:-2:2]   # a pair is active together
    assert_maps(act, W_in, b_in, W_out, rows=7, floor=1.0)


def test_per_row_path_with_a_unit_active_everywhere():
    """Unit 0 active in every row and the others not nested: the rows' active sets are not
    prefixes of one order (though the first column dominates the others), so each row's own
    units must be summed."""
    rng = np.random.default_rng(11)
    W_in, b_in, W_out = paired_units(rng, 1, 3)
    act = np.array([[1, 1, 1, 0, 0, 0, 1, 0], [1, 1, 0, 0, 1, 1, 0, 1], [1, 1, 1, 1, 0, 0, 0, 0]], bool)
    act[:, 0] = True
    assert_maps(act, W_in, b_in, W_out, rows=2, floor=1.0)


def test_the_nested_path_is_taken_for_a_one_dimensional_table(monkeypatch):
    """A table in one scalar (thresholds ``z_i``) has nested active sets: ``_prefix_sums`` (one
    pass over the units) is used, not the per-row sums of size rows x units; other sets use the
    per-row sums."""
    calls = []
    monkeypatch.setattr(mlps, "_prefix_sums", lambda *a: (calls.append("prefix"), _prefix_sums(*a))[1])
    monkeypatch.setattr(mlps, "_sum", lambda *a: (calls.append("rows"), _sum(*a))[1])
    W_in, b_in = np.ones((1, 6)), -np.arange(6.0)
    W_out = np.array([[1.0], [-2.0], [2.0], [-2.0], [2.0], [-2.0]])
    act = np.arange(7.0)[:, None] + b_in >= 0
    _active_maps(act, W_in, b_in, W_out, 64)
    assert calls == ["prefix"]
    calls.clear()
    _active_maps(np.array([[1, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0]], bool), W_in, b_in, W_out, 64)
    assert calls == ["rows"]


@pytest.mark.parametrize("case", ["big W_in", "big W_out", "tiny products"])
def test_fallback_of_the_error_free_products_still_encloses(case):
    """Weights above 2^900 (Veltkamp's split would overflow: 2^27 * 2^1000) and products below
    2^-900 (their low parts underflow, so ``p + e`` is not exact) take the interval product
    path, which must enclose too (each case has only one of the three reasons). The tiny products here (about 2^-1064) of two units cancel in
    float to exactly 0 (their low parts underflow to 0 as well), while the exact sum is
    b (a - next(a)) = -1.25 * 2^-1119, not 0: error-free sums (per row: the sets are not nested)
    would return exactly [0, 0]."""
    b_in = np.array([0.5, 0.0, -1.0])
    if case == "big W_in":            # (b_in times W_out is not below 2^-900 either)
        W_in, W_out = np.array([[2.0 ** 1000, -(2.0 ** 998), 3.0]]), np.array([[2.0 ** -990], [2.0 ** -989], [1.0]])
        b_in[0] = 2.0 ** 95
    elif case == "big W_out":
        W_in, W_out = np.array([[2.0 ** -990, -(2.0 ** -989), 3.0]]), np.array([[2.0 ** 1000], [2.0 ** 998], [1.0]])
        b_in[0] = 2.0 ** -95
    else:
        a, b = 1.5 * 2.0 ** -537, 1.25 * 2.0 ** -530
        W_in, W_out = np.array([[a, np.nextafter(a, 1.0), 1.0]]), np.array([[b], [-b], [1.0]])
    act = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 1], [1, 0, 0]], bool)
    M, c = _active_maps(act, W_in, b_in, W_out, 64)
    Mx, cx = exact_maps(act, W_in, b_in, W_out)
    assert Mx[0][0][0] != 0
    for r in range(len(act)):
        assert inside(M.lo[r, 0, 0], Mx[r][0][0], M.hi[r, 0, 0]), r
        assert inside(c.lo[r, 0], cx[r][0], c.hi[r, 0]), r


@pytest.mark.parametrize("case", ["W_in at 2^900", "W_out at 2^900", "products at 2^-900"])
def test_weights_at_the_thresholds_keep_error_free_products(case):
    """Exactly at the limits (|weight| = 2^900, |product| = 2^-900) error-free products are still
    exact (no overflow, low parts about 2^-953 are normal), so the cancelling sums stay tight:
    2^40 (1 + 2^-30) - 2^40 = 2^10 (or 2^-900 - 2^-900 = 0) within 1e-9 relative, where the
    interval product would be about 2^40 u (2^-900 u) wide."""
    if case == "W_in at 2^900":
        W_in, W_out = np.array([[2.0 ** 900, 2.0 ** 900]]), np.array([[2.0 ** -860 * (1 + 2.0 ** -30)], [-(2.0 ** -860)]])
    elif case == "W_out at 2^900":
        W_in, W_out = np.array([[2.0 ** -860 * (1 + 2.0 ** -30), 2.0 ** -860]]), np.array([[2.0 ** 900], [-(2.0 ** 900)]])
    else:
        W_in, W_out = np.array([[2.0 ** -450, 2.0 ** -450]]), np.array([[2.0 ** -450], [-(2.0 ** -450)]])
    assert_maps(np.ones((1, 2), bool), W_in, np.zeros(2), W_out, rows=64, floor=2.0 ** -990)


# ---------------------------------------------------------------------- enclose
def exact_mlp(x, W_in, b_in, W_out, b_out) -> list[F]:
    pre = [sum((F(a) * F(w) for a, w in zip(x, W_in[:, u])), F(b_in[u])) for u in range(W_in.shape[1])]
    return [sum((max(p, F(0)) * F(W_out[u, j]) for u, p in enumerate(pre)), F(b_out[j])) for j in range(W_out.shape[1])]


def assert_encloses(X: Iv, out: Iv, W_in, b_in, W_out, b_out, samples: int = 3, seed: int = 0) -> None:
    """The exact MLP output lies in ``out`` at both ends and ``samples`` random points of each box."""
    rng = np.random.default_rng(seed)
    for r in range(X.shape[0]):
        points = [X.lo[r], X.hi[r]] + [X.lo[r] + rng.random(X.shape[1]) * (X.hi[r] - X.lo[r]) for _ in range(samples)]
        for x in points:
            for j, v in enumerate(exact_mlp(x, W_in, b_in, W_out, b_out)):
                assert inside(out.lo[r, j], v, out.hi[r, j]), (r, j, x)


def test_enclose_a_table_over_many_rows():
    """A table in one scalar ``z`` (12 units at z = 0..11, slope changes 2^40 that cancel in
    pairs) at 200 boxes ``z = k / 16 + 1/64 + [0, 2^-20]`` (none at a kink): more rows than one
    chunk of 64 (and than 64 + 63), each row enclosed, and at most 2^-10 wide (the slopes are
    O(10), the box 2^-20; the units one by one would be 2^40 u wide)."""
    rng = np.random.default_rng(2)
    W_in = np.ones((1, 12))
    b_in = -np.repeat(np.arange(6.0), 2) * 2
    W_out = np.zeros((12, 2))
    W_out[0::2], W_out[1::2] = B + rng.integers(-3, 4, size=(6, 2)), -B
    b_out = np.array([0.75, -2.0])
    lo = np.arange(200.0)[:, None] / 16 + 2.0 ** -6
    X = Iv(lo, lo + 2.0 ** -20)
    out = enclose(X, W_in, b_in, W_out, b_out)
    assert out.lo.shape == (200, 2)
    assert_encloses(X, out, W_in, b_in, W_out, b_out, samples=1)
    assert np.all(out.hi - out.lo <= 2.0 ** -10)


def test_enclose_straddling_units():
    """Boxes on which a unit's pre-activation changes sign, with upper ends below 1 (0.5, 0.25)
    and ``W_out`` of both signs: the unit adds ``[0, max pre] W_out``, which the result must keep;
    rows of 2-D inputs (not nested) in chunks of the default 64 rows."""
    W_in = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    b_in = np.array([0.0, -1.0, -2.0])
    W_out = np.array([[3.0, -2.0], [-1.5, 4.0], [2.0, 1.0]])
    b_out = np.array([0.5, 0.25])
    lo = np.array([[-0.5, 0.75], [0.25, 0.5], [1.0, 1.0], [-0.25, 1.25], [2.0, -1.0]] * 14)
    X = Iv(lo, lo + np.array([1.0, 0.5]))
    out = enclose(X, W_in, b_in, W_out, b_out)
    assert_encloses(X, out, W_in, b_in, W_out, b_out)


def test_a_pre_activation_from_exactly_0_is_linear_on_the_box():
    """One unit whose pre-activation on the box is ``[0, h]`` with the lower end exactly 0 (``b_in``
    chosen as minus the enclosure's lower end of ``x W_in``): ReLU is the identity there, so the
    output ``ReLU(pre) * 3 + 1`` lies in ``[1, 1 + 3h]``: the unit must count (active), once, so the
    enclosure is at most 3h (1 + 1e-9) wide, not 6h."""
    W_in, W_out, b_out = np.array([[1.0]]), np.array([[3.0]]), np.array([1.0])
    X = Iv(np.array([[1.0]]), np.array([[3.0]]))
    b_in = -affine(X, W_in).lo[0]
    pre = affine(X, W_in, b_in)
    assert pre.lo[0, 0] == 0.0 and pre.hi[0, 0] > 1.9
    out = enclose(X, W_in, b_in, W_out, b_out)
    assert_encloses(X, out, W_in, b_in, W_out, b_out)
    assert width(out.lo[0, 0], out.hi[0, 0]) <= 3 * float(pre.hi[0, 0]) * (1 + 1e-9)
