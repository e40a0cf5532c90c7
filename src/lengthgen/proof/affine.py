"""Affine forms through LayerNorm, the MLP and the unembedding: the tight tail of the trained certificate.

An :class:`Affine` encloses a batch of sets of residual vectors as ``x = c + Σ_j ε_j·G_j + β`` with
``ε ∈ [−1, 1]^k`` shared by every coordinate (the generators keep the dependence between
coordinates) and ``|β| ≤ b`` coordinatewise (docs/certificate.md, "Trained models": the paragraph
on the affine tail). Sound in exact real arithmetic on the stored weights:

* a linear map ``x ↦ xW`` (W exact) maps generators exactly; float rounding of ``c@W`` and of every
  ``G_j@W`` is bounded by Higham's ``|fl(a@w) − a@w| ≤ γ_{n}|a|@|w| + n·2^-1074`` (section 3.1, any
  summation order) summed over generators, ``γ_n·(Σ_j|G_j|)@|W|``, and added to the box;
* LayerNorm by a first-order expansion around the centre c with a rigorous second-order remainder
  (:func:`mean_value_ln`): ``LN(x) = LN(c) + (x − c)J + ρ``, J the float Jacobian at c (its
  distance to the exact one bounded by :func:`jacobian_error`), ``|ρ|`` bounded through Taylor's
  theorem for the one nonlinearity ``(|u|²/d + eps)^(−1/2)`` of LayerNorm;
* GELU and ReLU unit by unit by a linear relaxation ``g(x) = αx + ν + μ·η`` with |η| ≤ 1 on the
  unit's range [l, u] (:func:`relax`): GELU by the mean-value form with the interval derivative
  ``g'([l, u])`` (``|g(x) − g(x0) − α(x − x0)| ≤ mag(g'([l, u]) − α)·|x − x0|``) or the plain
  interval range when that is narrower, ReLU by the triangle relaxation (Ehlers 2017; Zhang et
  al., CROWN, 2018). Each unit's ``μ·η`` becomes a new generator, kept as a diagonal block.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from . import interval as I
from .interval import Iv
from .layers import _point_cdf, _point_gelu, gelu, layer_norm, point_pdf, rsqrt, square

GP_MAX = 1.1289042  # ≥ max GELU' = GELU'(√2) = Φ(√2) + √2·φ(√2) = 1.1289041451…
GP_MIN = 1.0 - GP_MAX  # ≤ min GELU' = GELU'(−√2) = 1 − GELU'(√2) (GELU'(−x) = 1 − GELU'(x))
SQRT2_LO, SQRT2_HI = 1.4142135, 1.4142136  # bracket √2


def sum_up(x: np.ndarray, axis: int) -> np.ndarray:
    """Upper bound of the exact sum of non-negative ``x`` along ``axis`` (any order)."""
    return I.up(x.sum(axis) * I.up_sum_factor(x.shape[axis]))


def product_error(abs_a: np.ndarray, abs_w: np.ndarray, terms: int = 1) -> np.ndarray:
    """Upper bound of ``Σ |fl(a_j@w) − a_j@w|`` over ``terms`` products whose ``Σ_j |a_j|`` is ``abs_a``
    (Higham 3.1 with the underflow of each of the n products: γ_{n+2} covers both as in
    :func:`interval.matmul`)."""
    n = abs_w.shape[-2]
    err = I.up(I.up_matmul_nonneg(abs_a, abs_w) * I.up(2 * I.gamma(n + 2)))
    return I.up(err + terms * n * 4 * I.TINY)


def add_error(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Upper bound of the rounding of the one float addition or product that gave each entry of ``x``
    (≤ u·|x|, plus 2^-1075 for a product that underflowed), summed over ``axis`` when given."""
    if axis is None:
        return I.up(np.abs(x) * I.U64 * 2 + I.TINY)
    return I.up(sum_up(np.abs(x), axis) * (I.U64 * 2) + x.shape[axis] * I.TINY)


@dataclass
class Affine:
    """``c + Σ_j ε_j G_j + Σ_i η_i D_i·R_i + β``: ``c`` [C, d], ``G`` [C, k, d], box ``b`` [C, d] ≥ 0,
    and an optional diagonal block: unit i's own generator ``D[:, i]`` times the exact row ``R[i]``
    (the MLP's new generators after W_out: ``D`` [C, m], ``R`` [m, d]; ``None`` when absent)."""

    c: np.ndarray
    G: np.ndarray
    b: np.ndarray
    D: np.ndarray | None = None
    R: np.ndarray | None = None
    hull: np.ndarray | None = None  # another bound of |x − c| [C, d] (a plain interval enclosure)
    # generator blocks (start, T) whose ε lie in the polytope conv(rows of T [K, width]), not only
    # in the cube: the attention's free-key generators (trained_affine.attention_form)
    blocks: tuple = ()

    def radius(self) -> np.ndarray:
        """Upper bound of |x − c| per coordinate [C, d] (the smaller of the form's and the hull's)."""
        r = I.up(gen_abs(self.G, self.blocks) + self.b)
        if self.D is not None:  # R None: the identity (the hidden units' own generators)
            r = I.up(r + (np.abs(self.D) if self.R is None else I.up_matmul_nonneg(np.abs(self.D), np.abs(self.R))))
        return r if self.hull is None else np.minimum(r, self.hull)

    def rows(self, keep: np.ndarray) -> "Affine":
        """The forms of the rows ``keep`` only (a diagonal block's R is shared)."""
        pick = lambda v: None if v is None else v[keep]  # noqa: E731
        return Affine(self.c[keep], self.G[keep], self.b[keep], pick(self.D), self.R, pick(self.hull), self.blocks)

    def box(self) -> Iv:
        r = self.radius()
        return Iv(I.down(self.c - r), I.up(self.c + r))


def gen_abs(G: np.ndarray, blocks: tuple = ()) -> np.ndarray:
    """Upper bound of |Σ_j ε_j·G_j| over the generators' set, entry by entry (G [C, k, ...]): Σ_j |G_j|
    for free ε_j ∈ [−1, 1]; for a block (start, T) whose ε lie in conv(rows of T), the largest
    |T_k·G_block| over its vertices (a linear function's extremes over a polytope), with the float
    product's error, plus 4u·Σ|G_block| for vertex coordinates that are floats of exact ones
    within 2.0001u (:func:`trained_affine.free_values`); the cube's Σ|G_block| when smaller."""
    total = sum_up(np.abs(G), 1)
    if not blocks:
        return total
    C, k = G.shape[:2]
    flat = G.reshape(C, k, -1)
    free = np.ones(k, dtype=bool)
    parts = []
    for start, T in blocks:
        stop = start + T.shape[1]
        free[start:stop] = False
        gb = flat[:, start:stop]
        cube = sum_up(np.abs(gb), 1)
        # the float products' error, Higham's γ·Σ_j |T_kj|·|G_j| ≤ γ·max|T|·Σ_j |G_j| for every vertex
        gamma = I.up(2 * I.gamma(T.shape[1] + 2) * float(I.up(np.abs(T).max(initial=0.0))))
        slack = I.up_add(I.up_mul(gamma + 4 * I.U64, cube), T.shape[1] * 4 * I.TINY)
        parts.append(np.minimum(cube, I.up_add(np.abs(T[None] @ gb).max(1), slack)))
    out = I.up_add(sum_up(np.abs(flat[:, free]), 1), *parts)
    return np.minimum(total, out.reshape(total.shape))


def folded(x: Affine) -> Affine:
    """The same set with the diagonal block's generators written out: ``η_i·D_i·R_i`` (``R`` None:
    the identity) become ordinary generators after ``G``, the rounding of each product ``D_i·R_ij``
    (≤ u·|D_i·R_ij|) joins the box. Functions that read only ``G`` and ``b`` (the LayerNorm
    remainder, :func:`linear`) see every generator of the set this way."""
    if x.D is None:
        return x
    R = np.eye(x.D.shape[1]) if x.R is None else x.R
    rows = x.D[:, :, None] * R[None]  # [C, m, d]
    return Affine(x.c, np.concatenate([x.G, rows], axis=1), I.up_add(x.b, add_error(rows, 1)), hull=x.hull,
                  blocks=x.blocks)


def _abs_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Upper bound of |exact a @ b| entrywise (float product plus Higham's bound of its error)."""
    return I.up_add(np.abs(a @ b), product_error(np.abs(a), np.abs(b)))


_GRAM: dict[str, np.ndarray] = {}


def _row_gram(R: np.ndarray) -> np.ndarray:
    """|R Rᵀ| bounded above entrywise, kept for the last few R (W_out: the same for every batch)."""
    key = hashlib.sha1(np.ascontiguousarray(R).tobytes()).hexdigest()
    if key not in _GRAM:
        if len(_GRAM) > 4:
            _GRAM.clear()
        _GRAM[key] = _abs_dots(R, R.T)
    return _GRAM[key]


def norm_bound(x: Affine) -> np.ndarray:
    """Upper bound [C] of the Euclidean norm |x − c| over the set: for H the generator rows (the
    G_j and the diagonal block's D_i·R_i), |Σ ε_p·H_p|² = εᵀ(H Hᵀ)ε ≤ Σ_{p,q} |H_p·H_q| whenever
    |ε| ≤ 1, plus |β| ≤ |b|₂ for the box. The Gram sum is far below Σ_i (Σ_p |H_pi|)², the
    coordinatewise bound, when the generators point in few directions (the attention's
    perturbation does) or cancel. The diagonal block's Gram ``|D|ᵀ|R Rᵀ||D|`` uses one m×m matrix
    for every row."""
    gram = _abs_dots(x.G, x.G.transpose(0, 2, 1))  # [C, k, k]
    total = sum_up(gram.reshape(len(x.c), -1), 1)
    if x.D is not None:
        aD = np.abs(x.D)
        if x.R is None:  # the identity rows: D_i·D_l·δ_il and G_j·e_i = G_ji
            dd, cross = sum_up(I.up_mul(aD, aD), 1), sum_up(I.up_mul(np.abs(x.G), aD[:, None, :]).reshape(len(aD), -1), 1)
        else:
            dd = I.up_matmul_nonneg(I.up_matmul_nonneg(aD[:, None, :], _row_gram(x.R)[None]), aD[:, :, None])[:, 0, 0]
            # Σ_ji |D_i|·|G_j·R_i|: the float dots, then their rounding summed before it is formed,
            # Σ_ji |D_i|·γ|G_j|·|R_i| = γ·(Σ_j |G_j|)·(|R|ᵀ|D|) (product_error's bound, weighted)
            dots = sum_up(I.up_mul(np.abs(x.G @ x.R.T), aD[:, None, :]).reshape(len(aD), -1), 1)
            weight = I.up_matmul_nonneg(np.abs(x.R).T[None], aD[:, :, None])[:, :, 0]  # [C, d]
            terms = x.G.shape[1] * aD.shape[1]
            rounding = product_error(sum_up(np.abs(x.G), 1)[:, None, :], weight[:, :, None], terms)[:, 0, 0]
            cross = I.up_add(dots, I.up_mul(rounding, I.up(1.0 + aD.max(1, initial=0.0))))
        total = I.up_add(total, dd, I.up_mul(2.0, cross))
    return I.up_add(I.up(np.sqrt(total)), I.up(np.sqrt(sum_up(I.up_mul(x.b, x.b), 1))))


def from_iv(centre: Iv, G: np.ndarray, b: np.ndarray, blocks: tuple = ()) -> Affine:
    """The form ``centre + Σ ε_j G_j + box b`` with the centre an enclosure (its radius joins the box)."""
    c, r = centre.center_radius()
    return Affine(c, G, I.up(b + r), blocks=blocks)


def linear(x: Affine, W: np.ndarray, bias: np.ndarray | None = None) -> Affine:
    """``x @ W + bias`` for exact float W [d, m] (shared) or [C, d, m] (one per row); no diagonal block."""
    assert x.D is None
    absW = np.abs(W)
    c = x.c[:, None, :] @ W if W.ndim == 3 else x.c @ W
    c = c.reshape(len(x.c), -1)
    G = x.G @ W
    S = sum_up(np.abs(x.G), 1)
    lift = (lambda v: v[:, None, :]) if W.ndim == 3 else (lambda v: v)  # noqa: E731
    flat = lambda v: v.reshape(len(x.c), -1)  # noqa: E731
    b = flat(I.up_matmul_nonneg(lift(x.b), absW))
    b = I.up_add(b, flat(product_error(lift(np.abs(x.c)), absW)), flat(product_error(lift(S), absW, x.G.shape[1])))
    if bias is not None:
        c = c + bias
        b = I.up_add(b, add_error(c))
    return Affine(c, G, b, blocks=x.blocks)


def ln_point_jacobian(c: np.ndarray, w: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float Jacobian J [C, d, d] of LayerNorm at the points c [C, d] (``J[r, j, i] = ∂LN_i/∂x_j``),
    with the float x̂ [C, d] and s [C, 1] it was built from (:func:`jacobian_error` bounds its error)."""
    d = c.shape[-1]
    cen = c - c.mean(axis=1, keepdims=True)
    s = 1.0 / np.sqrt((cen * cen).mean(axis=1, keepdims=True) + eps)
    xh = cen * s
    J = np.eye(d)[None] - 1.0 / d - xh[:, :, None] * xh[:, None, :] / d
    return J * s[:, :, None] * w[None, None, :], xh, s


def q_change_bound(A: np.ndarray, Q: np.ndarray, d: int) -> np.ndarray:
    """Upper bound of ``|Δq|`` for ``q = |u|²/d``: ``Δq = (2u0·Δu + |Δu|²)/d``, so
    ``|Δq| ≤ (2A + Q)/d`` where ``A ≥ |u0·Δu|`` and ``Q ≥ |Δu|²``; equality when Δu points along
    u0 and both bounds are attained, so neither term may shrink (:func:`mean_value_ln`)."""
    return I.up(I.up(I.up(2 * A) + Q) / d)


def mean_value_ln(x: Affine, params: tuple[np.ndarray, np.ndarray], eps: float) -> tuple[Iv, np.ndarray, np.ndarray]:
    """LayerNorm around the centre c: ``LN(x) = LN(c) + (x − c)J + ρ`` for every x of the form.
    Returns (enclosure of LN(c) [C, d], float J [C, d, d], bound of |ρ| [C, d]).

    LN(x)_i = w_i·u_i·s(q) + b_i with u = x − mean(x) (linear in x), q = |u|²/d and
    s(q) = (q + eps)^(−1/2), the only nonlinearity. With u = u0 + Δu, Δs = s(q) − s(q0) and
    Δs_lin = −s0³·(u0·Δu)/d (the part of Δs linear in Δu), the part of LN(x) − LN(c) linear in Δx is
    ``Δx·J_c`` (J_c the exact Jacobian at c) and the rest is ``w_i·(u0_i·(Δs − Δs_lin) + Δu_i·Δs)``.
    Taylor's theorem for s in q, with ``s'' = ¾·s⁵`` at a point ≥ q_min, gives
    ``|Δs − Δs_lin| ≤ s0³·|Δu|²/(2d) + (3/8)·s_max⁵·Δq²``, ``Δq = (2u0·Δu + |Δu|²)/d``, and
    ``u0·Δu = u0·Δx`` (u0 sums to 0) is bounded on the form's generators (or by |u0|·|Δx|), and
    |Δu|² coordinatewise or by :func:`norm_bound`, whichever is smaller: a second-order remainder.
    The float J replaces J_c at the cost ``Σ_j r_j·|J_c − J|_ji`` (:func:`jacobian_error`)."""
    w, bias = params
    norm = norm_bound(x)  # ≥ |Δx|, also ≥ |Δu| (centring is an orthogonal projection)
    x = folded(x)  # |u0·Δx| below must see the diagonal block's generators too
    C, d = x.c.shape
    k = x.G.shape[1]
    r = x.radius()
    J, p, s_f = ln_point_jacobian(x.c, w, eps)
    point = Iv.exact(x.c)
    u0 = point - (point.sum(axis=1) / float(d))[:, None]
    q0 = square(u0).sum(axis=1) / float(d)
    s_iv = rsqrt(q0 + eps)
    s0 = s_iv.hi
    s0_3 = I.up_mul(I.up_mul(s0, s0), s0)
    uc, ur = u0.center_radius()
    S = sum_up(np.abs(x.G), 1)
    proj = (x.G @ uc[:, :, None])[:, :, 0]  # u0·G_j in floats [C, k]
    A = I.up_add(gen_abs(proj, x.blocks), product_error(S[:, None, :], np.abs(uc)[:, :, None], k)[:, 0, 0],
                 I.up_matmul_nonneg(S[:, None, :], ur[:, :, None])[:, 0, 0],
                 I.up_matmul_nonneg(x.b[:, None, :], u0.mag()[:, :, None])[:, 0, 0])  # ≥ |u0·Δx|
    A = np.minimum(A, I.up_mul(I.up(np.sqrt(sum_up(square(u0).hi, 1))), norm))  # or Cauchy–Schwarz
    r_u = I.up(r + I.up(sum_up(r, 1) / d)[:, None])  # ≥ |Δu_i| = |Δx_i − mean(Δx)|
    Q = np.minimum(sum_up(I.up_mul(r_u, r_u), 1), I.up_mul(norm, norm))  # ≥ |Δu|², coordinatewise or by the Gram sum
    dq = q_change_bound(A, Q, d)
    q_min = np.maximum(I.down(q0.lo - dq), 0.0)
    s_max = rsqrt(Iv(I.down(q_min + eps), I.up(q_min + eps))).hi
    s_max5 = I.up_mul(I.up_mul(I.up_mul(s_max, s_max), I.up_mul(s_max, s_max)), s_max)
    e2 = I.up_add(I.up(I.up_mul(s0_3, Q) / (2 * d)), I.up_mul(I.up_mul(0.375, s_max5), I.up_mul(dq, dq)))
    ds = I.up_add(I.up(I.up_mul(s0_3, A) / d), e2)  # ≥ |Δs|
    rem = I.up_mul(np.abs(w)[None], I.up_add(I.up_mul(u0.mag(), e2[:, None]), I.up_mul(r_u, ds[:, None])))
    rem = I.up_add(rem, jacobian_error(r, w, s_iv, u0 * s_iv[:, None], J, p, s_f))
    return layer_norm(point, w, bias, eps), J, rem


def jacobian_error(r: np.ndarray, w: np.ndarray, s: Iv, xh: Iv, J: np.ndarray, p: np.ndarray,
                   s_f: np.ndarray) -> np.ndarray:
    """Upper bound of ``Σ_j r_j·|J_c − J|_ji`` [C, d]: J_c the exact Jacobian at c,
    ``w_i·s·(E_ij − x̂_i·x̂_j/d)`` (E = I − 1/d, s ∈ ``s``, x̂ ∈ ``xh``), J the float one of
    :func:`ln_point_jacobian` from the float p ≈ x̂ and s_f ≈ s: its ≤ 7 roundings per entry are
    within ``16u·|w_i|·S·(|E_ij| + X_i·X_j/d)`` (S ≥ s, s_f; X ≥ |x̂|, |p|), and
    ``|x̂_i x̂_j − p_i p_j| ≤ X_i ρ_j + ρ_i X_j`` (ρ ≥ |x̂ − p|). Every sum over j is O(d):
    ``Σ_j r_j |E_ij| ≤ r_i + Σ r/d``."""
    d = r.shape[-1]
    S = np.maximum(s.hi, s_f[:, 0])[:, None]
    sigma = I.up_add(np.maximum(I.up(s.hi - s_f[:, 0]), I.up(s_f[:, 0] - s.lo))[:, None], I.up_mul(16 * I.U64, S))
    rho = I.up(np.maximum(I.up(xh.hi - p), I.up(p - xh.lo)))
    X = I.up(np.abs(p) + rho)
    rX = I.up_matmul_nonneg(r[:, None, :], X[:, :, None])[:, 0]  # [C, 1]
    rR = I.up_matmul_nonneg(r[:, None, :], rho[:, :, None])[:, 0]
    rE = I.up(r + I.up(sum_up(r, 1) / d)[:, None])
    first = I.up_mul(sigma, I.up_add(rE, I.up(I.up_mul(X, rX) / d)))
    second = I.up(I.up_mul(S, I.up_add(I.up_mul(X, rR), I.up_mul(rho, rX))) / d)
    out = I.up_mul(np.abs(w)[None], I.up_add(first, second))
    return I.up(out + 4 * d * I.TINY * (1 + sum_up(r, 1)[:, None]))


def apply_ln(x: Affine, params: tuple[np.ndarray, np.ndarray] | None, eps: float) -> Affine:
    """The form of LN(x) (the mean-value form, :func:`mean_value_ln`); x itself without LayerNorm."""
    if params is None:
        return x
    centre, J, rem = mean_value_ln(x, params, eps)
    x = folded(x)  # the linear part maps every generator, the diagonal block's included
    y = linear(Affine(np.zeros_like(x.c), x.G, x.b), J)
    return from_iv(centre, y.G, I.up_add(y.b, rem, add_error(y.c)), x.blocks)


def gelu_slope_range(l: np.ndarray, u: np.ndarray) -> Iv:
    """Enclosure of GELU'([l, u]) = Φ + xφ on intervals: increasing on [−√2, √2], decreasing outside."""
    ends = [Iv(*_point_cdf(v)) + Iv.exact(v) * Iv(*point_pdf(v)) for v in (l, u)]
    lo = np.minimum(ends[0].lo, ends[1].lo)
    hi = np.maximum(ends[0].hi, ends[1].hi)
    hi = np.where((l <= SQRT2_HI) & (u >= SQRT2_LO), GP_MAX, hi)
    lo = np.where((l <= -SQRT2_LO) & (u >= -SQRT2_HI), GP_MIN, lo)
    return Iv(lo, hi)


def relax(l: np.ndarray, u: np.ndarray, act: str) -> tuple[np.ndarray, Iv]:
    """Slope α (float) and enclosure N of ``g(x) − αx`` over x ∈ [l, u], unit by unit."""
    if act == "relu":
        cross = (l < 0) & (u > 0)
        alpha = np.where(u <= 0, 0.0, np.where(cross, u / np.where(cross, u - l, 1.0), 1.0))
        top = np.maximum(I.up_mul(alpha, np.abs(np.minimum(l, 0.0))), I.up_mul(I.up(1.0 - alpha), np.maximum(u, 0.0)))
        return alpha, Iv(np.zeros_like(l), np.where(cross, top, 0.0))
    x0 = l + 0.5 * (u - l)
    rho = I.up(np.maximum(I.up(u - x0), I.up(x0 - l)))
    slope = gelu_slope_range(l, u)
    alpha = 0.5 * (slope.lo + slope.hi)
    err = I.up_mul(Iv(I.down(slope.lo - alpha), I.up(slope.hi - alpha)).mag(), rho)
    base = _point_gelu(x0) - Iv.exact(alpha) * Iv.exact(x0)
    lin = Iv(I.down(base.lo - err), I.up(base.hi + err))
    flat = gelu(Iv(l, u))
    use_flat = (flat.hi - flat.lo) <= (lin.hi - lin.lo)
    alpha = np.where(use_flat, 0.0, alpha)
    return alpha, Iv(np.where(use_flat, flat.lo, lin.lo), np.where(use_flat, flat.hi, lin.hi))


def activation(x: Affine, act: str) -> Affine:
    """``act`` applied to every coordinate; each unit's relaxation error is its own new generator
    (the diagonal block D with rows R = identity, made concrete by the next :func:`linear_out`)."""
    r = x.radius()
    l, u = I.down(x.c - r), I.up(x.c + r)
    alpha, nu = relax(l, u, act)
    nc, nr = nu.center_radius()
    c = alpha * x.c + nc
    G = x.G * alpha[:, None, :]
    b = I.up_add(I.up_mul(np.abs(alpha), x.b), add_error(c), add_error(alpha * x.c), add_error(G, 1))
    return Affine(c, G, b, D=nr, blocks=x.blocks)


def linear_out(x: Affine, W: np.ndarray, bias: np.ndarray) -> Affine:
    """``x @ W + bias`` for a form whose diagonal block came from :func:`activation`: the block's
    generators become ``D_i·W[i]`` (exact, kept factored)."""
    y = linear(Affine(x.c, x.G, x.b, blocks=x.blocks), W, bias)
    return Affine(y.c, y.G, y.b, D=x.D, R=W, blocks=x.blocks)


def add(x: Affine, y: Affine) -> Affine:
    """The sum of two forms over the same ε (y may carry the diagonal block)."""
    assert len(x.blocks) == len(y.blocks) and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(x.blocks, y.blocks))
    c, G = x.c + y.c, x.G + y.G
    b = I.up_add(x.b, y.b, add_error(c), add_error(G, 1))
    return Affine(c, G, b, D=y.D, R=y.R, blocks=x.blocks)


def differences(x: Affine, ln: tuple[np.ndarray, np.ndarray] | None, eps: float, W_U: np.ndarray, b_U: np.ndarray,
                target: np.ndarray, ln_extra: np.ndarray | None = None) -> Iv:
    """Enclosure of ``logit[target] − logit[o]`` [C, V] for ``logits = LN_final(x) @ W_U + b_U``:
    LN by the mean-value form, then the exact map to the differences, then ``Σ|generators| + box``
    (``ln_extra``: any further move of the LN output, coordinatewise, such as a float rounding)."""
    C, d = x.c.shape
    if ln is None:
        centre, J, rem = Iv.exact(x.c), np.broadcast_to(np.eye(d), (C, d, d)), np.zeros_like(x.c)
    else:
        centre, J, rem = mean_value_ln(x, ln, eps)
    if ln_extra is not None:
        rem = I.up_add(rem, ln_extra)
    U = Iv.exact(W_U[:, target].T[:, :, None]) - Iv.exact(W_U[None])  # [C, d, V]: column t − column o
    bU = Iv.exact(b_U[target][:, None]) - Iv.exact(b_U[None])
    Um, Ur = U.center_radius()
    F = J @ Um  # the float map used for (x − c); its distance to J·U is bounded by F_err
    F_err = I.up_add(product_error(np.abs(J), np.abs(Um)), I.up_matmul_nonneg(np.abs(J), Ur))
    out = I.matmul(Iv(centre.lo[:, None, :], centre.hi[:, None, :]), U)[:, 0] + bU
    absU = U.mag()
    rad = I.up_matmul_nonneg(rem[:, None, :], absU)[:, 0]
    r = x.radius()
    rad = I.up_add(rad, I.up_matmul_nonneg(r[:, None, :], F_err)[:, 0])
    G = x.G @ F  # [C, k, V]
    S = sum_up(np.abs(x.G), 1)
    rad = I.up_add(rad, gen_abs(G, x.blocks), product_error(S[:, None, :], np.abs(F), x.G.shape[1])[:, 0],
                   I.up_matmul_nonneg(x.b[:, None, :], np.abs(F))[:, 0])
    if x.D is not None:
        RF = x.R[None] @ F  # [C, m, V]
        rad = I.up_add(rad, I.up_matmul_nonneg(np.abs(x.D)[:, None, :], np.abs(RF))[:, 0],
                       I.up_matmul_nonneg(np.abs(x.D)[:, None, :], product_error(np.abs(x.R)[None], np.abs(F)))[:, 0])
    return Iv(I.down(out.lo - rad), I.up(out.hi + rad))
