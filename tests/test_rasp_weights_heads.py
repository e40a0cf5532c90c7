"""rasp.weights heads: the documented scores, defaults, table sides, layer placement and sharing.

docs/turing-programs.md ("Attention", "Exactness and the leak bound") and rasp/weights/heads.py:
an atom scores 0 when its comparison holds and ``-beta`` when it fails (``-beta (c_k - c_q)**2``
for ``==``), the BOS key ``beta/2`` below a full match (level with it in a selector width),
``beta = 2 * 40`` for mean and width heads and ``2 (gamma R + 40)`` for max/min heads, whose
keys add ``gamma * rank``. The scores are compared with these formulas written out with the
literal 40, the outputs with the RASP interpreter's dense path (``evaluate(fast=False)``).
"""
from __future__ import annotations

import pytest
import torch

from rasp import lib
from rasp.core import (Aggregate, Comparison, Map, Select, SelectorWidth, SequenceMap, indices,
                       numerical, tokens)
from rasp.evaluate import evaluate
from rasp.weights import CompileError, compile_to_transformer
from rasp_weights_checks import assert_compiled_agrees

VOCAB = [0, 1, 2, 3]
XS = [0, 1, 0, 3, 2, 1]


def _want(program, xs, causal):
    return list(evaluate(program, xs, causal=causal, fast=False).column(program))


def _agree(program, xs_list, causal, n=12, vocab=VOCAB):
    return assert_compiled_agrees(program, vocab, n, causal, xs_list)


def _scores(ct, xs, layer=0, head=0):
    """Scores of one head relative to the BOS key: ``[query, key]`` for the token positions."""
    with torch.no_grad():
        _, acts = ct.model(torch.tensor(ct.encode(xs)), return_cache=True)
    s = acts[f"blocks.{layer}.attn.hook_attn_scores"][0, head].double()
    return s[1:, 1:] - s[1:, :1]


@pytest.mark.parametrize("causal", [False, True])
def test_mean_width_and_false_scores_follow_the_documented_margins(causal):
    n = len(XS)
    visible = [[j <= i or not causal for j in range(n)] for i in range(n)]
    mean = compile_to_transformer(Aggregate(Select(tokens, tokens, Comparison.EQ), tokens, default=-1),
                                  VOCAB, 8, causal=causal)
    width = compile_to_transformer(SelectorWidth(Select(tokens, tokens, Comparison.EQ)), VOCAB, 8, causal=causal)
    for ct, bos in ((mean, 40.0), (width, 0.0)):       # full match - BOS: beta/2 (mean), 0 (width)
        s = _scores(ct, XS)
        for i in range(n):
            for j in range(n):
                if visible[i][j]:
                    assert float(s[i, j]) == bos - 80.0 * (XS[j] - XS[i]) ** 2, (ct.describe(), i, j)
    assert [h.margin for hs in mean.heads for h in hs] == [40.0]
    assert [h.margin for hs in width.heads for h in hs] == [80.0]
    for program, gap in ((Aggregate(Select(tokens, tokens, Comparison.FALSE), tokens, default=-1), -40.0),
                         (SelectorWidth(Select(tokens, tokens, Comparison.FALSE)), -80.0)):
        ct = _agree(program, [XS], causal)
        s = _scores(ct, XS)
        assert all(float(s[i, j]) == gap for i in range(n) for j in range(n) if visible[i][j])


def test_max_scores_rank_the_values_above_the_selection():
    """max over tokens 0..3 under ``key <= query``: gamma = 40, R = 3, beta = 2 (40*3 + 40) = 320;
    a selected key scores beta/2 + 40 * value above BOS, a rejected one -beta/2 + 40 * value."""
    program = Aggregate(Select(tokens, tokens, Comparison.LEQ), tokens, reduce="max", default=-1)
    ct = _agree(program, [XS], False)
    s = _scores(ct, XS)
    for i, q in enumerate(XS):
        for j, k in enumerate(XS):
            assert float(s[i, j]) == (160.0 if k <= q else -160.0) + 40.0 * k


def test_defaults_reach_every_reader():
    """A query that selects nothing reads the default: one-hot inside and outside the value set
    (then read by a lookup, which sees the coordinate's size, not only its argmax), ordinal (40
    positions) read through its code and its square by later ``==`` heads, and numerical."""
    xs_list = [[3, 1, 2, 0, 3], [2, 2], [0, 1, 2, 3, 3, 2, 1, 0]]
    above = Select(tokens, tokens, Comparison.GT)
    for default in (2, 7):
        agg = Aggregate(above, tokens, reduce="min", default=default)
        for program in (Map(lambda v: (v * 3) % 5, agg), SequenceMap(lambda a, t: (a + t) % 4, agg, tokens),
                        SelectorWidth(Select(agg, agg, Comparison.EQ))):
            _agree(program, xs_list, False)
            _agree(program, xs_list, True)
    last = Aggregate(above, indices, reduce="max", default=5)             # values 0..39: ordinal
    for sel in (Select(last, indices, Comparison.EQ), Select(indices, last, Comparison.EQ)):
        ct = _agree(Aggregate(sel, tokens, reduce="max", default=-1), xs_list, False, n=40)
        assert ct.program.by_uid[last.uid].encoding == "ordinal"
    half = numerical(Map(lambda t: t / 2, tokens))
    _agree(numerical(Aggregate(above, half, default=5)), xs_list, False)
    _agree(numerical(Aggregate(above, half, default=5)), xs_list, True)


@pytest.mark.parametrize("causal", [False, True])
def test_a_table_with_more_key_values_than_query_values(causal):
    parity = Map(lambda t: t % 2, tokens)
    program = Aggregate(Select(tokens, parity, Comparison.LT), tokens, reduce="max", default=-1)
    _agree(program, [XS, [3, 2, 1], [0]], causal)


def test_heads_and_mlps_of_the_third_layer_sit_in_it():
    s3 = lib.shift_right(lib.shift_right(lib.shift_right(tokens, 1, 0), 1, 0), 1, 0)
    s2 = lib.shift_right(lib.shift_right(tokens, 1, 0), 1, 0)
    for program in (SelectorWidth(Select(s2, s2, Comparison.EQ)), Map(lambda v: (v * 3) % 5, s3)):
        ct = _agree(program, [XS, [3, 3, 1, 2, 0, 0, 1]], True)
        assert ct.stats["layers"] == 3


def test_aggregates_share_a_head_only_with_one_selector_and_reduction():
    """Two means with one selector share one head; two maxes of different values need two (the
    tie-break ranks the value), and both must equal the interpreter."""
    same = Select(tokens, tokens, Comparison.EQ)
    means = SequenceMap(lambda a, b: 10 * a + b, Aggregate(same, tokens, default=0),
                        Aggregate(same, Map(lambda t: 3 - t, tokens), default=0))
    ct = _agree(means, [XS, [2, 2]], True)
    assert ct.stats["heads_per_layer"][0] == 1
    first, second = ct.heads[0][0].text.split("; ")
    assert first.startswith(f"{means.fst.label} = Aggregate(") and second.startswith(f"{means.snd.label} = Aggregate(")
    both = Select(tokens, tokens, Comparison.LEQ) & Select(indices, indices, Comparison.LEQ)
    text = compile_to_transformer(SelectorWidth(both), VOCAB, 8, causal=False).heads[0][0].text
    assert text.startswith("selectorwidth") and " (table) & " in text
    sel = Select(tokens, tokens, Comparison.LEQ)
    maxes = SequenceMap(lambda a, b: 10 * a + b, Aggregate(sel, tokens, reduce="max", default=0),
                        Aggregate(sel, Map(lambda t: 3 - t, tokens), reduce="max", default=0))
    ct = _agree(maxes, [XS, [3, 0, 2]], True)
    assert ct.stats["heads_per_layer"][0] == 2


@pytest.mark.parametrize("reduce, cmp", [("max", Comparison.GT), ("min", Comparison.LT)])
def test_an_empty_selection_beside_the_extreme_value_reads_the_default(reduce, cmp):
    """The query holding the largest (smallest) value selects nothing, and the key with the top
    rank is rejected: BOS must still win (beta covers the whole rank range R)."""
    for value, n, xs in ((tokens, 12, [0, 3, 1, 2]), (indices, 40, [(5 * i) % 4 for i in range(40)]),
                         (numerical(Map(lambda t: t / 4, tokens)), 12, [3, 0, 2, 1])):
        program = Aggregate(Select(tokens, tokens, cmp), value, reduce=reduce, default=-1)
        _agree(program, [xs, xs[::-1]], True, n=n)
        _agree(program, [xs, xs[::-1]], False, n=n)


def test_max_over_values_whose_codes_need_care():
    """One-hot values 1, 1.5, 2 (1.5 gets a code above the integers: ranked by position), a
    single numerical value, and the refusals with their messages."""
    _agree(Aggregate(Select(tokens, tokens, Comparison.LEQ), tokens, reduce="max", default=0),
           [[1, 2, 1.5], [2, 1.5, 1]], True, vocab=[1, 1.5, 2])
    for reduce in ("max", "min"):
        one = numerical(Aggregate(Select(tokens, tokens, Comparison.LEQ), numerical(Map(lambda t: 0, tokens)),
                                  reduce=reduce, default=0))
        _agree(one, [XS], True)
    vocab = list(range(39)) + [38.5, 39]     # ordinal (41 values), codes 0..38, 40 (for 38.5), 39
    with pytest.raises(CompileError, match="'tokens': its integer codes do not follow the value order"):
        compile_to_transformer(Aggregate(Select(tokens, tokens, Comparison.EQ), tokens, reduce="max"), vocab, 4)
    with pytest.raises(CompileError, match="'tokens': max/min needs mutually comparable values"):
        compile_to_transformer(Aggregate(Select(tokens, tokens, Comparison.EQ), tokens, reduce="max"),
                               ["a", 1], 4)
    wide = numerical(Aggregate(Select(tokens, tokens, Comparison.LEQ), numerical(Map(lambda t: 2 * t, tokens)),
                               default=0)).named("wide")
    with pytest.raises(CompileError, match="'wide': max/min of a numerical s-op needs its value set"):
        compile_to_transformer(numerical(Aggregate(Select(tokens, tokens, Comparison.LEQ), wide, reduce="max")),
                               VOCAB, 4)
