"""The certificate's number type (src/lengthgen/proof/interval.py) encloses exact values:
checked against Python's exact rationals and 300-bit mpmath, on random data of mixed sign and
magnitude, so a missing outward rounding or a missing error term shows up."""
from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv


def _data(seed: int, shape: tuple) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape)) * (rng.random(shape) < 0.9)


def _encloses(got: Iv, exact) -> bool:
    lo, hi = np.asarray(got.lo).reshape(-1), np.asarray(got.hi).reshape(-1)
    return all(Fraction(float(a)) <= e <= Fraction(float(b)) for a, b, e in zip(lo, hi, np.asarray(exact, dtype=object).reshape(-1)))


def _frac(x: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda v: Fraction(float(v)), otypes=[object])(x)


def test_elementwise_operations_enclose_exact_rationals() -> None:
    a, b = _data(0, (400,)), _data(1, (400,))
    fa, fb = _frac(a), _frac(b)
    A, B = Iv.exact(a), Iv.exact(b)
    assert _encloses(A + B, fa + fb)
    assert _encloses(A - B, fa - fb)
    assert _encloses(A * B, fa * fb)
    assert _encloses((A + B) * (A - B), (fa + fb) * (fa - fb))
    assert _encloses(A / 3.0, fa / 3)


def test_sums_and_matrix_products_enclose_exact_rationals() -> None:
    x, W = _data(2, (30, 40)), _data(3, (40, 7))
    exact = _frac(x) @ _frac(W)
    assert _encloses(I.matmul(x, W), exact)
    assert _encloses(Iv.exact(x).sum(1), _frac(x).sum(1))
    wide = Iv(x, I.up(I.up(x + np.abs(x) * 1e-3)))  # an interval operand: every point inside is covered
    assert _encloses(I.matmul(wide, W), exact)
    assert np.all(I.up_matmul_nonneg(np.abs(x), np.abs(W)) >= np.abs(x) @ np.abs(W))
    nonneg_exact = _frac(np.abs(x)) @ _frac(np.abs(W))
    assert all(Fraction(float(u)) >= e for u, e in zip(I.up_matmul_nonneg(np.abs(x), np.abs(W)).reshape(-1),
                                                       nonneg_exact.reshape(-1)))


@pytest.mark.parametrize("name", ["exp", "expm1", "log", "log1p"])
def test_transcendentals_enclose_high_precision_values(name: str) -> None:
    rng = np.random.default_rng(4)
    x = {"log": rng.uniform(0.001, 40, 200), "log1p": rng.uniform(-0.999, 40, 200)}.get(name, rng.uniform(-40, 40, 200))
    got = getattr(I, name)(Iv.exact(x))
    with mpmath.workprec(300):
        for v, lo, hi in zip(x, got.lo, got.hi):
            exact = getattr(mpmath, name)(mpmath.mpf(float(v)))
            assert mpmath.mpf(float(lo)) <= exact <= mpmath.mpf(float(hi)), (name, v)


def test_outward_steps_leave_zero_alone_and_move_everything_else() -> None:
    x = np.array([1.0, -1.0, 2.0**-1000, -3.5e300, 1.5, -(2.0**-1022)])
    assert np.all(I.down(x) <= np.nextafter(x, -np.inf)) and np.all(I.up(x) >= np.nextafter(x, np.inf))
    assert I.up(0.0) == 0.0 and I.down(0.0) == 0.0
    assert I.up(np.inf) == np.inf and I.down(-np.inf) == -np.inf
