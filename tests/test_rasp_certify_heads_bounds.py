"""rasp.certify.heads: the margin, total-variation and error bounds of a head, against a float64
forward pass (tests/hook_oracle.py) and values worked out by hand.

Pinned here: a categorical mean's total variation is its leak alone (its intended keys share one
target), a numerical mean's adds ``tanh(delta/4)`` for the spread ``delta`` of its intended scores,
also when it shares its head with a categorical mean; the error a head adds is its value map's
miss plus that total variation times the range of each column's targets (per column), and the
bound is nearly tight once the margin is lowered by hand; the margin, TV_MAX and LOOKUP_TOL checks
(LOOKUP_TOL relative to ``1 + |target|`` per column) fail with the right kind and name the worst
column; a numerical mean's value set must hold every ``i/w``.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hook_oracle import reference_forward
from rasp_certify_checks import assert_bounds_hold, expected

from rasp import lib
from rasp.certify import certify
from rasp.certify import heads as heads_module
from rasp.core import Aggregate, Comparison, Map, Select, SelectorWidth, SequenceMap, indices, numerical, tokens
from rasp.evaluate import evaluate
from rasp.tracr_ops import ConstantSelector
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 4


def inputs(lengths=range(1, N + 1)) -> list[list[list]]:
    return [[list(x) for x in itertools.product(ABC, repeat=n)] for n in lengths]


def attn(ct):
    return ct.model.blocks[0].attn


def dim(ct, label: str) -> int:
    return ct.layout.labels.index(label)


def add(param: torch.nn.Parameter, index: tuple, value: float) -> None:
    with torch.no_grad():
        param[index] += value


def deviation(ct, prog, dims: list[int], lengths=range(1, N + 1)) -> np.ndarray:
    """Per dimension: the largest |resid_mid - encoding| after layer 0's heads, over all inputs."""
    worst = np.zeros(len(dims))
    for batch in inputs(lengths):
        _, acts = reference_forward(ct.model, torch.tensor([ct.encode(xs) for xs in batch]))
        resid = acts["blocks.0.hook_resid_mid"].numpy()
        for b, xs in enumerate(batch):
            ev = evaluate(prog, xs, causal=True, fast=False)
            for i in range(len(xs)):
                worst = np.maximum(worst, np.abs(resid[b, i + 1] - expected(ct, ev, i, 0))[dims])
    return worst


def _class_head(num_value: bool):
    """One head, selection ``cls(key) == cls(query)`` (cls: token == 'a'), computing the
    categorical mean of cls (its selected keys share one value: the premise) and, if asked, the
    numerical mean of ``token == 'b'`` (selected keys 'b' and 'c' hold 1 and 0)."""
    cls = Map(lambda t: t == "a", tokens)
    sel = Select(cls, cls, Comparison.EQ)
    cat = Aggregate(sel, cls, default=False)
    if not num_value:
        return cat, compile_to_transformer(cat, ABC, N)
    mean = numerical(Aggregate(sel, numerical(Map(lambda t: 1 if t == "b" else 0, tokens)), default=0))
    prog = SequenceMap(lambda x, y: (x, y), cat, Map(lambda v: v > 0.4, mean))
    return prog, compile_to_transformer(prog, ABC, N)


def _raise_b_keys(ct, delta: float) -> None:
    """Keys holding 'b' score ``delta`` more at the queries that select them: in head dimension 0
    the query side is ``160 cls - 80`` (the ``==`` atom, both of its halves on the key ``cls``),
    -80 at every query whose cls is False, so W_K's 'tokens:b' row gets -delta/80 there (a cls-True
    query, which selects no 'b' key, sees them delta lower)."""
    W_Q = attn(ct).W_Q
    assert float(W_Q[0, dim(ct, "one"), 0].detach()) == -80.0
    column = W_Q[0, :, 0].detach().clone()
    column[ct.layout.bos] = 0                    # the compiler's BOS clean-up
    assert sorted(float(c) for c in column[column != 0]) == [-80.0, 160.0]
    add(attn(ct).W_K, (0, dim(ct, "tokens:b"), 0), delta / -80.0)


def test_a_categorical_mean_is_not_charged_for_its_spread():
    """Keys 'b' and 'c' (both cls False) are selected together; 'b' scoring 1e-3 more spreads
    them by 1e-3, but they share one target, so the total variation is the leak (<= TV_MAX) and
    the model passes with every bound; charging tanh(1e-3/4) = 2.5e-4 would fail the margin."""
    prog, ct = _class_head(num_value=False)
    _raise_b_keys(ct, 1e-3)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    row = cert.heads[0]
    assert 1e-3 <= row.spread <= 1e-3 + 1e-9 and row.tv == row.leak <= 1e-15
    assert_bounds_hold(ct, prog, cert, inputs(range(1, 4)))


def test_a_numerical_mean_sharing_a_head_with_a_categorical_one_is_charged_for_its_spread():
    """The same head also computes the numerical mean of token == 'b'. With 'b' keys 1e-3 up,
    the input 'b c' puts weights e^d/(e^d+1) and 1/(e^d+1) on its two keys: that mean is off
    1/2 by tanh(d/2)/2 = 2.4999998e-4, measured below; so the spread counts (2.5e-4 > TV_MAX:
    FAIL margin). Taking the head for a categorical one (its first s-op) passed it with an
    error bound of 5e-15."""
    prog, ct = _class_head(num_value=True)
    mean = next(n for n in ct.program.nodes if n.kind == "attn" and n.numerical)
    _raise_b_keys(ct, 1e-3)
    out = certify(ct)
    assert (out.verdict, out.kind) == ("FAIL", "margin") and "total-variation bound 0.00025" in out.reason
    d = ct.layout.dims[id(mean)][0]
    assert deviation(ct, prog, [d], range(2, 3))[0] == pytest.approx(math.tanh(1e-3 / 2) / 2, rel=1e-6)


def _frac(scale_q: float = 1.0, raise_a: float = 0.0):
    """frac = mean of (token == 'a') over every key (a constant selector; BOS 40 below every
    key). ``scale_q`` scales W_Q (the margin becomes 40 scale_q); ``raise_a`` raises the score of
    keys holding 'a' (W_Q's 'one' row is -40 in the single head dimension)."""
    prog = numerical(Aggregate(ConstantSelector(True), numerical(Map(lambda t: 1 if t == "a" else 0, tokens)), default=0))
    ct = compile_to_transformer(prog, ABC, N)
    assert float(attn(ct).W_Q[0, dim(ct, "one"), 0].detach()) == -40.0
    with torch.no_grad():
        attn(ct).W_Q.mul_(scale_q)
    add(attn(ct).W_K, (0, dim(ct, "tokens:a"), 0), raise_a / (-40.0 * scale_q))
    return prog, ct


def test_a_numerical_mean_error_holds_its_spread_and_is_tight():
    """'a' keys 2e-9 up: the mean over 'a b' is off 1/2 by tanh(1e-9)/2 = 5e-10, the most any
    input reaches (the bound's own worst case, half the keys raised); the printed error is
    tanh-bound + leak + rounding, so it contains that and is within 1.01x of it."""
    prog, ct = _frac(raise_a=2e-9)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, prog, cert, inputs())
    d = dim(ct, prog.label)
    measured = deviation(ct, prog, [d])[0]
    assert measured == pytest.approx(math.tanh(1e-9) / 2, rel=1e-3)
    assert measured <= cert.eps[0][d] <= 1.01 * measured


def test_lowered_margins_keep_tight_error_bounds():
    """W_Q scaled by 0.6: the margin is 24, BOS (the only rival within 2m) takes weight
    e^-24/(1 + e^-24) at an 'a' query's key, moving frac by that much; the leak bound is
    n e^-24 with n = 4, so the error bound is within 4.01x of the measured deviation."""
    prog, ct = _frac(scale_q=0.6)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert 23.99 <= cert.heads[0].margin <= 24.0
    assert_bounds_hold(ct, prog, cert, inputs())
    d = dim(ct, prog.label)
    measured = deviation(ct, prog, [d])[0]
    assert measured == pytest.approx(math.exp(-24) / (1 + math.exp(-24)), rel=1e-3)
    assert measured <= cert.eps[0][d] <= 4.01 * measured


def _mixed_head(ones: bool):
    """One head (``key index == query index - 1``) computing a categorical copy of the previous
    token (default '_') and the numerical mean of a 0/1 value (default 3: BOS's target is 3)."""
    prev = Select(indices, indices - 1, Comparison.EQ)
    tok = Aggregate(prev, tokens, default="_")
    value = numerical(Map((lambda t: 1) if ones else (lambda t: 1 if t == "a" else 0), tokens))
    num = numerical(Aggregate(prev, value, default=3))
    prog = SequenceMap(lambda x, y: x if y else "_", tok, Map(lambda v: v > 2, num))
    ct = compile_to_transformer(prog, ABC, N)
    nodes = [n for n in ct.program.nodes if n.kind == "attn"]
    return prog, ct, nodes


def test_error_bounds_are_per_column():
    """Margin lowered to 24 (W_Q x 0.6). At a query with a key, BOS takes weight
    p = e^-24/(1+e^-24): column 'tok:_' (targets 0 and 1) is off by p, the numerical column
    (targets 1 at every key, 3 at BOS: range 2) by 2p. Each column's bound is the leak
    n e^-24 times its own range (plus the spread term, the mean being numerical, about 1e-12),
    within 4.2x of what it measures (4.09x)."""
    prog, ct, (tok, num) = _mixed_head(ones=True)
    with torch.no_grad():
        attn(ct).W_Q.mul_(0.6)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert cert.heads[0].writes == f"{tok.label}, {num.label}"
    assert_bounds_hold(ct, prog, cert, inputs())
    dims = [dim(ct, f"{tok.label}:_"), ct.layout.dims[id(num)][0]]
    measured = deviation(ct, prog, dims)
    p = math.exp(-24) / (1 + math.exp(-24))
    assert measured == pytest.approx([p, 2 * p], rel=1e-3)
    bounds = np.array(cert.eps[0])[dims]
    assert np.all(measured <= bounds) and np.all(bounds <= 4.2 * measured)


def test_a_max_of_negative_values_keeps_its_error_bound():
    """max over keys with token <= query's of -2 ('a') / -1 (else), default 0; margin lowered
    to 24: the targets span [-2, 0] (range 2, not max + min = -2) and the bound contains the
    measured deviation (BOS and the lower class leak into the output)."""
    neg = numerical(Map(lambda t: -2 if t == "a" else -1, tokens))
    prog = numerical(Aggregate(Select(tokens, tokens, Comparison.LEQ), neg, reduce="max", default=0))
    ct = compile_to_transformer(prog, ABC, N)
    with torch.no_grad():
        attn(ct).W_Q.mul_(0.6)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, prog, cert, inputs())
    assert min(cert.eps[0]) >= 0.0


def test_a_margin_too_small_fails_and_the_model_is_wrong():
    """W_Q x 0.001: shift_right's margin is 0.04 (> 0, but the leak bound 4 e^-0.04 is far over
    TV_MAX): FAIL margin, and the forward pass really decodes wrong (attention is near uniform)."""
    prog = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(prog, ABC, N)
    with torch.no_grad():
        attn(ct).W_Q.mul_(0.001)
    out = certify(ct)
    assert (out.verdict, out.kind) == ("FAIL", "margin") and out.reason.startswith(f"layer 0 head 0 ({prog.label}): margin 0.04,")
    assert any(ct.run(xs) != evaluate(prog, xs, causal=True).column(prog) for batch in inputs(range(2, 4)) for xs in batch)


def test_a_total_variation_equal_to_tv_max_passes(monkeypatch):
    """The width of ConstantSelector(True) has no rival key: margin inf, leak 0, spread 0, so
    its total variation is exactly 0, which passes TV_MAX = 0 (the bound is a maximum)."""
    monkeypatch.setattr(heads_module, "TV_MAX", 0.0)
    cert = certify(compile_to_transformer(SelectorWidth(ConstantSelector(True)), ABC, N))
    assert cert.verdict == "PASS", cert.text()
    assert cert.heads[0].tv == 0.0


def _shift_off(rel: float):
    """shift_right's W_O entry from its 'a' column to 'out:a' times (1 + rel): the head then
    writes 1 + rel where the target is 1."""
    prog = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(prog, ABC, N)
    o = attn(ct).W_O
    d = dim(ct, f"{prog.label}:a")
    e = int(np.nonzero(o[0, :, d].detach().numpy())[0][0])
    add(o, (0, e, d), rel * float(o[0, e, d].detach()))
    return prog, ct, d


def test_a_value_map_within_lookup_tol_passes_and_its_miss_is_in_eps():
    """Off by 1.5e-6 <= LOOKUP_TOL (1 + 1) = 2e-6: PASS, and eps holds the measured 1.5e-6."""
    prog, ct, d = _shift_off(1.5e-6)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, prog, cert, inputs(range(1, 3)))
    measured = deviation(ct, prog, [d], range(2, 3))[0]
    assert measured == pytest.approx(1.5e-6, rel=1e-6) and measured <= cert.eps[0][d] <= 1.01 * measured


def test_a_value_map_past_lookup_tol_fails_lookup():
    """Off by 2.5e-6 > 2e-6: FAIL lookup naming the column; the forward pass shows the miss."""
    prog, ct, d = _shift_off(2.5e-6)
    out = certify(ct)
    assert (out.verdict, out.kind) == ("FAIL", "lookup")
    assert out.reason == f"layer 0 head 0 ({prog.label}): its value map misses the target in '{prog.label}:a' by up to 2.5e-06"
    assert deviation(ct, prog, [d], range(2, 3))[0] > 2e-6


def test_lookup_tol_is_relative_per_column_and_the_worst_column_is_named():
    """The mixed head: the categorical column 'tok:a' (targets <= 1: tolerance 2e-6) is off by
    2.5e-6 (0.5e-6 over), the numerical column (targets up to 3 at BOS: tolerance 4e-6) by
    3 x 1.4e-6 = 4.2e-6 (0.2e-6 over, at BOS's 3). Both fail; the reason names 'tok:a', the
    larger excess."""
    prog, ct, (tok, num) = _mixed_head(ones=False)
    o = attn(ct).W_O
    d_tok, d_num = dim(ct, f"{tok.label}:a"), ct.layout.dims[id(num)][0]
    e_tok, e_num = (int(np.nonzero(o[0, :, d].detach().numpy())[0][0]) for d in (d_tok, d_num))
    assert float(o[0, e_tok, d_tok].detach()) == float(o[0, e_num, d_num].detach()) == 1.0
    add(o, (0, e_tok, d_tok), 2.5e-6)
    add(o, (0, e_num, d_num), 1.4e-6)
    out = certify(ct)
    assert (out.verdict, out.kind) == ("FAIL", "lookup")
    assert out.reason == (f"layer 0 head 0 ({tok.label}, {num.label}): its value map misses the target in "
                          f"'{tok.label}:a' by up to 2.5e-06")


def _frac_prevs(n: int):
    prog = lib.make_frac_prevs(Map(lambda t: 1 if t == "a" else 0, tokens))
    ct = compile_to_transformer(prog, ABC, n)
    return ct, next(x for x in ct.program.nodes if x.label == "frac_prevs")


@pytest.mark.parametrize("n, drop, missing", [(1, 1.0, "[(1, 1)]"), (4, 0.5, "[(1, 2)]")])
def test_a_numerical_mean_needs_every_fraction(n, drop, missing):
    """max_seq_len 1: the means are 0/1 and 1/1, so dropping 1.0 leaves (1, 1) missing; at 4,
    dropping 0.5 leaves 1/2 and 2/4 missing and the reason names the first."""
    ct, node = _frac_prevs(n)
    node.values.remove(drop)
    out = certify(ct)
    assert (out.verdict, out.kind, out.reason) == ("FAIL", "lookup", f"'frac_prevs': its value set lacks a mean {missing}")
