"""Every behaviour that docs/rasp.md states, one test each, with expected values worked out by
hand (the places where this interpreter differs from tracr and from RASP-L included)."""
from __future__ import annotations

import pytest

from rasp import (Aggregate, AmbiguousAggregateError, Comparison, Full, IncrementalEvaluator, Map,
                  RASPSizeError, RASPTypeError, Select, SelectorWidth, SequenceMap, evaluate,
                  indices, length, numerical, tokens)
from rasp.kernels import classify

EQ, LT, LEQ, GEQ, TRUE = Comparison.EQ, Comparison.LT, Comparison.LEQ, Comparison.GEQ, Comparison.TRUE


def col(program, toks, **kw):
    return evaluate(program, toks, **kw).column(program)


# -------------------------------------------------------------------- differences from tracr


def test_and_or_on_sops_return_booleans_not_an_operand():
    assert col(tokens & 3, [2, 0]) == [True, False]            # tracr: [3, 0]
    assert col(tokens | 5, [2, 0]) == [True, True]             # tracr: [2, 5]
    assert col(3 & tokens, [2, 0]) == [True, False]
    assert col(~tokens, [2, 0]) == [False, True]
    # the documented way to get tracr's operand-returning form
    tracr_and = SequenceMap(lambda x, y: x and y, tokens, Full(3))
    assert col(tracr_and, [2, 0]) == [3, 0]


def test_map_and_sequence_map_are_called_on_none():
    first = Aggregate(Select(indices + 1, indices, EQ), tokens)        # None at position 0
    assert col(first, "ab") == [None, "a"]
    assert col(Map(lambda v: v is None, first), "ab") == [True, False]  # tracr: [None, False]
    assert col(SequenceMap(lambda v, t: (v, t), first, tokens), "ab") == [(None, "a"), ("a", "b")]
    with pytest.raises(RASPTypeError, match="Map"):
        evaluate(Map(lambda v: v + "!", first), "ab")                   # tracr: [None, "a!"]


def test_none_is_an_ordinary_value_in_comparisons():
    first = Aggregate(Select(indices + 1, indices, EQ), tokens)
    # EQ against None selects the None keys (tracr raises "key is None!")
    assert col(SelectorWidth(Select(first, Full(None), EQ)), "abc") == [1, 1, 1]
    with pytest.raises(RASPTypeError):
        evaluate(SelectorWidth(Select(first, Full("b"), LT)), "abc")      # None < "b"


def test_categorical_mean_needs_one_distinct_value_numerical_mean_averages():
    sel = Select(indices, Full(1), LEQ)                                 # keys 0 and 1
    assert col(Aggregate(sel, tokens), "aab") == ["a"] * 3               # equal values: that value
    with pytest.raises(AmbiguousAggregateError, match="several different values"):
        evaluate(Aggregate(sel, tokens), [1, 3, 5])                     # tracr: 2.0
    assert col(numerical(Aggregate(sel, numerical(tokens))), [1, 3, 5]) == [2.0] * 3
    assert col(Aggregate(sel, tokens, reduce="max"), [1, 3, 5]) == [3] * 3


def test_map_does_not_fuse_unless_asked():
    inner = Map(lambda x: x + 1, tokens)
    assert Map(lambda x: 2 * x, inner).inner is inner                   # tracr fuses by default
    assert Map(lambda x: 2 * x, inner, simplify=True).inner is tokens


def test_and_of_selects_is_kept_as_two_selects():
    sel = Select(tokens, tokens, EQ) & Select(tokens, tokens, LEQ)
    assert type(sel).__name__ == "SelectorAnd"                          # tracr merges them
    assert col(SelectorWidth(sel), [1, 2, 1]) == [2, 1, 2]


# ----------------------------------------------------------------------- causal vs non-causal


def test_causal_length_is_the_prefix_length_and_keys_after_the_query_are_masked():
    assert col(length, "abcd") == [4] * 4
    assert col(length, "abcd", causal=True) == [1, 2, 3, 4]
    every = SelectorWidth(Select(tokens, tokens, TRUE))
    assert col(every, "abcd", causal=True) == [1, 2, 3, 4]


def test_not_complements_before_the_causal_mask():
    later_or_same = SelectorWidth(~Select(indices, indices, LT))         # keys k >= q
    assert col(later_or_same, "abcd") == [4, 3, 2, 1]
    assert col(later_or_same, "abcd", causal=True) == [1, 1, 1, 1]       # only k == q survives


def test_incremental_evaluation_equals_causal_batch_at_every_prefix():
    prog = numerical(Aggregate(Select(indices, length / 2, LT), numerical(tokens), default=0))
    toks = [4, 2, 6, 8, 1]
    inc = IncrementalEvaluator(prog)
    for p, t in enumerate(toks):
        assert inc.push(t) == col(prog, toks[:p + 1], causal=True)[p]
    assert inc.column(prog) == col(prog, toks, causal=True)


# --------------------------------------------------------------------- differences from RASP-L


def test_means_are_not_truncated_and_maps_are_not_cast_to_int():
    mean = numerical(Aggregate(Select(indices, indices, LEQ), numerical(tokens), default=0))
    assert col(mean, [1, 2], causal=True) == [1.0, 1.5]                 # np-rasp: [1, 1]
    assert col(tokens / 2, [3]) == [1.5]


def test_index_arithmetic_is_allowed_and_exact():
    mirror = Aggregate(Select(indices, length - indices - 1, EQ), tokens)
    assert col(mirror, "abc") == ["c", "b", "a"]                        # RASP-L forbids this


# ------------------------------------------------------------------------------- fast paths


@pytest.mark.parametrize("selector, kind", [
    (Select(indices - 1, indices, EQ), "direct"),
    (Select(tokens, tokens, EQ) & Select(indices, length / 2, LT), "hash"),
    (Select(tokens, tokens, TRUE) & Select(indices + 2, indices * 0.5, LEQ), "hash"),
    (Select(tokens, tokens, EQ) & Select(tokens, tokens, Comparison.FALSE), "empty"),
    (Select(indices, indices, GEQ), "dense"),
    (Select(tokens, tokens, EQ) | Select(indices, indices, EQ), "dense"),
])
def test_selector_plans_named_in_the_docs(selector, kind):
    assert classify(selector)[0] == kind


def test_dense_selectors_are_refused_beyond_max_dense():
    prog = SelectorWidth(Select(tokens, tokens, LT))
    assert col(prog, [3, 1, 2], max_dense=3) == [2, 0, 1]
    with pytest.raises(RASPSizeError, match="max_dense=3"):
        evaluate(prog, [3, 1, 2, 0], max_dense=3)
    hashed = SelectorWidth(Select(tokens, tokens, EQ) & Select(indices, indices, LEQ))
    assert col(hashed, [0, 1] * 3, max_dense=3) == [1, 1, 2, 2, 3, 3]    # fast: no guard


def test_the_example_in_docs_rasp_md_prints_what_its_comments_say():
    import ast
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "rasp.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    checked = 0
    for line in block.splitlines():
        code, _, comment = line.partition("#")
        if comment.strip().startswith("["):
            assert eval(code, scope) == ast.literal_eval(comment.strip()), line
            checked += 1
        else:
            exec(line, scope)
    assert checked == 2
