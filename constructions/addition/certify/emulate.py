"""A software emulation of the certificate's rounding model, independent of torch's kernels.

The float term of the certificate (:mod:`lengthgen.proof.rounding`, (F1)–(F3))
allows any kernel whose every operation is an IEEE rounding of its exact result. This module runs
*one* such evaluation deterministically, in numpy float64 with an explicit rounding to the format
at each point the model names (docs/certificate.md, "Soundness check"):

    x = ⌊W_E[tok] + W_pos[p]⌉; q, k, v = ⌊x W + b⌉; s = ⌊⌊q·k⌉·scale⌉; e = ⌊exp(⌊s − max s⌉)⌉;
    Z = ⌊Σ e⌉; w = ⌊e / Z⌉; z = ⌊Σ w v⌉; resid = ⌊x + ⌊z W_O⌉ + b_O⌉;
    pre = ⌊resid W_in + b_in⌉; out = ⌊resid + ⌊relu(pre) W_out⌉ + b_out⌉; logits = ⌊out W_U + b_U⌉

where ⌊·⌉ rounds to the format (round to nearest even) and every dot product is accumulated in
float64 first (a kernel that accumulates in a wider type, as CPU bfloat16/float16 matmuls do).
The certificate is sound only if every length it certifies is exact here — with a margin, by
:func:`lengthgen.decode.decided_argmax` — on every input; ``tests/test_certify_precision.py`` and
the precision map check that on adversarial inputs. float64 itself is evaluated as is.
"""
from __future__ import annotations

import numpy as np
import torch

from lengthgen.decode import decided_argmax
from lengthgen.tasks import ADDITION

from ..model import START_ID, build_model

SIGNIFICAND_BITS = {"bfloat16": 8, "float16": 11, "float32": 24, "float64": 53}
MIN_EXPONENT = {"bfloat16": -126, "float16": -14, "float32": -126, "float64": -1022}
MAX_FINITE = {"bfloat16": 3.3895313892515355e38, "float16": 65504.0, "float32": 3.4028234663852886e38}
QUERY_BLOCK = 256


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` (nearest, ties to even; subnormals by the fixed spacing
    below the smallest normal); beyond the largest finite value it gives ±inf."""
    if dtype == "float64":
        return x
    p, emin = SIGNIFICAND_BITS[dtype], MIN_EXPONENT[dtype]
    _, e = np.frexp(x)  # x = m·2^e with 0.5 ≤ |m| < 1, i.e. the leading bit has weight 2^(e−1)
    spacing = np.ldexp(1.0, np.maximum(e - 1, emin) - (p - 1))
    r = np.rint(x / spacing) * spacing  # division and product by a power of two are exact
    return np.where(np.abs(r) > MAX_FINITE[dtype], np.copysign(np.inf, x), r)


def _dot(x: np.ndarray, W: np.ndarray, dtype: str, b: np.ndarray | None = None) -> np.ndarray:
    out = x @ W if b is None else x @ W + b
    return round_to(out, dtype)


def emulated_forward(model, tokens: np.ndarray, pos_ids: np.ndarray, first_query: int) -> dict[str, np.ndarray]:
    """``resid_mid`` ``[batch, T − first_query, d]`` and ``logits`` ``[batch, T − first_query, vocab]`` of a
    1-layer model under the emulated rounding (queries from ``first_query`` on)."""
    dtype = model.cfg.dtype
    f = lambda t: t.detach().to(torch.float64).numpy()
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    x = round_to(f(model.embed.W_E)[tokens] + f(model.pos_embed.W_pos)[pos_ids], dtype)
    xq = x[:, first_query:]
    z = []
    for h in range(model.cfg.n_heads):
        q = _dot(xq, f(attn.W_Q[h]), dtype, f(attn.b_Q[h]))
        k = _dot(x, f(attn.W_K[h]), dtype, f(attn.b_K[h]))
        v = _dot(x, f(attn.W_V[h]), dtype, f(attn.b_V[h]))
        zh = np.empty(q.shape[:2] + (v.shape[-1],))
        for r0 in range(0, q.shape[1], QUERY_BLOCK):
            r1 = min(q.shape[1], r0 + QUERY_BLOCK)
            s = round_to(round_to(np.einsum("bqe,bke->bqk", q[:, r0:r1], k), dtype) * model.cfg.score_scale, dtype)
            visible = np.arange(k.shape[1])[None, :] <= np.arange(first_query + r0, first_query + r1)[:, None]
            s = np.where(visible[None], s, -np.inf)
            e = round_to(np.exp(round_to(s - s.max(-1, keepdims=True), dtype)), dtype)
            w = round_to(e / round_to(e.sum(-1, keepdims=True), dtype), dtype)
            zh[:, r0:r1] = round_to(np.einsum("bqk,bke->bqe", w, v), dtype)
        z.append(_dot(zh, f(attn.W_O[h]), dtype))
    resid = round_to(xq + round_to(sum(z), dtype) + f(attn.b_O), dtype)
    pre = _dot(resid, f(mlp.W_in), dtype, f(mlp.b_in))
    out = round_to(resid + _dot(np.maximum(pre, 0.0), f(mlp.W_out), dtype) + f(mlp.b_out), dtype)
    return {"resid_mid": resid, "logits": _dot(out, f(model.unembed.W_U), dtype, f(model.unembed.b_U))}


def emulated_exact(n: int, d_model: int, dtype: str, pairs: list[tuple[str, str]]) -> list[bool]:
    """Per operand pair: is every answer token (and the final EOS) the decided argmax of the
    emulated ``build_model(n_digits=n, d_model=d_model, dtype=dtype)``?"""
    model, _ = build_model(n_digits=n, d_model=d_model, dtype=dtype)
    insts = [ADDITION.instance(a, b, start=START_ID) for a, b in pairs]
    toks, pos = np.stack([i.tokens for i in insts]), np.stack([i.pos_ids for i in insts])
    p = insts[0].prompt_len
    logits = emulated_forward(model, toks[:, :-1], pos[:, :-1], p - 1)["logits"]
    return [bool(row) for row in (decided_argmax(torch.from_numpy(logits)).numpy() == toks[:, p:]).all(1)]
