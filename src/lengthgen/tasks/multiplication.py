"""N×M multiplication in the position-coupling format (Cho et al. 2024;
docs/training.md, "Data formats"), for M = 1 (N×1) and M = 2 (N×2).

``$ a_{N-1}..a_0 * b_{M-1}..b_0 = c_0 c_1 .. c_{N+M-1} $``: the first operand has N digits (MSB
first), the second is zero-padded to exactly M digits, and the product is zero-padded to N + M
digits and written **reversed** (LSB first); ``$`` is both BOS and EOS. ``=`` predicts c_0, c_i
predicts c_{i+1}, the last product digit predicts ``$``.

The authors' data never gives ``a`` a leading zero; here ``a`` is read as an N-digit number, so a
leading zero is allowed (a permutation of a prompt may move a zero to the front, and the oracle must
still answer it). The oracle is Python integer arithmetic.

Coupled position IDs (the orientation of the authors' code at publication), with start ``s`` and
``e = s + N + M``: a's digits get ``e-N .. e-1``, b's digits ``e-M .. e-1``, ``*`` and ``=`` get
``e``, the answer c_0 .. c_{N+M-1} gets ``e-1`` down to ``s``; ``$`` gets 0. Equal significance shares
an ID (a_i, b_i and c_i all get ``e-1-i``).
"""
from __future__ import annotations

import re

import numpy as np

from .base import SequenceTask, TaskInstance, Vocabulary, digits_of, digits_to_str, operand_digits



MultiplicationInstance = TaskInstance  # prompt_len = N + M + 3 (up to and including '=')


class MultiplicationTask(SequenceTask):
    """N×M multiplication with a reversed, zero-padded answer (M fixed per task: 1 or 2)."""

    #: the smallest first-operand length with a permutation-sensitive pair (see ``min_digits_reason``)
    min_digits: int

    def __init__(self, m: int) -> None:
        if m < 1:
            raise ValueError("the second operand needs at least one digit")
        self.m = m
        self.name = f"multiplication_nx{m}"
        self.vocabulary = Vocabulary(tuple("0123456789") + ("*", "=", "$"))
        self.BOS = self.EOS = self.vocabulary["$"]
        self.TIMES, self.EQUALS = self.vocabulary["*"], self.vocabulary["="]
        # N = 1, M = 1: the only rearrangement of "$a*b=" swaps a and b, and a*b = b*a.
        # N = 1, M = 2: "$1*23=" (23 -> "320") and "$2*13=" (26 -> "620") differ, so pairs exist.
        self.min_digits = 2 if m == 1 else 1
        self.min_digits_reason = (
            "with a 1-digit first operand the only rearrangement of '$a*b=' swaps a and b, and a*b = b*a"
            if m == 1 else ""
        )

    def _operands(self, a, b) -> tuple[np.ndarray, np.ndarray]:
        da, db = operand_digits(a, "a"), operand_digits(b, "b")
        if len(db) > self.m:
            raise ValueError(f"the second operand of {self.name} has at most {self.m} digit(s), got {len(db)}")
        db = np.concatenate([np.zeros(self.m - len(db), np.uint8), db])
        return da.astype(np.uint8), db

    def instance(self, a: str | int | np.ndarray, b: str | int | np.ndarray, start: int = 1) -> MultiplicationInstance:
        """Lay out ``a * b`` (decimal strings, ints or digit arrays) with coupled position IDs."""
        da, db = self._operands(a, b)
        n, m = len(da), self.m
        product = int(digits_to_str(da)) * int(digits_to_str(db))
        answer = digits_of(str(product).zfill(n + m))[::-1]
        dollar, times, eq = (np.array([t], np.int64) for t in (self.BOS, self.TIMES, self.EQUALS))
        tokens = np.concatenate([dollar, da, times, db, eq, answer, dollar]).astype(np.int64)
        return TaskInstance(n=n, m=m, tokens=tokens, pos_ids=self.coupled_ids(n, start), prompt_len=n + m + 3)

    def coupled_ids(self, n: int, start: int = 1) -> np.ndarray:
        """Position IDs of the full sequence ``$ a * b = c $`` (2N + 2M + 4 tokens) for an N-digit ``a``."""
        if n < 1:
            raise ValueError("the first operand needs at least one digit")
        if start < 1:
            raise ValueError("start ID s must be >= 1 (ID 0 is reserved for $)")
        m, e = self.m, start + n + self.m
        zero, sep = np.zeros(1, np.int64), np.array([e], np.int64)
        a_ids = np.arange(e - n, e, dtype=np.int64)
        b_ids = np.arange(e - m, e, dtype=np.int64)
        answer = np.arange(e - 1, start - 1, -1, dtype=np.int64)
        return np.concatenate([zero, a_ids, sep, b_ids, sep, answer, zero])

    def _parse(self, prompt_text: str) -> tuple[str, str, str]:
        match = re.fullmatch(r"\$([0-9]+)\*([0-9]+)=([0-9]*\$?)", prompt_text)
        if match is None:
            raise ValueError(f"not a {self.name} prompt: {prompt_text!r}")
        a, b, done = match.groups()
        if len(b) != self.m:
            raise ValueError(f"the second operand must be zero-padded to {self.m} digit(s): {prompt_text!r}")
        return a, b, done

    def next_token(self, prompt_text: str) -> str:
        """The exact next token after a (possibly partially answered) prompt ``$a*b=c_0..c_k``."""
        a, b, done = self._parse(prompt_text)
        full = self.answer(a, b)
        if not full.startswith(done) or len(done) >= len(full):
            raise ValueError(f"{prompt_text!r} is not a prefix of a correct answer")
        return full[len(done)]

    def position_ids(self, prompt_text: str, start: int = 1) -> np.ndarray:
        """Coupled position IDs of a prompt (any prefix of a full sequence starting ``$a*b=``)."""
        a, _, _ = self._parse(prompt_text)
        return self.coupled_ids(len(a), start)[: len(prompt_text)]

    def query_template(self, n: int) -> str:
        """The prompt ``$a*b=`` with ``_`` for each digit slot (N digits of a, M of b)."""
        return "$" + "_" * n + "*" + "_" * self.m + "="


MULTIPLICATION_NX1 = MultiplicationTask(1)
MULTIPLICATION_NX2 = MultiplicationTask(2)
