"""Operand strategies for hypothesis that shrink digit by digit.

Long operands are drawn as *runs* of digit pairs: ``(digit of a, digit of b, run length)``. A run
of (9, 0) or (9, 9) after a carry is a carry chain, (5, 4) then (4, 5) a chain that flips, so
hypothesis reaches the hard cases by drawing digits, and shrinks a failure towards fewer runs,
shorter runs and smaller digits. Plain Python ints come out; they are the oracle.
"""
from __future__ import annotations

from hypothesis import strategies as st

DIGIT = st.integers(0, 9)


@st.composite
def operand_pairs(draw: st.DrawFn, max_digits: int) -> tuple[int, int]:
    """(a, b) with up to ``max_digits`` digits each, built from runs of digit pairs (MSB first);
    the shorter operand drops some leading digits, and the order of a and b is drawn too."""
    runs = draw(st.lists(st.tuples(DIGIT, DIGIT, st.integers(1, max_digits)), min_size=1, max_size=8))
    a_digits = "".join(str(x) * length for x, _, length in runs)[:max_digits]
    b_digits = "".join(str(y) * length for _, y, length in runs)[:max_digits]
    b_digits = b_digits[draw(st.integers(0, len(b_digits) - 1)) :]
    a, b = int(a_digits), int(b_digits)
    return (b, a) if draw(st.booleans()) else (a, b)


def short_operands(max_digits: int) -> st.SearchStrategy[int]:
    """One operand of 1..``max_digits`` decimal digits (leading zeros allowed in the text)."""
    return st.text("0123456789", min_size=1, max_size=max_digits).map(int)


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
