"""lengthgen.decode.decided_argmax, the one rule for "exact": a prediction counts only if its logit
beats every other logit by more than DECISION_MARGIN, as real numbers.

The reference is Python's exact rational arithmetic on the values the tensors actually hold
(``Fraction(float(x))`` is exact), plus literal expectations for NaN and infinities.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from lengthgen.decode import DECISION_MARGIN, UNDECIDED, decided_argmax

NAN, INF = math.nan, math.inf
DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
DTYPE_IDS = dict(ids=lambda dt: str(dt).removeprefix("torch."))


def oracle(row: list[float], margin: float = DECISION_MARGIN) -> int:
    """The index whose value beats every other by more than ``margin`` (exactly), else UNDECIDED."""
    if any(math.isnan(x) for x in row):
        return UNDECIDED
    if len(row) == 1:
        return 0
    best = max(range(len(row)), key=lambda i: row[i])
    others = [row[i] for i in range(len(row)) if i != best]
    runner_up = max(others)
    if math.isinf(row[best]) or math.isinf(runner_up):  # extended reals: a finite margin needs unequal values
        return best if row[best] > runner_up else UNDECIDED
    return best if Fraction(row[best]) - Fraction(runner_up) > Fraction(margin) else UNDECIDED


def test_the_margin_is_one_thousandth():
    assert DECISION_MARGIN == 1e-3


@pytest.mark.parametrize("dtype", DTYPES, **DTYPE_IDS)
def test_ties_and_a_gap_of_exactly_the_margin_are_undecided(dtype):
    m = DECISION_MARGIN
    ties = [[0.0, 1.0, 1.0], [2.0, 2.0, -1.0], [5.0, -1.0, 5.0]]  # two-class ties, wherever they sit
    assert decided_argmax(torch.tensor(ties, dtype=dtype)).tolist() == [UNDECIDED] * 3
    assert [oracle(r) for r in ties] == [UNDECIDED] * 3
    if dtype == torch.float64:  # float64 holds 1e-3 as DECISION_MARGIN itself: a gap of exactly the margin
        at_margin = [[m, 0.0, -1.0], [0.0, -m, -1.0], [0.0, m, 0.0]]
        assert decided_argmax(torch.tensor(at_margin, dtype=dtype)).tolist() == [UNDECIDED] * 3
        assert [oracle(r) for r in at_margin] == [UNDECIDED] * 3
    else:  # a narrower float nearest to 1e-3 is not 1e-3: the reference decides by its exact value
        row = torch.tensor([[m, 0.0]], dtype=dtype)
        assert decided_argmax(row).tolist() == [oracle(row.to(torch.float64)[0].tolist())]


def test_a_gap_just_above_the_margin_decides():
    m = DECISION_MARGIN
    above = math.nextafter(m, INF)
    logits = torch.tensor([[0.0, above, -5.0], [above, 0.0, -5.0], [0.0, m, -5.0], [-m, 0.0, -5.0]], dtype=torch.float64)
    assert decided_argmax(logits).tolist() == [1, 0, UNDECIDED, UNDECIDED]
    assert [oracle(r) for r in logits.tolist()] == [1, 0, UNDECIDED, UNDECIDED]


def test_a_gap_that_rounds_onto_the_margin_is_decided_by_its_exact_value():
    """1e-3 - (-2^-64) is above the margin although the float64 subtraction rounds it to 1e-3;
    1e-3 - 2^-64 is below it and rounds to the same float."""
    m, tiny = DECISION_MARGIN, 2.0**-64
    assert m - (-tiny) == m and m - tiny == m  # the rounding this test is about
    logits = torch.tensor([[m, -tiny], [m, tiny], [-tiny, m], [tiny, m]], dtype=torch.float64)
    assert [oracle(r) for r in logits.tolist()] == [0, UNDECIDED, 1, UNDECIDED]
    assert decided_argmax(logits).tolist() == [0, UNDECIDED, 1, UNDECIDED]


@pytest.mark.parametrize("dtype", DTYPES, **DTYPE_IDS)
def test_random_near_margin_gaps_agree_with_exact_arithmetic(dtype):
    """Runner-ups of every size, leaders a few units in the last place around runner-up + margin,
    in each dtype; the reference compares the stored values as rationals."""
    rng = np.random.default_rng(7)
    rows = []
    for _ in range(4000):
        second = float(rng.choice([-1, 1]) * 10.0 ** rng.uniform(-12, 3))
        first = second + DECISION_MARGIN
        for _ in range(int(rng.integers(-3, 4))):
            first = math.nextafter(first, INF if first > second + DECISION_MARGIN else -INF)
        first += float(rng.normal()) * abs(first) * float(torch.finfo(dtype).eps) * float(rng.integers(0, 3))
        third = second - abs(float(rng.normal()))
        row = [first, second, third]
        rng.shuffle(row)
        rows.append(row)
    logits = torch.tensor(rows, dtype=torch.float64).to(dtype)
    stored = logits.to(torch.float64).tolist()  # exactly the values the dtype holds
    expected = [oracle(r) for r in stored]
    assert decided_argmax(logits).tolist() == expected
    assert UNDECIDED in expected and any(e != UNDECIDED for e in expected)  # both outcomes exercised


@pytest.mark.parametrize("dtype", DTYPES, **DTYPE_IDS)
def test_nan_is_never_decided(dtype):
    rows = [[NAN], [NAN, NAN], [NAN, 0.0], [5.0, NAN, 0.0], [0.0, 1.0, NAN], [INF, NAN]]
    for row in rows:
        assert decided_argmax(torch.tensor([row], dtype=dtype)).tolist() == [UNDECIDED], row
        assert oracle(row) == UNDECIDED


@pytest.mark.parametrize("dtype", DTYPES, **DTYPE_IDS)
def test_infinite_logits(dtype):
    rows = [[INF, 0.0], [0.0, INF, -INF], [INF, INF], [-INF, -INF, -INF], [3.0, -INF], [-INF, -INF, 2.0], [INF, -INF]]
    expected = [0, 1, UNDECIDED, UNDECIDED, 0, 2, 0]
    assert [oracle(r) for r in rows] == expected
    assert decided_argmax(torch.tensor(rows[:1] + rows[4:5] + rows[6:], dtype=dtype)).tolist() == [0, 0, 0]
    for row, want in zip(rows, expected):
        assert decided_argmax(torch.tensor([row], dtype=dtype)).tolist() == [want], row


@pytest.mark.parametrize("dtype", DTYPES, **DTYPE_IDS)
def test_single_class_rows_are_decided_unless_nan(dtype):
    logits = torch.tensor([[[0.0], [-7.5], [NAN]], [[INF], [-INF], [1e30 if dtype != torch.float16 else 6e4]]],
                          dtype=dtype)
    assert decided_argmax(logits).tolist() == [[0, 0, UNDECIDED], [0, 0, 0]]
    assert [[oracle(r) for r in batch] for batch in logits.to(torch.float64).tolist()] == [[0, 0, UNDECIDED], [0, 0, 0]]


def test_batched_shapes_and_custom_margin():
    logits = torch.tensor([[[0.0, 0.5, 0.0], [1.0, 0.0, 0.2]], [[0.3, 0.3, 0.0], [0.0, 0.0, 2.0]]], dtype=torch.float64)
    assert decided_argmax(logits).tolist() == [[1, 0], [UNDECIDED, 2]]
    assert decided_argmax(logits, margin=0.8).tolist() == [[UNDECIDED, UNDECIDED], [UNDECIDED, 2]]
    assert decided_argmax(logits, margin=0.5).tolist() == [[UNDECIDED, 0], [UNDECIDED, 2]]  # 0.5 - 0 is not > 0.5
