"""The weights and the input format the multiplication certificate reads (docs/multiplication.md,
"Certificate"): float64 copies of every parameter of the 3-layer model (exact: every float format
embeds in float64) and the roles of the positions of ``$ a * b = c``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lengthgen.model import Transformer
from lengthgen.proof.weights import LayeredWeights, StructureError

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


class Weights(LayeredWeights):
    """The 3-layer model's parameters (:class:`lengthgen.proof.weights.LayeredWeights`) and the
    shape the certificate's chain assumes."""

    @classmethod
    def from_model(cls, model: Transformer, n_layers: int = 3) -> "Weights":
        if n_layers != N_LAYERS:
            raise StructureError(f"the multiplication certificate reads {N_LAYERS}-layer models")
        return super().from_model(model, N_LAYERS)

    def check_shape(self) -> None:
        """The chain covers layer 1 without MLP, layer 3 without attention (both exactly zero maps,
        biases allowed) and layer-2 attention: anything else is not covered and FAILs."""
        if np.any(self.W_out[0]):
            raise StructureError("the layer-1 MLP writes to the residual stream (W_out ≠ 0); the chain assumes it does not")
        if self.working_heads(2):
            raise StructureError("layer-3 attention writes to the residual stream (W_O ≠ 0); the chain assumes it does not")


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
