"""Interval enclosures of the nonlinear layers of a trained transformer: exp, reciprocal, LayerNorm, GELU.

Built only from the sound primitives of :mod:`lengthgen.proof.interval` (``Iv`` ``+ − ×``, division
by positive exact numbers, outward stepping with ``down``/``up``) and two IEEE-754 operations that
are correctly rounded by the standard itself (division and ``sqrt``), so no libm accuracy is assumed
(docs/certificate.md, "Trained models"). Vectorized over numpy arrays: the trained-model
certificate pushes ~10^4 enclosures per answer position through them.

* :func:`exp_enclosure`: e^x by range reduction e^x = (e^{x/2^m})^{2^m}, a degree-12 Taylor
  polynomial with its Lagrange remainder on |x/2^m| ≤ 1/32, then m interval squarings;
* :func:`recip`, :func:`rsqrt`, :func:`square`: 1/y (y > 0), 1/√v (v > 0), x²;
* :func:`affine_exact`: x @ W + b for an exact W in two float matrix products;
* :func:`layer_norm`: (x − mean)/√(var + eps)·w + b, the mean and variance from interval sums
  and squares (the dependence of the mean on x is not tracked: sound, slightly wide);
* :func:`gelu`: x·Φ(x) (torch's erf form). Φ at a point comes from a table of Φ and φ on a grid of
  step 2^-10 over [−8, 8] (Φ by the all-positive series erf z = 2/√π·e^{−z²}·Σ z(2z²)^n/(2n+1)!!
  with a geometric tail bound) and Taylor's theorem, |Φ''| = |xφ(x)| ≤ φ(1) < 0.2420; beyond ±8,
  1 − Φ(8) < φ(8)/8 < 10^-15 (Mills' ratio). GELU decreases up to x* ≈ −0.75179 and increases after,
  so an interval maps to its end points' values, or down to GELU(x*) > −0.16997121 when it holds x*.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from mpmath import iv

from . import interval as I
from .interval import Iv

TAYLOR_DEGREE = 12
REDUCED = 1.0 / 32  # |x / 2^m| ≤ REDUCED before the Taylor polynomial
EXP_UNDER = -745.2  # e^x < 2^-1074 below this
EXP_OVER = 709.8  # e^x > the largest float above this
GRID_STEP = 2.0**-10
GRID_EDGE = 8.0
PHI_TAIL = 1e-15  # 1 − Φ(8) < φ(8)/8 ≈ 6.3e-16
D2_BOUND = 0.2420  # max |Φ''(x)| = max |x φ(x)| = φ(1) ≈ 0.24197
PDF_D2 = 0.4  # max |φ''(x)| = max |x² − 1|·φ(x) = φ(0) ≈ 0.39894
PDF_TAIL = 1e-14  # φ(8) ≈ 5.05e-15
GELU_LEFT, GELU_RIGHT = -0.7518, -0.7517  # bracket the minimiser x* ≈ −0.751791
GELU_MIN = -0.16997121  # below GELU(x*) = −0.1699712074799…


def _const(expr) -> Iv:
    """A float64 enclosure of a constant given as an mpmath interval expression."""
    old = iv.prec
    iv.prec = 113
    try:
        r = expr()
        return Iv(I.down(float(r.a)), I.up(float(r.b)))
    finally:
        iv.prec = old


def _point_exp(v: np.ndarray) -> Iv:
    """Enclosure of e^v for float64 points ``v`` (any shape, finite or not)."""
    v = np.asarray(v, dtype=np.float64)
    lo, hi = np.empty(v.shape), np.empty(v.shape)
    under, over = v < EXP_UNDER, v > EXP_OVER
    lo[under], hi[under] = 0.0, I.TINY
    lo[over], hi[over] = np.finfo(np.float64).max, np.inf
    mid = ~(under | over)
    if mid.any():
        x = v[mid]
        mag = np.abs(x)
        m = np.where(mag > REDUCED, np.ceil(np.log2(np.maximum(mag, REDUCED) / REDUCED)), 0).astype(np.int64)
        m = m + (np.ldexp(mag, -m) > REDUCED)  # guard against log2 rounding
        y = Iv.exact(np.ldexp(x, -m))  # exact: scaling by a power of two stays normal here
        poly = Iv.exact(np.ones_like(x))
        for k in range(TAYLOR_DEGREE, 0, -1):  # Horner: 1 + y/1·(1 + y/2·(1 + ...))
            poly = (y * poly) / float(k) + 1.0
        rem = I.up(I.up(REDUCED**(TAYLOR_DEGREE + 1)) / 6.0e9 * 1.04)  # |y|^13/13!·e^|y|, 13! > 6.2e9
        poly = poly + Iv(np.full_like(x, -rem), np.full_like(x, rem))
        for step in range(int(m.max(initial=0))):
            sel = m > step
            sq = poly[sel] * poly[sel]
            poly.lo[sel], poly.hi[sel] = np.maximum(sq.lo, 0.0), sq.hi
        lo[mid], hi[mid] = np.maximum(poly.lo, 0.0), poly.hi
    return Iv(lo, hi)


def exp_enclosure(x: Iv) -> Iv:
    """Enclosure of e^x (increasing: e^lo from below, e^hi from above)."""
    return Iv(_point_exp(x.lo).lo, _point_exp(x.hi).hi)


def exp_upper(x: np.ndarray) -> np.ndarray:
    """An upper bound of e^x at float points ``x``."""
    return _point_exp(x).hi


def affine_exact(x: Iv, W: np.ndarray, b: np.ndarray | None = None) -> Iv:
    """Enclosure of ``x @ W + b`` for an exact matrix ``W`` in two float products (midpoint–radius,
    Rump 1999): ``|fl(c@W) − c@W| ≤ γ_k·|c|@|W| + k·2^-1074`` in any summation order (Higham 3.1),
    so the radius ``(2γ_{k+2}|c| + r)@|W|``, bounded above like :func:`interval.up_matmul_nonneg` but
    with the inner dimension k for the count of non-zero products, encloses the result."""
    c, r = x.center_radius()
    k = W.shape[0]
    centre = c @ W
    weight = I.up(I.up_mul(I.up(2 * I.gamma(k + 2)), np.abs(c)) + r)
    rad = I.up(I.up(weight @ np.abs(W) + 2 * k * I.TINY) * I.up_sum_factor(k))
    rad = I.up(rad + 2 * k * I.TINY)  # the centre product's own underflow
    out = Iv(I.down(centre - rad), I.up(centre + rad))
    return out if b is None else out + b


def recip(y: Iv) -> Iv:
    """1/y for y > 0 (IEEE division is correctly rounded; one spacing outward covers it)."""
    if np.any(y.lo <= 0):
        raise ValueError("recip needs a positive interval")
    with np.errstate(divide="ignore"):
        return Iv(I.down(1.0 / y.hi), I.up(1.0 / y.lo))


def rsqrt(v: Iv) -> Iv:
    """1/√v for v > 0 (IEEE sqrt and division are correctly rounded)."""
    if np.any(v.lo <= 0):
        raise ValueError("rsqrt needs a positive interval")
    return Iv(I.down(1.0 / I.up(np.sqrt(v.hi))), I.up(1.0 / I.down(np.sqrt(v.lo))))


def square(x: Iv) -> Iv:
    """x² (tighter than x·x when the interval holds 0)."""
    mig, mag = x.mig(), x.mag()
    return Iv(np.maximum(np.nextafter(mig * mig, -np.inf), 0.0), I.up_mul(mag, mag))


def layer_norm(x: Iv, w: np.ndarray, b: np.ndarray, eps: float) -> Iv:
    """Enclosure of torch's LayerNorm over the last axis (biased variance, eps inside the root)."""
    d = x.shape[-1]
    flat = Iv(x.lo.reshape(-1, d), x.hi.reshape(-1, d))
    c = flat - (flat.sum(axis=1) / float(d))[:, None]
    var = square(c).sum(axis=1) / float(d) + eps
    out = c * rsqrt(var)[:, None] * w + b
    return Iv(out.lo.reshape(x.shape), out.hi.reshape(x.shape))


@lru_cache(maxsize=1)
def _phi_table() -> tuple[Iv, Iv]:
    """Φ(g) and φ(g) enclosures on the grid g = −8, −8 + 2^-10, …, 8."""
    g = np.arange(-GRID_EDGE, GRID_EDGE + GRID_STEP / 2, GRID_STEP)
    inv_sqrt2 = _const(lambda: 1 / iv.sqrt(2))
    two_over_sqrtpi = _const(lambda: 2 / iv.sqrt(iv.pi))
    inv_sqrt2pi = _const(lambda: 1 / iv.sqrt(2 * iv.pi))
    z = Iv.exact(np.abs(g)) * inv_sqrt2
    z2 = square(z)
    term, total = z, z
    for n in range(160):  # terms z(2z²)^n/(2n+1)!!; 2z² ≤ 64, so the ratio is < 1/4 from n = 160 on
        term = (term * z2 * 2.0) / float(2 * n + 3)
        total = total + term
    total = total + Iv(np.zeros_like(g), term.hi)  # tail ≤ last term · r/(1 − r) ≤ last term
    erf = total * exp_enclosure(-z2) * two_over_sqrtpi
    erf = Iv(np.maximum(erf.lo, 0.0), np.minimum(erf.hi, 1.0))
    signed = Iv(np.where(g >= 0, erf.lo, -erf.hi), np.where(g >= 0, erf.hi, -erf.lo))
    cdf = (signed + 1.0) * 0.5
    pdf = exp_enclosure(-(Iv.exact(g) * Iv.exact(g)) * 0.5) * inv_sqrt2pi
    return cdf, pdf


def _point_cdf(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of Φ at float points ``v``: Taylor from the grid point g ≤ v below,
    Φ(v) = Φ(g) + δφ(g) + R with |R| ≤ D2_BOUND·δ²/2, δ = v − g ∈ [0, 2^-10). Plain float
    operations: every rounding error (each at most 2^-53 of a value ≤ 1.01) is covered by the
    absolute slack 1e-15, and the error sum is rounded up by a factor 1 + 2^-40."""
    cdf, pdf = _phi_table()
    v, inside, idx, g, delta = _grid(v, len(cdf.lo))
    f_mid = 0.5 * (cdf.lo[idx] + cdf.hi[idx])
    p_mid = 0.5 * (pdf.lo[idx] + pdf.hi[idx])
    err = (cdf.hi[idx] - cdf.lo[idx]) + delta * (pdf.hi[idx] - pdf.lo[idx]) + 0.5 * D2_BOUND * delta * delta
    err = (err + 1e-15) * (1 + 2.0**-40)
    val = f_mid + delta * p_mid
    lo = np.where(inside, np.maximum(val - err, 0.0), np.where(v > 0, 1.0 - PHI_TAIL, 0.0))
    hi = np.where(inside, np.minimum(val + err, 1.0), np.where(v > 0, 1.0, PHI_TAIL))
    return lo, hi


def _grid(v: np.ndarray, size: int) -> tuple[np.ndarray, ...]:
    """For float points v: (v, |v| < 8, the grid index of g ≤ v, g (an exact multiple of 2^-10), and
    δ = v − g ∈ [0, 2^-10] in floats: its rounding, < 2^-63, is covered by the callers' slack)."""
    v = np.asarray(v, dtype=np.float64)
    inside = np.abs(v) < GRID_EDGE
    idx = np.clip(np.floor((np.clip(v, -GRID_EDGE, GRID_EDGE) + GRID_EDGE) / GRID_STEP).astype(np.int64), 0, size - 2)
    g = idx * GRID_STEP - GRID_EDGE
    delta = np.where(inside, np.clip(v - g, 0.0, GRID_STEP), 0.0)
    return v, inside, idx, g, delta


def point_pdf(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of φ at float points: Taylor from the grid point g ≤ v,
    φ(v) = φ(g) − δ·g·φ(g) + R with |R| ≤ PDF_D2·δ²/2 (|φ''| = |x² − 1|·φ(x) ≤ φ(0) < 0.4);
    float rounding (values ≤ 0.41) is covered by the slack 1e-15; beyond ±8, 0 ≤ φ < 10^-14."""
    cdf, pdf = _phi_table()
    v, inside, idx, g, delta = _grid(v, len(pdf.lo))
    p_mid = 0.5 * (pdf.lo[idx] + pdf.hi[idx])
    err = 0.5 * (pdf.hi[idx] - pdf.lo[idx]) * (1 + np.abs(g) * delta) + 0.5 * PDF_D2 * delta * delta
    err = (err + 1e-15) * (1 + 2.0**-40)
    val = p_mid - delta * g * p_mid
    lo = np.where(inside, np.maximum(val - err, 0.0), 0.0)
    hi = np.where(inside, val + err, PDF_TAIL)
    return lo, hi


def _point_gelu(v: np.ndarray) -> Iv:
    """Enclosure of v·Φ(v) at float points (products one spacing outward, plus underflow)."""
    lo, hi = _point_cdf(v)
    a, b = v * lo, v * hi
    return Iv(I.down(np.minimum(a, b)) - I.TINY, I.up(np.maximum(a, b)) + I.TINY)


def gelu(x: Iv) -> Iv:
    """Enclosure of GELU(x) = x·Φ(x) on intervals (see the module docstring)."""
    at_lo, at_hi = _point_gelu(x.lo), _point_gelu(x.hi)
    falling = x.hi <= GELU_LEFT
    rising = x.lo >= GELU_RIGHT
    lo = np.where(falling, at_hi.lo, np.where(rising, at_lo.lo, GELU_MIN))
    hi = np.maximum(at_lo.hi, at_hi.hi)  # unimodal: the maximum is at an end point
    return Iv(lo, hi)
