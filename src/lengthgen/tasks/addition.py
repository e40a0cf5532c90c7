"""The addition format of Cho et al. 2024 (theorem-5-1-addition.md §1.1).

``$ a_{n-1}..a_0 + b_{n-1}..b_0 = c_0 c_1 .. c_n $``: operands MSB-first, zero-padded to a common
length n; the sum zero-padded to n + 1 digits and written reversed (LSB first); ``$`` is both BOS
and EOS. ``=`` predicts c_0, c_i predicts c_{i+1}, c_n predicts ``$``.

Operands may have 10^5-10^6 digits, so everything here works on numpy digit arrays; Python ints
are used only as the exact oracle (with ``sys.set_int_max_str_digits(0)``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ..positions import coupled_addition_ids

sys.set_int_max_str_digits(0)  # Python >= 3.11 refuses int<->str beyond 4300 digits by default


class Vocabulary:
    """Token strings with their ids (id = index). Every token is a single character."""

    def __init__(self, tokens: tuple[str, ...]):
        self.tokens = tokens
        self._ids = {t: i for i, t in enumerate(tokens)}
        self._lut = np.full(256, -1, dtype=np.int64)
        for t, i in self._ids.items():
            self._lut[ord(t)] = i

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, token: str) -> int:
        return self._ids[token]

    def encode(self, text: str) -> np.ndarray:
        raw = np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8)
        ids = self._lut[raw]
        if (ids < 0).any():
            bad = text[int(np.argmax(ids < 0))]
            raise ValueError(f"character {bad!r} is not in the vocabulary {''.join(self.tokens)!r}")
        return ids

    def decode(self, ids) -> str:
        return "".join(self.tokens[int(i)] for i in np.asarray(ids).reshape(-1))


def digits_of(text: str, what: str = "operand") -> np.ndarray:
    """Decimal string -> uint8 digit array (MSB first). Raises ``ValueError`` with a clear message."""
    text = text.strip()
    if not text:
        raise ValueError(f"{what} is empty")
    if text.startswith("-"):
        raise ValueError(f"{what} is negative; only non-negative integers can be added")
    raw = np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8)
    bad = (raw < 48) | (raw > 57)
    if bad.any():
        pos = int(np.argmax(bad))
        raise ValueError(f"{what} has a non-digit character {text[pos]!r} at position {pos + 1}")
    return raw - 48


def digits_to_str(digits: np.ndarray) -> str:
    return (np.asarray(digits, dtype=np.uint8) + 48).tobytes().decode("ascii")


def exact_sum_digits(a: np.ndarray, b: np.ndarray, width: int) -> np.ndarray:
    """The oracle: a + b by Python integer arithmetic, as ``width`` digits MSB-first."""
    total = int(digits_to_str(a)) + int(digits_to_str(b))
    text = str(total).zfill(width)
    if len(text) > width:
        raise ValueError("sum does not fit the requested width")
    return digits_of(text)


@dataclass(frozen=True)
class AdditionInstance:
    """One addition, laid out: ``tokens``/``pos_ids`` cover the whole sequence (3n + 5 tokens,
    answer and final ``$`` included); ``prompt_len`` is the number of tokens up to and including
    ``=``, which is the first position whose prediction belongs to the answer."""

    n: int
    tokens: np.ndarray
    pos_ids: np.ndarray

    @property
    def prompt_len(self) -> int:
        return 2 * self.n + 3

    @property
    def answer_tokens(self) -> np.ndarray:
        """c_0 .. c_n and the final ``$`` (n + 2 tokens)."""
        return self.tokens[self.prompt_len :]


class AdditionTask:
    name = "addition"

    def __init__(self) -> None:
        self.vocabulary = Vocabulary(tuple("0123456789") + ("+", "=", "$"))
        self.vocab = self.vocabulary.tokens
        self.BOS = self.EOS = self.vocabulary["$"]
        self.PLUS, self.EQUALS = self.vocabulary["+"], self.vocabulary["="]

    def encode(self, text: str) -> np.ndarray:
        return self.vocabulary.encode(text)

    def decode(self, ids) -> str:
        return self.vocabulary.decode(ids)

    def instance(self, a: str | int | np.ndarray, b: str | int | np.ndarray, start: int = 2) -> AdditionInstance:
        """Lay out ``a + b`` (decimal strings, ints or digit arrays) with coupled position IDs."""
        da, db = (x if isinstance(x, np.ndarray) else digits_of(str(x), name) for x, name in ((a, "a"), (b, "b")))
        n = max(len(da), len(db))
        da, db = (np.concatenate([np.zeros(n - len(d), np.uint8), d]) for d in (da, db))
        answer = exact_sum_digits(da, db, n + 1)[::-1]
        dollar, plus, eq = (np.array([t], np.int64) for t in (self.BOS, self.PLUS, self.EQUALS))
        tokens = np.concatenate([dollar, da, plus, db, eq, answer, dollar]).astype(np.int64)
        return AdditionInstance(n=n, tokens=tokens, pos_ids=coupled_addition_ids(n, start))

    def prompt(self, a: str | int, b: str | int) -> str:
        """Prompt text up to and including ``=``, e.g. ``$653+049=``."""
        inst = self.instance(a, b)
        return self.decode(inst.tokens[: inst.prompt_len])

    def answer(self, a: str | int, b: str | int) -> str:
        """Answer text after ``=``: the reversed (n+1)-digit sum and ``$``, e.g. ``2070$``."""
        inst = self.instance(a, b)
        return self.decode(inst.answer_tokens)

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
