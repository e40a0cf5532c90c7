"""tracr's LinearSequenceMap, ConstantSOp and ConstantSelector: values checked against plain
Python lists and nested loops, in every evaluation path (dense, fast, causal, non-causal,
incremental)."""
from __future__ import annotations

import pytest

import rasp
from rasp import (Aggregate, Comparison, ConstantLengthError, ConstantSelector, ConstantSOp,
                  IncrementalEvaluator, LinearSequenceMap, Select, SelectorWidth, SequenceMap,
                  evaluate, indices, length, numerical, tokens)

MODES = [dict(causal=c, fast=f) for c in (False, True) for f in (True, False)]


def out(program, toks, **kw):
    return evaluate(program, toks, **kw).column(program)


def incremental(program, toks):
    return IncrementalEvaluator(program).extend(toks)


def reference(matrix, values, causal, reduce):
    """Nested-loop Aggregate over a (query x key) 0/1 matrix."""
    rows = []
    for q, row in enumerate(matrix):
        picked = [values[k] for k, s in enumerate(row) if s and (k <= q or not causal)]
        rows.append(None if not picked else {"max": max, "min": min}[reduce](picked))
    return rows


def test_exported_from_the_package():
    for name in ("LinearSequenceMap", "ConstantSOp", "ConstantSelector"):
        assert name in rasp.__all__ and getattr(rasp, name) is not None


@pytest.mark.parametrize("mode", MODES)
def test_linear_sequence_map_is_a_times_x_plus_b_times_y(mode):
    lin = numerical(LinearSequenceMap(tokens, indices, 2, -0.5))
    toks = [3, -1, 0.25, 7]
    assert out(lin, toks, **mode) == [2 * t - 0.5 * i for i, t in enumerate(toks)]
    assert isinstance(lin, SequenceMap) and (lin.fst_fac, lin.snd_fac) == (2, -0.5)
    assert lin.encoding is rasp.Encoding.NUMERICAL
    assert LinearSequenceMap(tokens, indices, 1, 1).encoding is rasp.Encoding.CATEGORICAL


def test_linear_sequence_map_feeds_a_numerical_mean_incrementally():
    lin = numerical(LinearSequenceMap(tokens, length, 1, -1))   # t[k] - (k + 1) causally
    mean = numerical(Aggregate(Select(indices, indices, Comparison.LEQ), lin, default=0))
    toks = [4, 8, 1, 2]
    expect = [sum(toks[k] - (k + 1) for k in range(q + 1)) / (q + 1) for q in range(len(toks))]
    assert incremental(mean, toks) == expect == out(mean, toks, causal=True)


def test_linear_sequence_map_rejects_non_numeric_factors():
    with pytest.raises(TypeError, match="fst_fac"):
        LinearSequenceMap(tokens, indices, "2", 1)
    with pytest.raises(TypeError, match="snd_fac"):
        LinearSequenceMap(tokens, indices, 1, True)


def test_constant_sop_column_and_length_rule():
    const = ConstantSOp([3, 1, 4])
    assert out(const, "abc") == [3, 1, 4]
    assert out(const, "ab", causal=True) == [3, 1]               # causal reads a prefix
    assert incremental(const + tokens, [10, 20, 30]) == [13, 21, 34]
    with pytest.raises(ConstantLengthError, match="exactly 3 tokens; it has 2"):
        evaluate(const, "ab")                                     # tracr's check_length
    assert out(ConstantSOp([3, 1, 4], check_length=False), "ab") == [3, 1]
    for kw in (dict(), dict(causal=True)):
        with pytest.raises(ConstantLengthError, match="at most 3|exactly 3"):
            evaluate(const, "abcd", **kw)
    with pytest.raises(ConstantLengthError, match="at most 3 tokens; it has 4"):
        incremental(const, "abcd")
    with pytest.raises(TypeError, match="Full"):
        ConstantSOp(5)


@pytest.mark.parametrize("mode", MODES)
def test_uniform_constant_selector_selects_all_or_nothing(mode):
    n = 5
    width_all = SelectorWidth(ConstantSelector(True))
    expect = [q + 1 for q in range(n)] if mode["causal"] else [n] * n
    assert out(width_all, "abcde", **mode) == expect
    assert out(SelectorWidth(ConstantSelector(False)), "abcde", **mode) == [0] * n
    # combined with an EQ select it stays on the hash fast path: same as the EQ alone
    same = Select(tokens, tokens, Comparison.EQ)
    assert out(SelectorWidth(same & ConstantSelector(True)), "abaab", **mode) == \
        out(SelectorWidth(same), "abaab", **mode)
    assert out(Aggregate(same & ConstantSelector(False), tokens, default="-"), "ab", **mode) == ["-"] * 2


MATRIX = [[0, 1, 0, 1],
          [1, 0, 0, 0],
          [1, 1, 1, 0],
          [0, 0, 0, 0]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_matrix_constant_selector_against_nested_loops(mode, reduce):
    toks = [5, 2, 9, 4]
    agg = Aggregate(ConstantSelector(MATRIX), tokens, reduce=reduce)
    assert out(agg, toks, **mode) == reference(MATRIX, toks, mode["causal"], reduce)
    widths = [sum(s for k, s in enumerate(row) if k <= q or not mode["causal"])
              for q, row in enumerate(MATRIX)]
    assert out(SelectorWidth(ConstantSelector(MATRIX)), toks, **mode) == widths
    if mode["causal"]:
        assert incremental(agg, toks) == reference(MATRIX, toks, True, reduce)


def test_matrix_constant_selector_combines_with_not_and_or():
    toks = "abcd"
    sel = ~ConstantSelector(MATRIX) | Select(indices, indices, Comparison.EQ)
    want = [sum(1 for k in range(4) if not MATRIX[q][k] or k == q) for q in range(4)]
    assert out(SelectorWidth(sel), toks) == want


def test_constant_selector_forms_and_length_rule():
    named = ConstantSelector(indices, tokens, value=False)
    assert named.children == (indices, tokens) and named.uniform is False
    assert ConstantSelector(indices, tokens).uniform is True
    by_name = ConstantSelector(keys=indices, queries=tokens, value=MATRIX)
    assert by_name.children == (indices, tokens) and by_name.value == ConstantSelector(MATRIX).value
    for bad in (dict(keys=indices), dict(keys=indices, queries=3)):
        with pytest.raises(TypeError, match="keys and queries"):
            ConstantSelector(**bad)
    with pytest.raises(TypeError, match="value twice"):
        ConstantSelector(indices, tokens, True, value=False)
    assert ConstantSelector(value=MATRIX).value == ConstantSelector(MATRIX, True).value
    shown = ConstantSelector(tokens, indices, True)
    ev = evaluate(SelectorWidth(shown), "ab", causal=True)
    assert ev.selector(shown).tolist() == [[True, False], [True, True]]
    assert ev.show_selector(shown).splitlines()[1:] == ["    'a' 'b'", "0 | 1 .", "1 | 1 1"]
    assert evaluate(SelectorWidth(sel := ConstantSelector(MATRIX)), "abcd").selector(sel).tolist() \
        == [[bool(x) for x in row] for row in MATRIX]
    sel = ConstantSelector(MATRIX)
    with pytest.raises(ConstantLengthError, match="exactly 4 tokens; it has 3"):
        evaluate(SelectorWidth(sel), "abc")
    assert out(SelectorWidth(sel), "abc", causal=True) == [0, 1, 3]
    assert out(SelectorWidth(ConstantSelector(MATRIX, check_length=False)), "abc") == [1, 1, 3]
    with pytest.raises(ConstantLengthError, match="at most 4"):
        incremental(SelectorWidth(sel), "abcde")
    with pytest.raises(ValueError, match="square"):
        ConstantSelector([[1, 0], [1]])
    with pytest.raises(TypeError):
        ConstantSelector(3)
