"""The analysis of the weights compiler (rasp/weights/graph.py) against the RASP interpreter.

Each program here takes one path of the analysis (docs/turing-programs.md, "Compiling RASP to
weights"): selectors that select nothing or everything, causal index comparisons that are
constant over the visible keys, And/Or/Not trees as one table, tuple equality as one atom per
part, integer codes shared by integers and other values, repeated labels, s-ops of the tokens or
the positions alone (embedded, no layer), aggregates of categorical values, and the value sets
of ``length`` and selector widths. The compiled transformer must equal the interpreter's dense
path (``tests/rasp_weights_checks.py``) on every input tried; where the analysis chooses a
layout (embedding, layers, head text), the test compares it with the documented rule.
"""
from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from rasp import lib
from rasp.core import (Aggregate, Comparison, Full, Map, Select, SelectorWidth, SequenceMap, indices,
                       length, numerical, tokens)
from rasp.tracr_ops import ConstantSelector, LinearSequenceMap
from rasp.weights import compile_to_transformer
from tests.rasp_weights_checks import assert_compiled_agrees

VOCAB = [0, 1, 2, 3]
INPUTS = [[3, 0, 2, 2, 1], [1, 1, 3], [0], [2, 3, 0, 1, 3]]
C = Comparison


def _lines(ct) -> list[str]:
    return re.sub(r"\(\d+ units\)", "(N units)", ct.describe()).splitlines()


# ---------------------------------------------------------------- selectors that are constant


def test_selectors_that_select_nothing_or_everything():
    """FALSE and ConstantSelector(False) select no key (the default); TRUE and
    ConstantSelector(True) every visible key. The head text names the selector."""
    for causal in (True, False):
        for sel, want in ((Select(tokens, tokens, C.FALSE).named("never"), "never"),
                          (ConstantSelector(False).named("none"), "none"),
                          (ConstantSelector(True).named("all"), "True")):
            width = SelectorWidth(sel).named("w")
            ct = assert_compiled_agrees(width, VOCAB, 5, causal, INPUTS)
            assert f"w = SelectorWidth({want}) [attention to BOS + selected]" in ct.describe()
            agg = Aggregate(sel, Map(lambda t: t + 4, tokens), default=9, reduce="max").named("a")
            assert_compiled_agrees(agg, VOCAB, 5, causal, INPUTS)


def test_causal_index_comparisons_constant_over_visible_keys_need_no_table():
    """Causally a key j <= i is visible; ``Select(indices + a, indices + b, cmp)`` depends on
    i - j only, so ``indices <= indices`` holds for every visible key and ``indices > indices``
    for none: no atom, no one-hot table, hence no limit at 600 positions (TABLE_MAX = 512)."""
    n = 600
    ct = compile_to_transformer(SelectorWidth(Select(indices, indices, C.LEQ)).named("w"), [0], n)
    assert "w = SelectorWidth(True)" in ct.describe() and ct.run([0] * n) == list(range(1, n + 1))
    sel = Select(indices, indices, C.GT).named("later")
    ct = compile_to_transformer(Aggregate(sel, indices, default=-1).named("a"), [0], n)
    assert "a = Aggregate(later, indices, reduce=mean, default=-1)" in ct.describe()
    assert ct.run([0] * 7) == [-1] * 7


def test_causal_index_comparisons_with_offsets_that_are_not_constant():
    """``j < i - 1`` holds for some visible keys and not others (d = i - j >= 2), as does
    ``j + 1 == i``: each compiles to a real comparison."""
    xs = [[t % 4 for t in range(k, 2 * k + 3)] for k in range(4)]
    for sel in (Select(indices, indices - 1, C.LT), Select(indices, indices + 1, C.GEQ),
                Select(indices + 2, indices, C.LT), Select(indices + 1, indices, C.EQ)):
        assert_compiled_agrees(SelectorWidth(sel), VOCAB, 6, True, xs)
        assert_compiled_agrees(Aggregate(sel, tokens, default=7, reduce="max"), VOCAB, 6, True, xs)


# ------------------------------------------------------------------ And / Or / Not as one table

def _trees(depth: int):
    leaf = st.sampled_from([C.EQ, C.LT, C.LEQ, C.GT, C.GEQ, C.NEQ]).map(lambda c: Select(tokens, tokens, c))
    if depth == 0:
        return leaf
    sub = _trees(depth - 1)
    return st.one_of(leaf, sub.map(lambda s: ~s), st.tuples(sub, sub).map(lambda p: p[0] | p[1]),
                     st.tuples(sub, sub).map(lambda p: p[0] & p[1]))


def _tree_agrees(tree, causal: bool) -> None:
    """A tree over one key and one query s-op (And nested under Or/Not included) is one table
    of its predicate; a top-level And adds an index comparison as a second atom."""
    assert_compiled_agrees(SelectorWidth(tree), VOCAB, 5, causal, INPUTS)
    assert_compiled_agrees(SelectorWidth(tree & Select(indices, indices, C.LT)), VOCAB, 5, causal, INPUTS)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(tree=_trees(3), causal=st.booleans())
def test_random_and_or_not_trees_compile_to_the_interpreters_selection(tree, causal):
    _tree_agrees(tree, causal)


def test_and_under_or_and_not_is_a_conjunction():
    s = lambda c: Select(tokens, tokens, c)  # noqa: E731
    for tree in (~(s(C.LEQ) & s(C.GEQ)), (s(C.LEQ) & s(C.NEQ)) | s(C.GT), s(C.EQ) | (s(C.GEQ) & s(C.LEQ))):
        _tree_agrees(tree, False)


def test_table_atoms_are_described_by_their_predicate():
    lt = compile_to_transformer(SelectorWidth(Select(tokens, tokens, C.LT).named("lt")).named("w"), VOCAB, 4)
    assert "w = SelectorWidth(lt: tokens < tokens (table))" in lt.describe()
    odd = Select(tokens, tokens, lambda k, q: (k + q) % 2 == 1).named("odd")
    ct = compile_to_transformer(SelectorWidth(odd).named("w"), VOCAB, 4)
    assert "w = SelectorWidth(odd: tokens custom tokens (table))" in ct.describe()
    either = (Select(tokens, tokens, C.LT) | Select(tokens, tokens, C.EQ)).named("le")
    ct = compile_to_transformer(SelectorWidth((~either).named("gt")).named("w"), VOCAB, 4)
    assert "w = SelectorWidth(gt: tokens SelectorNot tokens (table))" in ct.describe()
    ct = compile_to_transformer(SelectorWidth(either).named("w"), VOCAB, 4)
    assert "w = SelectorWidth(le: tokens SelectorOr tokens (table))" in ct.describe()


# ----------------------------------------------------------------------------- tuples

def test_tuple_equality_is_one_atom_per_part():
    """``Select(pair, pair, ==)`` compares each part by its own codes; the tuple itself has no
    dimension and no layer (a later op reading it runs in the same layer as its parts)."""
    a = lib.shift_right(tokens, 1, 0).named("a")
    b = lib.lasts(tokens, tokens).named("b")
    pair = lib.make_pair(a, b).named("ab")
    sel = Select(pair, lib.make_pair(tokens, indices).named("ti"), C.EQ).named("same")
    program = SelectorWidth(sel).named("w")
    xs = [[1, 1, 1, 2, 2], [0, 0, 3, 3, 3], [2, 2], [3, 1, 1, 1, 0]]
    for causal in (True, False):
        ct = assert_compiled_agrees(program, VOCAB, 5, causal, xs)
        assert "w = SelectorWidth(same[0]: a == tokens & same[1]: b == indices)" in ct.describe()
    ct = assert_compiled_agrees(Map(lambda p: p[0] + 10 * p[1], pair).named("sum"), VOCAB, 5, True, xs)
    assert ct.stats["layers"] == 1 and not any(lab.startswith("ab") for lab in ct.residual_labels)


def test_maps_over_tuples_of_token_functions_are_embedded():
    """A function of the tokens (and constants) alone, through a tuple, is a token embedding."""
    pair = lib.make_pair(Map(lambda t: t % 2, tokens), Full(5))
    program = SequenceMap(lambda x, i: x + i, Map(lambda p: p[0] * p[1], pair).named("x"), indices)
    ct = assert_compiled_agrees(program, VOCAB, 5, True, INPUTS)
    assert "  W_E: x (onehot, 2 values)" in ct.describe().splitlines()


def test_concatenated_tuples_are_one_lookup():
    """``pair + pair`` concatenates (``operator.add``, which the affine analysis reads as a
    sum): a lookup table of 4-tuples, decoded as such."""
    program = lib.make_pair(tokens, indices) + lib.make_pair(indices, tokens)
    assert_compiled_agrees(program, VOCAB, 3, True, [[3, 0, 2], [1], [2, 1]])


# -------------------------------------------------------------------------- integer codes

def test_other_values_get_codes_above_every_integer():
    """Strings share the integer codes' range with integers: an == select must never match a
    string with an integer (vocabularies with one-hot tokens, and with 38 ordinal tokens)."""
    for vocab in ([3, 4, "a", "b"], [2, 3, "a"], list(range(36)) + ["a", "b"]):
        xs = [vocab[:4] + vocab[:2], list(reversed(vocab[:4])) + [vocab[-1], vocab[-2], vocab[-1]],
              [vocab[-1], vocab[2], vocab[-2], vocab[1]]]
        for program in (lib.lasts(tokens, tokens), SelectorWidth(Select(tokens, tokens, C.EQ)),
                        Aggregate(Select(indices, Map(lambda i: i + 1, indices), C.EQ), tokens, default="-")):
            assert_compiled_agrees(program, vocab, 7, False, xs)
    # the integers here are 0..3 (the widths) and 6: counting them instead of taking the largest
    # would give "a" the code 6, and "a" would select 6
    width = SelectorWidth(Select(tokens, tokens, C.EQ))
    assert_compiled_agrees(width, [6, "a"], 3, False, [[6, "a", 6], ["a", "a"], [6]])


# ----------------------------------------------------------------- labels and embeddings

def test_two_s_ops_with_one_label_both_compile():
    x = Map(lambda t: t + 1, tokens).named("x")
    y = lib.shift_right(tokens, 1, 0).named("x")
    ct = assert_compiled_agrees(SequenceMap(lambda a, b: 10 * a + b, x, y), VOCAB, 5, True, INPUTS)
    assert "x:1" in ct.residual_labels and f"x#{y.uid}:0" in ct.residual_labels


def test_functions_of_the_tokens_or_the_positions_and_constants_are_embedded():
    """docs/turing-programs.md ("Embeddings"): W_E holds functions of the token and constants,
    W_pos functions of the position and constants (causal ``length`` included); none gets a
    layer, so the model has no head and no hidden unit."""
    tok = SequenceMap(lambda t, c: t * c, tokens, Full(3)).named("tc")
    pos = SequenceMap(lambda i, c: i + c, indices, Map(lambda c: c - 1, Full(3))).named("ic")
    ct = assert_compiled_agrees(SequenceMap(lambda a, b: a - b, tok, pos).named("out"), VOCAB, 5, True, INPUTS)
    lines = ct.describe().splitlines()
    assert "  W_E: tc (onehot, 4 values)" in lines and "  W_pos: ic (onehot, 5 values)" in lines
    assert (ct.stats["heads"], ct.stats["layers"]) == (0, 1)
    ct = compile_to_transformer(SequenceMap(lambda t, c: t + c, tokens, Full(7).named("c")), VOCAB, 4)
    assert "c:7" in ct.residual_labels and "  W_E: c (onehot, 1 values)" in ct.describe().splitlines()


def test_a_position_function_compiles_with_a_one_token_vocabulary():
    ct = assert_compiled_agrees(Map(lambda i: 3 * i, indices), ["x"], 4, True, [["x"] * 4, ["x"]])
    assert ct.stats["heads"] == 0


def test_shifted_indices_are_described_as_such():
    ct = compile_to_transformer(lib.shift_right(tokens, 1, 0).named("prev"), VOCAB, 6)
    assert "prev = Aggregate(shift_1: indices+1 == indices, tokens, reduce=mean, default=0)" in ct.describe()
    nxt = (indices + 1).named("nxt")
    ct = compile_to_transformer(Aggregate(Select(nxt, indices, C.EQ).named("s"), tokens, default=0).named("p"),
                                VOCAB, 6)
    assert "p = Aggregate(s: nxt == indices, tokens, reduce=mean, default=0)" in ct.describe()


# ------------------------------------------------------------------- value sets and layers

def test_length_and_widths_have_exactly_their_possible_values():
    """Non-causal ``length`` is 1..n, a selector width 0..n: the output classes (W_U columns)."""
    assert compile_to_transformer(length, VOCAB, 6, causal=False).classes == [1, 2, 3, 4, 5, 6]
    width = SelectorWidth(Select(tokens, tokens, C.EQ))
    assert compile_to_transformer(width, VOCAB, 6, causal=False).classes == [0, 1, 2, 3, 4, 5, 6]
    ct = assert_compiled_agrees(length, VOCAB, 6, False, INPUTS)
    assert "length:1" in ct.residual_labels and "length:0" not in ct.residual_labels


def test_a_numerical_mean_of_a_categorical_value_is_an_average():
    """The mean keeps the numerical encoding although its value (a 0/1 Map) is one-hot, and a
    threshold on it reads its enumerated value set (n <= 64)."""
    is2 = Map(lambda t: 1 if t == 2 else 0, tokens)
    frac = numerical(Aggregate(Select(indices, indices, C.LEQ), is2, default=0)).named("frac")
    for causal in (True, False):
        assert_compiled_agrees(frac, VOCAB, 6, causal, INPUTS)
        assert_compiled_agrees(Map(lambda f: f > 0.4, frac), VOCAB, 6, causal, INPUTS)


def test_an_aggregate_of_a_one_hot_value_stays_one_hot():
    """An aggregate keeps its value's layout kind: 32 one-hot values and a new default (33 values)
    stay one-hot (ONEHOT_MAX = 32 alone would make them ordinal)."""
    vocab = list(range(32))
    agg = lib.shift_right(tokens, 1, -1).named("prev")
    ct = assert_compiled_agrees(agg, vocab, 4, True, [[31, 0, 7, 30], [5]])
    assert "prev:-1" in ct.residual_labels and ct.program.output.encoding == "onehot"
    ct = compile_to_transformer(Map(lambda t: t, tokens).named("x"), vocab + [32], 4)
    assert ct.residual_labels[-2:] == ["x", "x^2"]


def test_linear_tuple_and_folded_s_ops_take_no_layer():
    """docs/turing-programs.md ("Affine maps"): a linear map of two means, a tuple and a folded
    affine link are computed where their readers are: one layer here."""
    o = numerical(Map(lambda t: 1 if t == 0 else 0, tokens))
    c = numerical(Map(lambda t: 1 if t == 1 else 0, tokens))
    fo = numerical(Aggregate(Select(indices, indices, C.LEQ), o, default=0))
    fc = numerical(Aggregate(Select(indices, indices, C.LEQ), c, default=0))
    ct = assert_compiled_agrees(numerical(LinearSequenceMap(fo, fc, 1, -1)), VOCAB, 6, False, INPUTS)
    assert ct.stats["layers"] == 1
    a, b = lib.shift_right(tokens, 1, 0), lib.lasts(tokens, tokens)
    link = SequenceMap(lambda x, y: x - y, a, b)                 # affine, read only by an affine map
    ct = assert_compiled_agrees(Map(lambda v: v + 1, link), VOCAB, 5, True, INPUTS)
    assert ct.stats["layers"] == 1


def test_a_compared_affine_link_is_not_folded_away():
    """An affine s-op that a selector compares keeps its own dimensions, even when its only other
    readers are affine maps that could absorb it (for a SelectorWidth and for an Aggregate)."""
    xs = [[3, 0, 2, 2, 1], [1, 1, 3, 0], [2, 3, 0, 1, 3]]
    add = lambda u, v: u + v  # noqa: E731 - affine, so it could absorb an affine input
    for causal in (True, False):
        k = SequenceMap(lambda a, b: a - b, length, indices)
        w = SelectorWidth(Select(indices, k, C.LT))
        assert_compiled_agrees(SequenceMap(add, w, Map(lambda v: v + 2, k)), VOCAB, 5, causal, xs)
        j = SequenceMap(lambda a, b: a + b, lib.lasts(tokens, tokens), indices)
        g = Aggregate(Select(j, indices, C.EQ), tokens, default=0)
        later = Aggregate(Select(tokens, tokens, C.EQ), indices, default=0, reduce="max")
        program = SequenceMap(add, SequenceMap(add, g, Map(lambda v: v - 1, j)), later)
        assert_compiled_agrees(program, VOCAB, 5, causal, xs)



def test_an_order_comparison_on_an_aggregate_of_ordinal_values():
    """An aggregate that a table compares is one-hot (up to TABLE_MAX values); the values it copies
    are then one-hot too, along a chain of aggregates, although 40 values alone are ordinal.
    (Before: the aggregate took its value's ordinal layout and the table found no one-hot
    dimensions, a KeyError.)"""
    x = Map(lambda t: t, tokens).named("x")
    y = Aggregate(Select(indices, indices, C.EQ), x, default=-1).named("y")
    z = Aggregate(Select(indices, indices, C.EQ), y, default=-1).named("z")
    xs = [[5, 3, 39, 0, 12], [1, 2], [39, 38, 39]]
    for causal in (True, False):
        for v in (y, z):
            assert_compiled_agrees(SelectorWidth(Select(v, v, C.LT)), list(range(40)), 5, causal, xs)
