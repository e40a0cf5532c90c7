"""rasp.certify on library programs: PASS, and every bound it prints against a float64 forward pass.

The forward pass is tests/hook_oracle.py's (float64 einsums from the parameters); the intended
keys and the values come from the RASP interpreter (rasp.evaluate, dense path), never from the
certificate or the compiler.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from hook_oracle import reference_forward
from lengthgen.decode import DECISION_MARGIN
from rasp import lib
from rasp.certify import PREMISE, certify
from rasp.certify.heads import LOOKUP_TOL, TV_MAX
from rasp.certify.run import NUMERIC_TOL
from rasp.certify.state import COMBO_BUDGET, PAIR_BUDGET
from rasp.core import Aggregate, Map, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer

N = 6                     # max_seq_len of every compiled program here
LENGTHS = range(1, 5)     # every input of these lengths is run
ABC, NUM = ["a", "b", "c"], [1, 2, 3]

PROGRAMS = {
    "make_length": (lib.make_length, ABC),
    "make_reverse": (lambda: lib.make_reverse(tokens), ABC),
    "make_hist": (lib.make_hist, ABC),
    "make_sort_unique": (lambda: lib.make_sort_unique(tokens, tokens), NUM),
    "make_frac_prevs": (lambda: lib.make_frac_prevs(Map(lambda t: 1 if t == "a" else 0, tokens)), ABC),
    "lasts (max)": (lambda: lib.lasts(tokens, tokens), ABC),
    "firsts (min)": (lambda: lib.firsts(tokens, tokens), ABC),
    "shift_right": (lambda: lib.shift_right(tokens, 1, "_"), ABC),
    "cumsum (width of an And)": (lambda: lib.cumsum(Map(lambda t: t == "a", tokens)), ABC),
}


def test_documented_constants():
    assert (TV_MAX, LOOKUP_TOL, NUMERIC_TOL) == (1e-6, 1e-6, 1e-9)
    assert (PAIR_BUDGET, COMBO_BUDGET, DECISION_MARGIN) == (5_000_000, 1_000_000, 1e-3)
    assert "selects keys that all hold one value" in PREMISE


def _inputs(vocab: list):
    for n in LENGTHS:
        yield n, [list(x) for x in itertools.product(vocab, repeat=n)]


def _intended(node, ev, i: int) -> set[int]:
    """Model key positions (BOS = 0) that the RASP semantics intends for the query token ``i``."""
    sel = ev.selector(node.sop.selector)[i]
    chosen = [j for j in range(i + 1) if sel[j]]
    if not isinstance(node.sop, Aggregate):                       # selector width: BOS and selected
        return {0} | {j + 1 for j in chosen}
    if not chosen:
        return {0}
    if node.sop.reduce == "mean":
        return {j + 1 for j in chosen}
    vals = ev.column(node.sop.sop)
    best = (max if node.sop.reduce == "max" else min)(vals[j] for j in chosen)
    return {j + 1 for j in chosen if vals[j] == best}


def _expected(ct, ev, i: int, sub: int) -> np.ndarray:
    """The residual the invariant describes at token ``i`` after sub-layer ``sub`` (head 2l, MLP 2l+1)."""
    lay = ct.layout
    out = np.zeros(len(lay))
    out[lay.one] = 1.0
    for node in ct.program.nodes:
        if id(node) not in lay.dims or (node.kind not in ("token", "position") and node.slot > sub + (node.kind == "width")):
            continue
        v = ev.column(node.sop)[i]
        if node.kind == "width":
            out[lay.scratch(node)] = 1.0 / (v + 1)
            if node.slot > sub:
                continue
        for d, c in lay.write(node, v).items():
            out[d] += c
    return out


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_pass_and_bounds_hold_on_every_short_input(name):
    make, vocab = PROGRAMS[name]
    program = make()
    ct = compile_to_transformer(program, vocab, N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert cert.heads and all(39.99 <= r.margin <= 40.0 or 79.98 <= r.margin <= 80.0 or r.margin == np.inf
                              for r in cert.heads)
    rows = {(r.layer, r.head): r for r in cert.heads}
    worst_leak = 0.0
    for n, batch in _inputs(vocab):
        ids = torch.tensor([ct.encode(xs) for xs in batch])
        logits, acts = reference_forward(ct.model, ids)
        for b, xs in enumerate(batch):
            ev = evaluate(program, xs, causal=True, fast=False)
            want = ev.column(program)
            if ct.program.output.numerical:
                assert np.allclose(logits[b, 1:, 0].numpy(), want, atol=1e-9)
            else:
                got = ct.decode(logits[b, 1:])
                assert got == want, (xs, got, want)
            for layer, heads in enumerate(ct.heads):
                pattern = acts[f"blocks.{layer}.attn.hook_pattern"][b].numpy()
                for h, spec in enumerate(heads):
                    for i in range(n):
                        keep = _intended(spec.node, ev, i)
                        off = sum(pattern[h, i + 1, j] for j in range(i + 2) if j not in keep)
                        assert off <= rows[layer, h].leak, (xs, layer, h, i, off)
                        worst_leak = max(worst_leak, off)
            for sub in range(2 * len(ct.heads)):
                hook = f"blocks.{sub // 2}.hook_resid_{'mid' if sub % 2 == 0 else 'post'}"
                resid = acts[hook][b].numpy()
                eps = np.array(cert.eps[sub])
                for i in range(n):
                    exp = _expected(ct, ev, i, sub)
                    dev = np.abs(resid[i + 1] - exp)
                    assert np.all(dev <= eps), (xs, hook, i, dev.max())


def test_certificate_text_and_json():
    cert = certify(compile_to_transformer(lib.make_hist(), ABC, N))
    text = cert.text()
    assert "PASS" in text and "premise" in text and "margin 80" in text
    js = cert.to_json()
    assert js["verdict"] == "PASS" and js["heads"][0]["reduce"] == "width" and js["max_seq_len"] == N
