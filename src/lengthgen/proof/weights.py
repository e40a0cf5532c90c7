"""The weights a certificate reads: exact float64 copies of a model's parameters.

Every float format the model may hold (float64, float32, float16, bfloat16) embeds exactly in
float64, so a certificate that reads these copies reasons about the very numbers the model holds.
:class:`Weights` is the single-layer view (Theorem 5.1's addition, copy and reverse),
:class:`LayeredWeights` the per-layer one (N×2 multiplication). A model outside what a certificate
covers raises :class:`StructureError`, which every certificate reports as a FAIL, never as a PASS.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from lengthgen.model import Transformer

__all__ = ["LayeredWeights", "StructureError", "Weights", "group_rows", "to_float64"]


class StructureError(ValueError):
    """The weights do not have the structure the certificate relies on (it then FAILs)."""


def to_float64(t: torch.Tensor) -> np.ndarray:
    """A float64 numpy copy of a parameter (exact for every float format torch holds)."""
    return t.detach().to("cpu", torch.float64).numpy().copy()


def group_rows(rows: np.ndarray) -> np.ndarray:
    """Group index of each row of a 2-D array (rows with identical bytes share one), numbered in
    order of first appearance. The certificates use it to find the answer positions that see the
    same local computation (equal rows, hence equal bounds)."""
    rows = np.ascontiguousarray(rows)
    if rows.ndim != 2:
        raise ValueError(f"group_rows takes a 2-D array, got shape {rows.shape}")
    if rows.shape[1] == 0:
        return np.zeros(len(rows), dtype=np.int64)
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
    _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inv.reshape(-1)]


def require_finite(obj: Any) -> Any:
    """``obj`` (a weights dataclass) when every array field is finite; :class:`StructureError`
    naming the first parameter with a NaN or an infinity otherwise. The certificates reason about
    real numbers: a NaN compares false with every bound (a NaN gap is neither below nor above a
    margin), so such a model must FAIL before any bound is computed, never PASS by accident."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        arrays = list(value) if isinstance(value, (list, tuple)) else [value]
        for part, arr in enumerate(arrays):
            if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                where = (f"{f.name}[layer {part + 1}]" if isinstance(value, list)
                         else f"{f.name} ({('weight', 'bias')[part]})" if isinstance(value, tuple) else f.name)
                raise StructureError(f"{where} has entries that are not finite (NaN or ±inf); "
                                     "a certificate covers finite weights only")
    return obj


def _digest(obj, names: tuple[str, ...]) -> str:
    h = hashlib.sha1()
    for name in names:
        value = getattr(obj, name)
        for arr in value if isinstance(value, list) else [value]:
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


@dataclass
class Weights:
    """float64 copies of a 1-layer model's parameters; ``W_Q`` is [heads, d, d_head], ``b_O`` [d] ..."""

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
    W_in: np.ndarray
    b_in: np.ndarray
    W_out: np.ndarray
    b_out: np.ndarray
    W_U: np.ndarray
    b_U: np.ndarray
    scale: float
    dtype: str
    labels: list[str]
    mlp_labels: list[str]

    @classmethod
    def from_model(cls, model: Transformer, mlp: bool = True) -> "Weights":
        """``mlp=False`` reads an attention-only model (no MLP): W_in, b_in, W_out are then empty
        (zero hidden units) and b_out is zero, which is what skipping the MLP computes."""
        cfg = model.cfg
        if cfg.n_layers != 1 or cfg.normalization is not None or cfg.positional != "learned" \
                or cfg.attn_windows is not None or (cfg.d_mlp > 0) != mlp or (mlp and cfg.act_fn != "relu"):
            kind = "ReLU" if mlp else "attention-only (no MLP)"
            raise StructureError(f"the certificate covers 1-layer, {kind}, LayerNorm-free models with learned positions")
        f = to_float64
        a, m = model.blocks[0].attn, model.blocks[0].mlp
        labels = model.annotations.residual or [f"r{i}" for i in range(cfg.d_model)]
        mlp_labels = model.annotations.mlp or [f"unit {i}" for i in range(cfg.d_mlp)]
        d = cfg.d_model
        ffn = (f(m.W_in), f(m.b_in), f(m.W_out), f(m.b_out)) if mlp else (np.zeros((d, 0)), np.zeros(0), np.zeros((0, d)),
                                                                        np.zeros(d))
        return require_finite(cls(
            f(model.embed.W_E), f(model.pos_embed.W_pos), f(a.W_Q), f(a.b_Q), f(a.W_K), f(a.b_K), f(a.W_V),
            f(a.b_V), f(a.W_O), f(a.b_O), *ffn, f(model.unembed.W_U),
            f(model.unembed.b_U), float(cfg.score_scale), cfg.dtype, list(labels), list(mlp_labels)))

    def digest(self, *names: str) -> str:
        """SHA-1 of the named parameters (the certificates' cache keys)."""
        return _digest(self, names)


@dataclass
class LayeredWeights:
    """Every parameter of a multi-layer model, per layer: ``W_Q[l]`` is [heads, d, d_head], ``b_O[l]`` [d] ..."""

    W_E: np.ndarray
    W_pos: np.ndarray
    W_Q: list[np.ndarray]
    b_Q: list[np.ndarray]
    W_K: list[np.ndarray]
    b_K: list[np.ndarray]
    W_V: list[np.ndarray]
    b_V: list[np.ndarray]
    W_O: list[np.ndarray]
    b_O: list[np.ndarray]
    W_in: list[np.ndarray]
    b_in: list[np.ndarray]
    W_out: list[np.ndarray]
    b_out: list[np.ndarray]
    W_U: np.ndarray
    b_U: np.ndarray
    scale: float
    labels: list[str]

    @classmethod
    def from_model(cls, model: Transformer, n_layers: int) -> "LayeredWeights":
        """Reads a causal ``n_layers``-layer ReLU model without LayerNorm, with learned positions;
        anything else raises :class:`StructureError`."""
        cfg = model.cfg
        if cfg.n_layers != n_layers or cfg.normalization is not None or cfg.act_fn != "relu" \
                or cfg.positional != "learned" or cfg.attn_windows is not None or not cfg.causal:
            raise StructureError(f"the certificate covers causal {n_layers}-layer ReLU models without LayerNorm, "
                                 "with learned positions")
        get = lambda part, name: [to_float64(getattr(getattr(b, part), name)) for b in model.blocks]  # noqa: E731
        labels = model.annotations.residual or [f"r{i}" for i in range(cfg.d_model)]
        return require_finite(cls(
            to_float64(model.embed.W_E), to_float64(model.pos_embed.W_pos), get("attn", "W_Q"),
            get("attn", "b_Q"), get("attn", "W_K"), get("attn", "b_K"), get("attn", "W_V"), get("attn", "b_V"),
            get("attn", "W_O"), get("attn", "b_O"), get("mlp", "W_in"), get("mlp", "b_in"),
            get("mlp", "W_out"), get("mlp", "b_out"), to_float64(model.unembed.W_U),
            to_float64(model.unembed.b_U), float(cfg.score_scale), list(labels)))

    @property
    def d_model(self) -> int:
        return self.W_E.shape[1]

    def working_heads(self, layer: int) -> list[int]:
        """Heads whose W_O is not identically zero (the others add exactly 0)."""
        return [h for h in range(self.W_O[layer].shape[0]) if np.any(self.W_O[layer][h])]

    def digest(self, *names: str) -> str:
        """SHA-1 of the named parameters (the certificates' cache keys)."""
        return _digest(self, names)
