"""Copy and reverse in the position-coupling format (Cho et al. 2024;
docs/training.md, "Data formats").

``$ x_1..x_n = y_1..y_n $`` over the digits 0–9; ``$`` is both BOS and EOS and there is no padding.
Copy: y = x. Reverse: y_j = x_{n+1-j}. ``=`` predicts y_1, y_j predicts y_{j+1}, y_n predicts ``$``.
The oracle is plain string slicing.

Coupled position IDs with start ``s`` (the authors' reverse example
``$ a c a b = b a c a $`` -> ``0 5 6 7 8 9 8 7 6 5 0`` is s = 5):

* copy:    x_i -> s + i,      ``=`` -> s,      y_i -> s + i;
* reverse: x_i -> s + i - 1,  ``=`` -> s + n,  y_j -> s + n - j (the ID of the x it copies);
* ``$`` -> 0.
"""
from __future__ import annotations

import re

import numpy as np

from .base import SequenceTask, TaskInstance, Vocabulary, digits_of, operand_digits


CopyInstance = TaskInstance  # prompt_len = n + 2 ('$ x =')


class CopyTask(SequenceTask):
    """Copy (``reverse=False``) or reverse (``reverse=True``) a digit string."""

    min_digits = 2
    min_digits_reason = "a 1-digit prompt '$x=' has no other arrangement that keeps it a prompt"

    def __init__(self, reverse: bool = False) -> None:
        self.reverse = reverse
        self.name = "reverse" if reverse else "copy"
        self.vocabulary = Vocabulary(tuple("0123456789") + ("=", "$"))
        self.BOS = self.EOS = self.vocabulary["$"]
        self.EQUALS = self.vocabulary["="]

    def _output(self, x: str) -> str:
        return x[::-1] if self.reverse else x

    def instance(self, x: str | int | np.ndarray, start: int = 1) -> CopyInstance:
        """Lay out the copy/reverse of ``x`` (a digit string, int or digit array) with coupled IDs."""
        dx = operand_digits(x, "input")
        out = dx[::-1] if self.reverse else dx
        dollar, eq = (np.array([t], np.int64) for t in (self.BOS, self.EQUALS))
        tokens = np.concatenate([dollar, dx, eq, out, dollar]).astype(np.int64)
        return TaskInstance(n=len(dx), tokens=tokens, pos_ids=self.coupled_ids(len(dx), start), prompt_len=len(dx) + 2)

    def coupled_ids(self, n: int, start: int = 1) -> np.ndarray:
        """Position IDs of the full sequence ``$ x = y $`` (2n + 3 tokens)."""
        if n < 1:
            raise ValueError("the input needs at least one digit")
        if start < 1:
            raise ValueError("start ID s must be >= 1 (ID 0 is reserved for $)")
        s, zero = start, np.zeros(1, np.int64)
        if self.reverse:
            x_ids, eq, y_ids = np.arange(s, s + n), s + n, np.arange(s + n - 1, s - 1, -1)
        else:
            x_ids, eq, y_ids = np.arange(s + 1, s + n + 1), s, np.arange(s + 1, s + n + 1)
        return np.concatenate([zero, x_ids, [eq], y_ids, zero]).astype(np.int64)

    def _parse(self, prompt_text: str) -> tuple[str, str]:
        match = re.fullmatch(r"\$([0-9]+)=([0-9]*\$?)", prompt_text)
        if match is None:
            raise ValueError(f"not a {self.name} prompt: {prompt_text!r}")
        return match.group(1), match.group(2)

    def next_token(self, prompt_text: str) -> str:
        """The exact next token after a (possibly partially answered) prompt ``$x=y_1..y_k``."""
        x, done = self._parse(prompt_text)
        full = self._output(x) + "$"
        if not full.startswith(done) or len(done) >= len(full):
            raise ValueError(f"{prompt_text!r} is not a prefix of a correct answer")
        return full[len(done)]

    def position_ids(self, prompt_text: str, start: int = 1) -> np.ndarray:
        """Coupled position IDs of a prompt (any prefix of a full sequence starting ``$x=``)."""
        x, _ = self._parse(prompt_text)
        return self.coupled_ids(len(x), start)[: len(prompt_text)]

    def query_template(self, n: int) -> str:
        """The prompt ``$x=`` with ``_`` for each of the n digit slots."""
        return "$" + "_" * n + "="


COPY = CopyTask(reverse=False)
REVERSE = CopyTask(reverse=True)
