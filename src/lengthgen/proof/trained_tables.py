"""A 1-layer trained transformer read as exact float64 numbers, and its (token, ID) tables in intervals.

With one layer, the residual at a position before attention is ``W_E[t] + W_pos[p]``: it depends only
on the pair (token t, position ID p). So LN1 of it, and the query, key and value vectors, form finite
tables over (token, ID) that are enclosed once, in interval arithmetic (docs/certificate.md,
"Trained models"). Every later step of the certificate gathers rows of these tables. With a float
format (:class:`~lengthgen.proof.trained_float.FloatFormat`, the float32 statement) every step is
widened by its rounding, so that the tables, and :meth:`OneLayer.tail`, enclose the float values.

Covered: :class:`lengthgen.Transformer` with one causal layer, learned positions, no Hard-ALiBi
windows, any number of heads, LayerNorm or no normalization, a GELU or ReLU MLP or none, scaled or
unscaled q·k, and log-length scaled q·k (``attn_log_length``) in real arithmetic. Anything else raises :class:`~lengthgen.proof.weights.StructureError`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Transformer
from . import interval as I
from .interval import Iv
from .layers import affine_exact, gelu, layer_norm, recip, rsqrt
from .trained_float import FloatFormat, widen
from .weights import StructureError, require_finite, to_float64

LN_EPS = 1e-5  # lengthgen.model.LayerNorm
#: relative room around ln t in :func:`log_length_factor`: the model's factor is ln t computed in
#: float64 and rounded once to its dtype (lengthgen.attention.log_key_counts), within
#: 2^-52 + 2^-24 relative of ln t; 2^-22 covers it and the exact ln t alike
LOG_FACTOR_SLACK = 2.0 ** -22


def log_length_factor(keys_seen: int) -> Iv:
    """Enclosure of the factor a log-length scaled model (``attn_log_length``) puts on the queries of
    a position that sees ``keys_seen`` keys: every number within :data:`LOG_FACTOR_SLACK` relative of
    ln t, so the statement holds for the exact ln t and for the model's rounded one."""
    if keys_seen < 1:
        raise ValueError(f"a query sees at least one key (itself), not {keys_seen}")
    f = I.log(Iv.exact(np.array([float(keys_seen)])))
    return Iv(I.down(f.lo * (1 - LOG_FACTOR_SLACK)), I.up(f.hi * (1 + LOG_FACTOR_SLACK)))


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
    log_length: bool = False  # queries also times ln(keys seen) (TransformerConfig.attn_log_length)
    # the float format of the forward pass the statement is about (lengthgen.proof.trained_float);
    # None: the exact real-number function of the weights
    fmt: FloatFormat | None = None

    @classmethod
    def from_model(cls, model: Transformer, fmt: FloatFormat | None = None) -> "OneLayer":
        cfg = model.cfg
        if cfg.n_layers != 1:
            raise StructureError(f"the trained-model certificate covers 1-layer models; this one has {cfg.n_layers}")
        if cfg.positional != "learned" or cfg.attn_windows is not None or not cfg.causal:
            raise StructureError("the trained-model certificate covers causal models with learned positions and "
                                 "no Hard-ALiBi windows")
        if cfg.attn_log_length and fmt is not None:
            raise StructureError("the float statement does not cover log-length scaled attention (attn_log_length) "
                                 "yet; certify this model in real arithmetic")
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
            cfg.act_fn, f(model.unembed.W_U), f(model.unembed.b_U), scale, cfg.attn_log_length, fmt))

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_E.shape[1]

    def norm(self, which: str, x: Iv) -> Iv:
        """LayerNorm ``which`` (ln1, ln2, ln_final) of ``x``, or ``x`` itself without normalization;
        with a float format, widened by the kernel's rounding (F4)."""
        params = getattr(self, which)
        if params is None:
            return x
        out = layer_norm(x, params[0], params[1], LN_EPS)
        return out if self.fmt is None else widen(out, self.fmt.layer_norm(x, params[0], params[1], LN_EPS))

    def linear(self, x: Iv, W: np.ndarray, b: np.ndarray | None, product=affine_exact) -> Iv:
        """``x @ W + b`` for exact W (enclosed by ``product``); with a float format, widened by its
        rounding (F1)."""
        out = product(x, W, b)
        return out if self.fmt is None else widen(out, self.fmt.dot(x.mag(), W, b))

    def summed(self, x: Iv) -> Iv:
        """A residual sum ``x`` (already enclosed exactly), widened by its one rounding (F1)."""
        return x if self.fmt is None else widen(x, self.fmt.rounded(x.mag()))

    def activation(self, pre: Iv) -> Iv:
        post = gelu(pre) if self.act == "gelu" else pre.relu()
        return post if self.fmt is None else widen(post, self.fmt.activation(pre, self.act))

    def mlp(self, x: Iv) -> Iv:
        """MLP output (without the residual) of normalized inputs ``x`` [rows, d]."""
        if self.W_in is None:
            return Iv.exact(np.zeros(x.shape))
        return self.linear(self.activation(self.linear(x, self.W_in, self.b_in)), self.W_out, self.b_out)

    def round_logits(self, diff: Iv, x_mag: np.ndarray, target: np.ndarray) -> Iv:
        """``diff`` (logit[target] − logit[o] [rows, V], exact in the float inputs ``|x| ≤ x_mag`` of
        the unembedding) widened by the rounding of both float logits (F1); the decision compares
        the two float logits exactly (:func:`lengthgen.decode.decided_argmax`)."""
        if self.fmt is None:
            return diff
        err = self.fmt.dot(x_mag, self.W_U, self.b_U)
        both = I.up_add(err[np.arange(len(target)), target][:, None], err)
        return widen(diff, both)

    def tail(self, resid_mid: Iv) -> Iv:
        """Enclosure of the final normalized residual for residuals after attention ``[rows, d]``."""
        post = self.summed(resid_mid + self.mlp(self.norm("ln2", resid_mid)))
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
    fmt: FloatFormat | None = None
    n_keys: int = 1  # with a float format: at most this many keys per query (the softmax's sums)
    attn_error: np.ndarray | None = None  # with a float format: the float part of the attention output [d]
    log_length: bool = False  # OneLayer.log_length: scores need the query's count of keys

    @classmethod
    def build(cls, w: OneLayer, n_keys: int = 1) -> "Tables":
        """The tables of ``w``; with its float format, of the float values (each step widened by its
        rounding), for queries that see at most ``n_keys`` keys."""
        V, P, d = w.W_E.shape[0], w.W_pos.shape[0], w.d_model
        resid = w.summed(Iv.exact(w.W_E[:, None, :]) + Iv.exact(w.W_pos[None, :, :]))
        flat = w.norm("ln1", Iv(resid.lo.reshape(-1, d), resid.hi.reshape(-1, d)))
        shape = lambda x: Iv(x.lo.reshape(V, P, -1), x.hi.reshape(V, P, -1))  # noqa: E731
        query, key, value, out = [], [], [], []
        for h in range(w.n_heads):
            query.append(shape(w.linear(flat, w.W_Q[h], w.b_Q[h], I.affine) * w.scale))
            key.append(shape(w.linear(flat, w.W_K[h], w.b_K[h], I.affine)))
            v = w.linear(flat, w.W_V[h], w.b_V[h], I.affine)
            value.append(shape(v))
            out.append(shape(I.matmul(v, w.W_O[h])))
        tables = cls(resid, query, key, value, out, w.fmt, n_keys, log_length=w.log_length)
        if w.fmt is not None:
            tables.attn_error = tables.attention_error(w)
        return tables

    def attention_error(self, w: OneLayer) -> np.ndarray:
        """The float part of ``Σ_h z_h·W_O[h] + b_O`` [d]: each head's ``z`` within
        :meth:`FloatFormat.head_error` of the exact softmax mean that the certificate encloses
        (mapped through |W_O[h]|), and the rounding of the sum over heads and coordinates of z."""
        fmt, n = self.fmt, self.n_keys
        v_max = [v.mag().reshape(-1, v.shape[-1]).max(axis=0) for v in self.value]
        errs = [fmt.head_error(m, n) for m in v_max]
        moved = I.up_add(*[I.up_matmul_nonneg(e[None], np.abs(w.W_O[h]))[0] for h, e in enumerate(errs)])
        z_max = np.concatenate([I.up_add(m, e) for m, e in zip(v_max, errs)])[None]
        summed = fmt.dot(z_max, w.W_O.reshape(-1, w.d_model), w.b_O)[0]
        return I.up_add(moved, summed)

    def attention_rounding(self, resid_mid: Iv) -> np.ndarray:
        """With a float format: how far the float residual after attention can lie from ``resid_mid``
        (its exact enclosure in the float inputs): the attention's float part and the residual
        sum's rounding [rows, d]."""
        moved = widen(resid_mid, self.attn_error)
        return I.up_add(self.attn_error, self.fmt.rounded(moved.mag()))

    def after_attention(self, resid_mid: Iv) -> Iv:
        """``resid_mid`` widened by :meth:`attention_rounding` (itself without a float format)."""
        return resid_mid if self.fmt is None else widen(resid_mid, self.attention_rounding(resid_mid))

    def scores(self, h: int, query_id: int, keys_seen: int | None = None) -> Iv:
        """Scores [query token, key token, key ID] of head h for queries at ``query_id``; a
        log-length scaled model also needs ``keys_seen``, the keys the query sees."""
        q = self.query[h][:, query_id]  # [V, e]
        if self.log_length:
            if keys_seen is None:
                raise ValueError("a log-length scaled model's scores depend on how many keys the query sees")
            q = q * log_length_factor(keys_seen)
        k = self.key[h]
        V, P, e = k.shape
        kt = Iv(k.lo.reshape(V * P, e).T, k.hi.reshape(V * P, e).T)
        s = I.matmul(q, kt)
        if self.fmt is not None:  # (F1) the score's rounding, (F3) the softmax kernel's shift
            s = widen(s, self.fmt.score(q.mag(), kt.mag()))
            s = widen(s, self.fmt.score_shift(s.mag().max(axis=1), self.n_keys)[:, None])
        return Iv(s.lo.reshape(-1, V, P), s.hi.reshape(-1, V, P))
