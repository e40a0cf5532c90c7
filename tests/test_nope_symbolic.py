"""Proposition 5.2 with symbolic weights (constructions.nope.symbolic): the last-position logits of a
1-layer NoPE transformer are the same expression for a prompt and a permutation with the same last
token, and not once positions are added or the last token differs. The symbolic model is checked
against the real lengthgen Transformer with the same numbers, so it is not a model of its own."""
from __future__ import annotations

import itertools
import random

import pytest
import sympy as sp
import torch

from constructions.nope.symbolic import PHI, check_invariance, last_logits, main
from lengthgen.model import Transformer, TransformerConfig


@pytest.mark.parametrize("layernorm", [False, True])
@pytest.mark.parametrize("a,b,vocab", [((0, 1, 2, 1), (2, 0, 1, 1), 3), ((3, 0, 2), (0, 3, 2), 4),
                                       ((1, 0, 0, 2), (0, 1, 0, 2), 3)])
def test_nope_logits_are_the_same_expression_for_a_permutation(a, b, vocab, layernorm):
    assert sorted(a) == sorted(b) and a[-1] == b[-1] and a != b  # the proposition's hypotheses
    check = check_invariance(a, b, vocab=vocab, layernorm=layernorm)
    assert check.same_expression and check.witness is None
    assert check.seconds < 5


@pytest.mark.parametrize("a,b", [((0, 1, 2, 1), (2, 0, 1, 1)), ((1, 0, 0, 2), (0, 1, 0, 2))])
def test_a_position_embedding_breaks_the_invariance(a, b):
    check = check_invariance(a, b, positional=True)
    assert not check.same_expression and check.witness > 1e-6


def test_a_different_last_token_breaks_the_invariance():
    check = check_invariance((0, 1, 2, 1), (0, 1, 1, 2))
    assert not check.same_expression and check.witness > 1e-6


def test_two_heads_are_still_invariant():
    assert check_invariance((0, 2, 1), (2, 0, 1), n_heads=2, d_head=1).same_expression


@pytest.mark.parametrize("layernorm,positional", [(False, False), (True, False), (False, True)])
def test_symbolic_model_is_the_lengthgen_transformer(layernorm, positional):
    """Substitute random numbers for every symbol (φ = ReLU) and compare with Transformer.forward."""
    vocab, d, m, tokens = 3, 2, 2, (0, 2, 1, 2)
    exprs = [] if layernorm else last_logits(tokens, vocab, d_model=d, d_head=d, d_mlp=m, positional=positional)
    rng = random.Random(1)
    shapes = {"E": (vocab, d), "P": (len(tokens), d), "Q0": (d, d), "K0": (d, d), "V0": (d, d), "O0": (d, d),
              "Win": (d, m), "Wout": (m, d), "U": (d, vocab)}
    names = [f"{k}_{i}_{j}" for k, (r, c) in shapes.items() for i in range(r) for j in range(c)]
    names += [f"bin_{j}" for j in range(m)] + [f"ln_{x}_{i}" for x in "wb" for i in range(d)]
    values = {sp.Symbol(n): rng.uniform(-1, 1) for n in names}
    if exprs:  # every weight the expressions use has a value
        assert set().union(*(e.free_symbols for e in exprs)) <= set(values)
    cfg = TransformerConfig(d_vocab=vocab, d_model=d, n_heads=1, d_head=d, d_mlp=m, n_ctx=8, attn_scale=1.0,
                            positional="learned" if positional else "none", normalization="LN" if layernorm else None,
                            dtype="float64")
    model = Transformer(cfg)
    val = lambda name: values.get(sp.Symbol(name), 0.0)  # noqa: E731  (absent symbol: unused weight)
    with torch.no_grad():
        for (i, j) in itertools.product(range(vocab), range(d)):
            model.embed.W_E[i, j] = val(f"E_{i}_{j}")
        if positional:
            for (p, j) in itertools.product(range(len(tokens)), range(d)):
                model.pos_embed.W_pos[p, j] = val(f"P_{p}_{j}")
        attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
        for (i, j) in itertools.product(range(d), range(d)):
            for W, name in ((attn.W_Q, "Q0"), (attn.W_K, "K0"), (attn.W_V, "V0"), (attn.W_O, "O0")):
                W[0, i, j] = val(f"{name}_{i}_{j}")
        for (i, j) in itertools.product(range(d), range(m)):
            mlp.W_in[i, j], mlp.W_out[j, i] = val(f"Win_{i}_{j}"), val(f"Wout_{j}_{i}")
        for j in range(m):
            mlp.b_in[j] = val(f"bin_{j}")
        for (i, k) in itertools.product(range(d), range(vocab)):
            model.unembed.W_U[i, k] = val(f"U_{i}_{k}")
        if layernorm:
            for ln in (model.blocks[0].ln1, model.blocks[0].ln2, model.ln_final):
                for i in range(d):
                    ln.w[i], ln.b[i] = val(f"ln_w_{i}"), val(f"ln_b_{i}")
    want = model(torch.tensor([tokens]))[0, -1]
    numbers = {str(s): v for s, v in values.items()}
    relu = lambda u: sp.Max(u, 0)  # noqa: E731
    got = [float(e) for e in last_logits(tokens, vocab, d_model=d, d_head=d, d_mlp=m, positional=positional,
                                         layernorm=layernorm, values=numbers, phi=relu)]
    assert got == pytest.approx(want.tolist(), rel=1e-9, abs=1e-9)
    # and the symbolic expressions are that same computation: substitute the numbers (skipped with
    # LayerNorm, whose expression tree has ~10^6 operations and takes seconds to substitute into)
    point = {s: sp.Float(v, 30) for s, v in values.items()}
    for e, g in zip([] if layernorm else exprs, got):
        assert float(e.xreplace(point).replace(PHI, relu)) == pytest.approx(g, rel=1e-12, abs=1e-12)


def test_main_reports_as_the_proposition_says(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.count("same expression") == 2 and out.count("different") == 2
