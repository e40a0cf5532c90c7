"""Compiled transformers of tracr's frequency programs, equal numbers, refusals and linear size.

Every exactness test runs the compiled transformer (rasp.weights, docs/turing-programs.md,
"Compiling RASP to weights") and compares it with the RASP interpreter's dense path
(``evaluate(..., fast=False)``) and, where one is short, a plain-Python definition.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from rasp import lib
from rasp.core import (Aggregate, Comparison, Map, Select, SelectorWidth, SequenceMap, indices,
                       length, numerical, tokens)
from rasp.evaluate import evaluate
from rasp.tracr_ops import LinearSequenceMap
from rasp.turing.cli import main
from rasp.weights import compile_to_transformer
from rasp.weights.graph import CompileError

LETTERS = ["a", "b", "c"]


def _inputs(n: int, vocab: list, count: int, seed: int = 0) -> list[list]:
    rng = random.Random(seed)
    lengths = [1, n] + [rng.randint(1, n) for _ in range(count - 2)]
    return [[rng.choice(vocab) for _ in range(k)] for k in lengths]


def _agree(program, vocab: list, n: int, causal: bool, count: int = 25, oracle=None) -> None:
    ct = compile_to_transformer(program, vocab, n, causal=causal)
    for xs in _inputs(n, vocab, count):
        want = list(evaluate(program, xs, causal=causal, fast=False).column(program))
        if oracle is not None:
            assert want == oracle(xs)
        assert ct.run(xs) == want, xs


# ------------------------------------------------- order comparisons on a computed s-op


def _count_less_freq(xs: list, k: int = 2) -> list:
    counts = Counter(xs)
    return [sum(counts[x] <= k for x in xs)] * len(xs)


def _sort_freq(xs: list) -> list:
    counts = Counter(xs)
    return [xs[i] for i in sorted(range(len(xs)), key=lambda i: (-counts[xs[i]], i))]


@pytest.mark.parametrize("causal", [False, True])
def test_order_comparison_on_the_histogram_compiles_exactly(causal):
    hist = lib.make_hist()
    program = SelectorWidth(Select(hist, hist, Comparison.LT))
    oracle = None
    if not causal:
        def oracle(xs):
            c = Counter(xs)
            return [sum(c[y] < c[x] for y in xs) for x in xs]
    for n in (5, 10, 20):
        _agree(program, LETTERS, n, causal, oracle=oracle)


@pytest.mark.parametrize("n", [5, 10, 20])
@pytest.mark.parametrize("causal", [False, True])
def test_tracr_count_less_freq_and_sort_freq_compile_exactly(n, causal):
    _agree(lib.make_count_less_freq(2), LETTERS, n, causal,
           oracle=None if causal else _count_less_freq)
    _agree(lib.make_sort_freq(n), LETTERS, n, causal, count=15, oracle=None if causal else _sort_freq)


def test_or_of_selects_over_different_s_ops_compiles():
    program = SelectorWidth(Select(tokens, tokens, Comparison.LT) | Select(indices, indices, Comparison.LT))
    _agree(program, LETTERS, 5, True)


# --------------------------------------------------------------------- equal numbers


@pytest.mark.parametrize("causal", [False, True])
def test_an_int_and_an_equal_float_select_each_other(causal):
    """``i / 2`` is a float; key ``j`` (an int) must match it exactly when ``j == i / 2``."""
    half = Map(lambda i: i / 2, indices)
    program = Aggregate(Select(indices, half, Comparison.EQ), tokens, default="-")
    _agree(program, LETTERS, 12, causal,
           oracle=lambda xs: [xs[i // 2] if i % 2 == 0 else "-" for i in range(len(xs))])
    as_float = Map(lambda i: float(i), indices)
    program = SelectorWidth(Select(as_float, Map(lambda t: {"a": 0, "b": 1, "c": 2}[t], tokens),
                                   Comparison.EQ))
    _agree(program, LETTERS, 12, causal)


# ------------------------------------------------------------------------ refusals


def test_an_unknown_value_set_names_its_real_cause():
    sevenths = Map(lambda n: n / 7, length)                   # 1000 non-integer values
    wide = numerical(LinearSequenceMap(sevenths, indices, 0.5, 0.5)).named("wide")
    with pytest.raises(CompileError) as info:
        compile_to_transformer(Map(lambda v: v > 3, wide), [0], 1000, causal=False)
    msg = str(info.value)
    assert "mean" not in msg and "1000000" in msg and "LOOKUP_MAX = 400000" in msg, msg

    mean = numerical(Aggregate(Select(indices, indices, Comparison.LEQ), numerical(tokens), default=0))
    with pytest.raises(CompileError, match=r"not all in \{0, 1\}"):
        compile_to_transformer(Map(lambda v: v > 0.5, mean), [0, 1, 2], 8)
    with pytest.raises(CompileError, match="max_seq_len = 512 .here 513."):
        compile_to_transformer(Map(lambda v: v > 0.5, mean), [0, 1], 513)


def test_a_table_over_the_lookup_limit_names_the_limit_and_the_size():
    product = SequenceMap(lambda a, b: a * b, length, indices)     # not affine
    with pytest.raises(CompileError, match=r"1000000 entries .*1000 x 1000.*LOOKUP_MAX = 400000"):
        compile_to_transformer(product, [0], 1000, causal=False)


def test_cli_transformer_backend_over_a_limit_is_one_line(capsys):
    """A 40-state, 40-symbol machine: the local rule's table (|classes|^2 x |tokens|) passes
    LOOKUP_MAX whatever the input."""
    status = main(["--machine", "random:1:40:40", "--input", "s0 s1 s1 s0 s1",
                   "--backend", "transformer", "--mode", "teacher"])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "LOOKUP_MAX = 400000" in lines[0] and "--backend interpreter" in lines[0]
    assert "fewer states and symbols" in lines[0] and "sequencemap" not in lines[0]


def test_a_lookup_of_seven_inputs_is_exact():
    """7 shifted tokens in one lookup: 7! orders of the inputs are not all tried (ORDER_BUDGET),
    the k orders with one input most significant are, and the table is exact."""
    window = Map(lib.tuple_singleton, tokens)
    for d in range(1, 7):
        window = SequenceMap(lib.tuple_append, window, lib.shift_right(tokens, d, "_"))
    program = Map(lambda w: sum(x == "a" for x in w) + 2 * (w[-1] == "_"), window)
    for causal in (True, False):
        _agree(program, LETTERS, 10, causal, count=10)


# ------------------------------------------------------------------ linear size


def _reverse(n: int):
    return compile_to_transformer(lib.make_reverse(tokens), LETTERS, n, causal=False)


def test_reverse_has_linearly_many_parameters_and_is_exact():
    small, large = _reverse(200), _reverse(400)
    ratio = large.stats["params"] / small.stats["params"]
    assert ratio < 2.5, (small.stats, large.stats)
    assert large.stats["d_mlp"] <= 2 * 400 + 1
    program = large.program.output_sop
    for xs in _inputs(400, LETTERS, 4):
        assert large.run(xs) == list(evaluate(program, xs, causal=False, fast=False).column(program)) == xs[::-1]


def test_numerical_linear_maps_have_no_hidden_units():
    opens = numerical(Aggregate(Select(indices, indices, Comparison.LEQ),
                                numerical(Map(lambda t: 1 if t == 0 else 0, tokens)), default=0))
    closes = numerical(Aggregate(Select(indices, indices, Comparison.LEQ),
                                 numerical(Map(lambda t: 1 if t == 1 else 0, tokens)), default=0))
    balance = numerical(LinearSequenceMap(opens, closes, 1, -1))
    scaled = numerical(Map(lambda x: 2 * x, numerical(-balance)))        # exact on floats: verified affine
    for causal in (False, True):
        ct = compile_to_transformer(scaled, [0, 1], 10, causal=causal)
        assert ct.stats["mlp_units"] == 0, ct.describe()
        for xs in _inputs(10, [0, 1], 20):
            want = [-2 * (xs[:i + 1].count(0) - xs[:i + 1].count(1)) / (i + 1) for i in range(len(xs))]
            assert ct.run(xs) == pytest.approx(want, abs=1e-9)


def test_a_nearly_affine_map_is_not_taken_for_an_affine_one():
    """``i + (i == 7)`` agrees with ``i`` except at one value: a lookup table, still exact."""
    bent = Map(lambda i: i + (1 if i == 7 else 0), indices)
    opp = SequenceMap(lambda a, b: a - b + (1 if (a, b) == (9, 2) else 0), length, bent)
    program = Aggregate(Select(indices, Map(lambda v: v - 1, opp), Comparison.EQ), tokens, default="-")
    _agree(program, LETTERS, 12, False)


def test_affine_forms_are_checked_exactly():
    from fractions import Fraction

    from rasp.weights.affine import affine_form

    xs, ys = list(range(-3, 12)), list(range(0, 9))
    form = affine_form(Map(lambda x: 3 * x + 1, indices), [xs], 10**6)
    assert (form.coeffs, form.const, form.integral) == ((3,), 1, True)
    form = affine_form(SequenceMap(lambda x, y: (x - 2 * y) / 4, indices, indices), [xs, ys], 10**6)
    assert (form.coeffs, form.const, form.integral) == ((Fraction(1, 4), Fraction(-1, 2)), 0, False)
    assert affine_form(Map(lambda x: x * 0.1, indices), [xs], 10**6) is None        # rounds at x = 3
    assert affine_form(Map(lambda x: x > 2, indices), [xs], 10**6) is None          # booleans
    bent = SequenceMap(lambda x, y: x - y + (x == 9 and y == 2), indices, indices)
    assert affine_form(bent, [xs, ys], 10**6) is None                             # off at one pair
    assert affine_form(bent, [xs, ys], 100) is None                               # too many pairs to check
    form = affine_form(length - indices, [list(range(1, 10**4 + 1)), list(range(10**4))], 100)
    assert (form.coeffs, form.integral) == ((1, -1), True)                        # by definition


def test_affine_chains_fold_only_when_nothing_else_reads_the_link():
    """``make_reverse``'s ``length - indices`` folds into ``- 1`` (3 layers, not 4); a link that a
    selector or a non-affine map also reads keeps its own MLP, and the results stay exact."""
    assert _reverse(200).stats["layers"] == 3
    opp = (length - indices).named("opp")
    back = Aggregate(Select(indices, opp - 1, Comparison.EQ), tokens, default="-")
    both_affine = SequenceMap(lambda a, b: a + b, back,
                         Aggregate(Select(indices, opp - 2, Comparison.EQ), tokens, default="-"))
    shown = SequenceMap(lambda a, o: f"{a}{o}", back, opp)
    also_selected = SequenceMap(lambda a, b: a + b, back,
                                Aggregate(Select(indices, opp, Comparison.EQ), tokens, default="-"))
    for program in (both_affine, shown, also_selected):
        ct = compile_to_transformer(program, LETTERS, 12, causal=False)
        folded = [n.label for n in ct.program.nodes if n.kind == "folded"]
        assert folded == (["opp"] if program is both_affine else []), folded
        for xs in _inputs(12, LETTERS, 12):
            assert ct.run(xs) == list(evaluate(program, xs, causal=False, fast=False).column(program))
