"""rasp.certify.heads: which s-ops a head writes and reads, read off its weights.

Pinned here: a head may write only the aggregates (or one selector width's scratch) scheduled in its
own layer, several aggregates only when they share a selection and a reduction (and, for max/min,
the value); a ``W_O`` row fed by a zero ``W_V`` column writes nothing and a ``W_V`` column whose
``W_O`` row is zero reads nothing (neither changes the forward pass: ``b_V = 0``); the budget of
value states is inclusive and counts only what is read. Every broken model below is a correct
compilation with one or two weights set by hand; the expected failures follow from the layout
(which dimensions belong to which s-op, printed by the compiler), not from a certificate run.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from rasp_certify_checks import assert_bounds_hold

from rasp import lib
from rasp.certify import certify
from rasp.certify import heads as heads_module
from rasp.core import Aggregate, Comparison, Map, Select, SelectorWidth, SequenceMap, indices, numerical, tokens
from rasp.tracr_ops import ConstantSelector
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 4


def dim(ct, label: str) -> int:
    return ct.layout.labels.index(label)


def attn(ct, layer: int = 0):
    return ct.model.blocks[layer].attn


def value_column(ct, layer: int, h: int) -> int:
    """A head dimension that both W_V and W_O of head ``h`` use."""
    a = attn(ct, layer)
    used = a.W_V[h].detach().numpy().any(0) & a.W_O[h].detach().numpy().any(1)
    return int(np.nonzero(used)[0][0])


def set_w(param: torch.nn.Parameter, index: tuple, value: float) -> None:
    with torch.no_grad():
        param[index] = value


def inputs(vocab: list, lengths=range(1, N + 1)) -> list[list[list]]:
    return [[list(x) for x in itertools.product(vocab, repeat=n)] for n in lengths]


def verdict(ct) -> tuple[str, str | None, str]:
    cert = certify(ct)
    return cert.verdict, cert.kind, cert.reason


def shift_and_hist():
    """Layer 0: head 0 computes shift_right(tokens) (mean), head 1 the width 'hist'."""
    sh = lib.shift_right(tokens, 1, "_")
    prog = SequenceMap(lambda x, y: x if y > 1 else "_", sh, lib.make_hist())
    ct = compile_to_transformer(prog, ABC, N)
    shift = next(n for n in ct.program.nodes if n.kind == "attn")
    hist = next(n for n in ct.program.nodes if n.kind == "width")
    assert [[s.node for s in hs] for hs in ct.heads][0] == [shift, hist]
    return ct, shift, hist


def width_in_layer_1():
    """Layer 0 computes sh = shift_right(tokens); layer 1's head the width of ``sh == sh``."""
    sh = lib.shift_right(tokens, 1, "_")
    prog = SelectorWidth(Select(sh, sh, Comparison.EQ))
    return prog, compile_to_transformer(prog, ABC, N)


def test_a_selector_width_in_layer_1_passes():
    """A width's head sits in layer l and its node in slot 2l+1 (here l = 1, slot 3): the program
    passes and the bounds hold on every input of up to 4 tokens."""
    prog, ct = width_in_layer_1()
    width = next(n for n in ct.program.nodes if n.kind == "width")
    sh = next(n for n in ct.program.nodes if n.kind == "attn")
    assert width.slot == 3
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert [(r.layer, r.reduce, r.writes) for r in cert.heads] == [(0, "mean", sh.label), (1, "width", width.label)]
    assert_bounds_hold(ct, prog, cert, inputs(ABC, range(1, 4)))


def test_a_head_writing_an_unowned_dimension_fails_structure():
    """Head 0 also writes 'one' (dimension 0, owned by no s-op): its written dimensions are
    [0, the shift's], so the reason names dimension 0, 'one', and the head."""
    ct, shift, _ = shift_and_hist()
    assert dim(ct, "one") == 0
    set_w(attn(ct).W_O, (0, value_column(ct, 0, 0), 0), 1.0)
    assert verdict(ct) == ("FAIL", "structure", "layer 0 head 0 writes the dimension 'one'")


@pytest.mark.parametrize("target", ["tokens:c", "hist:0"])
def test_a_head_writing_another_s_op_fails_structure(target):
    """Head 1 (the width 'hist') writes the last dimension of 'tokens' (a token s-op; a width is
    allowed only its scratch, which is its last dimension) or 'hist:0' (hist's one-hot value,
    which its MLP writes): neither is an aggregate or a width's scratch of layer 0."""
    ct, _, hist = shift_and_hist()
    set_w(attn(ct).W_O, (1, value_column(ct, 0, 1), dim(ct, target)), 1.0)
    assert verdict(ct) == ("FAIL", "structure", f"layer 0 head 1 writes {target!r}, which no aggregate or selector "
                                                "width of layer 0 owns")


def test_a_head_writing_an_s_op_of_another_layer_fails_structure():
    """Layer 1's width head also writes a dimension of layer 0's aggregate sh (an attn node of
    slot 0); layer 0's head writes the width's scratch (a width node of slot 3): both fail."""
    _, ct = width_in_layer_1()
    sh = next(n for n in ct.program.nodes if n.kind == "attn")
    width = next(n for n in ct.program.nodes if n.kind == "width")
    d_sh, d_scratch = ct.layout.dims[id(sh)][1], ct.layout.scratch(width)
    set_w(attn(ct, 1).W_O, (0, value_column(ct, 1, 0), d_sh), 1.0)
    assert verdict(ct) == ("FAIL", "structure", f"layer 1 head 0 writes {ct.layout.labels[d_sh]!r}, which no "
                                                "aggregate or selector width of layer 1 owns")
    _, ct = width_in_layer_1()
    set_w(attn(ct, 0).W_O, (0, value_column(ct, 0, 0), d_scratch), 1.0)
    assert verdict(ct) == ("FAIL", "structure", f"layer 0 head 0 writes {ct.layout.labels[d_scratch]!r}, which no "
                                                "aggregate or selector width of layer 0 owns")


def test_a_head_writing_a_width_and_an_aggregate_fails_structure():
    """Head 0 (the shift) also writes hist's scratch: a width head computes nothing else."""
    ct, _, hist = shift_and_hist()
    set_w(attn(ct).W_O, (0, value_column(ct, 0, 0), ct.layout.scratch(hist)), 1.0)
    assert verdict(ct) == ("FAIL", "structure", "layer 0 head 0 writes a selector width and other s-ops")


def _two_aggregates(make):
    """Layer 0 computes two aggregates (two heads); head 0 then also writes a dimension of head 1's."""
    first, second = make()
    prog = SequenceMap(lambda x, y: (x, y), first, second)
    ct = compile_to_transformer(prog, ABC, N)
    a, b = (next(n for n in ct.program.nodes if n.sop is s) for s in (first, second))
    h_a = next(h for h, spec in enumerate(ct.heads[0]) if spec.node is a)
    assert min(ct.layout.dims[id(a)]) < min(ct.layout.dims[id(b)])
    set_w(attn(ct).W_O, (h_a, value_column(ct, 0, h_a), ct.layout.dims[id(b)][0]), 1.0)
    return ct, h_a, a, b


@pytest.mark.parametrize("make", [
    lambda: (lib.shift_right(tokens, 1, "_"), lib.shift_right(tokens, 2, "_")),            # selections differ
    lambda: (Aggregate(Select(tokens, tokens, Comparison.EQ), indices, reduce="max", default=0),
             Aggregate(Select(tokens, tokens, Comparison.EQ), tokens, default="_")),      # max, then mean
    lambda: (Aggregate(Select(tokens, tokens, Comparison.LEQ), tokens, reduce="max", default="_"),
             Aggregate(Select(tokens, tokens, Comparison.LEQ), indices, reduce="max", default=0)),  # two values
], ids=["two selections", "max and mean", "max of two values"])
def test_a_head_writing_two_incompatible_aggregates_fails_structure(make):
    """One head can compute several aggregates only as means of one selection (each value in its
    own W_V columns) or as one max/min: these pairs fail, and the reason names both."""
    ct, h, a, b = _two_aggregates(make)
    assert verdict(ct) == ("FAIL", "structure", f"layer 0 head {h} writes {a.label!r} and {b.label!r}, whose "
                                                "selections or reductions differ")


def _spare_column(ct, layer: int = 0) -> int:
    """A head dimension of head 0 that W_V does not use."""
    return int(np.nonzero(~attn(ct, layer).W_V[0].detach().numpy().any(0))[0][0])


def test_a_dead_w_o_row_writes_nothing():
    """hist's head: a W_O row whose W_V column is zero (so that head dimension holds b_V = 0 at
    every key) is set to write 'tokens:a'. The forward pass is unchanged, so the model still
    passes, with every bound holding; counting that row as a write would fail structure."""
    prog = lib.make_hist()
    ct = compile_to_transformer(prog, ABC, N)
    assert float(attn(ct).b_V[0].detach().abs().max()) == 0.0
    set_w(attn(ct).W_O, (0, _spare_column(ct), dim(ct, "tokens:a")), 1.0)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, prog, cert, inputs(ABC, range(1, 4)))


def test_the_pair_budget_counts_what_the_head_reads(monkeypatch):
    """width_in_layer_1: layer 0's shift compares 4 query positions with 4 key positions (16
    pairs), layer 1's width compares 4 values of sh with 4 (16 pairs); their value maps read 3
    token classes and BOS's token dimension (1 state). With PAIR_BUDGET = STATE_BUDGET = 16 the model passes and
    prints 16 pairs per head, also after a W_V column of the width's head whose W_O row is zero
    reads 'tokens:a', 'indices:1' and a dimension of sh (3 x 4 x 4 = 48 value states if counted)."""
    prog, ct = width_in_layer_1()
    sh = next(n for n in ct.program.nodes if n.kind == "attn")
    spare = _spare_column(ct, 1)
    for d in (dim(ct, "tokens:a"), dim(ct, "indices:1"), ct.layout.dims[id(sh)][1]):
        set_w(attn(ct, 1).W_V, (0, d, spare), 1.0)
    monkeypatch.setattr(heads_module, "PAIR_BUDGET", 16)
    monkeypatch.setattr(heads_module, "STATE_BUDGET", 16)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert [r.pairs for r in cert.heads] == [16, 16]


def _frac_of_all():
    """The mean of a 0/1 map over every earlier position (a constant selector): 1 (query, key)
    pair and 2 value states (the map is 1 on 'a' and 0 on 'b' and 'c')."""
    isa = numerical(Map(lambda t: 1 if t == "a" else 0, tokens))
    prog = numerical(Aggregate(ConstantSelector(True), isa, default=0))
    return prog, compile_to_transformer(prog, ABC, N)


def test_the_value_state_budget_is_inclusive(monkeypatch):
    """2 value states pass STATE_BUDGET = 2 (the budget is a maximum) and fail STATE_BUDGET = 1,
    with a reason that names the head, its s-op and the count."""
    prog, ct = _frac_of_all()
    monkeypatch.setattr(heads_module, "STATE_BUDGET", 2)
    cert = certify(ct)
    assert cert.verdict == "PASS" and cert.heads[0].pairs == 1
    monkeypatch.setattr(heads_module, "STATE_BUDGET", 1)
    out = verdict(ct)
    assert out == ("FAIL", "budget", f"layer 0 head 0 ({prog.label}): 2 value states, over STATE_BUDGET = 1")


def test_a_width_whose_value_map_reads_tokens_passes():
    """hist's head: its W_V column that carries BOS's 1 into the scratch also reads 'tokens:a'
    with weight 1e-9, so an 'a' key writes 1e-9 where its target is 0 (BOS's target is 1). The
    head now has 3 token classes of value states plus BOS; it passes, and the bounds (the 1e-9
    miss in eps) hold."""
    prog = lib.make_hist()
    ct = compile_to_transformer(prog, ABC, N)
    e = value_column(ct, 0, 0)
    set_w(attn(ct).W_V, (0, dim(ct, "tokens:a"), e), 1e-9)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    scratch = ct.layout.labels.index("hist:1/(w+1)")
    assert 1e-9 <= cert.eps[0][scratch] <= 1.1e-9
    assert_bounds_hold(ct, prog, cert, inputs(ABC, range(1, 4)))


def test_a_head_whose_w_o_rows_write_every_dimension_fails_structure():
    """Every W_O row that head 0 (the shift) uses is set to 1.0 in all residual dimensions:
    the head writes everything, 'one' (dimension 0) first, and fails structure there (a row with
    no zero, or all ones, is still a row that writes)."""
    ct, _, _ = shift_and_hist()
    a = attn(ct)
    used = np.nonzero(a.W_V[0].detach().numpy().any(0) & a.W_O[0].detach().numpy().any(1))[0]
    with torch.no_grad():
        a.W_O[0, used, :] = 1.0
    assert verdict(ct) == ("FAIL", "structure", "layer 0 head 0 writes the dimension 'one'")
