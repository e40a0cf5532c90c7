"""The float32 rounding model of the trained-model certificate (lengthgen.proof.trained_float).

Two parts. The formulas, against values worked out by hand with exact rationals (``Fraction``):
Higham's γ, the rounding of a dot product with its bias, of a score, the softmax kernel's shift
and relative weight error, a head's float part. And the two kernel assumptions, against torch's
own float32 kernels on inputs chosen to make them round: (F4) LayerNorm on rows with a large mean
over a small spread (cancellation), mixed magnitudes and tiny variances near ``eps``; (F5) GELU
on a dense grid out to ±20 and on subnormals. The float64 kernel is the reference (its error is
about 10^-16, far below the float32 bounds); each test prints the largest measured error as a
fraction of the bound, so that a kernel that comes close can be seen before it breaks the
assumption. Where torch's kernels change (another CPU, ``ATEN_CPU_CAPABILITY=default``), these
tests say whether the assumption still holds.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lengthgen.proof.interval import Iv
from lengthgen.proof.trained_float import GELU_ULPS, VARIANCE_TERMS, FloatFormat

F32 = FloatFormat("float32")
U = Fraction(1, 2**24)


def gamma_exact(n: int) -> Fraction:
    return n * U / (1 - n * U)


def test_the_unit_roundoff_and_gamma_are_the_documented_ones():
    assert F32.u == 2.0**-24 and FloatFormat("float64").u == 2.0**-53
    assert GELU_ULPS == 20.0 and VARIANCE_TERMS == 4
    for n in (1, 129, 3003):
        g = F32.gamma(n)
        assert Fraction(g) >= gamma_exact(n) and g <= float(gamma_exact(n)) * (1 + 2e-6), n
    assert F32.gamma(2**24) == math.inf
    with pytest.raises(ValueError, match="float32 and float64"):
        FloatFormat("bfloat16")


def test_a_dot_product_with_a_bias_rounds_within_gamma_k_plus_1():
    """``x @ W + b`` with k = 3 terms: γ_4·(|x|@|W| + |b|) plus 3·2^-150, worked out exactly."""
    x = np.array([[1.5, -2.0, 0.25]])
    W = np.array([[1.0, -3.0], [0.5, 2.0], [-4.0, 1.0]])
    b = np.array([-0.5, 2.0])
    got = F32.dot(np.abs(x), W, b)[0]
    for j in range(2):
        total = sum(Fraction(abs(x[0, i])) * Fraction(abs(W[i, j])) for i in range(3)) + Fraction(abs(b[j]))
        want = gamma_exact(4) * total + 3 * Fraction(1, 2**150)
        assert want <= Fraction(got[j]) <= want * (1 + Fraction(1, 10**5)), j


def test_one_rounding_is_u_times_the_magnitude():
    got = F32.rounded(np.array([3.0, 0.0]))
    assert Fraction(got[0]) >= 3 * U and got[0] <= 3 * 2.0**-24 * (1 + 1e-12)
    assert 2.0**-150 <= got[1] <= 2.0**-149  # an underflow still rounds


def test_a_score_rounds_within_gamma_e_plus_2():
    """``(q·k)·scale`` with e = 2 and the scale a float32: γ_4 |q|@|k|."""
    got = F32.score(np.array([[1.0, 2.0]]), np.array([[3.0], [0.5]]))[0, 0]
    want = gamma_exact(4) * 4 + 2 * Fraction(1, 2**150)
    assert want <= Fraction(got) <= want * (1 + Fraction(1, 10**5))


def test_the_softmax_kernel_terms_are_the_documented_ones():
    """(F3): the shift ``2·4·u·(S_max + ln n)`` and ``θ = (1+2u)(1+u)(1+3u)^4/(1−γ_n) − 1``."""
    shift = F32.score_shift(np.array([10.0]), 100)[0]
    want = 8 * U * (10 + Fraction(math.log(100)))
    assert want <= Fraction(shift) <= want * (1 + Fraction(1, 10**9))
    theta = F32.softmax_theta(100)
    want = (1 + 2 * U) * (1 + U) * (1 + 3 * U) ** 4 / (1 - gamma_exact(100)) - 1
    assert want <= Fraction(theta) <= want * (1 + Fraction(1, 10**5))
    head = F32.head_error(np.array([2.0]), 100)[0]
    want_head = (Fraction(theta) + gamma_exact(100) * (1 + Fraction(theta))) * 2 + 100 * Fraction(1, 2**150)
    assert want_head <= Fraction(head) <= want_head * (1 + Fraction(1, 10**5))


def _ln_rows(rng: np.random.Generator, d: int) -> np.ndarray:
    rows = [rng.normal(size=(64, d)),
            1000.0 + 0.01 * rng.normal(size=(64, d)),                    # a large mean over a small spread
            rng.normal(size=(64, d)) * 10.0 ** rng.integers(-6, 4, size=(64, d)),  # mixed magnitudes
            1e-3 * rng.normal(size=(64, d)),                             # variance near eps
            rng.choice([-1.0, 1.0], size=(64, d)) * 3.0 + 50.0]
    return np.concatenate(rows).astype(np.float32)


@pytest.mark.parametrize("d", [7, 128, 512])
def test_torch_layernorm_kernel_is_within_the_assumed_rounding(d):
    """(F4) against ``F.layer_norm`` in float32 (the model's call), w and b random, the exact value
    from float64 on the same float32 inputs: every coordinate within the bound."""
    rng = np.random.default_rng(d)
    x = _ln_rows(rng, d)
    w = rng.normal(size=d).astype(np.float32)
    b = rng.normal(size=d).astype(np.float32)
    t = [torch.from_numpy(a) for a in (x, w, b)]
    got = F.layer_norm(t[0], (d,), t[1], t[2], eps=1e-5).double().numpy()
    exact = F.layer_norm(t[0].double(), (d,), t[1].double(), t[2].double(), eps=1e-5).numpy()
    bound = F32.layer_norm(Iv.exact(x.astype(np.float64)), w.astype(np.float64), b.astype(np.float64), 1e-5)
    finite = np.isfinite(bound)
    assert finite.mean() > 0.5  # the bound is not vacuous on most rows
    err = np.abs(got - exact)
    assert np.all(err[finite] <= bound[finite]), float(np.max(err[finite] / bound[finite]))
    print(f"d={d}: LayerNorm error up to {np.max(err[finite] / bound[finite]):.3g} of the bound")


def test_torch_gelu_kernel_is_within_the_assumed_rounding():
    """(F5) against ``F.gelu`` in float32 on a dense grid out to ±20, near 0 and on subnormals."""
    grid = np.concatenate([np.linspace(-20, 20, 400001), np.geomspace(1e-30, 1e-3, 2000),
                           -np.geomspace(1e-30, 1e-3, 2000), [1e-40, -1e-40, 0.0]]).astype(np.float32)
    x = torch.from_numpy(grid)
    got = F.gelu(x).double().numpy()
    exact = F.gelu(x.double()).numpy()
    bound = F32.activation(Iv.exact(grid.astype(np.float64)), "gelu")
    err = np.abs(got - exact)
    assert np.all(err <= bound), float(np.max(err / bound))
    print(f"GELU error up to {np.max(err / bound):.3g} of the bound ({GELU_ULPS:g} u|x|)")
    assert np.all(F32.activation(Iv.exact(grid.astype(np.float64)), "relu") == 0)


def test_zero_inputs_keep_the_underflow_terms():
    """Products that underflow still round: at x = 0 each radius is its underflow term alone."""
    z = np.zeros((1, 3))
    assert 3 * 2.0**-150 <= F32.dot(z, np.ones((3, 2)))[0, 0] <= 3 * 2.0**-150 * (1 + 1e-12)
    assert 4 * 2.0**-150 <= F32.score(np.zeros((1, 4)), np.ones((4, 1)))[0, 0] <= 4 * 2.0**-150 * (1 + 1e-12)
    assert 7 * 2.0**-150 <= F32.head_error(np.zeros(1), 7)[0] <= 7 * 2.0**-150 * (1 + 1e-12)
    assert 2.0**-140 <= F32.activation(Iv.exact(np.zeros(1)), "gelu")[0] <= 2.0**-140 * (1 + 1e-12)
    ln = F32.layer_norm(Iv.exact(np.zeros((1, 4))), np.ones(4), np.zeros(4), 1e-5)
    assert np.all((4 * 2.0**-150 <= ln) & (ln <= 4 * 2.0**-150 * (1 + 1e-12)))


def test_gelu_bound_is_the_documented_one():
    x = np.array([-3.0, 0.5, 7.0])
    got = F32.activation(Iv.exact(x), "gelu")
    for g, v in zip(got, x):
        want = 20 * U * abs(Fraction(v)) + Fraction(1, 2**140)
        assert want <= Fraction(g) <= want * (1 + Fraction(1, 10**12))


def test_the_softmax_bound_gives_up_where_gamma_reaches_1():
    """γ_n ≥ 1 (n·u ≥ 1/2) bounds nothing: θ is infinite, never negative, and never a division by 0."""
    assert F32.softmax_theta(2**23) == math.inf          # γ = 1 exactly
    assert F32.softmax_theta(int(0.6 * 2**24)) == math.inf  # γ = 1.5
    assert 0 < F32.softmax_theta(2**22) < math.inf      # γ = 1/3


def _ln_by_hand(x, w, b, eps):
    """(F4)'s radius for one exact row, in 60-digit arithmetic (the formula of the docstring)."""
    import mpmath

    mpmath.mp.dps = 60
    d = len(x)
    u = mpmath.mpf(2) ** -24
    gam = lambda n: n * u / (1 - n * u)  # noqa: E731
    X = [mpmath.mpf(float(v)) for v in x]
    mu = sum(X) / d
    e_mu = gam(d) * sum(abs(v) for v in X) / d
    m2 = sum(v * v for v in X) / d
    V = sum((v - mu) ** 2 for v in X) / d + mpmath.mpf(eps)
    T = (gam(4 * d) * m2 + 2 * e_mu**2) / V
    theta = (1 + 2 * u) / mpmath.sqrt((1 - T) * (1 - u)) - 1
    r = 1 / mpmath.sqrt(V)
    grow = (1 + u) ** 3 * (1 + theta)
    out = []
    for v, wi, bi in zip(X, w, b):
        A = abs(v - mu)
        move = abs(wi) * r * (A * (grow - 1) + e_mu * grow)
        q = abs(wi) * r * (A + e_mu) * grow
        out.append(move + u * (q + abs(bi)) + 4 * mpmath.mpf(2) ** -150)
    return out


@pytest.mark.parametrize("scale", [0.3, 10.0])
def test_the_layernorm_bound_by_hand(scale):
    """(F4) on rows of 4 and 6 numbers (one with a mean far from 0, a variance far from 1, eps =
    0.01 so that it counts): the code's radius is the formula's to 5·10^-6 (its γ inflated by
    1 + 2^-20), never below; a 3-axis input keeps its shape."""
    rng = np.random.default_rng(int(scale * 10))
    rows = [scale * rng.normal(size=4), scale * (3.0 + rng.normal(size=6))]
    for x in rows:
        w, b = rng.normal(size=len(x)), rng.normal(size=len(x))
        got = F32.layer_norm(Iv.exact(x[None]), w, b, 0.01)[0]
        want = _ln_by_hand(x, w, b, 0.01)
        for g, e in zip(got, want):
            assert float(e) * (1 - 1e-12) <= g <= float(e) * (1 + 5e-6), (g, float(e))
    cube = Iv.exact(rng.normal(size=(2, 3, 5)))
    assert F32.layer_norm(cube, np.ones(5), np.zeros(5), 1e-5).shape == (2, 3, 5)


def test_a_variance_error_near_the_variance_itself_bounds_nothing():
    """T ≥ 1/2 (the variance's error near the variance itself: a large mean over a spread of 10^-3)
    gives an infinite radius, never a NaN."""
    x = 1000.0 + 1e-3 * np.arange(8.0)
    got = F32.layer_norm(Iv.exact(x[None]), np.ones(8), np.zeros(8), 1e-12)
    assert np.all(got == np.inf)
    # T about 1.2, where 1 - T < 0 (a square root of a negative number would be a NaN)
    s = float(np.sqrt(16 * 2.0**-24 / 1.2))
    x = 1.0 + s * np.array([-1.0, 1.0, -1.0, 1.0])
    got = F32.layer_norm(Iv.exact(x[None]), np.ones(4), np.zeros(4), 1e-30)
    assert np.all(got == np.inf)


def test_a_score_counts_the_terms_of_the_last_axis():
    """``q`` of any leading shape: the dot product has e = q.shape[-1] terms (here 3, not 2)."""
    got = F32.score(np.ones((1, 2, 3)), np.ones((3, 1)))
    want = gamma_exact(5) * 3 + 3 * Fraction(1, 2**150)
    assert got.shape == (1, 2, 1)
    assert all(want <= Fraction(g) <= want * (1 + Fraction(1, 10**5)) for g in got.ravel())
