"""rasp.weights' interface: argument checks, encode/decode, classes, labels, describe, annotations,
documented sizes, and every s-op read back from the residual stream.

docs/turing-programs.md ("Compiling RASP to weights", "Residual layout", section 6's size table)
and the docstrings of rasp/weights/assemble.py and layout.py; outputs against the RASP
interpreter's dense path (``evaluate(fast=False)``), sizes against the documented table.
"""
from __future__ import annotations

import re

import pytest
import torch

from rasp import lib
from rasp.core import Aggregate, Comparison, Map, Select, SequenceMap, indices, length, numerical, tokens
from rasp.evaluate import evaluate
from rasp.tracr_ops import LinearSequenceMap
from rasp.weights import UNDECIDED_VALUE, CompileError, compile_to_transformer

VOCAB = [0, 1, 2, 3]


def _want(program, xs, causal=True):
    return list(evaluate(program, xs, causal=causal, fast=False).column(program))


def test_arguments_and_tokens_are_checked():
    program = lib.shift_right(tokens, 1, 0)
    for n in (0, -1, 1.5, "3"):
        with pytest.raises(CompileError, match=re.escape(f"max_seq_len must be a positive integer, got {n!r}")):
            compile_to_transformer(program, VOCAB, n)
    assert compile_to_transformer(program, VOCAB, 1).run([2]) == [0] == _want(program, [2])
    for vocab in ([], [1, 1], [1, 2, 1]):
        with pytest.raises(CompileError, match="^the vocabulary must be non-empty and without repeats$"):
            compile_to_transformer(program, vocab, 4)
    ct = compile_to_transformer(program, VOCAB, 4)
    for xs in ([7], [0, 7]):
        with pytest.raises(CompileError, match=re.escape(f"token {xs[-1]!r} is not in the compiled vocabulary")):
            ct.run(xs)
    with pytest.raises(CompileError, match="5 tokens exceed max_seq_len=4"):
        ct.run([0] * 5)


def test_an_unhashable_token_is_named():
    ct = compile_to_transformer(Map(lambda t: t, tokens), VOCAB, 4)
    with pytest.raises(CompileError, match=re.escape("token [3] is not in the compiled vocabulary")):
        ct.run([1, 2, [3]])


def test_a_tie_decodes_as_undecided():
    ct = compile_to_transformer(Map(lambda t: t, tokens), VOCAB, 4)
    with torch.no_grad():   # class 1 reads what class 0 reads: token 0 ties, token 2 does not
        ct.model.unembed.W_U[:, ct.classes.index(1)] = ct.model.unembed.W_U[:, ct.classes.index(0)]
    assert ct.run([0, 2]) == [UNDECIDED_VALUE, 2]
    assert repr(UNDECIDED_VALUE) == "<undecided>"


def test_classes_start_with_output_values_and_never_output_ones_lose():
    program = Map(lambda t: 3 - t, tokens)
    ct = compile_to_transformer(program, VOCAB, 4, output_values=[3, 2])
    assert ct.classes == [3, 2, 0, 1] and ct.run([0, 1, 3]) == _want(program, [0, 1, 3])
    # an ordinal output (40 positions) with a class it never outputs first, and the value 0
    ct = compile_to_transformer(indices, VOCAB, 40, output_values=["$"])
    assert ct.program.output.encoding == "ordinal" and ct.classes[:2] == ["$", 0]
    assert ct.run([1] * 40) == list(range(40))
    # one-hot output of large values: the indicator logits stay exact
    big = [10**9, 10**9 + 1, 10**9 + 2]
    ct = compile_to_transformer(Map(lambda t: t, tokens), big, 4)
    assert ct.program.output.encoding == "onehot" and ct.run(big) == big


def test_labels_follow_the_residual_layout():
    labels = compile_to_transformer(Map(lambda t: t, tokens), ["a", "b"], 4).residual_labels
    assert labels[:4] == ["one", "tokens:BOS", "tokens:a", "tokens:b"]
    labels = compile_to_transformer(Map(lambda t: t, tokens), [1, "1"], 4).residual_labels
    assert "tokens:1" in labels and "tokens:'1'" in labels and len(labels) == len(set(labels))
    x = Map(lambda t: t, tokens).named("x")
    y = numerical(Map(lambda t: t + 0.5, tokens)).named("x:1")
    with pytest.raises(CompileError, match=re.escape("two residual dimensions would both be named 'x:1'")):
        compile_to_transformer(SequenceMap(lambda a, b: a, x, y), VOCAB, 4)
    # tuples, folded (opp_idx) and linear (bal) s-ops own no dimension
    pair = lib.make_pair(tokens, indices).named("pair")
    labels = compile_to_transformer(Map(lambda p: p[0] + p[1], pair), VOCAB, 4).residual_labels
    assert not any(lab.startswith("pair") for lab in labels)
    reverse = compile_to_transformer(lib.make_reverse(tokens), VOCAB, 8, causal=False)
    assert not any(lab.split(":")[0] in ("opp_idx", "opp_idx^2") for lab in reverse.residual_labels)
    assert "bal" not in {lab.split(":")[0] for lab in _balance().residual_labels}


def _balance():
    o = numerical(Map(lambda t: 1 if t == 0 else 0, tokens)).named("o")
    c = numerical(Map(lambda t: 1 if t == 1 else 0, tokens)).named("c")
    fo = numerical(Aggregate(Select(indices, indices, Comparison.LEQ), o, default=0)).named("fo")
    fc = numerical(Aggregate(Select(indices, indices, Comparison.LEQ), c, default=0)).named("fc")
    return compile_to_transformer(numerical(LinearSequenceMap(fo, fc, 1, -1)).named("bal"), VOCAB, 8,
                                  causal=False)


def test_describe_and_annotations_name_each_op():
    ct = compile_to_transformer(lib.make_reverse(tokens).named("rev"), VOCAB, 8, causal=False)
    text = re.sub(r"\(\d+ units\)", "(N units)", ct.describe())
    assert text.splitlines() == [
        "embedding:",
        "  W_pos: indices (onehot, 8 values)",
        "  W_E: tokens (onehot, 4 values)",
        "no layer (affine; read by the ops that use them):",
        "  opp_idx: folded into the affine s-ops that read it",
        "layer 0 head 0: length = SelectorWidth(True) [attention to BOS + selected]",
        "layer 0 MLP (N units): MLP decode w from 1/(w+1): length",
        "layer 1 MLP (N units): MLP affine: opp_idx-1 = 1*length + -1*indices + -1 (identity table on 16 values)",
        f"layer 2 head 0: rev = Aggregate({ct.heads[2][0].node.sop.selector.label}: indices == opp_idx-1, "
        "tokens, reduce=mean, default=None)",
        "unembed: rev (onehot)"]
    notes = ct.model.annotations
    assert notes.head_names == [h.text for hs in ct.heads for h in hs] == [line.split(": ", 1)[1] for line in
                                                                          text.splitlines() if " head " in line]
    assert notes.vocab == ["0", "1", "2", "3", "BOS"] and notes.title == "compiled RASP program 'rev'"
    assert notes.notes == {"unembed.W_U": "reads rev (onehot)"}
    assert 0 <= ct.seconds < 60 and ct.stats["compile_seconds"] == round(ct.seconds, 3)
    lines = _balance().describe().splitlines()
    assert lines[:5] == ["embedding:", "  W_pos: indices (onehot, 8 values)", "  W_E: tokens (onehot, 4 values)",
                         "  W_E: o (numerical, 2 values)", "  W_E: c (numerical, 2 values)"]
    assert lines[5:7] == ["no layer (affine; read by the ops that use them):", "  bal = 1*fo + -1*fc"]


@pytest.mark.parametrize("name, program, row", [
    ("shift_right (causal)", lib.shift_right(tokens, 1, 0), (1, 1, 17, 1, 1810)),
    ("lasts (causal)", lib.lasts(tokens, tokens), (1, 1, 11, 1, 1747)),
])
def test_sizes_match_the_documented_table(name, program, row):
    """docs/turing-programs.md, section 6: max_seq_len = 64, vocabulary a b x ( )."""
    stats = compile_to_transformer(program, ["a", "b", "x", "(", ")"], 64).stats
    assert (stats["layers"], stats["heads"], stats["d_model"], stats["d_mlp"], stats["params"]) == row, name


def test_causal_length_is_a_position_embedding():
    """Causal ``length`` is p + 1, a function of the position alone: W_pos, no head ("Embeddings");
    a model without heads or MLP units keeps one of each, all zero."""
    ct = compile_to_transformer(length, VOCAB, 6)
    assert ct.describe().splitlines()[1] == "  W_pos: length (onehot, 6 values)"
    assert (ct.stats["heads"], ct.stats["d_head"], ct.stats["d_mlp"], ct.stats["layers"]) == (0, 1, 1, 1)
    assert ct.run([3, 1, 2]) == [1, 2, 3]


def test_float32_is_compiled_as_float32():
    ct = compile_to_transformer(lib.shift_right(tokens, 1, 0), VOCAB, 8, dtype=torch.float32)
    assert {p.dtype for p in ct.model.parameters()} == {torch.float32}
    assert ct.run([1, 2, 3]) == [0, 1, 2]


def test_a_dtype_other_than_float64_or_float32_is_refused():
    """float64 is the default; a half-precision dtype, or a dtype's name as a string, is refused by
    name rather than compiled as float64."""
    program = lib.shift_right(tokens, 1, 0)
    assert {p.dtype for p in compile_to_transformer(program, VOCAB, 4).model.parameters()} == {torch.float64}
    for dtype in (torch.float16, torch.bfloat16, "float32"):
        message = f"dtype must be torch.float64 or torch.float32, got {dtype!r}"
        with pytest.raises(CompileError, match=re.escape(message)):
            compile_to_transformer(program, VOCAB, 4, dtype=dtype)


def test_non_numbers_are_not_read_as_numbers():
    sel = Select(tokens, tokens, Comparison.EQ)
    with pytest.raises(CompileError, match="'tokens' has non-numeric values; it cannot be read as a number"):
        compile_to_transformer(numerical(Aggregate(sel, tokens)), ["a", "b"], 4)
    halves = [i / 2 for i in range(1, 80, 2)]          # 40 non-integer values: an ordinal code
    with pytest.raises(CompileError, match="'tokens' holds non-integer values in an ordinal code"):
        compile_to_transformer(numerical(Aggregate(sel, tokens)), halves, 4)


@pytest.mark.parametrize("causal", [True, False])
def test_every_s_op_reads_back_from_the_residual_stream(causal):
    """Layout.read on the last residual: each s-op with dimensions (one-hot, ordinal at 40
    positions, numerical) decodes to the interpreter's value at every position."""
    last = lib.lasts(tokens, tokens)
    frac = numerical(Aggregate(Select(indices, indices, Comparison.LEQ),
                               numerical(Map(lambda t: 1 if t == 2 else 0, tokens)), default=0))
    program = SequenceMap(lambda v, f: (v, f), lib.index_select(tokens, Map(lambda j: max(j - 1, 0), last)),
                          Map(lambda f: f > 0.5, frac))
    ct = compile_to_transformer(program, VOCAB, 40, causal=causal)
    xs = [(7 * i) % 4 for i in range(23)]
    with torch.no_grad():
        _, acts = ct.model(torch.tensor(ct.encode(xs)), return_cache=True)
    resid = acts[f"blocks.{ct.model.cfg.n_layers - 1}.hook_resid_post"][0]
    env = evaluate(program, xs, causal=causal, fast=False)
    encodings = set()
    for node in ct.program.nodes:
        if id(node) not in ct.layout.dims:
            continue
        encodings.add(node.encoding)
        want = list(env.column(node.sop))
        got = [ct.layout.read(node, resid[p + 1]) for p in range(len(xs))]
        assert got == (pytest.approx(want, abs=1e-9) if node.numerical else want), node
    assert encodings == {"onehot", "ordinal", "numerical"}


def test_equality_on_a_numerical_s_op_is_refused():
    half = numerical(Map(lambda t: t / 2, tokens)).named("half")
    with pytest.raises(CompileError, match=re.escape("== on the numerical s-op 'half' is not compiled "
                                                     "(make it categorical)")):
        compile_to_transformer(Aggregate(Select(half, tokens, Comparison.EQ), tokens, default=0), VOCAB, 4)
