"""rasp.weights: the paths of the compiler's newer analyses that small programs reach (selection
keys, Or/Not inside And, order widths that other ops read, value sets of means over one
selection near the lookup limit), each against the interpreter's dense path or values worked
out by hand."""
from __future__ import annotations

import random

import pytest

from rasp import lib
from rasp.core import (Aggregate, Comparison as C, Map, Select, SelectorWidth, SequenceMap, indices,
                       numerical, tokens)
from rasp.evaluate import evaluate
from rasp.tracr_ops import ConstantSelector, LinearSequenceMap
from rasp.weights import CompileError, compile_to_transformer, graph
from rasp.weights.graph import Program
from rasp.weights.selectors import selection_key

VOCAB = [0, 1, 2, 3]


def _interpreter(program, xs, causal=True):
    return list(evaluate(program, xs, causal=causal, fast=False).column(program))


def test_selection_keys_are_equal_exactly_for_the_same_selection():
    a, b = Select(tokens, tokens, C.LT), Select(indices, indices, C.EQ)
    f, g = (lambda k, q: k == q + 1), (lambda k, q: k == q + 1)
    same = [(Select(tokens, tokens, C.LT), a), (~a, ~Select(tokens, tokens, C.LT)), (a & b, Select(tokens, tokens, C.LT) & b),
            (Select(tokens, tokens, f), Select(tokens, tokens, f))]
    for x, y in same:
        assert selection_key(x) == selection_key(y)
    different = [(a, Select(tokens, tokens, C.GT)), (a, Select(tokens, indices, C.LT)), (~a, ~b), (a & b, a | b),
                 (a & b, a & Select(indices, indices, C.LT)), (b & a, Select(indices, indices, C.LT) & a),
                 (Select(tokens, tokens, f), Select(tokens, tokens, g)),
                 (ConstantSelector([[True]]), ConstantSelector([[True]]))]
    for x, y in different:
        assert selection_key(x) != selection_key(y)


@pytest.mark.parametrize("first", [True, False])
def test_an_or_over_two_s_op_pairs_inside_an_and(first):
    mixed = Select(tokens, tokens, C.LT) | Select(indices, indices, C.EQ)
    plain = Select(tokens, tokens, C.NEQ)
    program = SelectorWidth(mixed & plain if first else plain & mixed)
    ct = compile_to_transformer(program, VOCAB, 8)
    for xs in ([3, 1, 2, 0, 3], [0, 0, 1], [2] * 8):
        assert ct.run(xs) == _interpreter(program, xs)


def test_an_order_width_that_other_ops_read(monkeypatch):
    """TABLE_MAX lowered to 8: two order widths, the first over 4 values (a table), the second
    over 20 (bits), read by a map, by a tuple equality and by an aggregate."""
    monkeypatch.setattr(graph, "TABLE_MAX", 8)
    vocab = list(range(20))
    small = SelectorWidth(Select(Map(lambda t: t % 4, tokens), Map(lambda t: t % 4, tokens), C.LT))
    count = SelectorWidth(Select(tokens, tokens, C.GT)).named("count")
    doubled = Map(lambda w: 2 * w + 1, count)
    pair = SequenceMap(lib.tuple_pair, count, Map(lambda t: t % 2, tokens))
    same = Aggregate(Select(pair, pair, C.EQ), tokens, reduce="max", default=-1)
    program = SequenceMap(lambda a, b: a * 1000 + b, SequenceMap(lambda x, y: x * 50 + y, doubled, small), same)
    ct = compile_to_transformer(program, vocab, 10)
    assert any(node.label == "count_count4" for node in ct.program.nodes)
    rng = random.Random(4)
    for _ in range(5):
        xs = [rng.choice(vocab) for _ in range(rng.randint(1, 10))]
        assert ct.run(xs) == _interpreter(program, xs)


def test_an_order_width_over_17_values_needs_five_bits(monkeypatch):
    """Ranks 0..16: the rank 16 has its only 1 in bit 4."""
    monkeypatch.setattr(graph, "TABLE_MAX", 8)
    program = SelectorWidth(Select(tokens, tokens, C.LT))
    vocab = list(range(17))
    ct = compile_to_transformer(program, vocab, 6)
    assert any(node.label.endswith("_bit4") for node in ct.program.nodes)
    for xs in ([16, 0, 15, 16, 8], [16], [3, 16, 16, 2, 9, 1]):
        assert ct.run(xs) == _interpreter(program, xs)


def test_an_order_width_with_an_unknown_value_set_is_refused_by_the_compiler(monkeypatch):
    monkeypatch.setattr(graph, "TABLE_MAX", 8)
    mean = numerical(Aggregate(Select(indices, indices, C.LEQ), numerical(tokens), default=0))
    for program in (SelectorWidth(Select(mean, tokens, C.LT)), SelectorWidth(Select(tokens, mean, C.LT))):
        with pytest.raises(CompileError):
            compile_to_transformer(program, list(range(20)), 6)


def test_order_values_that_do_not_compare_are_refused(monkeypatch):
    monkeypatch.setattr(graph, "TABLE_MAX", 2)
    mixed = Map(lambda t: "x" if t == 0 else t, tokens).named("mixed")
    with pytest.raises(CompileError, match="'w': an order comparison needs mutually comparable values"):
        compile_to_transformer(SelectorWidth(Select(mixed, mixed, C.LT)).named("w"), VOCAB, 4)


def _balance(n, default=0, values=(0, 1)):
    def mean(t):
        return numerical(Aggregate(Select(indices, indices, C.LEQ),
                                   numerical(Map(lambda x, t=t: values[1] if x == t else values[0], tokens)),
                                   default=default))
    return numerical(LinearSequenceMap(mean(1), mean(2), 1, -1)).named("bal")


@pytest.mark.parametrize("limit, shared", [(80, True), (79, False)])
def test_the_shared_value_set_counts_its_entries_against_the_lookup_limit(monkeypatch, limit, shared):
    """n = 8, numerators from -w to w: sum over w of (2 w + 1) = 80 entries."""
    monkeypatch.setattr(graph, "LOOKUP_MAX", limit)
    node = next(x for x in Program(_balance(8), VOCAB, 8, True).nodes if x.label == "bal")
    want = sorted({m / w for w in range(1, 9) for m in range(-w, w + 1)})
    assert (node.values is not None and node.values == pytest.approx(want)) == shared


def test_one_position_lists_the_averages_of_width_one():
    node = next(x for x in Program(_balance(1), VOCAB, 1, True).nodes if x.label == "bal")
    assert node.values == [-1.0, 0.0, 1.0]


def test_means_that_the_shared_list_cannot_cover_fall_back():
    """A default that is not a number, or averaged values that are not integers: no shared list;
    the product path then refuses the first (its map fails on None), and the second's means have
    no value set (as in tracr, only means of {0, 1} do), so neither has the map."""
    with pytest.raises(CompileError, match="'bal': its function fails on the input value"):
        Program(_balance(6, None), VOCAB, 6, True)
    node = next(x for x in Program(_balance(6, 0, (0, 0.5)), VOCAB, 6, True).nodes if x.label == "bal")
    assert node.values is None and "not all in {0, 1}" in node.unknown


def test_a_table_width_before_a_bit_width_leaves_the_second_unrolled(monkeypatch):
    """The unrolling skips a width over few values and goes on to the next one."""
    monkeypatch.setattr(graph, "TABLE_MAX", 8)
    small = SelectorWidth(Select(Map(lambda t: t % 3, tokens), Map(lambda t: t % 3, tokens), C.LT))
    big = SelectorWidth(Select(tokens, tokens, C.LT)).named("big")
    program = SequenceMap(lambda a, b: a * 100 + b, small, big)
    prog = Program(program, list(range(20)), 6, True)
    assert [n.label for n in prog.nodes].index("big_count0") > 0
    ct = compile_to_transformer(program, list(range(20)), 6)
    for xs in ([19, 3, 7, 7, 0], [5, 4, 3, 2, 1, 0]):
        assert ct.run(xs) == _interpreter(program, xs)


def test_a_tuple_keeps_its_other_part_when_its_order_width_is_unrolled(monkeypatch):
    """(count, t mod 2) with count an order width over 20 values (bits, TABLE_MAX lowered to 8):
    the unrolled count replaces its own part only. On [9, 4, 7] positions 1 and 2 both have count 1
    but parities 0 and 1, so the tuple equality selects position 2 alone there (a width of 1 where
    (count, count) would give 2), and the map of the tuple tells them apart."""
    monkeypatch.setattr(graph, "TABLE_MAX", 8)
    count = SelectorWidth(Select(tokens, tokens, C.GT)).named("count")
    pair = lib.make_pair(count, Map(lambda t: t % 2, tokens)).named("pair")
    twins = SelectorWidth(Select(pair, pair, C.EQ))
    program = SequenceMap(lambda a, b: a * 100 + b, Map(lambda p: 2 * p[0] + p[1], pair), twins)
    ct = compile_to_transformer(program, list(range(20)), 6)
    assert any(node.label == "count_count4" for node in ct.program.nodes)  # unrolled
    assert _interpreter(program, [9, 4, 7]) == [101, 201, 301]
    for xs in ([9, 4, 7], [19, 2, 11, 6, 3, 8], [0, 1, 0, 1]):
        assert ct.run(xs) == _interpreter(program, xs)
