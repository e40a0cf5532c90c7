"""Program == weights: compiled transformers against plain-Python definitions and the interpreter.

The compiler is rasp.weights (docs/turing-programs.md, "Compiling RASP to weights"); every test
compares the transformer's output with an independent oracle: a plain-Python definition of
the program, or the RASP interpreter's dense path (``evaluate(..., fast=False)``).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rasp import lib
from rasp.core import Aggregate, Comparison, Map, Select, SelectorWidth, indices, length, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer

VOCAB = [0, 1, 2, 3]
N = 12
toks = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=N)


@pytest.fixture(scope="module")
def compiled():
    """Compile each program once per test session (a module-level cache would outlive the session
    and hand a later session, e.g. one per mutant of bench/mutate.py, models built by other code)."""
    cache: dict = {}

    def get(name: str, causal: bool, n: int = N):
        if (name, causal, n) not in cache:
            cache[name, causal, n] = compile_to_transformer(PROGRAMS[name](), VOCAB, n, causal=causal)
        return cache[name, causal, n]
    return get


PROGRAMS = {
    "shift_right": lambda: lib.shift_right(tokens, 2, -1),
    "index_select": lambda: lib.index_select(tokens, Map(lambda i: i // 2, indices)),
    "cumsum": lambda: lib.cumsum(Map(lambda t: t % 2 == 1, tokens)),
    "firsts": lambda: lib.firsts(tokens, tokens),
    "lasts": lambda: lib.lasts(tokens, tokens),
    "where": lambda: lib.where(Map(lambda t: t > 1, tokens), tokens, lib.shift_right(tokens, 1, 0)),
    "masked_ngram": lambda: Map(lambda g: sum(x for x in g if x is not None),
                                lib.masked_ngram(tokens, Map(lambda t: t == 3, tokens), 3, edge=0)),
    "length": lambda: length,
    "make_length": lambda: lib.make_length(),
    "reverse": lambda: lib.make_reverse(tokens),
    "hist": lambda: lib.make_hist(),
    "sort_unique": lambda: lib.make_sort_unique(tokens, tokens),
    "frac_prevs": lambda: lib.make_frac_prevs(Map(lambda t: 1 if t == 2 else 0, tokens)),
    "pair_balance": lambda: lib.make_pair_balance(tokens, 0, 1),
    "last_occurrence": lambda: lib.index_select(tokens, Map(lambda j: max(j - 1, 0), lib.lasts(tokens, tokens))),
}


def check(compiled, name: str, causal: bool, xs: list, expected: list | None = None) -> None:
    ct = compiled(name, causal)
    got = ct.run(xs)
    program = ct.program.output_sop
    oracle = evaluate(program, xs, causal=causal, fast=False).column(program)
    if expected is not None:
        assert list(oracle) == pytest.approx(expected)
    if ct.program.output.numerical:
        assert got == pytest.approx(list(oracle), abs=1e-9)
    else:
        assert got == list(oracle)


@settings(max_examples=25, deadline=None)
@given(xs=toks, causal=st.booleans())
def test_lib_helpers(compiled, xs, causal):
    n = len(xs)
    check(compiled, "shift_right", causal, xs, [xs[i - 2] if i >= 2 else -1 for i in range(n)])
    check(compiled, "index_select", causal, xs, [xs[i // 2] for i in range(n)])
    check(compiled, "where", causal, xs, [x if x > 1 else (xs[i - 1] if i else 0) for i, x in enumerate(xs)])
    check(compiled, "masked_ngram", causal, xs)
    check(compiled, "firsts", causal, xs, [xs.index(x) for x in xs])
    last = [max(j for j in range(n if not causal else i + 1) if xs[j] == x) for i, x in enumerate(xs)]
    check(compiled, "lasts", causal, xs, last)
    check(compiled, "last_occurrence", causal, xs, [xs[max(j - 1, 0)] for j in last])


@settings(max_examples=25, deadline=None)
@given(xs=toks)
def test_causal_programs(compiled, xs):
    n = len(xs)
    check(compiled, "cumsum", True, xs, [sum(x % 2 for x in xs[:i + 1]) for i in range(n)])
    check(compiled, "length", True, xs, list(range(1, n + 1)))
    check(compiled, "frac_prevs", True, xs, [sum(x == 2 for x in xs[:i + 1]) / (i + 1) for i in range(n)])


@settings(max_examples=25, deadline=None)
@given(xs=toks)
def test_non_causal_programs(compiled, xs):
    n = len(xs)
    check(compiled, "length", False, xs, [n] * n)
    check(compiled, "make_length", False, xs, [n] * n)
    check(compiled, "reverse", False, xs, xs[::-1])
    check(compiled, "hist", False, xs, [xs.count(x) for x in xs])
    check(compiled, "frac_prevs", False, xs, [sum(x == 2 for x in xs[:i + 1]) / (i + 1) for i in range(n)])
    balance = [(xs[:i + 1].count(0) - xs[:i + 1].count(1)) / (i + 1) for i in range(n)]
    check(compiled, "pair_balance", False, xs, balance)


@settings(max_examples=15, deadline=None)
@given(xs=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4, unique=True))
def test_sort_unique(compiled, xs):
    check(compiled, "sort_unique", False, xs, sorted(xs))


@settings(max_examples=15, deadline=None)
@given(xs=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=N), causal=st.booleans())
def test_selector_combinations_and_max_min(xs, causal):
    programs = [
        SelectorWidth(Select(tokens, tokens, Comparison.LT) | Select(tokens, tokens, Comparison.EQ)),
        SelectorWidth(~Select(tokens, tokens, Comparison.EQ)),
        SelectorWidth(Select(tokens, tokens, Comparison.GEQ) & Select(indices, indices, Comparison.EQ)),
        Aggregate(Select(tokens, tokens, Comparison.LEQ), tokens, reduce="max", default=0),
        Aggregate(Select(tokens, tokens, Comparison.GT), tokens, reduce="min", default=-5),
        Aggregate(Select(tokens, tokens, Comparison.NEQ), indices, reduce="min", default=-1),
    ]
    for program in programs:
        ct = compile_to_transformer(program, VOCAB, N, causal=causal)
        assert ct.run(xs) == list(evaluate(program, xs, causal=causal, fast=False).column(program))


@pytest.mark.parametrize("causal", [True, False])
def test_positions_past_the_one_hot_limit(compiled, causal):
    """At max_seq_len = 48 indices use the 2-dimensional ordinal code (not a 48-wide one-hot)."""
    import random

    rng = random.Random(0)
    for name in ("shift_right", "lasts", "index_select") + (() if causal else ("reverse",)):
        ct = compiled(name, causal, 48)
        assert len([lab for lab in ct.residual_labels if lab.startswith("indices")]) == 2
        for n in (1, 17, 48):
            xs = [rng.choice(VOCAB) for _ in range(n)]
            program = ct.program.output_sop
            assert ct.run(xs) == list(evaluate(program, xs, causal=causal, fast=False).column(program))
