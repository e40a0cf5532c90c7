"""The layer enclosures of :mod:`lengthgen.proof.layers` at their adversarial points, each against an
oracle of its own (mpmath at 40 digits, exact fractions, torch's float64 LayerNorm): the constants,
e^x at ±inf and past the float range, the exact affine map where float products round and cancel
or underflow, 1/y and 1/√v at 0, x² at an inexact square, LayerNorm over a 3-d array, Φ and φ on
the grid, halfway between grid points and at ±8 (containment and a width within a literal of the
Taylor remainder's), and the float32 points just below a grid point.

The broad sweeps: tests/test_proof_layers.py.
"""
from __future__ import annotations

import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from mpmath import iv

from lengthgen.proof.interval import TINY, Iv
from lengthgen.proof.layers import _const, _point_cdf, _point_exp, affine_exact, gelu, layer_norm, point_pdf, recip, rsqrt, square

STEP = 2.0**-10  # the grid of the Φ/φ tables, a literal: Taylor steps δ ∈ [0, 2^-10]


def between(lo, hi, truth) -> bool:
    return all(float(lo[i]) <= t <= float(hi[i]) for i, t in enumerate(truth))


def exactly_between(enc: Iv, truth: list[Fraction]) -> bool:
    lo, hi = enc.lo.ravel(), enc.hi.ravel()
    return all(Fraction(lo[i]) <= t <= Fraction(hi[i]) for i, t in enumerate(truth))


def exact_products(x: np.ndarray, W: np.ndarray) -> list[Fraction]:
    return [sum((Fraction(x[i, k]) * Fraction(W[k, j]) for k in range(W.shape[0])), Fraction(0))
            for i in range(x.shape[0]) for j in range(W.shape[1])]


@pytest.mark.parametrize("expr,truth", [
    (lambda: 1 / iv.sqrt(2), lambda: 1 / mpmath.sqrt(2)),
    (lambda: 2 / iv.sqrt(iv.pi), lambda: 2 / mpmath.sqrt(mpmath.pi)),
    (lambda: 1 / iv.sqrt(2 * iv.pi), lambda: 1 / mpmath.sqrt(2 * mpmath.pi)),
])
def test_constants_lie_within_two_spacings_and_leave_mpmath_as_found(expr, truth):
    iv.prec = 53
    try:
        c = _const(expr)
        assert iv.prec == 53
    finally:
        iv.prec = 53
    with mpmath.workdps(40):
        t = truth()
        assert float(c.lo) <= t <= float(c.hi)
    assert float(c.hi) - float(c.lo) <= 2 * np.spacing(float(c.lo))  # 113 bits: one step out each way


def test_exp_at_infinities_and_past_the_float_range():
    v = np.array([-np.inf, -1e308, -800.0, -745.2, -745.0, 709.8, 710.0, 800.0, 1e308, np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # also numpy's deprecations: no warning on these points
        enc = _point_exp(v)
    with mpmath.workdps(40):
        assert between(enc.lo, enc.hi, [mpmath.exp(mpmath.mpf(float(x))) for x in v])
    low = v < 0
    assert np.all(enc.hi[low] <= 2.0**-1073) and np.all(enc.lo[~low] >= 1e308)
    assert np.all(np.isfinite(enc.lo))


def test_exp_at_the_range_reduction_boundaries_and_on_other_float_types():
    ks = np.arange(0, 11)
    v = np.concatenate([2.0**-5 * 2.0**ks * (1 + 2.0**-52), 2.0**-5 * 2.0**ks, np.nextafter(2.0**-5 * 2.0**ks, 0)])
    v = np.concatenate([v, -v])
    enc = _point_exp(v)
    with mpmath.workdps(40):
        truth = [mpmath.exp(mpmath.mpf(float(x))) for x in v]
        assert between(enc.lo, enc.hi, truth)
        assert np.all(enc.hi - enc.lo <= 1e-9 * enc.hi)
        for pts in (np.array([-3, 0, 2, 40]), np.array([-3.3, 0.1, 2.7, 40.5], dtype=np.float32)):
            got = _point_exp(pts)
            assert between(got.lo, got.hi, [mpmath.exp(mpmath.mpf(float(x))) for x in pts])
            assert np.all(got.hi - got.lo <= 1e-9 * got.hi)


def test_affine_exact_covers_products_that_round_and_cancel():
    """Point inputs, so only the rounding radius can hold the exact value: a product that rounds
    (k = 1), two that round and cancel to 2^-60 (k = 2), and ones that absorb 255 addends
    of about 2^-53 each (k = 256, one output column: the count is the inner dimension)."""
    a = 1 + 2.0**-30
    cases = [
        (np.array([[a]]), np.array([[a]])),
        (np.array([[a, -1.0]]), np.array([[a], [1 + 2.0**-29]])),
        (np.array([[1.0] * 8 + [2.0**-53 * (1 - 2.0**-20)] * 248]), np.ones((256, 1))),
    ]
    for x, W in cases:
        enc = affine_exact(Iv.exact(x), W)
        assert exactly_between(enc, exact_products(x, W))


def test_affine_exact_covers_products_that_underflow():
    """64 products of 0.49·2^-1074 each: every one (and their float sum) rounds to 0, their exact
    sum is 31.36·2^-1074."""
    x = np.full((1, 64), 2.0**-537)
    W = np.full((64, 2), 2.0**-537 * 0.49)
    enc = affine_exact(Iv.exact(x), W)
    truth = exact_products(x, W)
    assert truth[0] > 31 * Fraction(TINY)
    assert exactly_between(enc, truth)


@pytest.mark.parametrize("fn,name", [(recip, "recip"), (rsqrt, "rsqrt")])
@pytest.mark.parametrize("lo", [0.0, -0.0, -1.0])
def test_reciprocal_and_root_refuse_a_non_positive_end(fn, name, lo):
    with pytest.raises(ValueError, match=f"^{name} needs a positive interval$"):
        fn(Iv(np.array([1.0, lo]), np.array([2.0, 1.0])))


def test_square_at_an_inexact_square():
    a = 1 + 2.0**-30  # a² = 1 + 2^-29 + 2^-60 rounds down to 1 + 2^-29
    enc = square(Iv(np.array([a, -3.0, -2 * a, -a]), np.array([3.0, -a, 3.0, a])))
    exact = [Fraction(a) ** 2, Fraction(a) ** 2, Fraction(0), Fraction(0)]
    assert all(Fraction(float(lo)) <= t for lo, t in zip(enc.lo, exact))
    top = [Fraction(9), Fraction(9), Fraction(9), Fraction(a) ** 2]
    assert all(t <= Fraction(float(hi)) for hi, t in zip(enc.hi, top))


def test_layer_norm_over_the_last_axis_of_a_3d_array():
    rng = np.random.default_rng(3)
    shape = (2, 3, 5)
    centre, rad = rng.normal(size=shape), np.abs(rng.normal(size=shape)) * 0.1
    w, b = rng.normal(size=5), rng.normal(size=5)
    enc = layer_norm(Iv(centre - rad, centre + rad), w, b, 1e-5)
    assert enc.shape == shape and enc.hi.shape == shape
    for _ in range(50):
        x = centre + rng.uniform(-1, 1, size=shape) * rad
        y = torch.nn.functional.layer_norm(torch.tensor(x), (5,), torch.tensor(w), torch.tensor(b), 1e-5).numpy()
        assert np.all(enc.lo <= y + 1e-12) and np.all(y - 1e-12 <= enc.hi)


def grid_points() -> np.ndarray:
    g = np.arange(-8.0, 8.0, STEP)
    return np.concatenate([g[::37], np.arange(-8, 8.5, 0.5), np.arange(-10, 11) * STEP])


@pytest.mark.parametrize("offset", [0.0, STEP / 2, STEP * (1 - 2.0**-30)])
def test_phi_and_its_density_on_and_between_grid_points(offset):
    """Containment; width within a literal of the Taylor remainder's: 2·max|Φ''|/2·δ² < 0.25·δ² for
    Φ, 2·max|φ''|/2·δ² < 0.42·δ² for φ (max |Φ''| = φ(1) < 0.242, max |φ''| = φ(0) < 0.399), plus
    10^-11 (Φ) and 10^-13 (φ) for the tables and float rounding."""
    v = grid_points()
    v = v[np.abs(v) < 8] + offset
    (clo, chi), (plo, phi) = _point_cdf(v), point_pdf(v)
    with mpmath.workdps(40):
        assert between(clo, chi, [mpmath.ncdf(mpmath.mpf(float(x))) for x in v])
        assert between(plo, phi, [mpmath.npdf(mpmath.mpf(float(x))) for x in v])
    d2 = offset * offset
    assert np.all(chi - clo <= 0.25 * d2 + 1e-11) and np.all(phi - plo <= 0.42 * d2 + 1e-13)


def test_phi_stays_in_the_unit_interval_and_is_tight_at_and_past_8():
    v = np.concatenate([np.linspace(7.0, 8.0, 301), np.nextafter(8.0, 0) - np.arange(4) * 2.0**-49])
    lo, hi = _point_cdf(np.concatenate([v, -v]))
    assert np.all(hi <= 1.0) and np.all(lo >= 0.0)
    edge = np.array([-np.inf, -1e300, -9.0, -8.0, 8.0, 9.0, 1e300, np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no invalid cast of an infinite or huge point to a grid index
        (clo, chi), (plo, phi) = _point_cdf(edge), point_pdf(edge)
    far = np.abs(edge) == 1e300  # Φ there is 0 or 1 to any precision; mpmath's φ overflows
    with mpmath.workdps(40):
        cdf = [mpmath.ncdf(mpmath.mpf(float(x))) if not f else float(x > 0) for x, f in zip(edge, far)]
        assert between(clo, chi, cdf)
        assert between(plo[~far], phi[~far], [mpmath.npdf(mpmath.mpf(float(x))) for x in edge[~far]])
    assert np.all(chi - clo <= 1e-14) and np.all(plo >= 0) and np.all(phi <= 1e-14)


@pytest.mark.parametrize("kind", ["float32", "float64"])
def test_points_just_below_a_grid_point(kind):
    """float32 points one float32 spacing below a grid point g of [−8, 0): v + 8 in float32
    arithmetic would round up to g + 8, Taylor would then start above v; float64 points of (0, 8)
    0.9·2^-50 below g, where v + 8 does round up to g + 8 (the grid point above v, δ clipped to 0)."""
    if kind == "float32":
        v = np.nextafter(np.arange(-8.0, 0.0, STEP)[1::41].astype(np.float32), np.float32(-np.inf))
    else:
        g = np.arange(STEP, 8.0, STEP)[::41]
        v = g - 0.9 * 2.0**-50
        assert np.all(v + 8 == g + 8) and np.all(v < g)
    (clo, chi), (plo, phi) = _point_cdf(v), point_pdf(v)
    with mpmath.workdps(40):
        assert between(clo, chi, [mpmath.ncdf(mpmath.mpf(float(x))) for x in v])
        assert between(plo, phi, [mpmath.npdf(mpmath.mpf(float(x))) for x in v])


@pytest.mark.parametrize("lo,hi", [(-1.0, -0.7518), (-0.7517, 0.0)])
def test_gelu_on_one_side_of_its_minimum_keeps_the_end_value(lo, hi):
    """GELU falls up to x* = −0.7517915… and rises after: on [−1, −0.7518] its minimum is GELU(−0.7518),
    on [−0.7517, 0] it is GELU(−0.7517), 1.6e-11 and 1.8e-9 above GELU(x*). The lower end stays
    within 10^-9 of that value, below the value of the global minimum's bound −0.16997121."""
    enc = gelu(Iv(np.array([lo]), np.array([hi])))
    end = hi if hi <= -0.7518 else lo
    with mpmath.workdps(40):
        x = mpmath.mpf(end)
        least = x * mpmath.ncdf(x)
        assert least - mpmath.mpf("1e-9") <= float(enc.lo[0]) <= least
