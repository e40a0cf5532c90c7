"""The weights and the input format the Theorem 5.1 certificate reads (docs/certificate.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lengthgen.positions import coupled_addition_ids
from lengthgen.proof.weights import StructureError, Weights
from lengthgen.tasks import ADDITION

from ..model import START_ID
from .ffn import ROLE_A, ROLE_B, ROLE_BOS, ROLE_C, ROLE_EQ, ROLE_PLUS

DIGITS = [ADDITION.vocabulary[str(k)] for k in range(10)]
BOS, PLUS, EQ = ADDITION.BOS, ADDITION.PLUS, ADDITION.EQUALS
ROLE_TOKENS = {ROLE_A: DIGITS, ROLE_B: DIGITS, ROLE_C: DIGITS, ROLE_PLUS: [PLUS], ROLE_EQ: [EQ]}
CODE_TOKENS = DIGITS + [PLUS, EQ]  # tokens that sit at non-zero position IDs


@dataclass
class Layout:
    """The format ``$ a + b = c`` for operand length n (docs/theorem-5-1.md), keys only (the final ``$`` is never read).

    The class attributes name the tokens the attention bounds (:mod:`lengthgen.proof.attention`) read: ``$`` (at
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
