"""Sound interval arithmetic over numpy float64 arrays, the number type of the certificate.

Every quantity that the Theorem 5.1 certificate compares with a margin is an :class:`Iv`: a pair of
float64 arrays ``lo ≤ x ≤ hi`` that encloses the exact real value the weights define
(docs/certificate.md, "Interval arithmetic"). Soundness rests on IEEE-754 float64 with round to
nearest, nothing else:

* ``+ − ×`` and division by a positive number: the float result lies within half a spacing of the
  exact one (subnormal spacings included), so stepping one float outward (``np.nextafter``)
  encloses it;
* products of matrices and sums of ``n`` terms, in *any* summation order (BLAS blocking, SIMD, FMA):
  ``|fl(Σ) − Σ| ≤ γ_n·Σ|terms| + n·2^-1074`` (Higham, *Accuracy and Stability of Numerical
  Algorithms*, 2nd ed., section 3.1; the last term covers underflow), so a radius of
  ``2·γ_{n+2}·fl(Σ|terms|) + n·2^-1073`` encloses the exact sum. The result is therefore the same
  enclosure whichever kernel numpy's BLAS picks;
* ``exp``, ``log``, ``log1p``, ``expm1`` are evaluated by ``mpmath.iv`` (its own outward-rounded
  interval arithmetic at :data:`MP_BITS` bits) on the *distinct* end points only, then rounded
  outward to float64 — no libm accuracy is assumed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mpmath
import numpy as np
from mpmath import iv

U64 = 2.0**-53
TINY = 2.0**-1074
MP_BITS = 113


def gamma(n: int | np.ndarray) -> float | np.ndarray:
    """Higham's γ_n = n·u/(1 − n·u) for float64 (u = 2^-53)."""
    n = np.asarray(n, dtype=np.float64)
    return n * U64 / (1 - n * U64)


def down(x: np.ndarray | float) -> np.ndarray:
    """The next float below ``x`` (``np.nextafter``): encloses the exact value of one operation
    that rounded to nearest gave ``x`` — also where ``x`` is subnormal (a product or quotient that
    lands there is not exact) and where ``x`` is +inf (an overflowed result; the bound is then the
    largest finite float). Only 0 stays: callers keep 0 for exact zeros (a sum that rounds to 0 is
    exact: Hauser, ACM TOPLAS 18(2), 1996) and step a product that underflowed themselves."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.where(x == 0, 0.0, np.nextafter(x, -np.inf))


def up(x: np.ndarray | float) -> np.ndarray:
    """The next float above ``x`` (see :func:`down`)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.where(x == 0, 0.0, np.nextafter(x, np.inf))


def _nonzero_count(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many products a_ik·b_kj are non-zero (each may underflow by ≤ 2^-1075)."""
    return (a != 0).astype(np.float64) @ (b != 0).astype(np.float64)


def up_sum_factor(n: int) -> float:
    """A factor ≥ 1/(1 − γ_n) rounded up: fl(Σ of n non-negative terms) times it bounds the exact sum."""
    return float(up(1 + 2 * gamma(n + 2)))


def up_matmul_nonneg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An upper bound of the exact ``a @ b`` for non-negative ``a``, ``b`` (any kernel)."""
    k = a.shape[-1]
    count = _nonzero_count(a, b)
    total = up(up(a @ b + count * 2 * TINY) * up_sum_factor(k))
    return np.where(count == 0, 0.0, total)


def up_add(*terms) -> np.ndarray:
    """Upper bound of the exact sum of a few arrays (each addition rounded up)."""
    total = np.asarray(terms[0], dtype=np.float64)
    for t in terms[1:]:
        total = up(total + t)
    return total


def lower_bound(x: np.ndarray) -> np.ndarray:
    """``x`` read as a lower bound: a NaN end point (inf − inf in an enclosure whose float64 arithmetic
    overflowed, with finite weights) bounds nothing, so it is −inf. Read as it is, a NaN lower bound
    of a margin would pass every test ``margin ≤ 0`` (all comparisons with NaN are false)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), -np.inf, x)


def upper_bound(x: np.ndarray) -> np.ndarray:
    """``x`` read as an upper bound: a NaN (inf − inf, inf·0 of an overflowed term) is +inf."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), np.inf, x)


def up_mul(a, b) -> np.ndarray:
    """Upper bound of the exact product of non-negative ``a`` and ``b`` (a zero factor is exact)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return np.where((a == 0) | (b == 0), 0.0, np.nextafter(a * b, np.inf))


@dataclass
class Iv:
    """Elementwise enclosure ``lo ≤ exact ≤ hi`` (float64 arrays of one shape)."""

    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def exact(cls, x) -> "Iv":
        """A float64 array holds exact numbers (every float format embeds in float64)."""
        x = np.asarray(x, dtype=np.float64)
        return cls(x, x)

    @property
    def shape(self) -> tuple:
        return self.lo.shape

    def __getitem__(self, idx) -> "Iv":
        return Iv(self.lo[idx], self.hi[idx])

    def __add__(self, other) -> "Iv":
        o = as_iv(other)
        return Iv(down(self.lo + o.lo), up(self.hi + o.hi))

    __radd__ = __add__

    def __neg__(self) -> "Iv":
        return Iv(-self.hi, -self.lo)

    def __sub__(self, other) -> "Iv":
        return self + (-as_iv(other))

    def __rsub__(self, other) -> "Iv":
        return as_iv(other) + (-self)

    def __mul__(self, other) -> "Iv":
        o = as_iv(other)
        los, his = [], []
        for x, y in ((self.lo, o.lo), (self.lo, o.hi), (self.hi, o.lo), (self.hi, o.hi)):
            x, y = np.broadcast_arrays(x, y)
            zero = (x == 0) | (y == 0)  # exact 0 (also for 0·inf); otherwise one ulp outward
            with np.errstate(invalid="ignore", over="ignore"):
                p = x * y
            los.append(np.where(zero, 0.0, np.nextafter(p, -np.inf)))
            his.append(np.where(zero, 0.0, np.nextafter(p, np.inf)))
        return Iv(np.min(los, axis=0), np.max(his, axis=0))

    __rmul__ = __mul__

    def __truediv__(self, k: float | np.ndarray) -> "Iv":
        """Division by positive exact numbers."""
        k = np.asarray(k, dtype=np.float64)
        if np.any(k <= 0):
            raise ValueError("Iv division only by positive numbers")
        lo, hi = np.broadcast_arrays(self.lo / k, self.hi / k)
        return Iv(np.where(self.lo == 0, 0.0, np.nextafter(lo, -np.inf)), np.where(self.hi == 0, 0.0, np.nextafter(hi, np.inf)))

    def mag(self) -> np.ndarray:
        """Upper bound of |x|."""
        return np.maximum(np.abs(self.lo), np.abs(self.hi))

    def mig(self) -> np.ndarray:
        """Lower bound of |x| (0 when the interval contains 0)."""
        return np.where(self.lo > 0, self.lo, np.where(self.hi < 0, -self.hi, 0.0))

    def relu(self) -> "Iv":
        return Iv(np.maximum(self.lo, 0.0), np.maximum(self.hi, 0.0))

    def sum(self, axis: int) -> "Iv":
        n = self.lo.shape[axis]
        return Iv(_round_sum(self.lo, axis, n, -1), _round_sum(self.hi, axis, n, +1))

    def max(self, axis: int) -> "Iv":
        return Iv(self.lo.max(axis), self.hi.max(axis))

    def min(self, axis: int) -> "Iv":
        return Iv(self.lo.min(axis), self.hi.min(axis))

    def intersect(self, other: "Iv") -> "Iv":
        """Two enclosures of the same numbers: their intersection (a NaN end point, no bound, gives
        way to the other's)."""
        return Iv(np.fmax(self.lo, other.lo), np.fmin(self.hi, other.hi))

    def center_radius(self) -> tuple[np.ndarray, np.ndarray]:
        """A float ``c`` and an upper bound ``r`` with [lo, hi] ⊆ [c − r, c + r]."""
        c = self.lo + 0.5 * (self.hi - self.lo)
        c = np.where(np.isfinite(c), c, self.lo)
        return c, up(np.maximum(up(self.hi - c), up(c - self.lo)))

    def key(self) -> np.ndarray:
        """Both end points side by side, for grouping equal enclosures."""
        return np.concatenate([self.lo[..., None], self.hi[..., None]], axis=-1)

    def unique(self) -> tuple["Iv", np.ndarray]:
        """The distinct enclosures of a 1-D Iv and, per element, the index of its own."""
        uniq, inv = np.unique(self.lo + 1j * self.hi, return_inverse=True)  # a fast 1-D sort
        return Iv(uniq.real.copy(), uniq.imag.copy()), inv.reshape(-1)


def as_iv(x) -> Iv:
    return x if isinstance(x, Iv) else Iv.exact(x)


def maximum(a: Iv, b: Iv) -> Iv:
    return Iv(np.maximum(a.lo, b.lo), np.maximum(a.hi, b.hi))


def minimum(a: Iv, b: Iv) -> Iv:
    return Iv(np.minimum(a.lo, b.lo), np.minimum(a.hi, b.hi))


def _round_sum(x: np.ndarray, axis: int, n: int, direction: int) -> np.ndarray:
    """Directed bound of the exact sum of ``x`` along ``axis`` (any summation order)."""
    s = x.sum(axis)
    err = up(np.abs(x).sum(axis) * up_sum_factor(n)) * (2 * gamma(n))
    err = np.where(err == 0, 0.0, np.nextafter(err, np.inf))  # non-zero sums of non-negative terms
    return down(s - err) if direction < 0 else up(s + err)


def matmul(a, b) -> Iv:
    """Enclosure of ``a @ b`` for exact arrays or :class:`Iv` (midpoint–radius, Rump 1999)."""
    ac, ar = as_iv(a).center_radius()
    bc, br = as_iv(b).center_radius()
    k = ac.shape[-1]
    c = ac @ bc
    abs_ac, abs_bc = np.abs(ac), np.abs(bc)
    rad = up_matmul_nonneg(abs_ac, abs_bc) * (2 * gamma(k))  # rounding of the centre product
    rad = up_add(np.where(rad == 0, 0.0, np.nextafter(rad, np.inf)), _nonzero_count(ac, bc) * 2 * TINY)
    if np.any(br):
        rad = up_add(rad, up_matmul_nonneg(abs_ac, br))
    if np.any(ar):
        rad = up_add(rad, up_matmul_nonneg(ar, up(abs_bc + br)))
    return Iv(down(c - rad), up(c + rad))


def affine(x, W: np.ndarray, b: np.ndarray | None = None) -> Iv:
    """Enclosure of ``x @ W + b`` (W, b exact)."""
    out = matmul(x, W)
    return out if b is None else out + b


def _to_float(v: mpmath.mpf, direction: int) -> float:
    """The float64 next to the mpmath number ``v`` on the side ``direction`` (−1: largest float
    ≤ v, +1: smallest float ≥ v), subnormals and underflow to 0 included. ``float()`` rounds to
    nearest; the comparison of a float with an mpf is exact, so one step corrects it."""
    f = float(v)
    if direction < 0 and mpmath.mpf(f) > v:
        f = float(np.nextafter(f, -np.inf))
    elif direction > 0 and mpmath.mpf(f) < v:
        f = float(np.nextafter(f, np.inf))
    return f


def _mp_map(values: np.ndarray, fn: Callable) -> tuple[np.ndarray, np.ndarray]:
    """Outward float64 enclosures of ``fn`` at each distinct value (mpmath interval evaluation)."""
    uniq, inv = np.unique(values, return_inverse=True)
    lo, hi = np.empty(len(uniq)), np.empty(len(uniq))
    old = iv.prec
    iv.prec = MP_BITS
    try:
        for i, v in enumerate(uniq.tolist()):
            r = fn(iv.mpf(v))
            a, b = r._mpi_  # raw end points, exact (no rounding to mpmath's working precision)
            lo[i], hi[i] = _to_float(mpmath.mp.make_mpf(a), -1), _to_float(mpmath.mp.make_mpf(b), +1)
    finally:
        iv.prec = old
    return lo[inv].reshape(values.shape), hi[inv].reshape(values.shape)


def _monotone(x: Iv, fn: Callable, np_fn: Callable, floor: float | None = None) -> Iv:
    """An increasing function on an interval: [f(lo)↓, f(hi)↑]; infinite end points map exactly."""
    out = []
    for ends, pick in ((x.lo, 0), (x.hi, 1)):
        ends = np.asarray(ends, dtype=np.float64)
        res = np.empty(ends.shape)
        finite = np.isfinite(ends)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            res[~finite] = np_fn(ends[~finite])
        if finite.any():
            lo, hi = _mp_map(ends[finite], fn)
            res[finite] = (lo, hi)[pick]
        out.append(res)
    lo, hi = out
    if floor is not None:
        lo = np.maximum(lo, floor)
    return Iv(lo, hi)


def exp(x: Iv) -> Iv:
    return _monotone(x, iv.exp, np.exp, floor=0.0)


def expm1(x: Iv) -> Iv:
    return _monotone(x, iv.expm1, np.expm1, floor=-1.0)


def log(x: Iv) -> Iv:
    """Natural log (end points ≤ 0 give −inf)."""
    safe = Iv(np.where(x.lo > 0, x.lo, 0.0), np.where(x.hi > 0, x.hi, 0.0))
    return _monotone(safe, iv.log, np.log)


def log1p(x: Iv) -> Iv:
    return _monotone(x, iv.log1p, np.log1p)
