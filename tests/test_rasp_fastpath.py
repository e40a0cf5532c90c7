"""The fast attention paths (hash, direct, incremental) against the dense path and an
independent nested-loop oracle, for queries that are not integers: fractions, negatives,
attention outputs, infinities and NaN (docs/rasp.md, "Fast paths")."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from rasp import (Aggregate, Comparison, ConstantSelector, Full, IncrementalEvaluator, Map,
                  Select, SelectorWidth, evaluate, indices, length, numerical, tokens)
from rasp.errors import RASPTypeError
from rasp.kernels import classify
from rasp_oracle import outcome, random_programs, ref_eval, selector_trees

EQ, LT, LEQ, GT, GEQ, NEQ = (Comparison.EQ, Comparison.LT, Comparison.LEQ, Comparison.GT,
                             Comparison.GEQ, Comparison.NEQ)


def col(program, toks, **kw):
    return evaluate(program, toks, **kw).column(program)


def every_path(program, toks, causal):
    """Results of fast batch, dense batch and (causal only) incremental evaluation."""
    runs = [col(program, toks, causal=causal), col(program, toks, causal=causal, fast=False)]
    if causal:
        runs.append(IncrementalEvaluator(program).extend(toks))
    return runs


# -------------------------------------------------------------- regression examples

HALF = numerical(Map(lambda n: n / 2, length))


def test_strict_bound_against_half_the_length():
    width = SelectorWidth(Select(indices, HALF, LT))
    assert classify(width.selector)[0] == "hash"
    assert col(width, ["a"]) == [1]                          # indices < 0.5 selects {0}
    assert col(width, ["a", "b", "c"]) == [2, 2, 2]          # indices < 1.5 selects {0, 1}
    assert col(width, ["a", "b", "c"], fast=False) == [2, 2, 2]
    assert every_path(width, "abcd", causal=True) == [[1, 1, 2, 2]] * 3   # p < (p+1)/2


def test_mean_over_a_fractional_strict_bound():
    mean = numerical(Aggregate(Select(indices, HALF, LT), numerical(indices), default=-1))
    # n = 5: keys 0, 1, 2 (< 2.5), mean 1.0; causal row p: keys < (p + 1) / 2
    assert col(mean, "abcde") == [1.0] * 5
    assert every_path(mean, "abcde", causal=True) == [[0.0, 0.0, 0.5, 0.5, 1.0]] * 3


def test_direct_eq_and_fractional_strict_bound():
    sel = Select(indices + 1, indices, EQ) & Select(indices, length / 2, LT)
    prog = Aggregate(sel, tokens)
    assert classify(sel)[0] == "direct"
    # row q reads key q - 1 when q - 1 < n / 2 (non-causal) or < (q + 1) / 2 (causal)
    assert every_path(prog, "aaa", causal=False) == [[None, "a", "a"]] * 2
    assert every_path(prog, "aaa", causal=True) == [[None, "a", "a"]] * 3
    assert every_path(prog, "abcde", causal=False) == [[None, "a", "b", "c", None]] * 2


@pytest.mark.parametrize("query, want", [
    # (query value, {comparison: number of keys j in 0..5 with j + 1 <op> query})
    (2, {LT: 1, LEQ: 2}), (2.0, {LT: 1, LEQ: 2}), (2.5, {LT: 2, LEQ: 2}),
    (Fraction(5, 2), {LT: 2, LEQ: 2}), (0.5, {LT: 0, LEQ: 0}), (-0.5, {LT: 0, LEQ: 0}),
    (-3, {LT: 0, LEQ: 0}), (1, {LT: 0, LEQ: 1}), (math.inf, {LT: 6, LEQ: 6}),
    (-math.inf, {LT: 0, LEQ: 0}), (math.nan, {LT: 0, LEQ: 0}), (2 ** 70 + 0.5, {LT: 6, LEQ: 6}),
    (True, {LT: 0, LEQ: 1}),
])
@pytest.mark.parametrize("causal", [False, True])
def test_index_bound_for_every_kind_of_real_query(query, want, causal):
    for pred, count in want.items():
        width = SelectorWidth(Select(indices + 1, Full(query), pred))
        expect = [min(count, p + 1) if causal else count for p in range(6)]
        assert every_path(width, "abcdef", causal) == [expect] * (3 if causal else 2), pred


@pytest.mark.parametrize("query, key", [(3, 2), (3.0, 2), (Fraction(6, 2), 2), (3 + 0j, 2), (2.5, None),
                                        (-1.0, None), (math.nan, None), (math.inf, None),
                                        ("x", None), (None, None)])
def test_direct_lookup_only_matches_an_exactly_integral_query(query, key):
    prog = Aggregate(Select(indices + 1, Full(query), EQ), tokens, default="-")
    expect = ["-"] * 4 if key is None else ["abcd"[key]] * 4
    assert every_path(prog, "abcd", causal=False) == [expect] * 2


def test_nan_keys_are_never_equal_even_to_the_same_nan_object():
    nan_at_even = Map(lambda t: math.nan if t % 2 == 0 else t, tokens)
    prog = SelectorWidth(Select(nan_at_even, nan_at_even, EQ))
    for causal in (False, True):
        want = ref_eval(prog, [0, 1, 2, 1], causal)
        assert every_path(prog, [0, 1, 2, 1], causal) == [want] * (3 if causal else 2)


def test_unhashable_eq_values_are_an_error_on_the_hash_path_only():
    pairs = Map(lambda t: [t], tokens)                      # lists: comparable, not hashable
    prog = SelectorWidth(Select(pairs, pairs, EQ))
    assert col(prog, "aba", fast=False) == [2, 1, 2]
    with pytest.raises(RASPTypeError, match="not hashable"):
        col(prog, "aba")
    as_tuples = SelectorWidth(Select(Map(tuple, pairs), Map(tuple, pairs), EQ))
    assert col(as_tuples, "aba") == [2, 1, 2]


def test_a_non_real_bound_query_is_an_error_on_every_path():
    prog = SelectorWidth(Select(tokens, Full("q"), EQ) & Select(indices, Full("x"), LT))
    for kw in (dict(), dict(fast=False), dict(causal=True)):
        with pytest.raises(RASPTypeError):
            col(prog, "ab", **kw)


def test_dense_comparisons_are_exact_beyond_float_precision():
    big = 2 ** 53 + 1                        # numpy would round it to 2.0 ** 53
    prog = SelectorWidth(Select(tokens, Full(2.0 ** 53), EQ))
    assert col(prog, [big, 2 ** 53], fast=False) == [1, 1] == col(prog, [big, 2 ** 53])
    prog = SelectorWidth(Select(tokens, Full(2.0 ** 53), LEQ))
    assert col(prog, [big, 2 ** 53], fast=False) == [1, 1]


# ------------------------------------------------- property: fast == dense == oracle

INDEX_KEYS = [indices, indices + 1, indices - 2, indices + 3]
VALUE_KEYS = [tokens, Map(lambda t: t % 3, tokens)]
QUERIES = [
    indices, length, tokens, HALF, length / 3,
    indices * 0.5 + 0.25, indices * 0.5, 1 - indices * 0.75, -(length / 2), indices - length / 2,
    Full(-0.5), Full(2.5), Full(-2),
    numerical(Aggregate(Select(indices, indices, LEQ), numerical(indices), default=0)),
    Map(lambda i: (math.inf, -math.inf, math.nan)[i % 3] if i > 3 else i + 0.5, indices),
]
PREDS = list(Comparison)


@st.composite
def atoms(draw):
    if draw(st.integers(0, 9)) == 0:
        return ConstantSelector(draw(st.booleans()))
    index_key = draw(st.integers(0, 4)) > 0                 # mostly fast-path shapes
    keys = draw(st.sampled_from(INDEX_KEYS if index_key else VALUE_KEYS))
    pred = draw(st.sampled_from([EQ, LT, LEQ] * 3 + PREDS))
    return Select(keys, draw(st.sampled_from(QUERIES)), pred)


def selectors():
    return selector_trees(atoms(), ["and"] * 4 + ["or", "not"])


def programs():
    return random_programs(selectors())



TOKENS = st.lists(st.one_of(st.integers(-2, 5), st.sampled_from([0.5, 1.0, -1.5])),
                  min_size=1, max_size=10)


@settings(max_examples=250, deadline=None)
@given(prog=programs(), toks=TOKENS, causal=st.booleans())
def test_fast_equals_dense_equals_oracle_on_fractional_queries(prog, toks, causal):
    expected = outcome(lambda: ref_eval(prog, toks, causal))
    assert outcome(lambda: col(prog, toks, causal=causal)) == expected
    assert outcome(lambda: col(prog, toks, causal=causal, fast=False)) == expected
    if causal:
        assert outcome(lambda: IncrementalEvaluator(prog).extend(toks)) == expected


def test_the_generator_mostly_reaches_the_fast_paths():
    kinds: dict[str, int] = {}

    @settings(max_examples=150, deadline=None, database=None, derandomize=True)
    @given(sel=selectors())
    def tally(sel):
        kind = classify(sel)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    tally()
    fast = kinds.get("hash", 0) + kinds.get("direct", 0)
    assert fast >= 0.25 * sum(kinds.values()) and kinds.get("direct", 0) > 0, kinds
