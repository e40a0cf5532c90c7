"""Mini-RASP interpreter semantics: hand-computed cases, errors, and fast paths against an
independent nested-loop reference (docs/rasp.md)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rasp.analyse import analyse
from rasp.core import (Aggregate, Comparison, Full, Map, Select, SelectorAnd, SelectorNot,
                       SelectorOr, SelectorWidth, SequenceMap, indices, length, numerical, tokens)
from rasp.errors import (AmbiguousAggregateError, RASPEvaluationError, RASPSizeError,
                         RASPTypeError)
from rasp.evaluate import IncrementalEvaluator, evaluate
from rasp_oracle import outcome, random_programs, ref_eval, selector_trees

EQ, LT, LEQ, GT, GEQ, NEQ, TRUE, FALSE = (Comparison.EQ, Comparison.LT, Comparison.LEQ, Comparison.GT,
                                          Comparison.GEQ, Comparison.NEQ, Comparison.TRUE,
                                          Comparison.FALSE)


def out(program, toks, **kw):
    return evaluate(program, toks, **kw).column(program)


# ------------------------------------------------------------------ hand-computed cases


def test_comparison_is_called_as_key_then_query():
    assert LT(1, 2) and not LT(2, 1)           # LT means key < query
    sel = Select(indices, indices, LT)
    # row q selects keys k < q; width = q
    assert out(SelectorWidth(sel), "abcd") == [0, 1, 2, 3]
    assert out(SelectorWidth(Select(indices, indices, GEQ)), "abcd") == [4, 3, 2, 1]


def test_aggregate_default_when_nothing_selected():
    prog = Aggregate(Select(tokens, tokens, FALSE), tokens, default="D")
    assert out(prog, "xyz") == ["D", "D", "D"]
    # EQ with no matching key
    prog = Aggregate(Select(tokens, Full("q"), EQ), indices, default=-7)
    assert out(prog, "xyz") == [-7, -7, -7]
    # causal: the first query sees no key strictly before it
    prog = Aggregate(Select(indices, indices, LT), tokens, default=None, reduce="max")
    assert out(prog, [5, 1, 9], causal=True) == [None, 5, 5]


def test_numerical_mean_of_several_values():
    vals = numerical(Map(lambda t: t, tokens))
    prog = Aggregate(Select(tokens, tokens, TRUE), vals, default=0)
    assert out(prog, [1, 2, 3, 6]) == [3.0] * 4
    assert out(prog, [1, 2, 3, 6], causal=True) == [1.0, 1.5, 2.0, 3.0]


def test_max_and_min_reductions():
    sel = Select(tokens, tokens, TRUE)
    assert out(Aggregate(sel, tokens, reduce="max"), [3, 1, 4, 1, 5]) == [5] * 5
    assert out(Aggregate(sel, tokens, reduce="min"), [3, 1, 4, 1, 5], causal=True) == [3, 1, 1, 1, 1]


def test_selector_width_and_causal_masking():
    hist = SelectorWidth(Select(tokens, tokens, EQ))
    assert out(hist, "abac") == [2, 1, 2, 1]
    assert out(hist, "abac", causal=True) == [1, 1, 2, 1]
    assert out(length, "abac") == [4, 4, 4, 4]
    assert out(length, "abac", causal=True) == [1, 2, 3, 4]


def test_categorical_mean_returns_the_single_value_even_if_repeated():
    prog = Aggregate(Select(tokens, Full("a"), EQ), tokens, default="-")
    assert out(prog, "baba") == ["a"] * 4


def test_selector_and_or_not():
    even = Map(lambda i: i % 2 == 0, indices)
    sel_even = Select(even, Full(True), EQ)
    sel_low = Select(indices, Full(2), LT)
    assert out(SelectorWidth(SelectorAnd(sel_even, sel_low)), "abcde") == [1] * 5      # {0}
    assert out(SelectorWidth(SelectorOr(sel_even, sel_low)), "abcde") == [4] * 5       # {0,1,2,4}
    assert out(SelectorWidth(SelectorNot(sel_even)), "abcde") == [2] * 5               # {1,3}
    assert out(SelectorWidth(~sel_even & sel_low), "abcde", causal=True) == [0, 1, 1, 1, 1]


def test_every_intermediate_is_returned_by_name_and_selectors_print():
    shifted = Aggregate(Select(indices + 1, indices, EQ).named("prev"), tokens, default="^").named("shift")
    loud = Map(str.upper, shifted).named("loud")
    ev = evaluate(loud, "abc")
    assert set(ev.names) >= {"tokens", "indices", "shift", "loud", "prev"}
    assert list(ev["shift"]) == ["^", "a", "b"] and list(ev.output) == ["^", "A", "B"]
    assert ev.values["loud"].tolist() == ["^", "A", "B"]
    assert ev.selector("prev").tolist() == [[False] * 3, [True, False, False], [False, True, False]]
    text = ev.show_selector("prev")
    assert text.splitlines()[-1].endswith("| . 1 .")
    assert "loud" in ev.show()


def test_numpy_columns_have_numeric_dtype_when_possible():
    ev = evaluate(indices * 2, "abc")
    assert ev.output.dtype.kind == "i" and ev.output.tolist() == [0, 2, 4]
    ev = evaluate(Map(lambda t: (t, t), tokens), "ab")
    assert ev.output.dtype == object and ev.output.tolist() == [("a", "a"), ("b", "b")]


def test_operators_build_maps_and_sequencemaps():
    assert out(tokens + 1, [1, 2]) == [2, 3]
    assert out(10 - tokens, [1, 2]) == [9, 8]
    assert out(tokens * indices, [3, 3]) == [0, 3]
    assert out((tokens > 1) & (indices == 0), [2, 2]) == [True, False]
    assert out(~(tokens == 2), [1, 2]) == [True, False]
    assert (indices + 3 - 1).index_offset == 2 and (tokens + 1).index_offset is None
    with pytest.raises(TypeError):
        bool(tokens == 1)


def test_expressions_are_immutable_and_named_returns_a_copy():
    m = Map(abs, tokens)
    n = m.named("abs")
    assert n.label == "abs" and m.label != "abs" and n.uid != m.uid
    with pytest.raises(AttributeError):
        m.f = len


def test_map_simplify_fuses_only_when_asked():
    inner = Map(lambda x: x + 1, tokens)
    assert Map(lambda x: x * 2, inner).inner is inner
    fused = Map(lambda x: x * 2, inner, simplify=True)
    assert fused.inner is tokens and out(fused, [1, 2]) == [4, 6]


def test_analyse_counts_ops_layers_and_heads():
    a = Aggregate(Select(tokens, tokens, EQ), indices, reduce="max")            # layer 1
    b = SelectorWidth(Select(indices, indices, LT))                                # layer 1
    c = Aggregate(Select(indices, a, EQ), tokens)                                  # layer 2
    prog = SequenceMap(lambda x, y: (x, y), c, b)
    stats = analyse(prog)
    assert stats.attention_layers == 2 and stats.heads_per_layer == (2, 1)
    assert stats.size == 7 and stats.ops["Select"] == 3


# ------------------------------------------------------------------------------- errors


def test_numerical_mean_over_non_numbers_is_an_error_naming_the_op():
    prog = numerical(Aggregate(Select(tokens, tokens, TRUE), tokens, default=0)).named("avg")
    with pytest.raises(RASPTypeError, match="avg.*non-numeric"):
        evaluate(prog, ["a", "b"])
    with pytest.raises(RASPTypeError, match="avg"):
        evaluate(prog, ["a", "b"], fast=False)


def test_categorical_aggregate_selecting_different_values_is_an_error():
    prog = Aggregate(Select(tokens, tokens, TRUE), tokens).named("mix")
    with pytest.raises(AmbiguousAggregateError, match=r"mix.*'x'.*'y'"):
        evaluate(prog, "xy")
    # causal: row 0 sees only 'x' and is fine, row 1 fails
    inc = IncrementalEvaluator(prog)
    assert inc.push("x") == "x"
    with pytest.raises(AmbiguousAggregateError, match="query position 1"):
        inc.push("y")
    with pytest.raises(RASPEvaluationError, match="stopped"):
        inc.push("z")


def test_max_over_incomparable_values_is_an_error():
    prog = Aggregate(Select(tokens, tokens, TRUE), tokens, reduce="max").named("mx")
    with pytest.raises(RASPTypeError, match="mx"):
        evaluate(prog, [1, "a"])


def test_user_function_errors_name_the_op():
    prog = Map(lambda t: 1 // t, tokens).named("inv")
    with pytest.raises(RASPEvaluationError, match="inv"):
        evaluate(prog, [1, 0])
    with pytest.raises(RASPEvaluationError, match="inv.*position 1"):
        IncrementalEvaluator(prog).extend([1, 0])


def test_dense_fallback_has_a_size_guard():
    sort_key = SelectorWidth(Select(tokens, tokens, LT)).named("rank")
    assert out(sort_key, [3, 1, 2]) == [2, 0, 1]
    with pytest.raises(RASPSizeError, match="rank"):
        evaluate(sort_key, list(range(50)), max_dense=40)
    with pytest.raises(RASPSizeError):
        IncrementalEvaluator(sort_key, max_dense=10).extend(range(20))


def test_equality_selects_scale_without_a_dense_matrix():
    n = 50_000
    prog = SelectorWidth(Select(tokens, tokens, EQ) & Select(indices, indices, LEQ))
    res = out(prog, [i % 7 for i in range(n)], max_dense=16)
    assert res[-1] == len(range(n - 1, -1, -7)) and res[:8] == [1, 1, 1, 1, 1, 1, 1, 2]


def test_constructor_type_errors():
    with pytest.raises(TypeError):
        Aggregate(tokens, tokens)
    with pytest.raises(ValueError):
        Aggregate(Select(tokens, tokens, EQ), tokens, reduce="sum")
    with pytest.raises(TypeError):
        Select(tokens, 3, EQ)


# ------------------------------------------------- fast paths vs a nested-loop reference


SIDES = [tokens, indices, indices + 1, indices - 2, Map(lambda t: t % 3, tokens), Full(1),
         Map(lambda i: i // 2, indices)]
PREDS = list(Comparison)


def selectors():
    atom = st.builds(Select, st.sampled_from(SIDES), st.sampled_from(SIDES), st.sampled_from(PREDS))
    return selector_trees(atom, ["and", "and", "or", "not"])


def programs():
    return random_programs(selectors())



@settings(max_examples=300)   # a cheap oracle: many examples
@given(prog=programs(), toks=st.lists(st.integers(0, 5), min_size=1, max_size=12),
       causal=st.booleans())
def test_fast_paths_and_dense_path_agree_with_the_reference(prog, toks, causal):
    expected = outcome(lambda: ref_eval(prog, toks, causal))
    assert outcome(lambda: out(prog, toks, causal=causal)) == expected
    assert outcome(lambda: out(prog, toks, causal=causal, fast=False)) == expected
    if causal:
        assert outcome(lambda: IncrementalEvaluator(prog).extend(toks)) == expected


def test_two_layer_program_incremental_equals_batch_and_reference():
    first = Aggregate(Select(tokens, tokens, EQ), indices, reduce="min", default=-1).named("first")
    gap = SequenceMap(lambda i, f: i - f, indices, first).named("gap")
    prog = Aggregate(Select(gap, Full(0), EQ) & Select(indices, indices, LT), tokens,
                     reduce="max", default=None)
    toks = [3, 1, 3, 2, 1, 1, 0, 3]
    expected = ref_eval(prog, toks, True)
    assert IncrementalEvaluator(prog).extend(toks) == expected == out(prog, toks, causal=True)
    assert np.array_equal(evaluate(prog, toks).output, np.array(ref_eval(prog, toks, False), dtype=object))
