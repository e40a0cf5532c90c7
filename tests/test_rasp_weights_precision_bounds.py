"""The magnitude guard of rasp/weights/precision.py, number by number, against values worked out by hand.

The guard refuses a program where float64 could round a head's score by more than SCORE_SLACK = 2
or an ordinal output's logit by more than LOGIT_SLACK = 1/4 (docs/turing-programs.md, "Not
compiled"). tests/test_rasp_weights_precision.py checks that what compiles equals the interpreter;
here each bound is checked on its own: the coordinate bounds of a small program (each s-op's
largest value and its square, by hand), the score bound ``S`` and its rounding ``(2k + d_head +
1) u S`` of a head written down by hand, and the logit check of the identity on large tokens on
either side of its threshold: the logit ``2 c x - c**2`` of class ``c`` has two terms whose
magnitudes sum to at most ``L = 2 X X + X**2 = 3 X**2``, ``X`` the largest code, and the guard
bounds its rounding by ``3 u L = 9 X**2 / 2**53``, which is 1/4 at ``X = 15 817 710.9``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from rasp.core import (Aggregate, Comparison, Map, Select, SelectorWidth, SequenceMap, indices, numerical,
                       tokens)
from rasp.weights import compile_to_transformer
from rasp.weights.graph import Program
from rasp.weights.heads import HeadSpec
from rasp.weights.layout import Layout
from rasp.weights.precision import (coordinate_bounds, integer_coordinates, onehot_groups, rounding_bound,
                                    score_bound)
from rasp.weights.values import CompileLimitError
from tests.rasp_weights_checks import assert_compiled_agrees

U = Fraction(1, 2**53)


def test_coordinate_bounds_are_each_s_ops_largest_value_and_its_square():
    """Tokens 4097..4136 (ordinal), ``big`` = t - 4000 (97..136), ``small`` = i % 3 (one-hot, before
    ordinal s-ops in the program's order), a width (0..40) with its scratch coordinate, a
    numerical ``(4100 - t) / 4`` (-9..0.75) and two numerical s-ops whose value sets are unknown."""
    vocab = [4097 + i for i in range(40)]
    big = Map(lambda t: t - 4000, tokens).named("big")
    small = Map(lambda i: i % 3, indices).named("small")
    num = numerical(Map(lambda t: (4100 - t) / 4, tokens)).named("num")
    mean = numerical(Aggregate(Select(indices, indices, Comparison.LEQ), num, default=0)).named("mean")
    w = SelectorWidth(Select(small, small, Comparison.EQ)).named("w")
    prod = SequenceMap(lambda a, b: a * b + 1, big, small).named("prod")         # 1..273
    out = numerical(Aggregate(Select(SequenceMap(lambda a, b: a + b, prod, w).named("sum"), big,
                                     Comparison.EQ), mean, default=0)).named("out")
    layout = Layout(Program(out, vocab, 40, True))
    want = {"one": 1, "tokens:BOS": 1, "tokens": 4136, "tokens^2": 4136**2, "big": 136, "big^2": 136**2,
            "indices": 39, "indices^2": 39**2, "small:0": 1, "small:1": 1, "small:2": 1,
            "prod": 273, "prod^2": 273**2, "w": 40, "w^2": 1600, "w:1/(w+1)": 1,
            "sum": 313, "sum^2": 313**2, "num": 9, "mean": math.inf, "out": math.inf}
    assert dict(zip(layout.labels, coordinate_bounds(layout))) == want
    fractional = {"w:1/(w+1)", "num", "mean", "out"}     # the scratch, (4100 - t) / 4, and unknown sets
    assert dict(zip(layout.labels, integer_coordinates(layout))) == {k: k not in fractional for k in want}
    groups = dict(zip(layout.labels, onehot_groups(layout)))
    assert {k for k, g in groups.items() if g >= 0} == {"small:0", "small:1", "small:2"}
    assert len({groups[f"small:{v}"] for v in range(3)}) == 1


def test_a_code_whose_square_passes_2_to_the_53_is_named_with_its_square():
    """Tokens 10**8 .. 10**8 + 39 are ordinal; the largest code's square is over 2^53."""
    top = 10**8 + 39
    with pytest.raises(CompileLimitError) as info:
        compile_to_transformer(Map(lambda t: t + 1, tokens), [10**8 + i for i in range(40)], 4)
    exc = info.value
    assert f"holds the integer code {top}, whose square {top * top} float64 cannot hold exactly" in str(exc)
    assert (exc.what, exc.limit_name, exc.limit) == (f"an integer code of {top}", "2^53 (a code squared)", 2**53)


def test_score_bound_and_its_rounding_for_a_head_written_by_hand():
    """Bounds (1, 3, 9, inf); head dimension 1: query 2 x0 - x1, key x2; dimension 2: query
    x1 / 2, key -4 x0 + 0 x3 (a zero coefficient on an unbounded coordinate adds nothing).
    S = (2 + 3) 9 + (3/2) 4 = 51; the largest feature has k = 2 terms, d_head = 2, so the rounding
    bound is (2 k + d_head + 1) u S = 7 * 51 u."""
    head = HeadSpec(None, "by hand", qk=[({0: 2.0, 1: -1.0}, {2: 1.0}), ({1: 0.5}, {0: -4.0, 3: 0.0})])
    bounds = [1.0, 3.0, 9.0, math.inf]
    assert score_bound(head, bounds) == 51
    assert rounding_bound(head, bounds) == float(7 * 51 * U)
    empty = HeadSpec(None, "no score dimensions")
    assert score_bound(empty, bounds) == 0 and rounding_bound(empty, bounds) == 0


def test_a_one_hot_group_counts_its_largest_coefficient_once():
    """Coordinates 0..2 are one one-hot s-op (one of them is 1), coordinate 3 is bounded by 7.
    Query 2 x0 - 5 x1 + 3 x2, key x3: S = 5 * 7 = 35 (not (2 + 5 + 3) 7 = 70), and the query is one
    non-zero term, so k = 1 and the rounding bound is (2 + 1 + 1) u S = 140 u."""
    head = HeadSpec(None, "by hand", qk=[({0: 2.0, 1: -5.0, 2: 3.0}, {3: 1.0})])
    bounds, groups = [1.0, 1.0, 1.0, 7.0], [0, 0, 0, -1]
    assert score_bound(head, bounds) == 70 and rounding_bound(head, bounds) == float(8 * 70 * U)
    assert score_bound(head, bounds, groups) == 35
    assert rounding_bound(head, bounds, groups=groups) == float(4 * 35 * U)


@pytest.mark.parametrize("query, integer, unit, want", [
    ({0: 2.0}, [True, True], U, 0),                                      # 2 x0 * 3 x1: S = 30, exact
    ({0: 2.5}, [True, True], U, 4 * Fraction(75, 2) * U),                # a coefficient 2.5
    ({0: 2.0}, [True, False], U, 4 * 30 * U),                            # x1 not integer-valued
    ({0: 2.0}, [True, True], Fraction(1, 16), 4 * 30 * Fraction(1, 16)),  # S = 30 > 1/u = 16
    ({0: 2.0}, [True, True], Fraction(1, 32), 0),                        # S = 30 <= 1/u = 32
])
def test_integer_arithmetic_below_one_over_u_rounds_by_nothing(query, integer, unit, want):
    """Query ``query``, key 3 x1, bounds (1, 5): integer coefficients on integer coordinates
    with S <= 1/u give integers of magnitude at most 1/u at every step, which the format holds;
    otherwise the bound is (2 k + d_head + 1) u S = 4 u S."""
    head = HeadSpec(None, "by hand", qk=[(query, {1: 3.0})])
    assert rounding_bound(head, [1.0, 5.0], float(unit), integer=integer) == float(want)


def test_large_scores_are_refused_with_the_rounding_bound_and_the_slack():
    """Tokens 10**7 .. 10**7 + 39 (ordinal) against a one-hot map of them (5 values), which cannot
    carry binary codes: the codes' squares (about 10**14) are exact in float64, but the terms of
    ``beta (2 c_k c_q - c_k**2)`` (beta = 80) reach about 2 * 10**16, which float64 could round by
    more than 2."""
    low = 10**7
    fifth = Map(lambda t: low + (t - low) % 5, tokens)
    with pytest.raises(CompileLimitError) as info:
        compile_to_transformer(SelectorWidth(Select(tokens, fifth, Comparison.EQ)),
                               [low + i for i in range(40)], 4)
    exc = info.value
    assert (exc.limit_name, exc.limit) == ("SCORE_SLACK", 2.0)
    error = float(exc.what.removeprefix("a score rounding bound of "))
    assert exc.what.startswith("a score rounding bound of ") and error > 2
    assert ", so float64 could round a score by " in str(exc) and "over 2 (the margin is 40)" in str(exc)
    assert str(exc).endswith("use smaller integer values (codes)")


def _identity(top: int):
    """The identity on tokens ``top - 39 .. top`` (ordinal), a few inputs, and the logit bound."""
    vocab = [top - 39 + i for i in range(40)]
    return Map(lambda t: t, tokens).named("ident"), vocab, [[vocab[0]], vocab[:5], [vocab[-1], vocab[3], vocab[-1]]], 9 * top**2 * U


def test_an_ordinal_output_just_under_the_logit_threshold_compiles_and_is_exact():
    """X = 15 000 039: 9 X**2 u = 0.225 < 1/4 (a check with a larger constant, a larger logit or the
    square's coordinate for X would refuse it)."""
    program, vocab, inputs, error = _identity(15_000_039)
    assert error < Fraction(1, 4)
    assert_compiled_agrees(program, vocab, 6, True, inputs)


def test_in_float32_the_logit_threshold_is_where_9_x_squared_reaches_2_to_the_22():
    """float32's unit roundoff is 2^-24, so the bound 9 X**2 u passes 1/4 at X = 682.7: X = 639
    (0.219) compiles and agrees with the interpreter in float32, X = 719 (0.277) is refused; both
    compile in float64."""
    program, vocab, inputs, _ = _identity(639)
    assert 9 * 639**2 * Fraction(1, 2**24) < Fraction(1, 4) < 9 * 719**2 * Fraction(1, 2**24)
    assert_compiled_agrees(program, vocab, 6, True, inputs, dtype=torch.float32)
    program, vocab, inputs, _ = _identity(719)
    with pytest.raises(CompileLimitError, match="so float32 could round a logit by 0.277"):
        compile_to_transformer(program, vocab, 4, dtype=torch.float32)
    assert_compiled_agrees(program, vocab, 6, True, inputs)


@pytest.mark.parametrize("output_values", [None, ["never output"]])
def test_an_ordinal_output_just_over_the_logit_threshold_is_refused(output_values):
    """X = 16 000 039: 9 X**2 u = 0.256 > 1/4. A class the program never outputs, listed first,
    has no code and is skipped; the others still count."""
    program, vocab, inputs, error = _identity(16_000_039)
    assert error > Fraction(1, 4)
    with pytest.raises(CompileLimitError) as info:
        compile_to_transformer(program, vocab, 4, output_values=output_values)
    exc = info.value
    assert (exc.what, exc.limit_name, exc.limit) == (f"a logit rounding bound of {float(error):.3g}",
                                                    "LOGIT_SLACK", 0.25)
    logit = 3 * 16_000_039**2
    assert str(exc) == (f"the output 'ident': its logits reach {logit:.3g}, so float64 could round a logit by "
                        f"{float(error):.3g}, over 0.25 (two codes' logits differ by at least 1); use smaller "
                        "integer values (codes)")
