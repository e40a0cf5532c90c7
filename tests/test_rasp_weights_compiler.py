"""rasp.weights: CompileError for unsupported constructs, a perturbed weight being caught, layer
sharing, saving through lengthgen.weights, non-causal attention (the leak bound and the other
exactness guarantees: tests/test_rasp_weights_exactness.py)."""
from __future__ import annotations

import pytest
import torch

from lengthgen.attention import chunked_attention, dense_attention, long_attention
from lengthgen.weights import load_model, save_model
from rasp import lib
from rasp.core import (Aggregate, Comparison, Map, Select, SequenceMap,
                       indices, numerical, tokens)
from rasp.evaluate import evaluate
from rasp.tracr_ops import ConstantSelector
from rasp.weights import CompileError, compile_to_transformer

VOCAB = [0, 1, 2, 3]
bools = Map(lambda t: t > 1, tokens)


@pytest.mark.parametrize("program, words", [
    (Aggregate(ConstantSelector([[True, False], [True, True]]), tokens), "fixed selection matrix"),
    (numerical(SequenceMap(lambda a, b: a * b, numerical(Map(float, tokens)), Aggregate(
        Select(tokens, tokens, Comparison.EQ), numerical(Map(float, tokens)), default=0))),
     "numerical"),
    (Aggregate(Select(indices, Map(lambda i: i // 2, indices), Comparison.LT), tokens), "one-hot table"),
    (Map(lambda x: x > 0.5, numerical(Aggregate(Select(tokens, tokens, Comparison.TRUE),
                                                numerical(Map(lambda t: t / 2, tokens)), default=0))),
     "unknown"),
    (Aggregate(Select(tokens, tokens, Comparison.EQ), lib.make_pair(tokens, indices)), "tuple"),
    (Select(tokens, tokens, Comparison.EQ), "s-op"),
    (Map(lambda t: 1 // (t - 2), tokens), "cannot tabulate"),
    (SequenceMap(lambda a, b: a + b, lib.lasts(tokens, tokens), lib.firsts(tokens, tokens)), "entries"),
])
def test_unsupported_constructs_raise_compile_error(program, words):
    with pytest.raises(CompileError, match=words):
        compile_to_transformer(program, VOCAB, 700, causal=False)


def test_independent_ops_share_a_layer_and_describe_names_them():
    a = lib.shift_right(tokens, 1, 0).named("a")
    b = lib.lasts(tokens, tokens).named("b")
    c = SequenceMap(lambda x, y: x + y, a, b).named("c")
    ct = compile_to_transformer(c, VOCAB, 8)
    assert ct.stats["layers"] == 1 and ct.stats["heads_per_layer"] == [2]
    text = ct.describe()
    assert "layer 0 head 0: a = Aggregate" in text and "reduce=max" in text and "layer 0 MLP" in text
    xs = [3, 1, 3, 0, 1]
    assert ct.run(xs) == evaluate(c, xs, causal=True).column(c)


def test_layout_is_tracr_style():
    ct = compile_to_transformer(lib.shift_right(tokens, 1, 0).named("prev"), VOCAB, 40)
    labels = ct.residual_labels
    assert labels[:2] == ["one", "tokens:BOS"]
    assert {"tokens:0", "tokens:3", "prev:0", "indices", "indices^2"} <= set(labels)


def test_a_perturbed_weight_is_caught():
    program = lib.make_hist()
    ct = compile_to_transformer(program, VOCAB, 10, causal=False)
    xs = [0, 1, 1, 3, 1, 0]
    expected = evaluate(program, xs, causal=False).column(program)
    assert ct.run(xs) == expected
    with torch.no_grad():   # BOS's value in the selector-width head: 1 -> 1.3
        ct.model.blocks[0].attn.W_V[0, 1, 0] += 0.3
    assert ct.run(xs) != expected


def test_saved_weights_reload_bit_for_bit(tmp_path):
    ct = compile_to_transformer(lib.make_reverse(tokens), VOCAB, 10, causal=False)
    path = save_model(ct.model, tmp_path / "reverse.safetensors")
    model = load_model(path)
    assert not model.cfg.causal and model.annotations.residual == ct.residual_labels
    ids = torch.tensor(ct.encode([3, 0, 2, 1]))
    assert torch.equal(model(ids), ct.model(ids))


@pytest.mark.parametrize("lq, lk", [(37, 37), (5, 40), (1, 23)])
def test_non_causal_long_and_chunked_paths_equal_dense(lq, lk):
    gen = torch.Generator().manual_seed(lq * lk)
    q, k, v = (torch.randn(2, 3, length, 8, generator=gen, dtype=torch.float64) for length in (lq, lk, lk))
    dense = dense_attention(q, k, v, 0.5, causal=False)[0]
    assert torch.allclose(long_attention(q, k, v, 0.5, causal=False), dense, atol=1e-10)
    assert torch.allclose(chunked_attention(q, k, v, 0.5, query_block=4, key_block=8, causal=False),
                          dense, atol=1e-10)
    # causal=False really differs from the causal kernel when a query has later keys
    if lq > 1:
        assert not torch.allclose(dense_attention(q, k, v, 0.5)[0], dense)


def test_bos_clean_up_keeps_bos_out_of_matches():
    """The key is an MLP output, so the BOS position holds a leftover key value (here 1); without
    the BOS clean-up of rasp.weights.assemble the BOS key would out-score the real match."""
    key = SequenceMap(lambda t, i: t + 1, tokens, indices)
    program = Aggregate(Select(key, tokens, Comparison.EQ), indices, default=-1, reduce="max")
    ct = compile_to_transformer(program, VOCAB, 8, causal=False)
    xs = [0, 1, 3, 1]
    assert ct.run(xs) == evaluate(program, xs, causal=False).column(program) == [-1, 0, -1, 0]
