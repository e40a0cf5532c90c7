"""Exact rational arithmetic with hard-max attention against Python integers."""
from __future__ import annotations

import random
from fractions import Fraction

from constructions.addition import START_ID, residual_basis
from constructions.addition.certify.exact import ExactModel, check_pairs, decided
from lengthgen.decode import DECISION_MARGIN
from lengthgen.tasks import ADDITION

D = 23  # P = 3, n_max = 6


def test_all_inputs_up_to_two_digits_and_a_sample_at_three_and_four() -> None:
    model = ExactModel.build(D, START_ID + 4 + 1)
    for n in (1, 2):
        count, wrong = check_pairs(model, n, ((a, b) for a in range(10**n) for b in range(10**n)))
        assert (count, wrong) == (100**n, [])
    rng = random.Random(3)
    for n in (3, 4):
        pairs = [(rng.randrange(10**n), rng.randrange(10**n)) for _ in range(40)]
        pairs += [(10**n - 1, 10**n - 1), (10**n - 1, 1), (0, 0)]
        assert check_pairs(model, n, pairs) == (len(pairs), [])


def test_scores_are_M_times_rationals() -> None:
    model = ExactModel.build(D, START_ID + 3)
    assert all(isinstance(v, Fraction) for form in model.form for row in form.values() for v in row.values())
    # query '=' at ID s+1 against the sink '$' (ID 0): score M·P with P = 3
    assert model.score(0, (ADDITION.EQUALS, START_ID + 1), (ADDITION.BOS, 0)) == 3


def test_a_wrong_weight_is_caught() -> None:
    model = ExactModel.build(D, START_ID + 2 + 1)
    pre_sum = residual_basis(D).index("PRE_SUM")
    for e, row in model.O[0].items():
        if pre_sum in row:
            row[pre_sum] = Fraction(2)  # head 1 writes 2·mean instead of 3·mean
    _, wrong = check_pairs(model, 2, [(a, b) for a in range(0, 100, 7) for b in range(0, 100, 11)])
    assert wrong


def test_exact_predictions_need_the_decision_margin() -> None:
    """A tie, or a lead of at most the margin, decides nothing; a larger lead does."""
    margin = Fraction(DECISION_MARGIN)
    assert decided([Fraction(0), Fraction(1), Fraction(1)]) is None
    assert decided([Fraction(1), 1 - margin, Fraction(0)]) is None
    assert decided([Fraction(1), Fraction(1) - margin - Fraction(1, 10**9), Fraction(0)]) == 0
    assert decided([Fraction(-3), Fraction(2), Fraction(0)]) == 1
