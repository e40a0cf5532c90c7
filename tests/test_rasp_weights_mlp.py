"""rasp.weights MLPs: affine maps by definition, lookups over ordinal and numerical inputs, and
the value sets of numerical means (docs/turing-programs.md, "Value sets", "MLPs", "Linear maps",
"Not compiled"); outputs against the RASP interpreter's dense path (``evaluate(fast=False)``),
messages against the documented wording.
"""
from __future__ import annotations

import re

import pytest

from rasp import lib
from rasp.core import Aggregate, Comparison, Map, Select, SequenceMap, indices, numerical, tokens
from rasp.tracr_ops import LinearSequenceMap
from rasp.weights import CompileError, compile_to_transformer
from rasp_weights_checks import assert_compiled_agrees

VOCAB = [0, 1, 2, 3]
INPUTS = [[0, 1, 0, 3, 2, 1], [3, 3, 1, 2, 0, 0, 1, 2, 2, 3, 0], [2], [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]]


def _agree(program, n, causal, inputs=INPUTS):
    return assert_compiled_agrees(program, VOCAB, n, causal, inputs)


def _frac(value):
    return numerical(Aggregate(Select(indices, indices, Comparison.LEQ), numerical(value), default=0))


@pytest.mark.parametrize("n", [12, 40])
@pytest.mark.parametrize("causal", [True, False])
def test_maps_that_are_affine_by_definition(n, causal):
    """``+``, ``-``, unary ``-`` and LinearSequenceMap: their forms are taken from the definition."""
    shifted = lib.shift_right(tokens, 1, 0)
    for program in (tokens + indices, indices - tokens, -shifted, shifted + tokens,
                    LinearSequenceMap(shifted, indices, 2, -3), Map(lambda v: v, -(shifted + indices))):
        _agree(program, n, causal)


@pytest.mark.parametrize("causal", [True, False])
def test_lookups_over_ordinal_and_numerical_inputs(causal):
    """At 40 positions ``lasts`` is ordinal: its lookups read its code offset from the smallest."""
    last = lib.lasts(tokens, tokens)
    ct = _agree(Map(lambda j: (j * 7) % 5, last), 40, causal)
    assert ct.program.by_uid[last.uid].encoding == "ordinal"
    _agree(SequenceMap(lambda j, t: (j + 3 * t) % 7, last, tokens), 40, causal)
    _agree(SequenceMap(lambda t, j: (j * t) % 5, Map(lambda t: t + 100, tokens), last + 60), 40, causal)
    frac = _frac(Map(lambda t: 1 if t == 2 else 0, tokens))
    _agree(Map(lambda f: int(f * 1000) % 7, frac), 12, causal)


def test_numerical_means_take_every_average_up_to_512_positions():
    """A lookup over a mean of {0, 1} values needs every average i/w, w <= max_seq_len: one hit at
    the last of 12 positions is 1/12; at one position the averages are 0/1 and 1/1; at 100
    positions they are still enumerated, past 512 not."""
    frac = _frac(Map(lambda t: 1 if t == 2 else 0, tokens))
    lookup = Map(lambda f: int(f * 1000) % 7, frac)
    _agree(lookup, 1, True, [[2], [0]])
    ones = [[0] * (k - 1) + [2] for k in (1, 2, 11, 12)] + [[2] + [0] * 11, [2, 2] + [0] * 9]
    _agree(lookup, 12, True, ones)
    _agree(lookup, 12, False, ones)
    _agree(lookup, 100, True, [[0] * 99 + [2], [2] + [0] * 99, [0, 2] * 50])
    with pytest.raises(CompileError, match=re.escape("enumerated only up to max_seq_len = 512 (here 513)")):
        compile_to_transformer(lookup, VOCAB, 513)
    wide = _frac(Map(lambda t: 2 * t, tokens))
    with pytest.raises(CompileError, match="whose values are not all in \\{0, 1\\}, so the set of possible "
                                           "averages is not enumerated"):
        compile_to_transformer(Map(lambda f: f > 1, wide), VOCAB, 8)
    pair = lib.make_pair(wide.named("wide"), tokens)
    with pytest.raises(CompileError, match="its part 'wide': it is a numerical mean of"):
        compile_to_transformer(Map(lambda p: p[1], pair), VOCAB, 8)


def test_affine_forms_print_fractions():
    """A numerical max of {0, 1} values, halved and raised by 3/4: the form 1/2*m + 3/4."""
    m = numerical(Aggregate(Select(tokens, tokens, Comparison.LEQ),
                            numerical(Map(lambda t: 1 if t == 2 else 0, tokens)), reduce="max", default=0)).named("m")
    program = numerical(Map(lambda v: v / 2 + 0.75, m)).named("y")
    ct = _agree(program, 12, True)
    assert "  y = 1/2*m + 3/4" in ct.describe().splitlines()


def test_an_affine_map_past_the_lookup_limit_takes_the_range_of_its_corners():
    """lasts + firsts at 700 positions: 701 x 701 pairs (values -1..699, the default -1 included)
    exceed LOOKUP_MAX = 400,000, so the value set is the integer range between the corners,
    -2..1398, and the identity table on it is exact."""
    program = lib.lasts(tokens, tokens) + lib.firsts(tokens, tokens)
    ct = _agree(program, 700, False)
    assert ct.program.output.values == list(range(-2, 1399))


@pytest.mark.parametrize("causal", [True, False])
def test_the_input_order_with_the_fewest_changes_is_kept(causal):
    """f(a, b) = a*a % 5 reads only a (tokens 0..3: outputs 0, 1, 4, 4): with a as the most
    significant input the table steps twice, two units per step (docs, "MLPs"), so 4 units in
    either argument order; b most significant would step at every a."""
    shifted = lib.shift_right(tokens, 1, 0)
    for program in (SequenceMap(lambda a, b: (a * a) % 5, shifted, tokens),
                    SequenceMap(lambda b, a: (a * a) % 5, tokens, shifted)):
        assert _agree(program, 8, causal, [x[:8] for x in INPUTS]).stats["mlp_units"] == 4


def test_numbers_that_float64_merges_are_refused_in_a_lookup():
    """2^53 and 2^53 + 1 are one float64: a lookup that must tell them apart is refused."""
    big = numerical(Map(lambda t: 2**53 + t, tokens))
    m = numerical(Aggregate(Select(tokens, tokens, Comparison.EQ), big, reduce="max", default=2**53))
    with pytest.raises(CompileError, match="two inputs share one numeric key; cannot tabulate"):
        compile_to_transformer(Map(lambda v: v % 2, m), VOCAB, 8)


def test_lookups_name_their_op_and_read_tuples_in_order():
    """A tuple argument before a plain one (the flat part values regrouped in order), the
    lookup's description, and each block's node (rasp/weights/mlp.py, MLPBlock)."""
    shifted = lib.shift_right(tokens, 1, 0).named("s")
    pair = lib.make_pair(shifted, Map(lambda t: t % 2, shifted).named("p"))
    program = SequenceMap(lambda ab, t: 9 * ab[0] + 3 * ab[1] + t, pair, tokens).named("f")
    ct = _agree(program, 12, True)
    blocks = [b for bl in ct.mlps for b in bl]
    assert [b.node.label for b in blocks] == ["p", "f"]
    assert [b.text for b in blocks] == ["MLP lookup table: p = Map(s)",
                                        f"MLP lookup table: f = SequenceMap({pair.label}, tokens)"]
    assert f"layer 1 MLP ({len(blocks[1].units)} units): {blocks[1].text}" in ct.describe().splitlines()
    width = compile_to_transformer(lib.make_hist().named("h"), VOCAB, 8, causal=False)
    assert [b.node.label for bl in width.mlps for b in bl] == ["h"]
    assert [b.text for bl in width.mlps for b in bl] == ["MLP decode w from 1/(w+1): h"]


def test_a_numerical_input_beside_another_is_refused():
    frac = _frac(Map(lambda t: 1 if t == 2 else 0, tokens))
    with pytest.raises(CompileError, match=re.escape(": a non-linear function of a numerical s-op and another "
                                                     "s-op has no exact lookup MLP (make the inputs categorical)")):
        compile_to_transformer(SequenceMap(lambda f, t: f * t, frac, tokens), VOCAB, 8)


def test_values_are_ordered_and_hashable():
    """Numbers in numeric order (10 after 2), mixed types by type name then repr; a list value
    cannot be one-hot encoded."""
    labels = compile_to_transformer(Map(lambda t: t, tokens), list(range(12)), 4).residual_labels
    assert labels[2:14] == [f"tokens:{i}" for i in range(12)]
    labels = compile_to_transformer(Map(lambda t: t, tokens), ["b", 1, "a"], 4).residual_labels
    assert labels[2:5] == ["tokens:1", "tokens:a", "tokens:b"]
    with pytest.raises(CompileError, match=re.escape("unhashable value [0] cannot be one-hot encoded")):
        compile_to_transformer(Map(lambda t: [t], tokens), VOCAB, 4)
