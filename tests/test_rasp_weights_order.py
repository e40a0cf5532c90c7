"""rasp.weights: selector widths of order comparisons over more value sets than a one-hot table
holds (docs/turing-programs.md, "Attention"; rasp/weights/order.py), and selector widths of
equalities between computed codes. Oracles: the interpreter's dense path and Python's sorted."""
from __future__ import annotations

import random

import pytest

from rasp import lib
from rasp.core import Comparison, Map, Select, SelectorWidth, SequenceMap, indices, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer, graph
from rasp.weights.graph import Program

INTS = list(range(20))


def _interpreter(program, xs, causal):
    return list(evaluate(program, xs, causal=causal, fast=False).column(program))


QUERIES = {"shifted": lambda t: (7 * t + 3) % 19,   # 19 values
           "halves": lambda t: t % 5 + 0.5}          # 5 values, none of them a key value


@pytest.mark.parametrize("cmp", [Comparison.LT, Comparison.LEQ, Comparison.GT, Comparison.GEQ])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_order_widths_over_large_value_sets_count_exactly(monkeypatch, cmp, causal, query):
    """With the table limit lowered to 8, ``tokens`` (20 values) against a map of them goes
    through the bits (ranks come from the union of both value sets, so a query value that no key
    takes still compares right); one side over the limit is enough."""
    monkeypatch.setattr(graph, "TABLE_MAX", 8)
    shifted = Map(QUERIES[query], tokens).named("shifted")
    program = SelectorWidth(Select(tokens, shifted, cmp)).named("count")
    prog = Program(program, INTS, 12, causal)
    labels = {node.label for node in prog.nodes}
    assert "count_count0" in labels and "count_key_bit4" in labels and "count_query_bit4" in labels
    assert ("count_equal" in labels) == (cmp in (Comparison.LEQ, Comparison.GEQ))
    ct = compile_to_transformer(program, INTS, 12, causal=causal)
    rng = random.Random(len(query) + 7 * causal + 13 * len(cmp.value))
    for _ in range(8):
        xs = [rng.choice(INTS) for _ in range(rng.randint(1, 12))]
        assert ct.run(xs) == _interpreter(program, xs, causal), xs


@pytest.mark.parametrize("values, bits", [(128, False), (129, True)])
def test_widths_count_by_bits_past_128_values(values, bits):
    """The documented switch: a one-hot table up to 128 values, bits past it."""
    program = SelectorWidth(Select(tokens, tokens, Comparison.LT))
    assert any("_bit" in node.label for node in Program(program, list(range(values)), 6, True).nodes) == bits


def test_make_sort_past_the_table_limit_sorts_exactly():
    """1000 keys (5 values x 200 positions), over TABLE_MAX = 512: refused before bits."""
    n = 200
    program = lib.make_sort(tokens, tokens, max_seq_len=n, min_key=1)
    ct = compile_to_transformer(program, [1, 2, 3, 4, 5], n, causal=False)
    rng = random.Random(3)
    for length in (1, 7, n):
        xs = [rng.choice([1, 2, 3, 4, 5]) for _ in range(length)]
        assert ct.run(xs) == sorted(xs) == _interpreter(program, xs, False)


def test_a_width_of_an_equality_between_computed_codes_is_exact():
    """``keys = -hist + i/200`` has 40 200 values, computed by an MLP lookup. Its squared code
    (about 1.6e9), interpolated by that lookup from a slightly inexact input, made the width's
    selected keys and BOS differ by more than its decoder tolerates (2 of 5 inputs wrong); a
    width compares codes by their bits, whose errors do not grow with the codes."""
    n = 200
    hist = (-1 * lib.make_hist()).named("hist")
    keys = SequenceMap(lambda x, i: x + i / n, hist, indices).named("keys")
    program = SelectorWidth(Select(keys, keys, Comparison.EQ))
    ct = compile_to_transformer(program, ["a", "b", "c", "d"], n, causal=False)
    assert ct.layout.binary(ct.program.by_uid[keys.uid])
    rng = random.Random(0)
    for _ in range(3):
        xs = [rng.choice("abcd") for _ in range(n)]
        assert ct.run(xs) == _interpreter(program, xs, False) == [1] * n
