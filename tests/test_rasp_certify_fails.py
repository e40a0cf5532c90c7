"""rasp.certify on broken weights: every check has a model that must FAIL there, with its kind.

Each model is a correct compilation with one weight changed by hand (or one limit lowered); the
change is chosen so that a float64 forward pass of the broken model really differs where it
matters, or so that the certificate's premise of form is violated.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rasp import lib
from rasp.certify import CertifyError, certify
from rasp.certify import heads as heads_module
from rasp.certify.cli import main
from rasp.core import Map, tokens
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 6


def shift():
    """``shift_right(tokens, 1)``: one mean head (``indices+1 == indices``), one-hot output."""
    return compile_to_transformer(lib.shift_right(tokens, 1, "_"), ABC, N)


def hist():
    """``make_hist``: a selector-width head and its decoding MLP."""
    return compile_to_transformer(lib.make_hist(), ABC, N)


def dim(ct, label: str) -> int:
    return ct.layout.labels.index(label)


def edit(param: torch.nn.Parameter, index: tuple, value=None, add: float = 0.0) -> None:
    with torch.no_grad():
        param[index] = param[index] + add if value is None else value


def verdict(ct) -> tuple[str, str | None, str]:
    cert = certify(ct)
    return cert.verdict, cert.kind, cert.reason


def test_unbroken_models_pass():
    assert verdict(shift())[0] == verdict(hist())[0] == "PASS"


def test_one_query_entry_breaks_the_margin():
    ct = shift()
    q = ct.model.blocks[0].attn.W_Q
    assert float(q[0, dim(ct, "indices:2"), 0].detach()) == 320.0   # 2*beta*code(2), beta = 2*MARGIN
    edit(q, (0, dim(ct, "indices:2"), 0), 300.0)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "margin") and "layer 0 head 0" in out[2]


def test_one_key_entry_breaks_the_margin():
    ct = shift()
    shifted = next(n.label for n in ct.program.nodes if n.kind == "position" and n.sop.index_offset == 1)
    k = ct.model.blocks[0].attn.W_K
    assert float(k[0, dim(ct, f"{shifted}:3"), 1].detach()) == 9.0      # the square of code 3
    edit(k, (0, dim(ct, f"{shifted}:3"), 1), 8.0)
    assert verdict(ct)[:2] == ("FAIL", "margin")


def test_lowered_bos_score_fails_the_margin():
    ct = shift()
    q = ct.model.blocks[0].attn.W_Q
    assert float(q[0, dim(ct, "one"), 2].detach()) == -40.0              # BOS: -beta/2 below a full match
    edit(q, (0, dim(ct, "one"), 2), -100.0)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "margin")
    # the broken model is wrong: at the first token nothing is selected and BOS no longer wins
    assert ct.run(["a", "b"])[0] != "_"


def test_head_writing_an_extra_dimension_fails_structure():
    ct = shift()
    edit(ct.model.blocks[0].attn.W_O, (0, 0, dim(ct, "tokens:a")), 1e-3)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "structure") and "tokens:a" in out[2]


def test_head_value_map_off_fails_lookup():
    ct = shift()
    o = ct.model.blocks[0].attn.W_O
    e = int(np.nonzero(o[0, :, dim(ct, f"{ct.program.output.label}:a")].detach().numpy())[0][0])
    edit(o, (0, e, dim(ct, f"{ct.program.output.label}:a")), 0.5)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "lookup") and "layer 0 head 0" in out[2]


def test_mlp_output_entry_fails_lookup():
    ct = hist()
    w = ct.model.blocks[0].mlp.W_out
    u, d = (int(x[0]) for x in np.nonzero(w.detach().numpy()))
    edit(w, (u, d), add=0.5)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "lookup") and "MLP of 'hist'" in out[2]


def test_mlp_writing_the_constant_fails_structure():
    ct = hist()
    w = ct.model.blocks[0].mlp.W_out
    u = int(np.nonzero(w.detach().numpy())[0][0])
    edit(w, (u, dim(ct, "one")), 1.0)
    assert verdict(ct)[:2] == ("FAIL", "structure")


def test_unembedding_entry_fails_readout():
    ct = shift()
    edit(ct.model.unembed.W_U, (dim(ct, f"{ct.program.output.label}:a"), ct.classes.index("b")), add=2.0)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "readout") and "'a'" in out[2]
    assert ct.run(["a", "a"])[1] == "b"                          # the model is wrong there


def test_numerical_readout_scale_fails_readout():
    ct = compile_to_transformer(lib.make_frac_prevs(Map(lambda t: 1 if t == "a" else 0, tokens)), ABC, N)
    u = ct.model.unembed.W_U
    d = dim(ct, "frac_prevs")
    edit(u, (d, 0), float(u[d, 0].detach()) * (1 + 1e-6))
    assert verdict(ct)[:2] == ("FAIL", "readout")


def test_embedding_entry_fails_lookup():
    ct = shift()
    edit(ct.model.embed.W_E, (0, dim(ct, "tokens:b")), 0.5)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "lookup") and "embedding" in out[2]


def test_value_outside_the_value_set_fails_lookup():
    ct = compile_to_transformer(lib.make_reverse(tokens), ABC, N)
    node = next(n for n in ct.program.nodes if n.label == "opp_idx-1")
    node.values.remove(max(node.values))
    out = verdict(ct)
    assert out[:2] == ("FAIL", "lookup") and "not in its value set" in out[2]


def test_budget(monkeypatch):
    monkeypatch.setattr(heads_module, "PAIR_BUDGET", 10)
    out = verdict(shift())
    assert out[:2] == ("FAIL", "budget") and "layer 0 head 0" in out[2] and "PAIR_BUDGET = 10" in out[2]


def test_state_budget_counts_query_and_key_states(monkeypatch):
    """The shift head enumerates N = 6 query positions and 6 key positions (scored as 36 pairs, in
    chunks) and 3 value states (the token classes): STATE_BUDGET = 6 passes (a maximum), 5 fails
    at the positions, before any pair is scored."""
    monkeypatch.setattr(heads_module, "STATE_BUDGET", N)
    assert verdict(shift())[0] == "PASS"
    monkeypatch.setattr(heads_module, "STATE_BUDGET", N - 1)
    out = verdict(shift())
    assert out[:2] == ("FAIL", "budget") and "6 query or key-group states, over STATE_BUDGET = 5" in out[2]


def test_refusals():
    with pytest.raises(CertifyError, match="non-causal"):
        certify(compile_to_transformer(lib.make_hist(), ABC, N, causal=False))


def test_cli(capsys):
    assert main(["--program", "lib:make_hist", "--max-seq-len", "5", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["verdict"] == "PASS"
    assert main(["--program", "lib:make_hist", "--plateau", "0.25", "--max-seq-len", "5", "--json"]) == 0
    flat = json.loads(capsys.readouterr().out)           # the option reaches the compiler: flat tables
    assert flat["verdict"] == "PASS" and sum(m["units"] for m in flat["mlps"]) > sum(m["units"] for m in plain["mlps"])
    for bad in (["--program", "lib:nope", "--max-seq-len", "5"], ["--program", "lib:make_hist", "--max-seq-len", "0"],
                ["--machine", "addition", "--max-seq-len", "5"], ["--machine", "nope", "--ngram", "1", "--max-seq-len", "5"],
                ["--program", "lib:make_hist", "--ngram", "2", "--max-seq-len", "5"],
                *(["--program", "lib:make_hist", "--plateau", p, "--max-seq-len", "5"] for p in ("0.5", "-0.1", "x"))):
        assert main(bad) == 2, bad
        res = capsys.readouterr()
        assert res.out == "" and len(res.err.strip().splitlines()) == 1, bad


def test_output_bias_fails_structure():
    ct = shift()
    edit(ct.model.blocks[0].attn.b_O, (dim(ct, "tokens:a"),), 1e-3)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "structure") and "b_O" in out[2]


def test_missing_head_fails_structure():
    ct = shift()
    with torch.no_grad():
        ct.model.blocks[0].attn.W_O.zero_()
    out = verdict(ct)
    assert out[:2] == ("FAIL", "structure") and "no head of layer 0 computes" in out[2]


def test_two_heads_writing_one_s_op_fail_structure():
    ct = compile_to_transformer(lib.shift_right(tokens, 1, "_") + lib.shift_right(tokens, 2, "_"), ABC, N)
    attn = ct.model.blocks[0].attn
    assert attn.W_O.shape[0] == 2
    target = next(n for n in ct.program.nodes if n.kind == "attn" and n.sop.selector.label == "shift_1")
    d = ct.layout.dims[id(target)][0]
    with torch.no_grad():                 # head 1 now writes head 0's s-op (and its own no more)
        attn.W_O[1].zero_()
    e = int(np.nonzero(attn.W_V[1].detach().numpy().any(axis=0))[0][0])
    edit(attn.W_O, (1, e, d), 1.0)
    out = verdict(ct)
    assert out[:2] == ("FAIL", "structure") and "two heads of layer 0 write" in out[2]


@pytest.mark.parametrize("make", [shift, lambda: compile_to_transformer(lib.lasts(tokens, tokens), ABC, N)],
                         ids=["mean", "max"])
def test_raised_bos_score_fails_the_margin(make):
    ct = make()
    q = ct.model.blocks[0].attn.W_Q
    e = int(np.nonzero(ct.model.blocks[0].attn.W_K[0, dim(ct, "tokens:BOS")].detach().numpy())[0][-1])
    edit(q, (0, dim(ct, "one"), e), add=1000.0)     # BOS now out-scores the selected keys
    out = verdict(ct)
    assert out[:2] == ("FAIL", "margin")
    assert any(got != want for got, want in zip(ct.run(["a", "b", "a"]), make().run(["a", "b", "a"])))


def test_unembedding_bias_fails_readout():
    """b_U is part of the logits: a bias that makes 'b' win at every position is a FAIL, and the
    model really answers 'b' where the program says 'a'."""
    ct = shift()
    edit(ct.model.unembed.b_U, (ct.classes.index("b"),), add=2.0)
    assert verdict(ct)[:2] == ("FAIL", "readout")
    assert ct.run(["a", "a"])[1] == "b"


def frac_prevs():
    return compile_to_transformer(lib.make_frac_prevs(Map(lambda t: 1 if t == "a" else 0, tokens)), ABC, N)


@pytest.mark.parametrize("fraction", [(2, 3), (1, 6), (5, 6)])
def test_a_numerical_mean_whose_value_set_lacks_a_fraction_fails_lookup(fraction):
    """The value set of a mean of 0/1 values over at most N = 6 keys must hold every i/w (w <= 6):
    drop one of them (i = w - 1, w = N) and the certificate FAILs lookup."""
    ct = frac_prevs()
    node = next(n for n in ct.program.nodes if n.label == "frac_prevs")
    i, w = fraction
    node.values.remove(next(v for v in node.values if v == i / w))
    out = verdict(ct)
    assert out[:2] == ("FAIL", "lookup") and "lacks a mean" in out[2]


def test_a_numerical_mean_of_values_outside_0_and_1_is_refused():
    """The compiler compiles a prefix mean of 0/2 values; the certificate does not cover it and
    says so in one line (its value set is checked only for means of 0/1 values)."""
    from rasp.core import Aggregate, Comparison, Select, indices, numerical

    two = numerical(Map(lambda t: 2 if t == "a" else 0, tokens))
    ct = compile_to_transformer(numerical(Aggregate(Select(indices, indices, Comparison.LEQ), two, default=0)), ABC, N)
    with pytest.raises(CertifyError, match="outside"):
        certify(ct)


def test_a_numerical_mean_whose_value_set_the_compiler_left_unknown_is_refused():
    """Past MEAN_MAX_N = 512 positions the compiler does not list a prefix mean's i/w values (its
    value set is None): the certificate, which must check that set, refuses in one line instead of
    crashing (it raised a TypeError)."""
    from rasp.weights.values import MEAN_MAX_N

    assert MEAN_MAX_N == 512
    ct = compile_to_transformer(lib.make_frac_prevs(Map(lambda t: 1 if t == "a" else 0, tokens)), ["a", "b"], 513)
    assert next(n for n in ct.program.nodes if n.label == "frac_prevs").values is None
    with pytest.raises(CertifyError, match="value set is unknown"):
        certify(ct)


@pytest.mark.parametrize("form", ["or", "not"])
def test_an_or_or_not_across_different_s_ops_fails_margin_as_documented(form):
    """The documented limit (docs/turing-programs.md, "Certifying a compiled program", the
    paragraph "Not covered yet"): an Or or a Not whose Selects compare different s-ops compiles
    to a head over tuple s-ops, which the certificate
    enumerates as if independent of their sources; it FAILs ``margin``, never PASSes on that
    reasoning and never stops with an exception. The sources of *every* leaf of the tree are
    enumerated (a tree whose first or second operand's sources were dropped stopped with a
    KeyError), and the model itself is right on every input (checked against the interpreter)."""
    from rasp.core import Comparison, Select, SelectorWidth, indices
    from rasp.evaluate import evaluate
    from rasp_certify_checks import all_inputs

    lt, eq = Select(tokens, tokens, Comparison.LT), Select(tokens, tokens, Comparison.EQ)
    pos_lt = Select(indices, indices, Comparison.LT)
    prog = SelectorWidth((lt & pos_lt) | eq if form == "or" else ~(eq & pos_lt))
    ct = compile_to_transformer(prog, [0, 1, 2], 4)
    for batch in all_inputs([0, 1, 2], 3):
        for xs in batch:
            assert ct.run(list(xs)) == evaluate(prog, list(xs), causal=True, fast=False).column(prog), xs
    cert, kind, reason = verdict(ct)
    assert (cert, kind) == ("FAIL", "margin"), reason
    assert "-80" in reason, reason
