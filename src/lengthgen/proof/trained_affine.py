"""The second pass of the trained-model certificate: the residual after attention as an affine form.

Per head h of a local configuration (docs/certificate.md, "Trained models"), the head output is
exactly ``o_fixed + λ·(v_free − v_fixed)·W_O[h]``: v_fixed the fixed keys' softmax-weighted mean
value, v_free the free keys' (a convex combination of the values a free key can carry, so
``v_free = c_free + Σ_i τ_i·h_i·b_i``, |τ_i| ≤ 1, by :func:`free_values`), λ ∈ [0, λ⁺] their share.
So ``s = v_free − v_fixed ∈ m ± R + Σ_i τ_i·h_i·b_i`` (m, R: centre and radius of
``c_free − v_fixed``) and, with ``λ = (λ⁺/2)(1 + τ)``, τ ∈ [−1, 1],

    λ·s·W_O = (λ⁺/2)·m·W_O + τ·(λ⁺/2)·m·W_O + Σ_i ε_i·λ⁺·h_i·b_i·W_O + β,   |ε_i| = |λτ_i/λ⁺| ≤ 1,
    |β| ≤ λ⁺·R·|W_O|

an affine form with 1 + (rank of the free values) generators per head, along the free values'
principal axes in the span of W_O[h]: far tighter than the d_model-dimensional box of the plain
pass. Its generators' ε do not fill the cube: with μ = λ/λ⁺ ∈ [0, 1] and τ(v) the coordinates of
v_free (a convex combination of the coordinates τ_k of the values a free key can carry),
(τ, ε) = (2μ − 1, μ·τ(v)) lies in the pyramid conv{(−1, 0), (1, τ_k)}: a block whose vertices
:func:`lengthgen.proof.affine.gen_abs` uses (a linear function is extreme at a vertex). :func:`affine_differences` pushes it through LN2,
the MLP, the final LN and the unembedding with :mod:`lengthgen.proof.affine`.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import affine as A
from . import interval as I
from .interval import Iv
from .trained_tables import LN_EPS, OneLayer

CHUNK = 64  # configurations per affine batch (the MLP's generators: CHUNK × k × d_mlp floats)
# Rows left unproven without finishing the affine tail (time only, never soundness): a free keys' share
# λ⁺ above SHARE_GIVE_UP, or an LN2 output wider than GIVE_UP (mean radius per coordinate). Measured on
# the committed checkpoints (bench/bench_affine_widths.py): proofs came at λ⁺ ≤ 1.5% and LN2 radii
# ≤ 0.02; at λ⁺ ≈ 4% the LN2 radius is 0.2-0.3 and nothing is proven.
SHARE_GIVE_UP = 0.1
GIVE_UP = 0.1


def attention_form(cert, heads: list[dict], slots, tq: np.ndarray, resid: Iv) -> A.Affine:
    """The residual after attention, ``resid + b_O + Σ_h head_h``, as an affine form [C, d]."""
    w: OneLayer = cert.w
    centre = resid + w.b_O
    gens, blocks, box = [], [], np.zeros(resid.shape)
    plain = centre
    for h, k in enumerate(heads):
        head, lam = cert._head(k, slots, tq)
        plain = plain + head
        fixed, fixed_gens, fixed_box = fixed_form(k, slots, tq, cert.t.out[h])
        centre = centre + fixed
        gens.append(fixed_gens)
        box = I.up_add(box, fixed_box)
        if not np.any(lam):
            continue
        fixed_v = cert.fixed_mean(k, slots, tq, "ev")[0].intersect(A.from_iv(*fixed_form(k, slots, tq, cert.t.value[h])).box())
        free = k["free_v"]
        m, R = (free["centre"] - fixed_v).center_radius()  # s − Σ τ_i·h_i·b_i ∈ m ± R
        g = I.matmul(Iv.exact(m), w.W_O[h]) * (Iv.exact(lam) * 0.5)[:, None]  # ∋ (λ⁺/2)·m·W_O
        gm, gr = g.center_radius()
        centre = centre + Iv.exact(gm)
        rows = lam[:, None, None] * free["gens"][None]  # λ⁺·h_i·b_i·W_O[h], one rounding each
        blocks.append((sum(g.shape[1] for g in gens), free["vertices"]))
        gens += [gm[:, None, :], rows]
        box = I.up_add(box, I.up_mul(2.0, gr), A.add_error(rows, 1), I.up_mul(lam[:, None], free["gens_err"][None]),
                       I.up_matmul_nonneg(I.up_mul(lam[:, None], R), np.abs(w.W_O[h])))
    G = np.concatenate(gens, axis=1)  # every head adds its fixed keys' generators
    x = A.from_iv(centre, G, box, tuple(blocks))
    x.hull = I.up(np.maximum(I.up(plain.hi - x.c), I.up(x.c - plain.lo)))  # the plain pass's box
    return x if w.fmt is None else widened(x, cert.t.attention_rounding(plain))


def fixed_form(k: dict, slots, tq: np.ndarray, table: Iv) -> tuple[Iv, np.ndarray, np.ndarray]:
    """The fixed keys' softmax-weighted mean of ``table`` (a head's (token, ID) table: value·W_O or the
    value) as a convex combination: an enclosed centre [C, ·], one generator per fixed key [C, S, ·]
    and a box [C, ·].

    The weights w_k = e_k/Σ_j e_j of the S fixed keys (e_k = exp(score − reference) within its
    enclosure ``k["e"]``) lie in [w⁻_k, w⁺_k], w⁻_k = e⁻_k/(e⁻_k + Σ_{j≠k} e⁺_j) and
    w⁺_k = e⁺_k/(e⁺_k + Σ_{j≠k} e⁻_j), since w_k rises with e_k and falls with every other e_j.
    With c_k ± r_k ⊇ [w⁻_k, w⁺_k], each key's row u_k = ũ_k + δ_k (ũ_k the centre of its table
    enclosure, |δ_k| ≤ ρ_k) and any reference ū, Σ_k w_k = 1 gives exactly

        Σ_k w_k·u_k = ū + Σ_k c_k·(ũ_k − ū) + Σ_k ε_k·r_k·(ũ_k − ū) + Σ_k w_k·δ_k,   |ε_k| ≤ 1,

    and |Σ_k w_k·δ_k| ≤ max_k ρ_k coordinatewise. The reference is the centre of the key with the
    largest c_k, whose generator is then 0: the other S − 1 are independent. The quotient
    Σ e_k·u_k / Σ e_k of two intervals forgets that the weights sum to 1, and its width grows
    with every weight's relative width
    (about 10^-3 wide in the float32 statement, where each score carries its rounding): kept as
    S generators along the keys' own rows, the weights' uncertainty moves the residual only inside
    their span."""
    e, index = k["e"], k["index"]
    lo = np.stack([e.lo[tq, tok, index[pid]] for tok, pid in slots], axis=1)  # [C, S]
    hi = np.stack([e.hi[tq, tok, index[pid]] for tok, pid in slots], axis=1)
    n = lo.shape[1]
    sum_hi = I.up(np.sum(hi, axis=1) * I.up_sum_factor(n))[:, None]  # ≥ Σ_j e⁺_j
    sum_lo = I.down(np.sum(lo, axis=1) / I.up_sum_factor(n))[:, None]  # ≤ Σ_j e⁻_j
    others_hi, others_lo = I.up(sum_hi - hi), np.maximum(I.down(sum_lo - lo), 0.0)
    w_lo = I.down(lo / I.up(lo + others_hi))  # fixed_mean refuses Σ e⁻ ≤ 0 first: no 0/0
    w_hi = I.up(hi / I.down(hi + others_lo))
    c = w_lo + 0.5 * (w_hi - w_lo)
    r = I.up(np.maximum(I.up(w_hi - c), I.up(c - w_lo)))
    rows = [table[tok, pid].center_radius() for tok, pid in slots]
    u = np.stack([m for m, _ in rows], axis=1)  # [C, S, ·]
    rho = np.max([rad for _, rad in rows], axis=0)  # [C, ·]
    ref = u[np.arange(len(u)), np.argmax(c, axis=1)]  # the heaviest key's row: its generator is 0
    D = Iv.exact(u) - Iv.exact(ref[:, None])
    centre = Iv.exact(ref) + (Iv.exact(c[..., None]) * D).sum(axis=1)
    G, G_err = (Iv.exact(r[..., None]) * D).center_radius()
    return centre, G, I.up_add(rho, A.sum_up(G_err, 1))


def widened(x: A.Affine, radius: np.ndarray | None) -> A.Affine:
    """The form ``x`` plus any vector of magnitude ≤ ``radius`` (a float rounding of every point of
    it, trained_float): added to the box and to the hull."""
    if radius is None:
        return x
    return replace(x, b=I.up_add(x.b, radius), hull=None if x.hull is None else I.up_add(x.hull, radius))


def _ln2(w: OneLayer, x: A.Affine) -> A.Affine:
    """The form of LN2(x); with a float format, plus the kernel's rounding (F4)."""
    y = A.apply_ln(x, w.ln2, LN_EPS)
    if w.fmt is None or w.ln2 is None:
        return y
    return widened(y, w.fmt.layer_norm(x.box(), *w.ln2, LN_EPS))


def free_values(value: Iv, free: list[tuple[np.ndarray, int]], W_O: np.ndarray) -> dict:
    """An enclosure of the convex hull of the free keys' value vectors v_k ([d_head], one per (token,
    ID) in ``free``) aligned with their principal axes: ``v_k = centre + Σ_i τ_i·h_i·b_i`` with
    |τ_i| ≤ 1 (b_i the right singular vectors of the centred points, h_i the half-ranges of their
    coordinates; whatever the float basis misses lies in the box part of ``centre``), so every convex
    combination v_free has the same form. Returns ``centre`` (Iv [d_head]), ``gens`` = h_i·b_i·W_O
    [r, d] in floats and ``gens_err`` [d] ≥ Σ_i |exact − float|."""
    pts = Iv(np.concatenate([value.lo[toks, pid] for toks, pid in free]),
             np.concatenate([value.hi[toks, pid] for toks, pid in free]))
    mid, _ = pts.center_radius()
    mean = mid.mean(axis=0)
    _, sv, Vt = np.linalg.svd(mid - mean, full_matrices=False)
    B = Vt[sv > 1e-9 * sv.max()] if sv.max() > 0 else Vt[:0]
    t = (mid - mean) @ B.T  # any floats: the exact remainder is enclosed below
    tmin, tmax = t.min(axis=0), t.max(axis=0)
    tc = tmin + 0.5 * (tmax - tmin)
    h = I.up(np.maximum(I.up(tmax - tc), I.up(tc - tmin)))
    e = pts - mean - I.matmul(t, B)  # v_k − mean − t_k·B
    centre = Iv(e.lo.min(axis=0), e.hi.max(axis=0)) + mean + I.matmul(tc[None], B)[0]
    hbw = I.matmul(Iv.exact(h[:, None]) * Iv.exact(B), W_O)
    gm, gr = hbw.center_radius()
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(h > 0, (t - tc) / h, 0.0)  # within 2.0001u of the exact (t_k − tc)/h
    vertices = np.concatenate([np.concatenate([[-1.0], np.zeros(len(h))])[None],
                               np.unique(np.concatenate([np.ones((len(tau), 1)), tau], axis=1), axis=0)])
    return {"centre": centre, "gens": gm, "gens_err": A.sum_up(gr, 0), "vertices": vertices}


def tail_forms(w: OneLayer, x: A.Affine, y: A.Affine | None = None) -> list[tuple[str, A.Affine]]:
    """The forms after LN2 (``y`` when already known), the MLP's hidden units and the MLP (residual
    added), by name."""
    y = _ln2(w, x) if y is None else y
    if w.W_in is None:
        return [("ln2", y), ("mlp", x)]
    f = w.fmt
    pre = widened(A.linear(y, w.W_in, w.b_in), f and f.dot(y.box().mag(), w.W_in, w.b_in))
    hidden = widened(A.activation(pre, w.act), f and f.activation(pre.box(), w.act))
    out = widened(A.linear_out(hidden, w.W_out, w.b_out), f and f.dot(hidden.box().mag(), w.W_out, w.b_out))
    post = A.add(x, out)
    return [("ln2", y), ("hidden", hidden), ("mlp", widened(post, f and f.rounded(post.box().mag())))]


def affine_differences(cert, heads: list[dict], slots, tq: np.ndarray, resid: Iv, target: np.ndarray) -> Iv:
    """Enclosure of logit[target] − logit[o] [C, V] through the affine tail."""
    w: OneLayer = cert.w
    out = Iv(np.full((len(tq), w.W_U.shape[1]), -np.inf), np.full((len(tq), w.W_U.shape[1]), np.inf))
    share = np.max([cert.fixed_mean(k, slots, tq)[1] for k in heads], axis=0)
    keep = np.flatnonzero(share <= SHARE_GIVE_UP)
    if not len(keep):
        return out
    x = attention_form(cert, heads, [(tok[keep], pid) for tok, pid in slots], tq[keep], resid[keep])
    y = _ln2(w, x)
    near = np.mean(y.radius(), axis=1) <= GIVE_UP
    keep = keep[near]
    if len(keep):
        x, y = x.rows(near), y.rows(near)
        d = differences(w, tail_forms(w, x, y)[-1][1], target[keep])
        out.lo[keep], out.hi[keep] = d.lo, d.hi
    return out


def differences(w: OneLayer, post: A.Affine, target: np.ndarray) -> Iv:
    """logit[target] − logit[o] [C, V] for the residual ``post`` after the MLP: the final LN and the
    unembedding (:func:`lengthgen.proof.affine.differences`); with a float format, the final LN's
    rounding (F4) on its output, then both float logits' (F1)."""
    if w.fmt is None:
        return A.differences(post, w.ln_final, LN_EPS, w.W_U, w.b_U, target)
    box = post.box()
    ln_err = None if w.ln_final is None else w.fmt.layer_norm(box, *w.ln_final, LN_EPS)
    d = A.differences(post, w.ln_final, LN_EPS, w.W_U, w.b_U, target, ln_err)
    return w.round_logits(d, w.norm("ln_final", box).mag(), target)
