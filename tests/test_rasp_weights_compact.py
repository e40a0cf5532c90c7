"""rasp.weights.heads.compact: a head's bilinear forms in fewer head dimensions.

docs/turing-programs.md ("Attention"): pairs of features whose one side is an integer multiple
of another pair's share one head dimension, first by the left side (the query of a score, the
value of a copy), then by the right. The oracle is the bilinear form of the pairs as given,
evaluated in exact rationals, never the compacted pairs themselves; the sizes are literals.
"""
from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings, strategies as st

from rasp.core import Aggregate, Comparison, Select, tokens
from rasp import lib
from rasp.turing.library import TASKS
from rasp.turing.machines import Vocab, build_trace, simulate
from rasp.turing.transformer import transformer_program
from rasp.weights import compile_to_transformer
from rasp.weights.heads import compact

DIMS = 5


def form(pairs, x, y) -> Fraction:
    """``sum_e a_e(x) b_e(y)`` in exact rationals."""
    return sum((sum(Fraction(c) * x[d] for d, c in a.items()) * sum(Fraction(c) * y[d] for d, c in b.items())
                for a, b in pairs), Fraction(0))


features = st.dictionaries(st.integers(0, DIMS - 1), st.integers(-3, 3), max_size=3)
# a pair list with deliberate repeats and multiples of earlier features on either side
pair_lists = st.lists(st.tuples(features, features, st.integers(-2, 3), st.sampled_from(["new", "left", "right"])),
                      max_size=8)


def build(spec) -> list[tuple[dict, dict]]:
    pairs: list[tuple[dict, dict]] = []
    for a, b, r, kind in spec:
        if pairs and kind == "left":               # a multiple of the last left side
            a = {d: r * c for d, c in pairs[-1][0].items()}
        elif pairs and kind == "right":
            b = {d: r * c for d, c in pairs[-1][1].items()}
        pairs.append(({d: float(c) for d, c in a.items()}, {d: float(c) for d, c in b.items()}))
    return pairs


@settings(max_examples=300, deadline=None)
@given(pair_lists, st.lists(st.integers(-4, 4), min_size=DIMS, max_size=DIMS),
       st.lists(st.integers(-4, 4), min_size=DIMS, max_size=DIMS))
def test_the_form_is_unchanged_and_integer_coefficients_stay_integers(spec, x, y):
    pairs = build(spec)
    out = compact(pairs)
    assert form(out, x, y) == form(pairs, x, y)
    assert len(out) <= len(pairs)
    for a, b in out:
        assert a and b and all(c != 0 for c in a.values()) and all(c != 0 for c in b.values())
        assert all(float(c).is_integer() for f in (a, b) for c in f.values())


def test_left_multiples_share_a_dimension_then_right_ones():
    one, u, v = 0, 1, 2
    pairs = [({one: -80.0}, {u: 1.0}), ({one: -80.0}, {v: 4.0}), ({one: 40.0}, {u: 3.0}),
             ({u: 2.0}, {v: 1.0}), ({v: 5.0}, {v: 2.0})]
    # the first two have the same left side; -80 = -2 * 40, so the third joins them, keyed by 40
    # (the factor -2 is an integer, -1/2 is not): 40 (3u - 2(u + 4v)); then {v: 5} = 5 {v: 1}
    # on the right: (2u + 5 * 2v) v
    assert compact(pairs) == [({one: 40.0}, {u: 1.0, v: -8.0}), ({u: 2.0, v: 10.0}, {v: 1.0})]


def test_a_factor_that_is_not_an_integer_keeps_two_dimensions():
    pairs = [({0: 2.0}, {1: 1.0}), ({0: 3.0}, {2: 1.0})]
    assert compact(pairs) == pairs
    pairs = [({0: 2.0, 1: 1.0}, {2: 1.0}), ({0: 4.0, 1: 3.0}, {3: 1.0})]   # not a multiple at all
    assert compact(pairs) == pairs


def test_empty_and_zero_sides_are_dropped():
    assert compact([({}, {0: 1.0}), ({0: 1.0}, {1: 0.0}), ({0: 0.0, 1: 2.0}, {2: 1.0})]) == [({1: 2.0}, {2: 1.0})]
    # sums that cancel: a coordinate, then a whole side
    assert compact([({0: 1.0}, {1: 1.0, 2: 1.0}), ({0: -1.0}, {1: 1.0})]) == [({0: 1.0}, {2: 1.0})]
    assert compact([({0: 1.0}, {1: 2.0}), ({0: 2.0}, {1: -1.0}), ({3: 1.0}, {4: 1.0})]) == [({3: 1.0}, {4: 1.0})]


def test_lasts_holds_its_rank_and_both_constant_halves_in_one_dimension():
    """lasts(tokens, tokens) at max_seq_len 64: ``tokens == tokens`` (two dimensions), the max's
    rank (one) and BOS (one) were four head dimensions; the rank's query, the constant 40, and
    the ``==``'s constant -80 (= -2 * 40) share one, so three (1,794 parameters before)."""
    ct = compile_to_transformer(lib.lasts(tokens, tokens), ["a", "b", "x", "(", ")"], 64)
    assert (ct.stats["d_head"], ct.stats["params"]) == (3, 1_747)
    assert ct.run(["a", "b", "a", "x", "b"]) == [0, 1, 2, 3, 4]


def test_the_n_gram_match_head_keeps_one_constant_dimension_for_all_its_cells():
    """Program P of the addition machine at n-gram 6: the lookup head compares six cells and the
    separator count; each quadratic ``==`` had its own constant dimension (2 per cell), now
    the six share one. The compiled transformer still follows the simulator."""
    tm, tape = TASKS["addition"].build("57+68")
    ref = build_trace(simulate(tm, tape, 10_000), Vocab.for_machine(tm))
    compiled = transformer_program(tm, 6).to_transformer(len(ref))
    head = compiled.compiled.heads[2][0]
    assert head.node.label == "match"
    constant = [q for q, _ in head.qk if set(q) == {compiled.compiled.layout.one}]
    assert len(constant) == 1
    assert compiled.greedy(ref[:len(tape) + 2], len(ref), monitor=False) == ref


def test_a_selection_with_a_table_atom_and_an_equality_answers_as_the_interpreter():
    """A table atom (``<=`` on positions) beside an ``==`` on tokens in one And, under a max:
    the compiled model against the RASP interpreter (the last earlier-or-equal position holding
    the same token) on every input of up to four tokens."""
    import itertools

    from rasp.core import indices
    from rasp.evaluate import evaluate

    sel = Select(tokens, tokens, Comparison.EQ) & Select(indices, indices, Comparison.LEQ)
    program = Aggregate(sel, indices, default=-1, reduce="max")
    ct = compile_to_transformer(program, [0, 1, 2], 4, causal=False)
    for n in range(1, 5):
        for xs in itertools.product([0, 1, 2], repeat=n):
            assert ct.run(list(xs)) == evaluate(program, list(xs), causal=False).column(program), xs
