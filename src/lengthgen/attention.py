"""Causal attention kernels: a dense reference path and long paths with O(N·d) memory.

All kernels share one contract. Queries cover the *last* ``Lq`` positions of a sequence whose
keys/values cover positions ``0 .. Lk-1`` (``Lq <= Lk``), so query row ``r`` sits at absolute
position ``q_offset + r`` with ``q_offset = Lk - Lq`` and may attend to keys ``j <= q_offset + r``
("lower-right" causal alignment). This is what a KV-cache decoding step, a full forward pass
(``Lq == Lk``) and a pass that only scores the answer tokens (``Lq < Lk``) all need.

``window`` is Hard-ALiBi (Jelassi et al. 2024, "Repeat After Me"; docs/turing-programs.md): a head with
window ``m`` sees only keys ``j`` with ``q - m < j <= q``; ``None`` is plain causal attention.

Shapes: ``q`` is ``[B, H, Lq, E]``, ``k`` is ``[B, H, Lk, E]``, ``v`` is ``[B, H, Lk, Ev]``.
Scores are ``scale * q·k``; the construction of Theorem 5.1 uses ``scale = 1``.

Paths
-----
``dense_attention``  materializes the ``Lq × Lk`` pattern; the reference, and the only path that
                     can return the attention pattern.
``long_attention``   never builds an ``Lq × Lk`` matrix:
    * CPU, no window: torch's fused flash kernel, called on the fully visible prefix and on the
      causal diagonal block separately and merged exactly through their log-sum-exps;
    * CUDA, no window, float16/bfloat16/float32: ``scaled_dot_product_attention`` with a
      lower-right causal bias (memory-efficient/flash kernels only, head dim zero-padded to a
      multiple of 8 — zero columns change neither scores nor outputs);
    * otherwise (float64 on CUDA, Hard-ALiBi windows, torch builds without the fused op):
      ``chunked_attention``, an online-softmax (flash-attention style) loop in plain torch ops
      (on CUDA in blocks of 4096 queries × 32768 keys, so a 10^6-digit pass takes few Python steps).
All paths agree with the dense path up to float rounding (tested in tests/test_attention.py).

The CPU kernel is torch's private ``aten._scaled_dot_product_flash_attention_for_cpu`` (it
returns the log-sum-exp the merge needs; the public ``scaled_dot_product_attention`` does not).
It exists from torch 2.2 on, the CUDA path's ``torch.nn.attention`` API from 2.3 (the floor in
pyproject.toml). A private op may vanish or change in a later torch: when it is missing,
:func:`cpu_flash_kernel` returns None and the long path falls back to ``chunked_attention``.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

__all__ = ["dense_attention", "dense_scores", "long_attention", "chunked_attention", "causal_mask", "report_progress"]

#: queries per fused-kernel call on the CPU long path (bounds per-call memory; drives progress)
QUERY_CHUNK = 16384
CPU_FLASH_OP = "_scaled_dot_product_flash_attention_for_cpu"
_progress: ContextVar[Callable[[int, int], None] | None] = ContextVar("attention_progress", default=None)


@contextmanager
def report_progress(callback: Callable[[int, int], None]) -> Iterator[None]:
    """Within this block, long-path kernels call ``callback(rows_done, rows_total)`` as query
    chunks finish (used for progress bars on 10^5-token passes)."""
    token = _progress.set(callback)
    try:
        yield
    finally:
        _progress.reset(token)


def visibility_mask(
    q_from: int, q_to: int, k_from: int, k_to: int, window: int | None, device: torch.device | str | None,
    causal: bool = True,
) -> torch.Tensor:
    """Boolean ``[q_to - q_from, k_to - k_from]``: True where the query at absolute position q may
    see the key at position j (``j <= q`` when causal, and ``j > q - window`` under Hard-ALiBi)."""
    q_pos = torch.arange(q_from, q_to, device=device).unsqueeze(1)
    k_pos = torch.arange(k_from, k_to, device=device).unsqueeze(0)
    allowed = k_pos <= q_pos if causal else torch.ones_like(k_pos <= q_pos)
    if window is not None:
        allowed &= k_pos > q_pos - window
    return allowed


def causal_mask(
    lq: int, lk: int, window: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean ``[Lq, Lk]`` mask for queries at the last ``Lq`` of ``Lk`` positions."""
    return visibility_mask(lk - lq, lk, 0, lk, window, device)


def log_key_counts(n_queries: int, n_keys: int, causal: bool, like: torch.Tensor,
                   filled: torch.Tensor | None = None) -> torch.Tensor:
    """``ln t`` for each query row, shape ``[Lq, 1]`` in ``like``'s dtype and device: ``t`` is the
    number of keys the query sees (``q_offset + r + 1`` causal, ``Lk`` non-causal; with a static
    KV cache, ``filled + 1`` for its single query). Multiplying the queries by it is log-length
    scaled attention (Chiang & Cholak 2022, "Overcoming a Theoretical Limitation of
    Self-Attention"; Nakanishi 2025's Scalable-Softmax without its learned factor): the gap a
    head keeps between its chosen keys and the others grows with ln t, so the share the many
    other keys of a long input can take does not. Computed in float64, then rounded once."""
    if filled is not None:
        t = (filled.to(torch.float64) + 1).reshape(1)
    elif causal:
        t = torch.arange(n_keys - n_queries + 1, n_keys + 1, dtype=torch.float64, device=like.device)
    else:
        t = torch.full((n_queries,), float(n_keys), dtype=torch.float64, device=like.device)
    return torch.log(t).to(like.dtype)[:, None]


def dense_scores(
    q: torch.Tensor, k: torch.Tensor, scale: float, window: int | None = None, causal: bool = True,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """``scale * q·k`` as a ``[B, H, Lq, Lk]`` matrix, ``-inf`` where a query may not look.
    ``causal=False``: every query sees every key (no mask, no window). ``allowed`` (boolean,
    broadcast to ``[Lq, Lk]``) replaces the mask worked out from the shapes: a decoding step over
    a fixed-size key buffer, only part of which is written (``StaticKVCache.visible``)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if allowed is not None:
        return scores.masked_fill(~allowed, float("-inf"))
    if causal and (q.shape[-2] > 1 or window is not None):  # one query (a decoding step) sees every key
        allowed = causal_mask(q.shape[-2], k.shape[-2], window, q.device)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, window: int | None = None,
    causal: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Explicit softmax. Returns ``(output, scores, pattern)``; masked scores are ``-inf``
    (:func:`dense_scores`)."""
    scores = dense_scores(q, k, scale, window, causal)
    pattern = torch.softmax(scores, dim=-1)
    return torch.matmul(pattern, v), scores, pattern


def chunked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: int | None = None,
    query_block: int = 512,
    key_block: int = 8192,
    causal: bool = True,
) -> torch.Tensor:
    """Online-softmax attention over key blocks (Milakov & Gimelshein 2018; FlashAttention).

    Memory is ``O(query_block · key_block)`` per head on top of the inputs. Key blocks that a
    query block cannot see (beyond the causal diagonal, or before the Hard-ALiBi window) are
    skipped, so work is proportional to the visible part of the score matrix.
    """
    lq, lk = q.shape[-2], k.shape[-2]
    offset = lk - lq
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for r0 in range(0, lq, query_block):
        r1 = min(lq, r0 + query_block)
        first_q, last_q = offset + r0, offset + r1 - 1
        lo = 0 if window is None else max(0, first_q - window + 1)
        q_blk = q[..., r0:r1, :] * scale
        row_max = torch.full((*q_blk.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
        row_sum = torch.zeros_like(row_max)
        acc = torch.zeros(*q_blk.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        k_end = last_q + 1 if causal else lk
        for k0 in range(lo - lo % key_block, k_end, key_block):
            k1 = min(k_end, k0 + key_block)
            s = torch.matmul(q_blk, k[..., k0:k1, :].transpose(-1, -2))
            needs_mask = causal and (k1 - 1 > first_q or (window is not None and k0 <= last_q - window))
            if needs_mask:
                s = s.masked_fill(~visibility_mask(first_q, last_q + 1, k0, k1, window, q.device), float("-inf"))
            new_max = torch.maximum(row_max, s.amax(dim=-1, keepdim=True))
            # rows that have seen no visible key yet keep max -inf; exp(-inf - -inf) would be nan
            safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            p = torch.exp(s - safe_max)
            rescale = torch.exp(row_max - safe_max)
            row_sum = row_sum * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + torch.matmul(p, v[..., k0:k1, :])
            row_max = new_max
        out[..., r0:r1, :] = acc / row_sum
    return out


def cpu_flash_kernel() -> Callable | None:
    """torch's fused CPU flash-attention op (returns output and log-sum-exp), or None when this
    torch build has no such op."""
    return getattr(torch.ops.aten, CPU_FLASH_OP, None)


def _cpu_long_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, kernel: Callable
) -> torch.Tensor:
    """Per query chunk: prefix (fully visible keys) + diagonal (square causal) block, both through
    the fused flash ``kernel``, merged exactly by their log-sum-exps."""

    def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = kernel(q, k, v, 0.0, causal, scale=scale)[:2]
        return out, lse

    lq, lk = q.shape[-2], k.shape[-2]
    offset = lk - lq
    ev = v.shape[-1]
    if ev != q.shape[-1]:  # the fused kernel wants one head size for q, k and v
        width = max(ev, q.shape[-1])
        q, k, v = (F.pad(t, (0, width - t.shape[-1])) for t in (q, k, v))
    out = torch.empty_like(q)
    callback = _progress.get()
    for r0 in range(0, lq, QUERY_CHUNK):
        r1 = min(lq, r0 + QUERY_CHUNK)
        d0, d1 = offset + r0, offset + r1
        qc = q[..., r0:r1, :]
        diag_out, diag_lse = flash(qc, k[..., d0:d1, :], v[..., d0:d1, :], True)
        if d0 == 0:
            out[..., r0:r1, :] = diag_out
        else:
            pre_out, pre_lse = flash(qc, k[..., :d0, :], v[..., :d0, :], False)
            top = torch.maximum(diag_lse, pre_lse).unsqueeze(-1)
            w_diag = torch.exp(diag_lse.unsqueeze(-1) - top)
            w_pre = torch.exp(pre_lse.unsqueeze(-1) - top)
            out[..., r0:r1, :] = (diag_out * w_diag + pre_out * w_pre) / (w_diag + w_pre)
        if callback is not None:
            callback(r1, lq)
    return out[..., :ev]


def _cuda_long_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    ev = v.shape[-1]
    width = 8 * math.ceil(max(ev, q.shape[-1]) / 8)
    q, k, v = (F.pad(t, (0, width - t.shape[-1])) for t in (q, k, v))
    lq, lk = q.shape[-2], k.shape[-2]
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        if lq == lk:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(lq, lk), scale=scale)
    return out[..., :ev]


def _cpu_full_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, kernel: Callable
) -> torch.Tensor:
    """Non-causal attention through the fused CPU flash kernel, one query chunk at a time."""
    ev = v.shape[-1]
    width = max(ev, q.shape[-1])
    q, k, v = (F.pad(t, (0, width - t.shape[-1])) for t in (q, k, v))
    out = torch.empty_like(q)
    for r0 in range(0, q.shape[-2], QUERY_CHUNK):
        r1 = min(q.shape[-2], r0 + QUERY_CHUNK)
        out[..., r0:r1, :] = kernel(q[..., r0:r1, :], k, v, 0.0, False, scale=scale)[0]
    return out[..., :ev]


def long_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, window: int | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Exact attention with memory O(N·d): picks the fastest path that fits (module doc).
    ``causal=False`` (non-causal programs): every query sees every key; no window."""
    kernel = cpu_flash_kernel() if window is None and q.device.type == "cpu" else None
    if not causal:
        if window is not None:
            raise ValueError("a non-causal head has no Hard-ALiBi window")
        if kernel is not None:
            return _cpu_full_attention(q, k, v, scale, kernel)
        return chunked_attention(q, k, v, scale, None, causal=False)
    if kernel is not None:
        return _cpu_long_attention(q, k, v, scale, kernel)
    if window is None and q.device.type == "cuda" and q.dtype != torch.float64:
        return _cuda_long_attention(q, k, v, scale)
    if q.device.type == "cuda":  # float64 (no fused kernel): big blocks, few Python steps; ~1 GiB of scores per head
        return chunked_attention(q, k, v, scale, window, query_block=4096, key_block=32768)
    return chunked_attention(q, k, v, scale, window)
