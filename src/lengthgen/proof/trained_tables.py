"""A 1-layer trained transformer read as exact float64 numbers, and its (token, ID) tables in intervals.

With one layer, the residual at a position before attention is ``W_E[t] + W_pos[p]``: it depends only
on the pair (token t, position ID p). So LN1 of it, and the query, key and value vectors, form finite
tables over (token, ID) that are enclosed once, in interval arithmetic (docs/certificate.md,
"Trained models"). Every later step of the certificate gathers rows of these tables.

Covered: :class:`lengthgen.Transformer` with one causal layer, learned positions, no Hard-ALiBi
windows, any number of heads, LayerNorm or no normalization, a GELU or ReLU MLP or none, scaled or
unscaled q·k. Anything else raises :class:`~lengthgen.proof.weights.StructureError`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Transformer
from . import interval as I
from .interval import Iv
from .layers import affine_exact, gelu, layer_norm, recip, rsqrt
from .weights import StructureError, require_finite, to_float64

LN_EPS = 1e-5  # lengthgen.model.LayerNorm


@dataclass
class OneLayer:
    """float64 copies of every parameter of a 1-layer model (``W_Q`` [heads, d, d_head], ...);
    ``ln1``/``ln2``/``ln_final`` are (w, b) pairs or ``None``; ``W_in`` is ``None`` without an MLP."""

    W_E: np.ndarray
    W_pos: np.ndarray
    W_Q: np.ndarray
    b_Q: np.ndarray
    W_K: np.ndarray
    b_K: np.ndarray
    W_V: np.ndarray
    b_V: np.ndarray
    W_O: np.ndarray
    b_O: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray] | None
    ln2: tuple[np.ndarray, np.ndarray] | None
    ln_final: tuple[np.ndarray, np.ndarray] | None
    W_in: np.ndarray | None
    b_in: np.ndarray | None
    W_out: np.ndarray | None
    b_out: np.ndarray | None
    act: str
    W_U: np.ndarray
    b_U: np.ndarray
    scale: Iv  # the exact multiplier of q·k: 1/sqrt(d_head) or 1/attn_scale

    @classmethod
    def from_model(cls, model: Transformer) -> "OneLayer":
        cfg = model.cfg
        if cfg.n_layers != 1:
            raise StructureError(f"the trained-model certificate covers 1-layer models; this one has {cfg.n_layers}")
        if cfg.positional != "learned" or cfg.attn_windows is not None or not cfg.causal:
            raise StructureError("the trained-model certificate covers causal models with learned positions and "
                                 "no Hard-ALiBi windows")
        f = to_float64
        blk = model.blocks[0]
        a = blk.attn
        norm = (lambda m: (f(m.w), f(m.b))) if cfg.normalization == "LN" else (lambda m: None)
        mlp = blk.mlp
        d_scale = float(cfg.d_head) if cfg.attn_scale is None else float(cfg.attn_scale)
        if not d_scale > 0:
            raise StructureError(f"attn_scale must be positive, got {cfg.attn_scale}")
        exact = Iv.exact(np.array([d_scale]))
        scale = rsqrt(exact) if cfg.attn_scale is None else recip(exact)
        return require_finite(cls(
            f(model.embed.W_E), f(model.pos_embed.W_pos), f(a.W_Q), f(a.b_Q), f(a.W_K), f(a.b_K),
            f(a.W_V), f(a.b_V), f(a.W_O), f(a.b_O), norm(blk.ln1), norm(blk.ln2), norm(model.ln_final),
            *(f(p) for p in (mlp.W_in, mlp.b_in, mlp.W_out, mlp.b_out)) if mlp is not None else (None,) * 4,
            cfg.act_fn, f(model.unembed.W_U), f(model.unembed.b_U), scale))

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_E.shape[1]

    def norm(self, which: str, x: Iv) -> Iv:
        """LayerNorm ``which`` (ln1, ln2, ln_final) of ``x``, or ``x`` itself without normalization."""
        params = getattr(self, which)
        return x if params is None else layer_norm(x, params[0], params[1], LN_EPS)

    def mlp(self, x: Iv) -> Iv:
        """MLP output (without the residual) of normalized inputs ``x`` [rows, d]."""
        if self.W_in is None:
            return Iv.exact(np.zeros(x.shape))
        pre = affine_exact(x, self.W_in, self.b_in)
        post = gelu(pre) if self.act == "gelu" else pre.relu()
        return affine_exact(post, self.W_out, self.b_out)

    def tail(self, resid_mid: Iv) -> Iv:
        """Enclosure of the final normalized residual for residuals after attention ``[rows, d]``."""
        post = resid_mid + self.mlp(self.norm("ln2", resid_mid))
        return self.norm("ln_final", post)


@dataclass
class Tables:
    """Per head h, enclosures over every (token, ID): ``query[h]`` [V, n_ctx, d_head] (already times
    the score scale), ``key[h]`` [V, n_ctx, d_head], ``value[h]`` [V, n_ctx, d_head], ``out[h]``
    [V, n_ctx, d_model] = value·W_O[h]; and the residual ``resid[V, n_ctx, d]`` = W_E[t] + W_pos[p]."""

    resid: Iv
    query: list[Iv]
    key: list[Iv]
    value: list[Iv]
    out: list[Iv]

    @classmethod
    def build(cls, w: OneLayer) -> "Tables":
        V, P, d = w.W_E.shape[0], w.W_pos.shape[0], w.d_model
        resid = Iv.exact(w.W_E[:, None, :]) + Iv.exact(w.W_pos[None, :, :])
        flat = w.norm("ln1", Iv(resid.lo.reshape(-1, d), resid.hi.reshape(-1, d)))
        shape = lambda x: Iv(x.lo.reshape(V, P, -1), x.hi.reshape(V, P, -1))  # noqa: E731
        query, key, value, out = [], [], [], []
        for h in range(w.n_heads):
            query.append(shape(I.affine(flat, w.W_Q[h], w.b_Q[h]) * w.scale))
            key.append(shape(I.affine(flat, w.W_K[h], w.b_K[h])))
            v = I.affine(flat, w.W_V[h], w.b_V[h])
            value.append(shape(v))
            out.append(shape(I.matmul(v, w.W_O[h])))
        return cls(resid, query, key, value, out)

    def scores(self, h: int, query_id: int) -> Iv:
        """Scores [query token, key token, key ID] of head h for queries at ``query_id``."""
        q = self.query[h][:, query_id]  # [V, e]
        k = self.key[h]
        V, P, e = k.shape
        kt = Iv(k.lo.reshape(V * P, e).T, k.hi.reshape(V * P, e).T)
        s = I.matmul(q, kt)
        return Iv(s.lo.reshape(-1, V, P), s.hi.reshape(-1, V, P))
