"""The second pass of the trained-model certificate: the residual after attention as an affine form.

Per head h of a local configuration (docs/certificate.md, "Trained models"), the head output is
exactly ``o_fixed + λ·(v_free − v_fixed)·W_O[h]``: v_fixed the fixed keys' softmax-weighted mean
value, v_free the free keys' (inside the box B_h of every value a free key can carry), λ ∈ [0, λ⁺]
their share. So ``s = v_free − v_fixed`` lies in ``m ± R`` (m, R: centre and radius of
``B_h − v_fixed``) and, with ``λ = (λ⁺/2)(1 + τ)``, τ ∈ [−1, 1],

    λ·s·W_O = (λ⁺/2)·m·W_O + τ·(λ⁺/2)·m·W_O + Σ_i ε_i·λ⁺R_i·W_O[h][i]     (|ε_i| = |λ·η_i/λ⁺| ≤ 1)

an affine form with 1 + d_head generators per head that lie in the span of W_O[h]: far tighter than
the d_model-dimensional box of the plain pass. :func:`affine_differences` pushes it through LN2,
the MLP, the final LN and the unembedding with :mod:`lengthgen.proof.affine`.
"""
from __future__ import annotations

import numpy as np

from . import affine as A
from . import interval as I
from .interval import Iv
from .trained_tables import LN_EPS, OneLayer

CHUNK = 64  # configurations per affine batch (the MLP's generators: CHUNK × k × d_mlp floats)
GIVE_UP = 0.1  # rows whose LN2 output is wider (mean radius) are left unproven: time only, never soundness


def attention_form(cert, heads: list[dict], slots, tq: np.ndarray, resid: Iv) -> A.Affine:
    """The residual after attention, ``resid + b_O + Σ_h head_h``, as an affine form [C, d]."""
    w: OneLayer = cert.w
    centre = resid + w.b_O
    gens, box = [], np.zeros(resid.shape)
    plain = centre
    for h, k in enumerate(heads):
        plain = plain + cert._head(k, slots, tq)[0]
        fixed, lam = cert.fixed_mean(k, slots, tq, "eo")
        centre = centre + fixed
        if not np.any(lam):
            continue
        fixed_v, _ = cert.fixed_mean(k, slots, tq, "ev")
        bv = k["box_v"]
        m, R = Iv(I.down(bv.lo - fixed_v.hi), I.up(bv.hi - fixed_v.lo)).center_radius()
        g = I.matmul(Iv.exact(m), w.W_O[h]) * (Iv.exact(lam) * 0.5)[:, None]  # ∋ (λ⁺/2)·m·W_O
        gm, gr = g.center_radius()
        centre = centre + Iv.exact(gm)
        rows = I.up_mul(lam[:, None], R)[:, :, None] * w.W_O[h][None]  # λ⁺R_i·W_O[h][i], one rounding each
        gens += [gm[:, None, :], rows]
        box = I.up_add(box, I.up_mul(2.0, gr), A.add_error(rows, 1))
    G = np.concatenate(gens, axis=1) if gens else np.zeros((len(tq), 0, resid.shape[-1]))
    x = A.from_iv(centre, G, box)
    x.hull = I.up(np.maximum(I.up(plain.hi - x.c), I.up(x.c - plain.lo)))  # the plain pass's box
    return x


def tail_forms(w: OneLayer, x: A.Affine, y: A.Affine | None = None) -> list[tuple[str, A.Affine]]:
    """The forms after LN2 (``y`` when already known), the MLP's hidden units and the MLP (residual
    added), by name."""
    y = A.apply_ln(x, w.ln2, LN_EPS) if y is None else y
    if w.W_in is None:
        return [("ln2", y), ("mlp", x)]
    pre = A.linear(y, w.W_in, w.b_in)
    hidden = A.activation(pre, w.act)
    return [("ln2", y), ("hidden", hidden), ("mlp", A.add(x, A.linear_out(hidden, w.W_out, w.b_out)))]


def affine_differences(cert, heads: list[dict], slots, tq: np.ndarray, resid: Iv, target: np.ndarray) -> Iv:
    """Enclosure of logit[target] − logit[o] [C, V] through the affine tail."""
    w: OneLayer = cert.w
    x = attention_form(cert, heads, slots, tq, resid)
    y = A.apply_ln(x, w.ln2, LN_EPS)
    keep = np.flatnonzero(np.mean(y.radius(), axis=1) <= GIVE_UP)
    out = Iv(np.full((len(tq), w.W_U.shape[1]), -np.inf), np.full((len(tq), w.W_U.shape[1]), np.inf))
    if len(keep):
        x, y = x.rows(keep), y.rows(keep)
        post = tail_forms(w, x, y)[-1][1]
        d = A.differences(post, w.ln_final, LN_EPS, w.W_U, w.b_U, target[keep])
        out.lo[keep], out.hi[keep] = d.lo, d.hi
    return out
