"""Floating-point term of the Theorem 5.1 certificate (docs/certificate.md, "Rounding model").

The margins certificate (:mod:`constructions.addition.certify.margins`) proves that the *real-arithmetic*
function defined by the weights the model holds adds correctly. This module bounds how far the
model's forward pass in a floating-point format can deviate from that function, so that "PASS in
float32 at N" is a statement about the float32 model, not about an idealisation.

Rounding model (stated, not measured)
-------------------------------------
``u`` is the unit roundoff of the format: 2^-53 (float64), 2^-24 (float32), 2^-11 (float16),
2^-8 (bfloat16). We assume:

(F1) every ``+ − × /`` returns the exact result of its (already rounded) operands times
     ``(1 + δ)`` with ``|δ| ≤ u`` (IEEE round to nearest); a product by ``0`` or ``±2^k`` and a sum
     with a zero operand are exact. Sums/dot products of ``n`` terms in *any* order (BLAS
     blocking, FMA, pairwise trees) satisfy ``|fl(Σ) − Σ| ≤ γ_n Σ|terms|`` with
     ``γ_n = n·u/(1 − n·u)`` (Higham, *Accuracy and Stability*, section 3.1). Formats that accumulate in
     a wider type (bfloat16 matmul on CPU) are covered, since they are at least this accurate.
(F2) for round to nearest, ``|fl(a + b) − (a + b)| ≤ min(|a|, |b|)``. A sum of attention terms in
     which ``k`` terms are ≈ 1 and the rest are tiny (total ``τ``) therefore has error at most
     ``(k − 1)·u·(k + τ) + 2τ`` in any summation tree: only merges of two subtrees that both hold a
     large term can round at the large magnitude (see :func:`attention_float_terms`).
(F3) ``exp`` is accurate to 2 ulp (``2u`` relative), the softmax divides once (``u``), and the
     attention kernel (dense softmax, torch's CPU flash kernel, or the chunked online softmax of
     :mod:`lengthgen.attention`) rescales or merges partial sums at most 4 times for the keys
     that carry the mass (each ``≤ 3u``). Its running-max subtraction and log-sum-exp merges act
     like an extra score perturbation of at most ``4u·(S_max + ln N_keys)`` (:func:`score_bounds` adds
     twice that, ``2·RESCALES·u·(S_max + ln N_keys)``). (F3) is an
     assumption about torch's kernels — reconstructed from their algorithms, not proven from
     their source; ``tests/test_certify_margins.py`` checks it against measured float32
     activations.

The bounds are *component-wise worst cases* over every (token, position ID) the format allows,
computed from the magnitudes of the weights actually held (float64 copies of them, exact).

Evaluating these bounds in float64 rounds too. Every quantity here is built from non-negative
numbers by ``+``, ``×``, ``/``, ``max`` and one ``log`` (the subtractions ``1 − n·u`` are exact),
along chains of fewer than :data:`MAX_CHAIN` roundings of relative size ≤ 2^-52 (``log``: 2 ulp),
so each computed value is at least the exact one times ``(1 − 2^-52)^MAX_CHAIN``. Multiplying by
:data:`FLOAT_TERM_INFLATION` = 1 + 2^-20 therefore yields an upper bound of the exact value while
``MAX_CHAIN · 2^-52 ≤ 2^-21``, i.e. for fewer than 2^31 roundings (docs/certificate.md derives it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
MAX_FINITE = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38, "float16": 65504.0,
              "bfloat16": 3.3895313892515355e38}
EXP_ULPS = 2.0  # (F3)
MAX_CHAIN = 2**31
FLOAT_TERM_INFLATION = 1 + 2.0**-20
RESCALES = 4  # (F3)


def gamma(n: int, u: float) -> float:
    """Higham's γ_n = n·u / (1 − n·u); infinite when n·u ≥ 1 (no guarantee)."""
    if n <= 0:
        return 0.0
    return math.inf if n * u >= 1 else n * u / (1 - n * u)


def _is_pow2_or_zero(values: np.ndarray) -> bool:
    a = np.abs(values[values != 0])
    if a.size == 0:
        return True
    mant, _ = np.frexp(a)
    return bool(np.all(mant == 0.5))


@dataclass
class Projection:
    """Bounds for ``x @ W + b`` over all embeddings x: magnitude ``mag[e]`` (≥ |exact|) and
    rounding error ``err[e]`` of the computed value."""

    mag: np.ndarray
    err: np.ndarray


@dataclass
class FloatTerms:
    """Everything the certificate needs from (F1)–(F3), for one dtype."""

    dtype: str
    u: float
    score_error: float  # |computed score − exact score| for every query/key pair, incl. (F3) merges
    score_magnitude: float  # bound on |score| (≈ M·P for the construction)
    softmax_rel: float  # relative error of each normalized attention weight (excl. the tail part)
    resid_error: np.ndarray  # [d] error of resid_mid per coordinate, excluding the leak-dependent part
    tail_base: np.ndarray  # [d] Σ_h max|v|·|W_O|: scale of the (F2) tail term per residual coordinate
    tail_cap: float  # (F2): the tail can cost at most n_keys·u·k merges at the large magnitude
    pre_error: np.ndarray  # [d_mlp] error of the FFN pre-activations beyond resid_mid's error
    logit_error: float  # error of any logit difference beyond what resid_mid's error explains
    overflow: str | None = None

    def tail(self, lam: float | np.ndarray) -> np.ndarray:
        """(F2) error of the weighted value sum and of the normalizer caused by the ``λ`` tail: the
        tiny terms may be lost (≤ 2τ) or merged at the large magnitude (≤ n_keys·u·k); the
        normalizer's relative error adds the same again."""
        lam = np.asarray(lam, dtype=float)[..., None]
        tail = 2 * np.minimum(2 * lam, self.tail_cap) * self.tail_base
        return np.where(tail == 0, 0.0, np.nextafter(tail * FLOAT_TERM_INFLATION, np.inf))

    def describe(self) -> list[str]:
        return [
            f"unit roundoff u = 2^{int(round(math.log2(self.u)))} ({self.dtype}); rounding model (F1)-(F3), "
            "see docs/certificate.md",
            f"score rounding at magnitude {self.score_magnitude:.4g} (≈ M·P): |Δscore| ≤ {self.score_error:.3g}",
            f"softmax (exp, normalizer sum, division, rescales): relative ≤ {self.softmax_rel:.3g} per weight",
            f"value path (W_V, weighted sum, W_O, residual add): |Δresid| ≤ {float(np.max(self.resid_error)):.3g}"
            f" (+ tail ≤ 2·min(2λ, {self.tail_cap:.3g})·{float(np.max(self.tail_base)):.3g})",
            f"FFN and readout: |Δpre-activation| ≤ {float(np.max(self.pre_error, initial=0)):.3g}, "
            f"|Δlogit gap| ≤ {self.logit_error:.3g}",
        ]


def embed_bounds(W_E: np.ndarray, W_pos: np.ndarray, u: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """|x_r| ≤ mag[r] for x = W_E[y] + W_pos[q]; rounding err[r] of that sum; exact_mult[r] says the
    coordinate only ever holds 0 or ±2^k (so multiplying by it is exact)."""
    e_mag, p_mag = np.abs(W_E).max(0), np.abs(W_pos).max(0)
    overlap = (e_mag > 0) & (p_mag > 0)
    mag = e_mag + p_mag
    err = np.where(overlap, u * mag, 0.0)
    exact_mult = np.array([(not overlap[r]) and _is_pow2_or_zero(W_E[:, r]) and _is_pow2_or_zero(W_pos[:, r])
                           for r in range(W_E.shape[1])])
    return mag, err, exact_mult


def project_bounds(x_mag: np.ndarray, x_err: np.ndarray, x_exact: np.ndarray, W: np.ndarray, b: np.ndarray,
                   u: float) -> Projection:
    """(F1) for ``x @ W + b`` column by column (W is [d, E])."""
    mags, errs = np.zeros(W.shape[1]), np.zeros(W.shape[1])
    for e in range(W.shape[1]):
        rows = np.nonzero((W[:, e] != 0) & (x_mag > 0))[0]
        terms = x_mag[rows] * np.abs(W[rows, e])
        n = len(rows) + (b[e] != 0)
        mag = float(terms.sum() + abs(b[e]))
        single_exact = n == 1 and len(rows) == 1 and x_exact[rows[0]] and x_err[rows[0]] == 0
        rounding = 0.0 if (n == 0 or single_exact) else gamma(n, u) * mag
        mags[e] = mag
        errs[e] = rounding + float(np.abs(W[rows, e]) @ x_err[rows])
    return Projection(mags, errs)


def score_bounds(q: Projection, k: Projection, scale: float, u: float, n_keys: int) -> tuple[float, float]:
    """(|Δscore| incl. the (F3) merge perturbation, bound on |score|) for one head."""
    qm, km = q.mag + q.err, k.mag + k.err
    products = qm * km
    n = int(np.count_nonzero(products))
    mag = float(products.sum()) * abs(scale)
    err = gamma(n, u) * mag if n > 1 else u * mag
    err += abs(scale) * float(np.sum(q.err * km + qm * k.err + q.err * k.err))
    if scale != 0 and not _is_pow2_or_zero(np.array([scale])):
        err += u * mag
    err += 2 * RESCALES * u * (mag + math.log(max(n_keys, 2)))  # (F3) running max / lse merges
    return err, mag


def attention_float_terms(W, dtype: str, n_keys: int, k_max: int) -> FloatTerms:
    """Bound every float error of the forward pass for the weights ``W`` (a
    :class:`~lengthgen.proof.weights.Weights`) in ``dtype``.

    ``k_max``: largest intended key set S; ``n_keys``: sequence length.
    Output errors are per residual coordinate; ``resid_tail_coef`` multiplies the leak λ."""
    u = UNIT_ROUNDOFF[dtype]
    x_mag, x_err, x_exact = embed_bounds(W.W_E, W.W_pos, u)
    H = W.W_Q.shape[0]
    score_err = score_mag = 0.0
    resid_err = x_err.copy()
    tail_base = np.zeros_like(x_mag)
    out_terms = np.zeros_like(x_mag)  # Σ_{h,e} |z_he|·|W_O| per residual coordinate
    out_prop = np.zeros_like(x_mag)
    theta = (EXP_ULPS + 1 + 3 * RESCALES + k_max + 1) * u  # (F3) + (F2) normalizer, relative
    n_out = np.zeros_like(x_mag)
    for h in range(H):
        q = project_bounds(x_mag, x_err, x_exact, W.W_Q[h], W.b_Q[h], u)
        k = project_bounds(x_mag, x_err, x_exact, W.W_K[h], W.b_K[h], u)
        err, mag = score_bounds(q, k, W.scale, u, n_keys)
        score_err, score_mag = max(score_err, err), max(score_mag, mag)
        v = project_bounds(x_mag, x_err, x_exact, W.W_V[h], W.b_V[h], u)
        v_max = v.mag + v.err
        # z_e = Σ_j ŵ_j v̂_je: weight errors (θ), value errors, and (F2) summation of k large terms
        z_err = 2 * theta / (1 - theta) * v_max + (1 + theta) * v.err + (k_max - 1) * u * (1 + theta) * v_max
        absO = np.abs(W.W_O[h])  # [E, d]
        out_terms += (v_max * (1 + theta)) @ absO
        out_prop += z_err @ absO
        tail_base += v_max @ absO
        n_out += np.count_nonzero(absO * (v_max[:, None] > 0), axis=0)
    out_mag = out_terms + np.abs(W.b_O)
    n_out += W.b_O != 0
    out_round = np.array([gamma(int(n), u) if n > 1 else (u if n == 1 else 0.0) for n in n_out]) * out_mag
    resid_mag = x_mag + out_mag
    resid_err = resid_err + out_prop + out_round + np.where((x_mag > 0) & (out_mag > 0), u * resid_mag, 0.0)
    # FFN: pre = resid @ W_in + b_in (its error beyond resid's own error), ReLU exact
    absI = np.abs(W.W_in)
    n_in = np.count_nonzero(absI * (resid_mag[:, None] > 0), axis=0) + (W.b_in != 0)
    pre_mag = resid_mag @ absI + np.abs(W.b_in)
    pre_err = np.array([gamma(int(n), u) for n in n_in]) * pre_mag
    # mlp_out = relu(pre) @ W_out + b_out ; resid_post = resid + mlp_out ; logits = resid_post @ W_U + b_U
    absW = np.abs(W.W_out)
    post_mag = pre_mag + pre_err
    n_o = np.count_nonzero(absW * (post_mag[:, None] > 0), axis=0) + (W.b_out != 0)
    mo_mag = post_mag @ absW + np.abs(W.b_out)
    mo_err = np.array([gamma(int(n), u) for n in n_o]) * mo_mag + pre_err @ absW
    rp_mag = resid_mag + mo_mag
    rp_err = mo_err + np.where((resid_mag > 0) & (mo_mag > 0), u * rp_mag, 0.0)
    absU = np.abs(W.W_U)
    n_u = np.count_nonzero(absU * (rp_mag[:, None] > 0), axis=0) + (W.b_U != 0)
    lg_err = np.array([gamma(int(n), u) for n in n_u]) * (rp_mag @ absU + np.abs(W.b_U)) + rp_err @ absU
    logit_err = 2 * float(lg_err.max())
    big = max(score_mag, float(resid_mag.max()), float(pre_mag.max(initial=0.0)), float(rp_mag.max()))
    overflow = None
    if big >= MAX_FINITE[dtype] / 4:
        overflow = f"magnitudes up to {big:.3g} come within 4x of the largest finite {dtype} ({MAX_FINITE[dtype]:.4g})"
    tail_cap = 2 * n_keys * u * k_max
    if max(len(x_mag), len(pre_mag)) * 64 + n_keys > MAX_CHAIN:
        raise ValueError("the float term's own rounding is only bounded for fewer than 2^31 operations per chain")
    up = lambda x: np.where(np.asarray(x) == 0, 0.0, np.nextafter(np.asarray(x, dtype=np.float64) * FLOAT_TERM_INFLATION, np.inf))
    return FloatTerms(dtype, u, float(up(score_err)), score_mag, float(up(theta)), up(resid_err), up(tail_base),
                      float(up(tail_cap)), up(pre_err), float(up(logit_err)), overflow)


def zero_terms(d: int, d_mlp: int) -> FloatTerms:
    """Real arithmetic: no float term."""
    return FloatTerms("real", 0.0, 0.0, 0.0, 0.0, np.zeros(d), np.zeros(d), 0.0, np.zeros(d_mlp), 0.0)
