"""The weights compiler's refusals and size limits (rasp/weights/graph.py): each names the op, the
reason and, for a limit, the size and the limit (``CompileLimitError.what``, ``limit_name``,
``limit``); a program at a limit compiles and equals the RASP interpreter.

The limits are module constants (LOOKUP_MAX = 400000, TABLE_MAX = 512, ONEHOT_MAX = 32); the
boundary tests lower LOOKUP_MAX and TABLE_MAX with ``monkeypatch`` so that a program at the
limit stays small.
"""
from __future__ import annotations


import pytest

from rasp import lib
from rasp.core import (Aggregate, Comparison, Map, Select, SelectorWidth, SequenceMap, SOp, indices, numerical,
                       tokens)
from rasp.tracr_ops import ConstantSelector, LinearSequenceMap
from rasp.weights import CompileError, compile_to_transformer, graph
from rasp.weights.values import CompileLimitError
from tests.rasp_weights_checks import assert_compiled_agrees

VOCAB = [0, 1, 2, 3]
C = Comparison


def _refused(program, message: str, n: int = 4, causal: bool = True, vocab=VOCAB, error=CompileError):
    with pytest.raises(error) as info:
        compile_to_transformer(program, vocab, n, causal=causal)
    assert str(info.value) == message
    return info.value


def _limit(exc: CompileLimitError, what: str, name: str, limit: int) -> None:
    assert (exc.what, exc.limit_name, exc.limit) == (what, name, limit)


# ------------------------------------------------------------------------- messages

def test_a_function_that_fails_is_named_with_its_input():
    _refused(Map(lambda t: 1 // (t - 2), tokens).named("inv"),
             "Map 'inv': cannot tabulate it over the vocabulary: Map 'inv' failed: ZeroDivisionError: "
             "integer division or modulo by zero")
    _refused(Map(lambda i: 1 // (i - 2), indices).named("pinv"),
             "Map 'pinv': cannot tabulate it over the positions: Map 'pinv' failed: ZeroDivisionError: "
             "integer division or modulo by zero")
    _refused(SequenceMap(lambda t, i: t // (i - 2), tokens, indices).named("q"),
             "SequenceMap 'q': its function fails on the input value(s) (0, 2): ZeroDivisionError: "
             "integer division or modulo by zero")


def test_tuple_misuse_is_refused_with_its_reason():
    pair = lib.make_pair(tokens, indices).named("pair")
    _refused(pair, "the output SequenceMap 'pair' is tuple-valued; decode one part")
    _refused(Aggregate(Select(tokens, tokens, C.EQ), pair).named("agg"),
             "Aggregate 'agg': aggregating a tuple-valued s-op is not supported; aggregate each part")
    for sel in (Select(pair, tokens, C.EQ), Select(tokens, pair, C.EQ)):
        _refused(SelectorWidth(sel.named("mix")), "Select 'mix': compares a tuple with a non-tuple")
    single = Map(lib.tuple_singleton, tokens)
    _refused(SelectorWidth(Select(pair, single, C.EQ).named("len")), "Select 'len': tuples of different lengths")
    _refused(SelectorWidth(Select(pair, pair, C.LT).named("lt")), "Select 'lt': only == compares tuple values")
    either = (Select(pair, pair, C.EQ) | Select(pair, pair, C.LT)).named("or")
    _refused(SelectorWidth(either), "SelectorOr 'or': only == compares tuple values")


def test_an_s_op_of_an_unknown_kind_is_refused():
    class Mystery(SOp):
        """An s-op the compiler has no construction for."""

    _refused(Mystery().named("m"), "Mystery 'm': no weights for this kind of s-op")


def test_selectors_that_no_head_computes_are_refused_with_their_reason():
    _refused(Aggregate(ConstantSelector([[True, False], [True, True]]).named("tri"), tokens),
             "ConstantSelector 'tri': a fixed selection matrix needs one score per (query, key) "
             "position pair; not compiled")
    mixed = (Select(tokens, tokens, C.LT) | ConstantSelector([[True, False], [True, True]]).named("tri")).named("mixed")
    _refused(SelectorWidth(mixed), "SelectorOr 'mixed': Or/Not over the ConstantSelector 'tri' is not compiled "
             "(only over Selects)")


def test_an_unknown_value_set_is_traced_through_aggregates_and_linear_maps():
    """n = 513 > MEAN_MAX_N: a numerical mean's averages are not enumerated; an aggregate of it,
    and a linear map of it, say so; the linear map itself compiles (numerical output)."""
    is0 = numerical(Map(lambda t: 1 if t == 0 else 0, tokens))
    mean = numerical(Aggregate(Select(indices, indices, C.LEQ), is0, default=0)).named("mean")
    why = "it is a numerical mean, whose possible averages are enumerated only up to max_seq_len = 512 (here 513)"
    copy = numerical(Aggregate(Select(indices, indices, C.EQ), mean, default=0)).named("copy")
    _refused(Map(lambda v: v > 0.5, copy).named("hi"),
             f"Map 'hi': no lookup table exists, because the value set of its input 'copy' is unknown: "
             f"it aggregates 'mean', whose value set is unknown: {why}", n=513)
    bal = numerical(LinearSequenceMap(mean, copy, 1, -1)).named("bal")
    assert_compiled_agrees(bal, VOCAB, 513, True, [[0, 1, 0, 0, 2], [3, 0] * 30])
    _refused(Map(lambda v: v > 0, bal).named("pos"),
             "Map 'pos': no lookup table exists, because the value set of its input 'bal' is unknown: it is "
             f"a linear function of 'mean', and the value set of its input 'mean' is unknown: {why}", n=513)
    big = numerical(Aggregate(Select(indices, indices, C.LEQ), numerical(tokens), default=0)).named("big")
    _refused(Map(lambda v: v > 0.5, big).named("t"),
             "Map 't': no lookup table exists, because the value set of its input 'big' is unknown: it is a "
             "numerical mean of 'tokens', whose values are not all in {0, 1}, so the set of possible "
             "averages is not enumerated")


# ---------------------------------------------------------------------- LOOKUP_MAX

def test_a_lookup_table_at_the_limit_compiles_and_one_over_it_is_refused(monkeypatch):
    monkeypatch.setattr(graph, "LOOKUP_MAX", 12)
    product = SequenceMap(lambda t, i: t * i, tokens, indices).named("prod")     # 4 x n entries
    assert_compiled_agrees(product, VOCAB, 3, True, [[3, 2, 1], [2]])
    exc = _refused(product, "SequenceMap 'prod': its lookup table would have 16 entries (the product of its "
                   "inputs' value-set sizes 4 x 4), over the limit LOOKUP_MAX = 12; factor the function "
                   "through smaller s-ops", error=CompileLimitError)
    _limit(exc, "an MLP lookup table of 16 entries", "LOOKUP_MAX", 12)


def test_a_tuple_at_the_limit_compiles_and_one_over_it_is_refused(monkeypatch):
    monkeypatch.setattr(graph, "LOOKUP_MAX", 12)
    pair = lib.make_pair(tokens, indices).named("pair")                        # 4 x n values
    program = Map(lambda p: p[0] * p[1], pair)
    assert_compiled_agrees(program, VOCAB, 3, True, [[3, 2, 1], [2]])
    exc = _refused(program, "SequenceMap 'pair': the tuple has 16 possible values (the product 4 x 4 of its "
                   "parts' value-set sizes), over the limit LOOKUP_MAX = 12 of one lookup table",
                   error=CompileLimitError)
    _limit(exc, "an MLP lookup table of 16 entries", "LOOKUP_MAX", 12)


def test_a_tuple_compared_by_parts_has_no_limit(monkeypatch):
    """A tuple that only == reads is never tabulated: its parts' value sets may multiply past
    LOOKUP_MAX."""
    monkeypatch.setattr(graph, "LOOKUP_MAX", 12)
    pair = lib.make_pair(tokens, indices)
    assert_compiled_agrees(SelectorWidth(Select(pair, pair, C.EQ)), VOCAB, 5, False, [[3, 3, 1, 3, 3], [0]])


def test_affine_maps_over_the_limit_take_their_value_range(monkeypatch):
    """Past LOOKUP_MAX an integral affine map's values are the range between its corners (an
    identity table on them, no lookup); a non-integral numerical one has an unknown value set,
    fine for a numerical output and named in the refusal of a table that reads it."""
    monkeypatch.setattr(graph, "LOOKUP_MAX", 12)
    xs = [[3, 2, 1, 0, 3], [2, 0]]
    assert_compiled_agrees(LinearSequenceMap(tokens, indices, 1, 2), VOCAB, 5, True, xs)
    wide = numerical(LinearSequenceMap(tokens, indices, 0.5, 0.25)).named("wide")
    assert_compiled_agrees(wide, VOCAB, 5, True, xs)
    _refused(Map(lambda v: v > 1, wide).named("hi"),
             "Map 'hi': no lookup table exists, because the value set of its input 'wide' is unknown: its "
             "value set would take 20 evaluations (more than LOOKUP_MAX = 12) and its values are not all "
             "integers", n=5)


# -------------------------------------------------------------------- ONEHOT_MAX, TABLE_MAX

def test_an_order_comparison_table_at_the_limit_compiles_and_one_over_it_is_refused(monkeypatch):
    """An order comparison needs one-hot values, up to TABLE_MAX of them (here 40, above
    ONEHOT_MAX = 32); past it, an aggregate is refused, and a selector width counts by bits
    instead (rasp.weights.order)."""
    monkeypatch.setattr(graph, "TABLE_MAX", 40)
    x = Map(lambda t: t, tokens).named("x")
    program = Aggregate(Select(x, x, C.LT), tokens, reduce="max", default=-1)
    assert_compiled_agrees(program, list(range(40)), 4, False, [[39, 0, 20, 21], [5, 5]])
    exc = _refused(program, "Map 'x' has 41 values; an order or custom comparison on it needs a one-hot "
                   "table, limited to TABLE_MAX = 40 values", vocab=list(range(41)), error=CompileLimitError)
    _limit(exc, "a one-hot comparison table over 41 values", "TABLE_MAX", 40)
    assert_compiled_agrees(SelectorWidth(Select(x, x, C.LT)), list(range(41)), 4, False,
                           [[40, 0, 20, 21], [5, 5], [40, 40, 39]])


def test_thirty_two_values_are_one_hot_and_thirty_three_ordinal():
    x = Map(lambda t: t, tokens).named("x")
    labels = compile_to_transformer(x, list(range(32)), 4).residual_labels
    assert [lab for lab in labels if lab.startswith("x")] == [f"x:{v}" for v in range(32)]
    labels = compile_to_transformer(x, list(range(33)), 4).residual_labels
    assert [lab for lab in labels if lab.startswith("x")] == ["x", "x^2"]


def test_an_order_comparison_on_a_numerical_s_op_is_refused():
    """A comparison table needs one-hot values; a numerical s-op has one number (before: a
    KeyError, or a TypeError when its value set is unknown)."""
    x = numerical(Map(lambda t: t, tokens)).named("x")
    _refused(SelectorWidth(Select(x, tokens, C.LT)), "Map 'x': an order or custom comparison on a numerical "
             "s-op is not compiled (make it categorical)")
    mean = numerical(Aggregate(Select(indices, indices, C.LEQ), Map(lambda t: t, tokens), default=0)).named("m")
    _refused(SelectorWidth(Select(tokens, mean, lambda k, q: k < q)), "Aggregate 'm': an order or custom "
             "comparison on a numerical s-op is not compiled (make it categorical)")
