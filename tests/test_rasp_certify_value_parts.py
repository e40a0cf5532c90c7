"""rasp.certify.heads.value_parts: a head's value side enumerated part by part.

A head that writes two aggregates of one selection (the compiler puts them in one head) has a
value map per aggregate; when no head dimension carries one aggregate's key dimensions into the
other's columns, each part's states are enumerated on their own (``a + b`` states, not
``a * b``: program P's head writing ``key_sep`` would otherwise take 446 x 1025 value states at
1024 tokens). A ``W_V`` weight that couples the parts must merge them, or the coupling's error is
missed; the bounds are checked against the float64 forward pass on every input.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch
from rasp_certify_checks import assert_bounds_hold

from rasp.certify import certify
from rasp.certify import heads as heads_module
from rasp.core import Aggregate, Comparison, Map, Select, SequenceMap, indices, tokens
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 4


def _two_aggregates():
    """The previous token and the previous position mod 3, from one selection (one head)."""
    sel = Select(indices, Map(lambda i: i - 1, indices), Comparison.EQ)
    prev_tok = Aggregate(sel, tokens).named("prev_tok")
    prev_pos = Aggregate(sel, Map(lambda i: i % 3, indices).named("pos_mod")).named("prev_pos")
    out = SequenceMap(lambda t, p: f"{t}{p}", prev_tok, prev_pos).named("out")
    return out, compile_to_transformer(out, ABC, N)


def _inputs():
    return [[list(x) for x in itertools.product(ABC, repeat=n)] for n in range(1, N + 1)]


def _record_parts(monkeypatch) -> list:
    seen: list = []
    real = heads_module.value_parts

    def spy(st, *args):
        parts = real(st, *args)
        seen.append([(sorted(map(str, st.sources(sops)[0])), len(cols)) for sops, cols, _ in parts])
        return parts
    monkeypatch.setattr(heads_module, "value_parts", spy)
    return seen


def _column_of(ct, label_prefix: str) -> int:
    """A head dimension of layer 0 head 0 whose W_O row writes a dimension of ``label_prefix``."""
    a = ct.model.blocks[0].attn
    WV, WO = a.W_V[0].detach().numpy(), a.W_O[0].detach().numpy()
    cols = [i for i, s in enumerate(ct.layout.labels) if s.startswith(label_prefix)]
    used = WV.any(0) & WO[:, cols].any(1)
    return int(np.nonzero(used)[0][0])


def test_two_aggregates_of_one_head_are_enumerated_apart(monkeypatch):
    """The token part (3 token classes, prev_tok's 4 columns) and the position part (4
    positions, prev_pos's 4 columns) are two parts; the certificate passes and its bounds hold."""
    out, ct = _two_aggregates()
    seen = _record_parts(monkeypatch)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert [r.writes for r in cert.heads] == ["prev_tok, prev_pos"]
    assert sorted(seen[0]) == [(["pos"], 4), (["tok"], 4)]
    assert_bounds_hold(ct, out, cert, _inputs())


def test_a_weight_that_couples_the_parts_merges_them(monkeypatch):
    """``W_V`` carries 'tokens:a' into a head dimension that writes prev_pos with weight 1e-9:
    prev_pos's columns now depend on the token too, so the head has one part of (token, position)
    states, eps holds the 1e-9 miss, and the bounds hold. Splitting by written s-op alone would
    miss it (the next test)."""
    out, ct = _two_aggregates()
    e = _column_of(ct, "prev_pos")
    with torch.no_grad():
        ct.model.blocks[0].attn.W_V[0, ct.layout.labels.index("tokens:a"), e] = 1e-9
    seen = _record_parts(monkeypatch)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert seen[0] == [(["pos", "tok"], 8)]
    prev_pos = [i for i, s in enumerate(ct.layout.labels) if s.startswith("prev_pos")]
    assert np.asarray(cert.eps[0])[prev_pos].max() >= 1e-10
    assert_bounds_hold(ct, out, cert, _inputs())


def test_splitting_by_written_s_op_alone_misses_the_coupling(monkeypatch):
    """The fault the union over reached columns prevents: parts made from each written s-op's
    own sources, ignoring which key dimensions reach its columns, drop the 1e-9 that 'tokens:a'
    adds to prev_pos, and the float64 forward pass leaves the printed eps."""
    out, ct = _two_aggregates()
    e = _column_of(ct, "prev_pos")
    with torch.no_grad():
        ct.model.blocks[0].attn.W_V[0, ct.layout.labels.index("tokens:a"), e] = 1e-9
    real = heads_module.value_parts

    def by_node(st, nodes, v_dims, WV, WO, out_dims):
        parts = real(st, nodes, v_dims, np.zeros_like(WV), WO, out_dims)  # nothing reaches
        return [(sops, cols, [d for d in v_dims if any(st.owner[d] is st.node(s) for s in sops)])
                for sops, cols, _ in parts]
    monkeypatch.setattr(heads_module, "value_parts", by_node)
    cert = certify(ct)
    try:
        assert_bounds_hold(ct, out, cert, _inputs())
    except AssertionError:
        return
    raise AssertionError("the coupling's error was inside eps although the parts ignored it")
