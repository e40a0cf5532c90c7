"""Pieces shared by every task: the vocabulary, digit strings, laid-out instances, prompt/answer.

A task lays out one example as a :class:`TaskInstance` (the whole token sequence with its position
IDs); ``prompt`` and ``answer`` are cut from it, so every task defines the layout exactly once.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

sys.set_int_max_str_digits(0)  # the oracles convert 10^5-digit numbers; Python >= 3.11 caps at 4300


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


def operand_digits(value: "str | int | np.ndarray", what: str = "operand") -> np.ndarray:
    """An operand as a uint8 digit array (MSB first): a digit array as it is, a non-negative ``int``,
    or a string of decimal digits. Anything else (``True``, ``2.5``, ``None``) is a ``TypeError``
    naming ``what`` and what is allowed; a negative or non-digit value a ``ValueError``."""
    if isinstance(value, np.ndarray):
        return value.astype(np.uint8, copy=False)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, str)):
        raise TypeError(f"{what} must be a non-negative int or a string of decimal digits, "
                        f"got {value!r} of type {type(value).__name__}")
    return digits_of(str(value), what)


def digits_of(text: str, what: str = "operand") -> np.ndarray:
    """Decimal string -> uint8 digit array (MSB first). Raises ``ValueError`` with a clear message."""
    text = text.strip()
    if not text:
        raise ValueError(f"{what} is empty")
    if text.startswith("-"):
        raise ValueError(f"{what} is negative; only non-negative integers are allowed")
    raw = np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8)
    bad = (raw < 48) | (raw > 57)
    if bad.any():
        pos = int(np.argmax(bad))
        raise ValueError(f"{what} has a non-digit character {text[pos]!r} at position {pos + 1}")
    return raw - 48


def digits_to_str(digits: np.ndarray) -> str:
    return (np.asarray(digits, dtype=np.uint8) + 48).tobytes().decode("ascii")


@dataclass(frozen=True)
class TaskInstance:
    """One example laid out: ``tokens``/``pos_ids`` cover the whole sequence (answer and final
    ``$`` included); ``prompt_len`` counts the tokens up to and including the one that predicts
    the first answer token. ``n`` is the (first) operand's length, ``m`` the second's if fixed."""

    n: int
    tokens: np.ndarray
    pos_ids: np.ndarray
    prompt_len: int
    m: int = 0

    @property
    def answer_tokens(self) -> np.ndarray:
        """The answer tokens and the final ``$``."""
        return self.tokens[self.prompt_len :]


class SequenceTask:
    """Base class: subclasses set ``vocabulary`` and define ``instance(*operands)``."""

    name: str
    vocabulary: Vocabulary

    @property
    def vocab(self) -> tuple[str, ...]:
        return self.vocabulary.tokens

    def encode(self, text: str) -> np.ndarray:
        return self.vocabulary.encode(text)

    def decode(self, ids) -> str:
        return self.vocabulary.decode(ids)

    def instance(self, *operands, start: int = 1) -> TaskInstance:
        raise NotImplementedError

    def prompt(self, *operands) -> str:
        """Prompt text up to and including the token that predicts the first answer token."""
        inst = self.instance(*operands)
        return self.decode(inst.tokens[: inst.prompt_len])

    def answer(self, *operands) -> str:
        """Answer text: the answer tokens and the final ``$``."""
        return self.decode(self.instance(*operands).answer_tokens)
