"""rasp.weights: value sets of linear maps of numerical means over one selection
(docs/turing-programs.md, "Value sets"). tracr's ``make_pair_balance`` subtracts two fractions of
previous positions, ``a / w - b / w``; the compiler lists ``m / w`` for every integer ``m``
between the corners, about N**2 values where the product of the two means' value sets has about
N**4. Oracles: the interpreter's dense path and a plain-Python shuffle-Dyck checker."""
from __future__ import annotations

import random
from fractions import Fraction

import pytest

from rasp import lib
from rasp.core import Aggregate, Comparison, Map, Select, indices, numerical, tokens
from rasp.evaluate import evaluate
from rasp.tracr_ops import LinearSequenceMap
from rasp.weights import compile_to_transformer
from rasp.weights.affine import Affine
from rasp.weights.graph import Program

BRACKETS = list("(){}x")


def _shuffle_dyck(xs: list[str]) -> int:
    """1 when each bracket pair, on its own, never closes more than it opened and ends balanced."""
    for open_, close in ("()", "{}"):
        depth = 0
        for x in xs:
            depth += (x == open_) - (x == close)
            if depth < 0:
                return 0
        if depth:
            return 0
    return 1


def _inputs(n: int, rng: random.Random) -> list[list[str]]:
    quarter = n // 4
    balanced = list("(" * quarter + "{" * quarter + "}" * quarter + ")" * quarter) or ["x"]
    shuffled = list("({)}" * quarter) or ["x"]
    return [balanced, shuffled, [")"] + balanced[:-1], ["x"]] + [
        [rng.choice(BRACKETS) for _ in range(rng.randint(1, n))] for _ in range(3)]


@pytest.mark.parametrize("n", [50, 100])
@pytest.mark.parametrize("causal", [True, False])
def test_shuffle_dyck2_compiles_past_64_positions_and_is_exact(n, causal):
    program = lib.make_shuffle_dyck2()
    ct = compile_to_transformer(program, BRACKETS, n, causal=causal)
    for xs in _inputs(n, random.Random(n)):
        want = list(evaluate(program, xs, causal=causal, fast=False).column(program))
        if not causal:
            assert want == [_shuffle_dyck(xs)] * len(xs)
        assert ct.run(xs) == want, xs


def test_the_listed_values_contain_every_balance_the_interpreter_computes():
    n = 40
    program = lib.make_shuffle_dyck2()
    prog = Program(program, BRACKETS, n, True)
    balance = next(node for node in prog.nodes if node.label == "balance_()")
    listed = balance.values
    assert len(listed) == len({m / w for w in range(1, n + 1) for m in range(-w, w + 1)})
    rng = random.Random(0)
    for xs in _inputs(n, rng) + [["("] * n, [")"] * n]:
        for v in evaluate(program, xs, causal=True, fast=False).column(balance.sop):
            assert min(abs(v - x) for x in listed) < 1e-12, v


def _mean(values, selector):
    return numerical(Aggregate(selector, numerical(values), default=0))


def test_coefficients_and_integer_ranges_set_the_corners():
    """``(2 a - b / 2) / w`` with ``a`` summing values in {0, 1, 2} and ``b`` in {0, 1}: numerators
    of 1/2 per step from -w/2 to 4w, and the map on it agrees with the interpreter."""
    n = 12
    prevs = Select(indices, indices, Comparison.LEQ)
    a = _mean(Map(lambda t: min(t, 2), tokens), prevs)
    b = _mean(Map(lambda t: int(t == 3), tokens), Select(indices, indices, Comparison.LEQ))
    combo = numerical(LinearSequenceMap(a, b, 2, -0.5)).named("combo")
    prog = Program(combo, [0, 1, 2, 3], n, True)
    node = next(x for x in prog.nodes if x.label == "combo")
    want = sorted({m / (2 * w) for w in range(1, n + 1) for m in range(-w, 8 * w + 1)})
    assert node.values == pytest.approx(want)
    program = Map(lambda v: round(v * 4) % 3, combo)
    ct = compile_to_transformer(program, [0, 1, 2, 3], n)
    rng = random.Random(5)
    for _ in range(6):
        xs = [rng.choice([0, 1, 2, 3]) for _ in range(rng.randint(1, n))]
        assert ct.run(xs) == list(evaluate(program, xs, causal=True, fast=False).column(program))


def test_means_over_different_selections_keep_the_product():
    """``a`` over ``<=`` and ``b`` over ``==``: not one width per position, so no shared list."""
    n = 10
    a = _mean(Map(lambda t: int(t > 1), tokens), Select(indices, indices, Comparison.LEQ))
    b = _mean(Map(lambda t: int(t > 2), tokens), Select(tokens, tokens, Comparison.EQ))
    combo = numerical(LinearSequenceMap(a, b, 1, -1)).named("combo")
    node = next(x for x in Program(combo, [0, 1, 2, 3], n, True).nodes if x.label == "combo")
    assert any(abs(v - (1 / 3 - 1 / 7)) < 1e-12 for v in node.values)


def test_a_constant_term_shifts_the_listed_values():
    """An affine form ``a - b + 1`` (forms with a constant are verified only on exact value
    sets, which means of fractions are not, so the form is set by hand): 1 + m / w."""
    n = 8
    a = _mean(Map(lambda t: int(t > 1), tokens), Select(indices, indices, Comparison.LEQ))
    b = _mean(Map(lambda t: int(t == 0), tokens), Select(indices, indices, Comparison.LEQ))
    prog = Program(numerical(LinearSequenceMap(a, b, 1, -1)).named("diff"), [0, 1, 2, 3], n, True)
    node = next(x for x in prog.nodes if x.label == "diff")
    node.affine = Affine(node.affine.coeffs, Fraction(1), False)
    want = sorted({1 + m / w for w in range(1, n + 1) for m in range(-w, w + 1)})
    assert prog._shared_mean_values(node) == pytest.approx(want)
