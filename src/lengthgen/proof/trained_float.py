"""The float32 statement of the trained-model certificate: the rounding of each step as a radius.

``python -m lengthgen.certify --dtype float32`` proves the bound for the model's float32 forward
pass itself, for every evaluation that obeys the rounding model of docs/certificate.md ("Rounding
model and the kernel assumption") and the two kernel assumptions below. The certificate's real
enclosures are kept; at each step of the forward pass they are widened by the most the float32
operation of that step can add, computed from the enclosure of the step's (float) inputs, so that
every later step encloses the float32 values themselves:

* (F1) ``+ − × /`` within ``u`` relative, a dot product of n terms plus a bias within
  ``γ_{n+1}·(|x|·|W| + |b|)`` in any order, plus ``n·2^-150`` for products that underflow
  (:meth:`FloatFormat.dot`, :meth:`FloatFormat.rounded`); the embedding sum, the projections, the
  scores ``(q·k)·scale`` (the scale itself a float32, ``γ_{e+2}``), ``z·W_O + b_O`` summed over
  heads (``γ_{H·e+1}``), both residual sums, W_in, W_out and the unembedding.
* (F3) the softmax (``lengthgen.proof.rounding``): the kernel's output is the exact softmax of
  scores moved by at most ``2·RESCALES·u·(S_max + ln n)`` (:meth:`FloatFormat.score_shift`), with
  every weight within ``θ`` relative (exp 2 ulp, one division, the normalizer's sum ``γ_n`` and at
  most RESCALES rescales of 3u each, :meth:`FloatFormat.softmax_theta`), and the weighted sum of
  the values within ``γ_n``. So a head's float output is the certificate's exact softmax mean of
  the float values under the widened scores, plus at most ``(θ + γ_n·(1 + θ))·max|v|``
  (:meth:`FloatFormat.head_error`).
* (F4) **LayerNorm kernel** (an assumption, like (F3); reconstructed from the two-pass, the
  one-pass and Welford's algorithms, all of which meet it): the row mean within
  ``|μ̂ − μ| ≤ γ_d·mean|x_i|``, the biased variance within ``|σ̂² − σ²| ≤ γ_{4d}·mean(x_i²) +
  2(μ̂ − μ)²`` (the raw second moment, so that a one-pass ``E[x²] − μ²`` is covered; torch's CPU
  kernel was measured at about a third of this on rows whose variance is near eps), then
  ``rsqrt(σ̂² + eps)`` within 2u after the addition's u, and ``((x_i − μ̂)·r̂)·w_i + b_i`` as four
  operations of (F1) (:meth:`FloatFormat.layer_norm`).
* (F5) **GELU kernel** (an assumption): ``|ĝ(x) − GELU(x)| ≤ GELU_ULPS·u·|x| + 2^-140``, i.e.
  an erf within 32 ulp of 1 (absolute), then ``1 + erf``, the half and the product by x. torch's
  vectorized float32 erf was measured at about 12 ulp of 1 (``F.gelu(2.98)`` is 1.1·10^-6 off,
  nine ulp of the result), so the margin is under 3×. ReLU is exact.

Both kernel assumptions are checked against torch's own kernels in
``tests/test_trained_float_kernels.py`` (which prints the measured ratio to the bound); like (F3),
a float32 proof is a proof for torch only as far as its kernels obey them. The radii are computed in
float64 rounded upward (:mod:`lengthgen.proof.interval`), ``γ`` inflated by
``rounding.FLOAT_TERM_INFLATION`` as in the rest of the rounding model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import interval as I
from .interval import Iv
from .rounding import EXP_ULPS, FLOAT_TERM_INFLATION, RESCALES, UNIT_ROUNDOFF, gamma

GELU_ULPS = 20.0  # (F5): 32/2 for erf, 2 for the sum and the half, 1 for the product, rounded up
VARIANCE_TERMS = 4  # (F4): the variance within γ_{4d}·mean(x²)
RSQRT_ULPS = 2.0  # (F4)
SUBNORMAL_HALF = {"float32": 2.0**-150, "float64": 2.0**-1075}  # the most one underflowing product loses
GELU_FLOOR = 2.0**-140


@dataclass(frozen=True)
class FloatFormat:
    """A float format of the forward pass (``name`` "float32" or "float64") and its unit roundoff."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in SUBNORMAL_HALF:
            raise ValueError(f"the trained-model certificate covers float32 and float64 forward passes, not {self.name}")

    @property
    def u(self) -> float:
        return UNIT_ROUNDOFF[self.name]

    def gamma(self, n: int) -> float:
        """An upper bound of γ_n in this format (infinite when n·u ≥ 1)."""
        return float(I.up(gamma(n, self.u) * FLOAT_TERM_INFLATION))

    def rounded(self, mag: np.ndarray) -> np.ndarray:
        """The most one rounding of a value of magnitude ≤ ``mag`` can move it (u·|x|, underflow)."""
        return I.up_add(I.up_mul(self.u, mag), SUBNORMAL_HALF[self.name])

    def dot(self, mag: np.ndarray, W: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """The rounding of ``x @ W + b`` for ``|x| ≤ mag`` [rows, k]: ``γ_{k+1}(|x|@|W| + |b|)`` plus
        ``k·2^-150`` for the products that underflow (Higham 3.1, any order)."""
        k = W.shape[0]
        total = I.up_matmul_nonneg(mag, np.abs(W))
        if b is not None:
            total = I.up_add(total, np.abs(b))
        return I.up_add(I.up_mul(self.gamma(k + 1), total), k * SUBNORMAL_HALF[self.name])

    def score(self, q_mag: np.ndarray, k_mag: np.ndarray) -> np.ndarray:
        """The rounding of ``(q·k)·scale`` with the scale stored as a float of the format: ``q_mag``
        already times the exact scale [.., e], ``k_mag`` [e, ..]: γ_{e+2}·|q|@|k|."""
        e = q_mag.shape[-1]
        return I.up_add(I.up_mul(self.gamma(e + 2), I.up_matmul_nonneg(q_mag, k_mag)), e * SUBNORMAL_HALF[self.name])

    def score_shift(self, s_max: np.ndarray, n_keys: int) -> np.ndarray:
        """(F3): the softmax kernel acts like the exact softmax of scores moved by at most this."""
        return I.up_mul(2 * RESCALES * self.u, I.up_add(s_max, float(I.up(math.log(n_keys)))))

    def softmax_theta(self, n_keys: int) -> float:
        """(F3): every softmax weight within this relative amount of the exact softmax of the moved
        scores: exp (EXP_ULPS), the division (1), the rescales (RESCALES × 3) and the normalizer's
        sum of ``n_keys`` terms, ``(1 + 2u)(1 + u)(1 + 3u)^RESCALES / (1 − γ_n) − 1``."""
        u, g = self.u, self.gamma(n_keys)
        if not g < 1:
            return math.inf
        grow = (1 + EXP_ULPS * u) * (1 + u) * (1 + 3 * u) ** RESCALES / (1 - g) - 1
        return float(I.up(grow * FLOAT_TERM_INFLATION))

    def head_error(self, v_max: np.ndarray, n_keys: int) -> np.ndarray:
        """How far one head's float output ``z`` [e] can lie from the exact softmax mean of its float
        values under the moved scores: ``θ·max|v|`` for the weights, ``γ_n(1 + θ)·max|v|`` for the
        weighted sum (weights summing to at most 1 + θ), ``v_max`` the largest |v| of any key."""
        theta = self.softmax_theta(n_keys)
        return I.up_add(I.up_mul(I.up_add(theta, I.up_mul(self.gamma(n_keys), 1 + theta)), v_max),
                        n_keys * SUBNORMAL_HALF[self.name])

    def layer_norm(self, x: Iv, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
        """(F4): the most the LayerNorm kernel's rounding can move its output, per coordinate, for
        inputs in the box ``x`` [rows, d]: with A_i ≥ |x_i − μ|, r ≤ (σ² + eps)^(-1/2), e_μ the mean's
        error and Θ ≥ |r̂/r − 1|, the output moves by at most
        ``|w_i|·r·(A_i·((1+u)^3(1+Θ) − 1) + e_μ(1+u)^3(1+Θ)) + u·(|q_i| + |b_i|)`` (q_i: the product
        before the bias). Infinite where the variance's error is not below its lower bound."""
        u, d = self.u, x.shape[-1]
        flat = Iv(x.lo.reshape(-1, d), x.hi.reshape(-1, d))
        mag = flat.mag()
        e_mu = I.up_mul(self.gamma(d), I.up(I.up_matmul_nonneg(mag, np.ones((d, 1)))[:, 0] / d))
        m2 = I.up(I.up_matmul_nonneg(I.up_mul(mag, mag), np.ones((d, 1)))[:, 0] / d)
        centred = flat - (flat.sum(axis=1) / float(d))[:, None]
        A = centred.mag()
        var_lo = I.down((centred.mig() ** 2).sum(axis=1) / d * (1 - 4 * d * I.U64)) + eps  # ≤ σ² + eps
        var_lo = I.down(np.maximum(var_lo, eps))
        T = I.up(I.up_add(I.up_mul(self.gamma(VARIANCE_TERMS * d), m2), I.up_mul(2.0, I.up_mul(e_mu, e_mu))) / var_lo)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            theta = np.where(T < 0.5, I.up((1 + RSQRT_ULPS * u) / I.down(np.sqrt(I.down((1 - T) * (1 - u)))) - 1),
                             np.inf)
        theta = I.up(theta * FLOAT_TERM_INFLATION)
        r = I.up(1.0 / I.down(np.sqrt(var_lo)))
        cube = I.up(I.up((1 + u) * (1 + u)) * (1 + u))  # ≥ (1 + u)^3: (1 + u)^2 is exact, one rounding up
        grow = I.up(cube * I.up(1 + theta))[:, None]  # ≥ (1+u)^3 (1+Θ), per row
        wr = I.up_mul(np.abs(w)[None], r[:, None])
        move = I.up_mul(wr, I.up_add(I.up_mul(A, I.up(grow - 1)), I.up_mul(e_mu[:, None], grow)))
        q = I.up_mul(wr, I.up_mul(I.up_add(A, e_mu[:, None]), grow))
        out = I.up_add(move, I.up_mul(u, I.up_add(q, np.abs(b)[None])), 4 * SUBNORMAL_HALF[self.name])
        return out.reshape(x.shape)

    def activation(self, pre: Iv, act: str) -> np.ndarray:
        """(F5): the GELU kernel's error for inputs in ``pre``; ReLU is exact."""
        if act == "relu":
            return np.zeros(pre.shape)
        return I.up_add(I.up_mul(GELU_ULPS * self.u, pre.mag()), GELU_FLOOR)


def widen(x: Iv, radius: np.ndarray) -> Iv:
    """``x`` widened by ``radius`` on both sides (rounded outward)."""
    return Iv(I.down(x.lo - radius), I.up(x.hi + radius))
