"""rasp.weights: Or and Not over selects that compare different s-ops (docs/turing-programs.md,
"Attention"). An attention score is a sum over one key and one query subspace, so the compiler
adds the s-op of the tuple of the compared s-ops on each side and builds one table over the
tuples. The oracle is the interpreter's dense path; trees are drawn at random."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rasp.core import (Aggregate, Comparison, Map, Select, SelectorWidth, indices, tokens)
from rasp.evaluate import evaluate
from rasp.tracr_ops import ConstantSelector
from rasp.weights import CompileError, compile_to_transformer
from rasp.weights.graph import CompileLimitError

VOCAB = [0, 1, 2, 3]
PARITY = Map(lambda t: t % 2, tokens).named("parity")
HALF = Map(lambda i: i // 2, indices).named("half")
SOPS = [tokens, indices, PARITY, HALF]
CMPS = [Comparison.EQ, Comparison.LT, Comparison.LEQ, Comparison.GT, Comparison.NEQ]


def _interpreter(program, xs, causal):
    return list(evaluate(program, xs, causal=causal, fast=False).column(program))


@st.composite
def selector_trees(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return Select(draw(st.sampled_from(SOPS)), draw(st.sampled_from(SOPS)), draw(st.sampled_from(CMPS)))
    kind = draw(st.sampled_from(["and", "or", "not"]))
    a = draw(selector_trees(depth=depth - 1))
    if kind == "not":
        return ~a
    b = draw(selector_trees(depth=depth - 1))
    return a & b if kind == "and" else a | b


@settings(max_examples=40, deadline=None)
@given(tree=selector_trees(), causal=st.booleans(), reduce=st.sampled_from(["width", "max", "min"]),
       inputs=st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=8), min_size=2, max_size=4))
def test_random_and_or_not_trees_compile_exactly(tree, causal, reduce, inputs):
    program = (SelectorWidth(tree) if reduce == "width"
               else Aggregate(tree, tokens, reduce=reduce, default=-1))
    ct = compile_to_transformer(program, VOCAB, 8, causal=causal)
    for xs in inputs:
        assert ct.run(xs) == _interpreter(program, xs, causal), xs


@pytest.mark.parametrize("causal", [True, False])
def test_an_or_over_tokens_and_positions_reads_the_tuples_it_adds(causal):
    sel = (Select(tokens, tokens, Comparison.LT) | Select(indices, indices, Comparison.EQ)).named("mixed")
    program = SelectorWidth(sel)
    ct = compile_to_transformer(program, VOCAB, 10, causal=causal)
    labels = ct.layout.labels
    assert any(label.startswith("mixed_keys:") for label in labels)
    assert any(label.startswith("mixed_queries:") for label in labels)
    for xs in ([0], [3, 2, 1, 0], [1, 1, 2, 0, 3, 3, 0, 2, 1, 0]):
        assert ct.run(xs) == _interpreter(program, xs, causal)


def test_three_s_ops_on_one_side_make_a_triple():
    sel = ~(Select(tokens, tokens, Comparison.EQ) | Select(indices, indices, Comparison.GT)
            | Select(PARITY, tokens, Comparison.EQ))
    program = Aggregate(sel, tokens, reduce="max", default=-1)
    ct = compile_to_transformer(program, VOCAB, 6, causal=False)
    for xs in ([2, 0, 1, 3, 3, 1], [0, 0], [3, 1, 2]):
        assert ct.run(xs) == _interpreter(program, xs, False)


def test_a_constant_selector_inside_an_or_is_refused_by_name():
    sel = (Select(tokens, tokens, Comparison.EQ) | ConstantSelector([[True, False], [True, True]]).named("tri"))
    with pytest.raises(CompileError, match="Or/Not over the ConstantSelector 'tri' is not compiled"):
        compile_to_transformer(SelectorWidth(sel), VOCAB, 2)


def test_a_tuple_over_the_table_limit_is_refused_with_the_limit():
    """tokens x indices at 200 positions: 800 values, over TABLE_MAX = 512."""
    sel = Select(tokens, tokens, Comparison.LT) | Select(indices, indices, Comparison.EQ)
    with pytest.raises(CompileLimitError) as info:
        compile_to_transformer(SelectorWidth(sel), VOCAB, 200)
    assert (info.value.limit_name, info.value.limit) == ("TABLE_MAX", 512)


def test_four_s_ops_on_one_side_give_each_partial_tuple_its_own_dimensions():
    """Keys tokens, indices, parity and half (6 x 6 x 2 x 3 values): the partial tuples (36 and 72
    values, over ONEHOT_MAX = 32) are ordinal, each with its own two dimensions; the full one (216)
    is the table's one-hot key. Two partial tuples with one name would make two dimensions
    'four_keys' and compile nothing."""
    sel = (Select(tokens, tokens, Comparison.EQ) | Select(indices, tokens, Comparison.LT)
           | Select(PARITY, tokens, Comparison.GT) | Select(HALF, tokens, Comparison.EQ)).named("four")
    program = SelectorWidth(sel)
    ct = compile_to_transformer(program, list(range(6)), 6, causal=False)
    labels = ct.layout.labels
    assert {"four_keys0", "four_keys0^2", "four_keys1", "four_keys1^2"} <= set(labels)
    assert any(label.startswith("four_keys:") for label in labels)
    for xs in ([5, 0, 3, 1, 2, 4], [0, 0], [2, 5, 1]):
        assert ct.run(xs) == _interpreter(program, xs, False)
