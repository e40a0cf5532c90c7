"""max/min aggregates as weights: compiled transformer == RASP interpreter on value sets that do
not start at 0.

docs/turing-programs.md ("Attention"): a max (min) head adds ``gamma * rank`` on the key side,
where the rank is the value's distance from the smallest (largest) value of its value set, so
the winning key beats BOS (the default) whatever the values are. The strategies reach what a
rank taken from the raw value or code gets wrong: integer codes far from 0 (one-hot and ordinal
layouts, tokens 100..140), negative numbers, numbers closer together than 1, and positions
shifted by a constant. The oracle is the interpreter's dense path (``evaluate(fast=False)``).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rasp.core import Aggregate, Comparison, Map, Select, indices, numerical, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer

CMPS = [Comparison.TRUE, Comparison.EQ, Comparison.LT, Comparison.LEQ, Comparison.GT,
        Comparison.GEQ, Comparison.NEQ]


def _agree(program, vocab, xs, causal, n):
    ct = compile_to_transformer(program, vocab, n, causal=causal)
    want = list(evaluate(program, xs, causal=causal, fast=False).column(program))
    got = ct.run(xs)
    if ct.program.output.numerical:
        assert got == pytest.approx(want, abs=1e-9), (got, want)
    else:
        assert got == want
    return ct


def test_min_over_tokens_100_to_140_and_max_over_negative_numbers():
    """The two programs of the soundness review (the BOS key used to out-score every key), and
    numbers 0.01 apart (the largest must still win by the margin, not by 0.4)."""
    vocab = list(range(100, 141))
    low = Aggregate(Select(tokens, tokens, Comparison.TRUE), tokens, reduce="min", default=0)
    ct = _agree(low, vocab, [120, 105, 130, 140, 100], True, 8)
    assert ct.run([120, 105, 130]) == [120, 105, 105]
    neg = numerical(Aggregate(Select(tokens, tokens, Comparison.TRUE),
                              numerical(Map(lambda t: -100.0 - t, tokens)), reduce="max", default=0))
    ct = _agree(neg, [0, 1, 2, 3], [1, 2, 0], True, 8)
    assert ct.run([1, 2, 0]) == [-101.0, -101.0, -100.0]
    close = numerical(Aggregate(Select(tokens, tokens, Comparison.TRUE),
                                numerical(Map(lambda t: t / 100, tokens)), reduce="max", default=0))
    ct = _agree(close, [0, 1, 2, 3], [1, 2, 0], True, 8)
    assert ct.run([1, 2, 0]) == pytest.approx([0.01, 0.02, 0.02], abs=1e-12)


@st.composite
def cases(draw):
    """A vocabulary of integers ``base + step * i`` (2..40 of them: one-hot up to 32, ordinal
    beyond), a max/min aggregate of tokens, of a numerical affine map of tokens, or of shifted
    positions, under a selector on a small Map of tokens (so tokens keep their own layout)."""
    base = draw(st.integers(-300, 300))
    step = draw(st.integers(1, 3))
    vocab = [base + step * i for i in range(draw(st.integers(2, 40)))]
    n = draw(st.sampled_from([6, 40]))          # 40 positions: indices use the ordinal code
    causal = draw(st.booleans())
    reduce = draw(st.sampled_from(["max", "min"]))
    kind = draw(st.sampled_from(["number", "tokens", "positions"]))
    m = draw(st.integers(1, 3))
    cls = Map(lambda t, m=m: t % m, tokens)
    sel = Select(cls, cls, draw(st.sampled_from(CMPS)))     # TRUE first: shrinks to "select all"
    default = draw(st.integers(-500, 500))
    if kind == "tokens":
        program = Aggregate(sel, tokens, reduce=reduce, default=default)
    elif kind == "positions":
        shift = draw(st.integers(-200, 200))
        program = Aggregate(sel, Map(lambda i, c=shift: i + c, indices), reduce=reduce, default=default)
    else:
        a = draw(st.sampled_from([0.01, -0.003, 1.0, -1.0, 0.5, -0.25]))
        b = draw(st.sampled_from([0.0, -100.0, 37.5, -1e3]))
        value = numerical(Map(lambda t, a=a, b=b: a * t + b, tokens))
        program = numerical(Aggregate(sel, value, reduce=reduce, default=default))
    xs = draw(st.lists(st.sampled_from(vocab), min_size=2, max_size=n))
    return program, vocab, xs, causal, n


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_max_min_compile_to_the_interpreters_values(case):
    program, vocab, xs, causal, n = case
    _agree(program, vocab, xs, causal, n)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_one_hot_values_with_gaps_rank_by_position_in_the_value_set(reduce):
    """One-hot values 0, 7 and 30: the rank is the index in the value set (range 2), not the code
    (range 30), which would outgrow the scale beta = 2 (40 * 2 + 40) of a rejected key."""
    value = Map(lambda t: {0: 0, 1: 7, 2: 30}[t], tokens)
    program = Aggregate(Select(tokens, tokens, Comparison.LT), value, reduce=reduce, default=-1)
    for xs in ([2, 0, 1, 2, 1], [0, 2, 2, 1, 0, 0], [1, 0]):
        _agree(program, [0, 1, 2], xs, True, 6)
        _agree(program, [0, 1, 2], xs, False, 6)
