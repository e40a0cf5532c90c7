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


# --- float64 edges: subnormal results, underflow to 0, overflow --------------------------------------

SUBNORMAL = 2.0**-1074
MAX = float(np.finfo(np.float64).max)


def _mp_encloses(name: str, x: np.ndarray) -> list[float]:
    """The arguments whose 300-bit value of ``name`` lies outside the enclosure (``[]``: all inside)."""
    got = getattr(I, name)(Iv.exact(x))
    bad = []
    with mpmath.workprec(300):
        for v, lo, hi in zip(x.tolist(), got.lo.tolist(), got.hi.tolist()):
            exact = getattr(mpmath, name)(mpmath.mpf(v))
            if not mpmath.mpf(lo) <= exact <= mpmath.mpf(hi):
                bad.append(v)
    return bad


def test_exp_encloses_subnormal_and_underflowing_results() -> None:
    """exp(x) for x in [−750, −708] is subnormal or below the smallest subnormal: the enclosure
    must still contain it (its upper end is then at least 2^-1074, never 0)."""
    x = np.concatenate([np.linspace(-750.0, -708.0, 421), [-745.1332191019411, -745.1332191019412, -744.44007,
                                                           -708.3964185322641, -1074 * np.log(2)]])
    assert _mp_encloses("exp", x) == []
    assert np.all(I.exp(Iv.exact(np.array([-746.0, -800.0]))).hi >= SUBNORMAL)


@pytest.mark.parametrize("name, x", [
    ("exp", [709.782712893384, 709.7827128933841, 709.79, -1e-300, SUBNORMAL, -SUBNORMAL, 2.0**-60]),
    ("expm1", [-SUBNORMAL, SUBNORMAL, 2.0**-1022, -(2.0**-1030), 1e-300, -37.5, -40.0, -745.5, 709.78, 709.79]),
    ("log", [SUBNORMAL, 3 * SUBNORMAL, 2.0**-1022, 2.0**-1030, 1 - 2.0**-53, 1 + 2.0**-52, MAX, 1e-300]),
    ("log1p", [-1 + 2.0**-53, -1 + 2.0**-30, SUBNORMAL, -SUBNORMAL, 2.0**-1030, 1e-300, -1e-300, 2.0**-60, MAX]),
])
def test_transcendentals_enclose_values_at_the_edges(name: str, x: list[float]) -> None:
    assert _mp_encloses(name, np.array(x)) == []


def test_outward_steps_at_subnormals_zero_and_infinities() -> None:
    """``down``/``up`` move every non-zero float by at least one float, subnormals included (a
    product or quotient that lands there is not exact), keep 0, and never give a lower end +inf."""
    x = np.array([SUBNORMAL, -SUBNORMAL, 3 * SUBNORMAL, 2.0**-1030, -(2.0**-1022), 2.0**-1022 + SUBNORMAL, MAX, -MAX])
    assert np.all(I.down(x) <= np.nextafter(x, -np.inf)) and np.all(I.up(x) >= np.nextafter(x, np.inf))
    assert I.up(SUBNORMAL) == 2 * SUBNORMAL and I.down(SUBNORMAL) == 0.0 and I.up(-SUBNORMAL) == 0.0
    assert I.up(0.0) == 0.0 and I.down(0.0) == 0.0 and I.up(-0.0) == 0.0
    assert I.up(np.inf) == np.inf and I.down(-np.inf) == -np.inf
    assert np.isfinite(I.down(np.inf)) and np.isfinite(I.up(-np.inf))  # MAX + MAX overflows: its exact value is finite
    a = SUBNORMAL * np.array([3.0, 5.0, 7.0, 1e6])
    assert _encloses(Iv.exact(a) * 0.3, _frac(a) * Fraction(0.3)) and _encloses(Iv.exact(a) / 3.0, _frac(a) / 3)
    assert _encloses(Iv.exact(2.0**-1000 * np.array([1.5, 3.0])) * Iv.exact(2.0**-60 * np.array([1.25, 1.75])),
                     _frac(2.0**-1000 * np.array([1.5, 3.0])) * _frac(2.0**-60 * np.array([1.25, 1.75])))


# --- sums and products whose float64 result carries near-worst-case accumulated error ---------------
# 1 followed by k terms t just below half a spacing of 1: each addition to a running sum ≈ 1 rounds
# t away, so a running sum loses k·t ≈ k·u of Σ|terms| ≈ 1 — the γ_k of Higham's bound, not γ_1.

T = 2.0**-53 * (1 - 2.0**-10)
U = 2.0**-53


def _error_in_u(x: np.ndarray, got: float) -> float:
    """|fl − exact| in units of u·Σ|terms| (Python rationals)."""
    exact = sum(_frac(x).tolist(), Fraction(0))
    return float(abs(Fraction(float(got)) - exact) / (sum(abs(_frac(x)).tolist(), Fraction(0)) * Fraction(U)))


def _column(k: int, cancel: bool = False) -> np.ndarray:
    return np.concatenate([[1.0], np.full(k, T)] + ([[-1.0]] if cancel else []))


@pytest.mark.parametrize("cancel", [False, True])
def test_sums_enclose_accumulated_rounding(cancel: bool) -> None:
    """Sums along axis 0 run one row after the other (a running sum per column), so the float sum
    is off by ≈ k·u·Σ|terms|; 1-D sums run in numpy's pairwise blocks of 8 running sums, which the
    8-ones-per-128 pattern defeats (≈ 15·u·Σ|terms|). ``cancel``: a final −1 leaves only the error."""
    k = 3000
    col = _column(k, cancel)
    x = np.tile(col[:, None], (1, 3)) * np.array([1.0, -1.0, 2.0**-600])
    s = Iv.exact(x).sum(0)
    assert _encloses(s, _frac(x).sum(0))
    assert _error_in_u(col, float(x.sum(0)[0])) > 0.9 * k / (2 if cancel else 1)  # the data do accumulate error
    block = np.tile(np.concatenate([np.ones(8), np.full(120, 2.0**-53 * (1 + 2.0**-10))]), 16)
    assert _encloses(Iv.exact(block[None]).sum(1), [sum(_frac(block).tolist(), Fraction(0))])
    assert _error_in_u(block, float(block.sum())) > 10


def test_a_huge_sum_encloses_its_exact_value() -> None:
    """2^20 terms along axis 0 (a running sum of ≈ 1 that rounds each tiny term away): exact value
    by formula, float error ≈ 2^20·T."""
    k = 2**20
    x = np.tile(np.concatenate([[1.0], np.full(k, T)])[:, None], (1, 2))  # two columns: a running sum each
    s = Iv.exact(x).sum(0)
    exact = 1 + k * Fraction(T)
    assert Fraction(float(s.lo[0])) <= exact <= Fraction(float(s.hi[0]))
    assert exact - Fraction(float(x.sum(0)[0])) > Fraction(k // 2) * Fraction(U)
    factor = I.up_sum_factor(k + 1)
    assert Fraction(float(x.sum(0)[0])) * Fraction(factor) >= exact


@pytest.mark.parametrize("cancel", [False, True])
def test_matrix_products_enclose_accumulated_rounding(cancel: bool) -> None:
    """A matrix product (BLAS gemm, a running sum per output over k) of rows 1, t, …, t: the float
    result is off by far more than u·Σ|terms|, and ``matmul``, ``affine`` and
    ``up_matmul_nonneg`` must still enclose (bound) the exact value."""
    k = 1000
    row = _column(k, cancel)
    x = np.tile(row, (3, 1)) * np.array([[1.0], [-3.0], [0.5]])
    W = np.ones((len(row), 5)) * np.array([1.0, 2.0, -1.0, 0.25, 3.0])
    exact = _frac(x) @ _frac(W)
    assert _encloses(I.matmul(x, W), exact)
    b = np.array([0.5, -1e-17, 2.0**-70, 0.0, 7.0])
    assert _encloses(I.affine(x, W, b), exact + _frac(b)[None])
    assert _encloses(I.matmul(Iv(x, x), Iv(W, W)), exact)  # the midpoint–radius path with zero radius
    assert _error_in_u(row, float((x @ W)[0, 0])) > 20  # the data do accumulate error in the kernel
    if not cancel:
        top = I.up_matmul_nonneg(np.abs(x), np.abs(W))
        assert all(Fraction(float(t)) >= e for t, e in zip(top.reshape(-1), (_frac(np.abs(x)) @ _frac(np.abs(W))).reshape(-1)))


def test_up_add_bounds_sums_that_round_down() -> None:
    """Each addition rounds the tiny terms away; ``up_add`` must round every step up."""
    terms = [np.array([1.0, -1.0, 2.0**-1000, 3.0]), np.full(4, T), np.full(4, T / 3), np.array([T, -T, SUBNORMAL, U])]
    exact = sum((_frac(t) for t in terms[1:]), _frac(terms[0]))
    assert all(Fraction(float(g)) >= e for g, e in zip(I.up_add(*terms), exact))
    assert float((terms[0] + terms[1] + terms[2])[0]) == 1.0  # plain addition loses them


def test_intersect_keeps_the_tighter_end_of_each_side_and_a_nan_end_gives_way():
    """Two enclosures of the same numbers meet: the larger lower end, the smaller upper end; an end
    that is NaN (an enclosure whose float arithmetic met inf − inf: no bound) takes the other's."""
    a = I.Iv(np.array([0.0, -1.0, np.nan, 2.0]), np.array([3.0, 5.0, 4.0, np.nan]))
    b = I.Iv(np.array([1.0, -2.0, 0.5, 1.0]), np.array([4.0, 2.0, np.nan, 6.0]))
    both = a.intersect(b)
    assert np.array_equal(both.lo, [1.0, -1.0, 0.5, 2.0])
    assert np.array_equal(both.hi, [3.0, 2.0, 4.0, 6.0])
