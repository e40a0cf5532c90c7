"""The addition format of Cho et al. 2024 (docs/training.md, "Data formats").

``$ a_{n-1}..a_0 + b_{n-1}..b_0 = c_0 c_1 .. c_n $``: operands MSB-first, zero-padded to a common
length n; the sum zero-padded to n + 1 digits and written reversed (LSB first); ``$`` is both BOS
and EOS. ``=`` predicts c_0, c_i predicts c_{i+1}, c_n predicts ``$``.

Operands may have 10^5-10^6 digits, so everything here works on numpy digit arrays; Python ints
are used only as the exact oracle (with ``sys.set_int_max_str_digits(0)``).
"""
from __future__ import annotations


import numpy as np

from ..positions import coupled_addition_ids
from .base import SequenceTask, TaskInstance, Vocabulary, digits_of, digits_to_str, operand_digits



def exact_sum_digits(a: np.ndarray, b: np.ndarray, width: int) -> np.ndarray:
    """The oracle: a + b by Python integer arithmetic, as ``width`` digits MSB-first."""
    total = int(digits_to_str(a)) + int(digits_to_str(b))
    text = str(total).zfill(width)
    if len(text) > width:
        raise ValueError("sum does not fit the requested width")
    return digits_of(text)


AdditionInstance = TaskInstance  # prompt_len = 2n + 3 (up to and including '=')


class AdditionTask(SequenceTask):
    name = "addition"

    def __init__(self) -> None:
        self.vocabulary = Vocabulary(tuple("0123456789") + ("+", "=", "$"))
        self.BOS = self.EOS = self.vocabulary["$"]
        self.PLUS, self.EQUALS = self.vocabulary["+"], self.vocabulary["="]

    def instance(self, a: str | int | np.ndarray, b: str | int | np.ndarray, start: int = 2) -> AdditionInstance:
        """Lay out ``a + b`` (decimal strings, ints or digit arrays) with coupled position IDs."""
        da, db = operand_digits(a, "a"), operand_digits(b, "b")
        n = max(len(da), len(db))
        da, db = (np.concatenate([np.zeros(n - len(d), np.uint8), d]) for d in (da, db))
        answer = exact_sum_digits(da, db, n + 1)[::-1]
        dollar, plus, eq = (np.array([t], np.int64) for t in (self.BOS, self.PLUS, self.EQUALS))
        tokens = np.concatenate([dollar, da, plus, db, eq, answer, dollar]).astype(np.int64)
        return TaskInstance(n=n, tokens=tokens, pos_ids=coupled_addition_ids(n, start), prompt_len=2 * n + 3)

    def next_token(self, prompt_text: str) -> str:
        """The exact next token after a (possibly partially answered) prompt ``$a+b=c_0..c_k``."""
        if not prompt_text.startswith("$") or prompt_text.count("+") != 1 or prompt_text.count("=") != 1:
            raise ValueError(f"not an addition prompt: {prompt_text!r}")
        query, done = prompt_text[1:].split("=")
        a, b = query.split("+")
        if len(a) != len(b):
            raise ValueError(f"operands must be zero-padded to a common length: {prompt_text!r}")
        full = self.answer(a, b)
        if not full.startswith(done) or len(done) >= len(full):
            raise ValueError(f"{prompt_text!r} is not a prefix of a correct answer")
        return full[len(done)]


ADDITION = AdditionTask()
