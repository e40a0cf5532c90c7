"""The copy/reverse format as the attention bounds of the addition certificate read it
(:class:`constructions.addition.certify.layout.Layout`): keys, roles, IDs, answer positions.

``$ x_1 .. x_n = y_1 .. y_n $`` with the coupled IDs of ``lengthgen.tasks.COPY`` / ``REVERSE``
(docs/copying.md). The answer positions (queries) are ``=`` and y_1 .. y_n; ``=`` predicts y_1,
y_j predicts y_{j+1} and y_n predicts ``$``. The final ``$`` is never a key.

Each digit position carries a *source* ``sig``: the index (0-based) of the input digit whose value
it holds (x_i -> i − 1; y_j -> the input digit it copies). Two positions with the same source hold
the same digit on every input, and positions with different sources are independent; so the
digits an answer position's computation can see are one free digit per distinct source.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from constructions.addition.certify.layout import Layout
from lengthgen.tasks import COPY
from lengthgen.tasks.copying import CopyTask

ROLE_BOS, ROLE_IN, ROLE_EQ, ROLE_OUT = range(4)
DIGITS = [COPY.vocabulary[str(k)] for k in range(10)]
BOS, EQ = COPY.BOS, COPY.EQUALS
ROLE_TOKENS = {ROLE_IN: DIGITS, ROLE_EQ: [EQ], ROLE_OUT: DIGITS}


@dataclass
class CopyLayout(Layout):
    """Keys ``$ x = y`` (without the final ``$``) of one n-digit copy or reverse, and per answer
    position the source of the digit it must predict (``target_sig``; −1 for ``$``)."""

    bos_token: ClassVar[int] = BOS
    first_query_token: ClassVar[int] = EQ
    digit_tokens: ClassVar[list[int]] = DIGITS
    role_tokens: ClassVar[dict[int, list[int]]] = ROLE_TOKENS
    code_tokens: ClassVar[list[int]] = DIGITS + [EQ]  # tokens at non-zero IDs ('$' only ever sits at ID 0)
    target_sig: np.ndarray = None  # type: ignore[assignment]

    @classmethod
    def build(cls, task: CopyTask, n: int, start: int = 1) -> "CopyLayout":  # type: ignore[override]
        ids = task.coupled_ids(n, start)[:-1].astype(np.int64)
        role = np.concatenate([[ROLE_BOS], np.full(n, ROLE_IN), [ROLE_EQ], np.full(n, ROLE_OUT)]).astype(np.int64)
        out_sig = np.arange(n - 1, -1, -1) if task.reverse else np.arange(n)
        sig = np.concatenate([[-1], np.arange(n), [-1], out_sig]).astype(np.int64)
        target_sig = np.concatenate([out_sig, [-1]]).astype(np.int64)  # '=' -> y_1, y_j -> y_{j+1}, y_n -> '$'
        return cls(n, start, ids, role, sig, target_sig)

    @property
    def queries(self) -> np.ndarray:
        """Positions whose prediction belongs to the answer: ``=`` and y_1 … y_n."""
        return np.arange(self.n + 1, 2 * self.n + 2)
