"""The weights and the input format the Theorem 5.1 certificate reads (docs/certificate.md)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from lengthgen.model import Transformer
from lengthgen.positions import coupled_addition_ids
from lengthgen.tasks import ADDITION

from ..model import START_ID
from .ffn import ROLE_A, ROLE_B, ROLE_BOS, ROLE_C, ROLE_EQ, ROLE_PLUS

DIGITS = [ADDITION.vocabulary[str(k)] for k in range(10)]
BOS, PLUS, EQ = ADDITION.BOS, ADDITION.PLUS, ADDITION.EQUALS
ROLE_TOKENS = {ROLE_A: DIGITS, ROLE_B: DIGITS, ROLE_C: DIGITS, ROLE_PLUS: [PLUS], ROLE_EQ: [EQ]}
CODE_TOKENS = DIGITS + [PLUS, EQ]  # tokens that sit at non-zero position IDs


class StructureError(ValueError):
    """The weights do not have the structure the certificate relies on (it then FAILs)."""


@dataclass
class Weights:
    """float64 copies of a 1-layer model's parameters (exact: every float format embeds in float64)."""

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
        f = lambda t: t.detach().to("cpu", torch.float64).numpy().copy()
        a, m = model.blocks[0].attn, model.blocks[0].mlp
        labels = model.annotations.residual or [f"r{i}" for i in range(cfg.d_model)]
        mlp_labels = model.annotations.mlp or [f"unit {i}" for i in range(cfg.d_mlp)]
        d = cfg.d_model
        ffn = (f(m.W_in), f(m.b_in), f(m.W_out), f(m.b_out)) if mlp else (np.zeros((d, 0)), np.zeros(0), np.zeros((0, d)),
                                                                        np.zeros(d))
        return cls(f(model.embed.W_E), f(model.pos_embed.W_pos), f(a.W_Q), f(a.b_Q), f(a.W_K), f(a.b_K), f(a.W_V),
                   f(a.b_V), f(a.W_O), f(a.b_O), *ffn, f(model.unembed.W_U),
                   f(model.unembed.b_U), float(cfg.score_scale), cfg.dtype, list(labels), list(mlp_labels))

    def digest(self, *names: str) -> str:
        h = hashlib.sha1()
        for name in names:
            h.update(np.ascontiguousarray(getattr(self, name)).tobytes())
        return h.hexdigest()


@dataclass
class Layout:
    """The format ``$ a + b = c`` for operand length n (docs/theorem-5-1.md), keys only (the final ``$`` is never read).

    The class attributes name the tokens the attention bounds (:mod:`.attention`) read: ``$`` (at
    ID 0), the token of the first answer position (``=``) and of the others (digits), the tokens
    each role may hold, and every token that sits at a non-zero ID. Another format with the same
    ``=``-then-digits queries (constructions.copying.certify) overrides them."""

    bos_token: ClassVar[int] = BOS
    first_query_token: ClassVar[int] = EQ
    digit_tokens: ClassVar[list[int]] = DIGITS
    role_tokens: ClassVar[dict[int, list[int]]] = ROLE_TOKENS
    code_tokens: ClassVar[list[int]] = CODE_TOKENS
    n: int
    start: int
    ids: np.ndarray
    role: np.ndarray
    sig: np.ndarray

    @classmethod
    def build(cls, n: int, start: int = START_ID) -> "Layout":
        ids = coupled_addition_ids(n, start)[:-1]
        role = np.concatenate([[ROLE_BOS], np.full(n, ROLE_A), [ROLE_PLUS], np.full(n, ROLE_B), [ROLE_EQ],
                               np.full(n + 1, ROLE_C)])
        sig = np.concatenate([[-1], np.arange(n - 1, -1, -1), [-1], np.arange(n - 1, -1, -1), [-1], np.arange(n + 1)])
        return cls(n, start, ids.astype(np.int64), role.astype(np.int64), sig.astype(np.int64))

    @property
    def queries(self) -> np.ndarray:
        """Positions whose prediction belongs to the answer: ``=`` and c_0 … c_n."""
        return np.arange(2 * self.n + 2, 3 * self.n + 4)

    def positions_by_id(self) -> tuple[np.ndarray, int]:
        """[max_id + 1, m] table of the positions (≥ 1) holding each ID, −1 padded; m = max multiplicity."""
        pos = np.arange(1, len(self.ids))
        order = np.argsort(self.ids[1:], kind="stable")
        sid, spos = self.ids[1:][order], pos[order]
        first = np.searchsorted(sid, sid, side="left")
        rank = np.arange(len(sid)) - first
        m = int(rank.max()) + 1
        table = np.full((int(self.ids.max()) + 1, m), -1, dtype=np.int64)
        table[sid, rank] = spos
        return table, m
