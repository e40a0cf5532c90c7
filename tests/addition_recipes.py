"""Operand *recipes* for hypothesis (ecosystem-conventions.md §8.6): draw a small description
(length, seed, carry-chain segments) and expand it into digits, so shrinking works and long
operands are cheap to generate. Plain Python ints come out; they are the oracle."""
from __future__ import annotations

import random

from hypothesis import strategies as st

SEGMENTS = ("random", "nines", "zeros", "fives", "fours")


def expand(n: int, m: int, seed: int, segments: list[tuple[str, int]]) -> tuple[int, int]:
    """Two operands of n and m digits (leading digit non-zero), with the given runs overlaid:
    'nines' puts 9s in a and b's complement (carry chains), 'fives' 5s in both, etc."""
    rng = random.Random(seed)
    a = [rng.randrange(10) for _ in range(n)]
    b = [rng.randrange(10) for _ in range(m)]
    pos = 0
    for kind, length in segments:
        for i in range(pos, min(n, pos + length)):
            j = i - (n - m)  # the digit of b with the same significance, if any
            if kind == "nines":
                a[i] = 9
                if 0 <= j < m:
                    b[j] = rng.choice((0, 9))
            elif kind == "zeros":
                a[i] = 0
            elif kind == "fives":
                a[i] = 5
                if 0 <= j < m:
                    b[j] = rng.choice((4, 5))
            elif kind == "fours":
                a[i] = 4
                if 0 <= j < m:
                    b[j] = 5
        pos += length
    a[0] = a[0] or 1
    b[0] = b[0] or 1 if m > 1 else b[0]
    return int("".join(map(str, a))), int("".join(map(str, b)))


@st.composite
def operand_pairs(draw: st.DrawFn, max_digits: int) -> tuple[int, int]:
    n = draw(st.integers(1, max_digits))
    m = draw(st.integers(1, n))
    seed = draw(st.integers(0, 2**32 - 1))
    segments = draw(st.lists(st.tuples(st.sampled_from(SEGMENTS), st.integers(1, max_digits)), max_size=5))
    a, b = expand(n, m, seed, segments)
    return (a, b) if draw(st.booleans()) else (b, a)


def adversarial_pairs(n: int) -> list[tuple[int, int]]:
    """Carry chains of length n: 99..9 + 1, 99..9 + 99..9, 55..5 + 44..45, alternating runs."""
    nines = 10**n - 1
    fives = 5 * nines // 9
    fours_then_five = 4 * nines // 9 + 1
    alternating = int(("9" * 7 + "0" * 3) * (n // 10 + 1))
    return [
        (nines, 1), (nines, nines), (fives, fours_then_five), (1, nines),
        (alternating % 10**n or 1, (10**n - 1 - alternating % 10**n) + 1),
        (10 ** (n - 1), 10**n - 10 ** (n - 1)),
    ]
