"""The interval layers of the trained-model certificate against independent oracles: mpmath at 100
digits for exp and GELU, exact rational arithmetic for the affine map, and points sampled inside
wide boxes (corners included) pushed through torch's own LayerNorm in float64 — and the carry
probabilities of the local configurations against counting every operand pair."""
from __future__ import annotations

import itertools
from fractions import Fraction

import mpmath
import numpy as np
import torch

from lengthgen.proof.interval import Iv
from lengthgen.proof.layers import affine_exact, exp_enclosure, gelu, layer_norm, recip, rsqrt
from lengthgen.proof.trained import carry_probability

mpmath.mp.dps = 100


def contains(enc: Iv, values) -> bool:
    return all(enc.lo[i] <= v <= enc.hi[i] for i, v in enumerate(values))


def test_exp_encloses_mpmath_from_underflow_to_overflow():
    x = np.concatenate([np.linspace(-760, 715, 601), np.linspace(-2, 2, 201), [0.0, 1e-300, -3e-310, 1 / 3]])
    enc = exp_enclosure(Iv.exact(x))
    assert contains(enc, [mpmath.exp(mpmath.mpf(float(v))) for v in x])
    finite = (x > -700) & (x < 700)
    assert np.all(enc.hi[finite] - enc.lo[finite] <= 1e-9 * enc.hi[finite])


def test_gelu_encloses_the_erf_form_on_points_and_intervals():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-12, 12, 1201), rng.normal(0, 3, 300), [-0.7517915246935, 0.0, 5e-324]])
    enc = gelu(Iv.exact(x))
    truth = [mpmath.mpf(float(v)) * mpmath.ncdf(mpmath.mpf(float(v))) for v in x]
    assert contains(enc, truth)
    assert np.max(enc.hi - enc.lo) < 1e-5
    lo = rng.normal(0, 2, 200)
    hi = lo + rng.exponential(1, 200)
    box = gelu(Iv(lo, hi))
    for i in range(200):
        pts = torch.linspace(lo[i], hi[i], 101, dtype=torch.float64)
        vals = torch.nn.functional.gelu(pts).numpy()
        assert box.lo[i] <= vals.min() + 1e-12 and vals.max() - 1e-12 <= box.hi[i]


def test_affine_exact_encloses_rational_products():
    rng = np.random.default_rng(1)
    c = rng.normal(size=(5, 7)) * 10.0 ** rng.integers(-5, 5, size=(5, 7))
    r = np.abs(rng.normal(size=(5, 7))) * 1e-3
    W = rng.normal(size=(7, 3))
    b = rng.normal(size=3)
    enc = affine_exact(Iv(c - r, c + r), W, b)
    for corner in itertools.product((0, 1), repeat=3):  # a few exact points of the box
        pick = np.array(corner * 3)[:7]
        x = np.where(pick, c + r, c - r)
        for i, j in itertools.product(range(5), range(3)):
            exact = sum(Fraction(x[i, k]) * Fraction(W[k, j]) for k in range(7)) + Fraction(b[j])
            assert Fraction(enc.lo[i, j]) <= exact <= Fraction(enc.hi[i, j])


def test_layer_norm_encloses_every_point_of_wide_boxes():
    rng = np.random.default_rng(2)
    d = 16
    centre = rng.normal(size=(20, d))
    rad = np.abs(rng.normal(size=(20, d))) * 0.3
    w, b = rng.normal(size=d), rng.normal(size=d)
    enc = layer_norm(Iv(centre - rad, centre + rad), w, b, 1e-5)
    ln = lambda x: torch.nn.functional.layer_norm(torch.tensor(x), (d,), torch.tensor(w), torch.tensor(b), 1e-5).numpy()  # noqa: E731
    for _ in range(300):
        corner = rng.integers(0, 2, size=(20, d)) * 2 - 1
        for x in (centre + corner * rad, centre + rng.uniform(-1, 1, size=(20, d)) * rad):
            y = ln(x)
            assert np.all(enc.lo <= y + 1e-12) and np.all(y - 1e-12 <= enc.hi)


def test_reciprocal_and_inverse_root_enclose_exact_values():
    v = np.array([1e-300, 0.1, 1.0, 3.0, 7.0, 1e5, 2.0**60 + 2.0**8])
    rec, root = recip(Iv.exact(v)), rsqrt(Iv.exact(v))
    assert contains(rec, [1 / mpmath.mpf(float(x)) for x in v])
    assert contains(root, [1 / mpmath.sqrt(mpmath.mpf(float(x))) for x in v])


def test_carry_probability_counts_every_lower_digit_pair():
    for lo in range(4):
        m = 10**lo
        ones = sum(1 for x in range(m) for y in range(m) if x + y >= m) if lo < 3 else m * (m - 1) // 2
        if lo < 3:
            assert carry_probability(lo, 1) == Fraction(ones, m * m)
        assert carry_probability(lo, 0) + carry_probability(lo, 1) == 1
