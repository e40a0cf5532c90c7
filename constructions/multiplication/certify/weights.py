"""The weights and the input format the multiplication certificate reads (docs/multiplication.md,
"Certificate"): float64 copies of every parameter of the 3-layer model (exact: every float format
embeds in float64) and the roles of the positions of ``$ a * b = c``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from constructions.addition.certify.layout import StructureError
from lengthgen.model import Transformer

from ..layout import START_ID
from ..model import TASK

__all__ = ["StructureError", "Weights", "Layout", "ROLE_TOKENS", "DIGITS", "BOS", "STAR", "EQ", "EOS"]

DIGITS = [TASK.vocabulary[str(k)] for k in range(10)]
BOS, STAR, EQ, EOS = TASK.BOS, TASK.TIMES, TASK.EQUALS, TASK.EOS
TOKEN_NAMES = list(TASK.vocab)
ROLE_BOS, ROLE_A, ROLE_STAR, ROLE_B, ROLE_EQ, ROLE_C = range(6)
ROLE_NAMES = {ROLE_BOS: "$", ROLE_A: "a", ROLE_STAR: "*", ROLE_B: "b", ROLE_EQ: "=", ROLE_C: "c"}
ROLE_TOKENS = {ROLE_BOS: [BOS], ROLE_A: DIGITS, ROLE_STAR: [STAR], ROLE_B: DIGITS, ROLE_EQ: [EQ], ROLE_C: DIGITS}
N_LAYERS = 3


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy().copy()


@dataclass
class Weights:
    """Every parameter the certificate reads, per layer: ``W_Q[l]`` is [heads, d, d_head], ``b_O[l]`` [d] ..."""

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
    def from_model(cls, model: Transformer) -> "Weights":
        cfg = model.cfg
        if cfg.n_layers != N_LAYERS or cfg.normalization is not None or cfg.act_fn != "relu" \
                or cfg.positional != "learned" or cfg.attn_windows is not None or not cfg.causal:
            raise StructureError("the certificate covers causal 3-layer ReLU models without LayerNorm, with learned positions")
        blocks = model.blocks
        get = lambda part, name: [_f64(getattr(getattr(b, part), name)) for b in blocks]  # noqa: E731
        labels = model.annotations.residual or [f"r{i}" for i in range(cfg.d_model)]
        return cls(_f64(model.embed.W_E), _f64(model.pos_embed.W_pos), get("attn", "W_Q"), get("attn", "b_Q"),
                   get("attn", "W_K"), get("attn", "b_K"), get("attn", "W_V"), get("attn", "b_V"), get("attn", "W_O"),
                   get("attn", "b_O"), get("mlp", "W_in"), get("mlp", "b_in"), get("mlp", "W_out"), get("mlp", "b_out"),
                   _f64(model.unembed.W_U), _f64(model.unembed.b_U), float(cfg.score_scale), list(labels))

    @property
    def d_model(self) -> int:
        return self.W_E.shape[1]

    def working_heads(self, layer: int) -> list[int]:
        """Heads whose W_O is not identically zero (the others add exactly 0)."""
        return [h for h in range(self.W_O[layer].shape[0]) if np.any(self.W_O[layer][h])]

    def check_shape(self) -> None:
        """The chain covers layer 1 without MLP, layer 3 without attention (both exactly zero maps,
        biases allowed) and layer-2 attention: anything else is not covered and FAILs."""
        if np.any(self.W_out[0]):
            raise StructureError("the layer-1 MLP writes to the residual stream (W_out ≠ 0); the chain assumes it does not")
        if self.working_heads(2):
            raise StructureError("layer-3 attention writes to the residual stream (W_O ≠ 0); the chain assumes it does not")

    def digest(self, *names: str) -> str:
        h = hashlib.sha1()
        for name in names:
            value = getattr(self, name)
            for arr in value if isinstance(value, list) else [value]:
                h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()


@dataclass
class Layout:
    """``$ a * b = c`` for an n-digit ``a`` (keys only: the final ``$`` is never read). ``sig`` is the
    digit's place (a_j, b_j, c_j) and −1 for the other tokens."""

    n: int
    ids: np.ndarray
    role: np.ndarray
    sig: np.ndarray

    @classmethod
    def build(cls, n: int, start: int = START_ID) -> "Layout":
        ids = TASK.coupled_ids(n, start)[:-1]
        role = np.concatenate([[ROLE_BOS], np.full(n, ROLE_A), [ROLE_STAR], np.full(2, ROLE_B), [ROLE_EQ],
                               np.full(n + 2, ROLE_C)])
        sig = np.concatenate([[-1], np.arange(n - 1, -1, -1), [-1], [1, 0], [-1], np.arange(n + 2)])
        return cls(n, ids.astype(np.int64), role.astype(np.int64), sig.astype(np.int64))

    @property
    def queries(self) -> np.ndarray:
        """Answer positions: ``=`` (predicts c_0) and c_0 … c_{n+1} (c_{n+1} predicts the final ``$``)."""
        return np.arange(self.n + 4, 2 * self.n + 7)

    def positions_by_id(self) -> tuple[np.ndarray, int]:
        """[max_id + 1, m] table of the positions holding each ID (−1 padded); m = max multiplicity."""
        order = np.argsort(self.ids, kind="stable")
        sid, spos = self.ids[order], order
        rank = np.arange(len(sid)) - np.searchsorted(sid, sid, side="left")
        m = int(rank.max()) + 1
        table = np.full((int(self.ids.max()) + 1, m), -1, dtype=np.int64)
        table[sid, rank] = spos
        return table, m
