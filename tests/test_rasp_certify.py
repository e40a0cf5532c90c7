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
from rasp_certify_checks import assert_bounds_hold

from lengthgen.decode import DECISION_MARGIN
from rasp import lib
from rasp.certify import PREMISE, certify
from rasp.certify.heads import LOOKUP_TOL, TV_MAX
from rasp.certify.run import NUMERIC_TOL
from rasp.certify.state import COMBO_BUDGET, PAIR_BUDGET, STATE_BUDGET
from rasp.core import Aggregate, Comparison, Map, Select, SelectorWidth, indices, tokens
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
    "three aggregates in one head": (lambda: _one_head_three_values(), ABC),
    "width of an Or": (lambda: SelectorWidth(Select(tokens, tokens, Comparison.LT) | Select(tokens, tokens, Comparison.EQ)),
                       NUM),
    "width of a Not": (lambda: SelectorWidth(~Select(tokens, tokens, Comparison.EQ)), ABC),
    "max over an And": (lambda: Aggregate(Select(tokens, tokens, Comparison.LEQ) & Select(indices, indices, Comparison.LT),
                                          tokens, reduce="max", default=0), NUM),
}


def _one_head_three_values():
    """Three Aggregates with one selector share one head (each value in its own columns of W_V)."""
    from rasp.core import Aggregate, Comparison, Select, SequenceMap, indices

    previous = Select(indices, indices - 1, Comparison.EQ)
    token = Aggregate(previous, tokens, default="_")
    is_a = Aggregate(previous, Map(lambda t: t == "a", tokens), default=False)
    is_b = Aggregate(previous, Map(lambda t: t == "b", tokens), default=False)
    return SequenceMap(lambda x, y: x if y else "_", token, SequenceMap(lambda u, v: u or v, is_a, is_b))


def test_documented_constants():
    assert (TV_MAX, LOOKUP_TOL, NUMERIC_TOL) == (1e-6, 1e-6, 1e-9)
    assert (PAIR_BUDGET, STATE_BUDGET, COMBO_BUDGET, DECISION_MARGIN) == (200_000_000, 5_000_000, 1_000_000, 1e-3)
    assert "selects keys that all hold one value" in PREMISE


def _inputs(vocab: list):
    for n in LENGTHS:
        yield n, [list(x) for x in itertools.product(vocab, repeat=n)]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_pass_and_bounds_hold_on_every_short_input(name):
    make, vocab = PROGRAMS[name]
    program = make()
    ct = compile_to_transformer(program, vocab, N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert cert.heads and all(39.99 <= r.margin <= 40.0 or 79.98 <= r.margin <= 80.0 or r.margin == np.inf
                              for r in cert.heads)
    assert_bounds_hold(ct, program, cert, [batch for _, batch in _inputs(vocab)])


def test_certificate_text_and_json():
    cert = certify(compile_to_transformer(lib.make_hist(), ABC, N))
    text = cert.text()
    assert "PASS" in text and "premise" in text and "margin 80" in text
    js = cert.to_json()
    assert js["verdict"] == "PASS" and js["heads"][0]["reduce"] == "width" and js["max_seq_len"] == N


def test_width_margin_counts_the_selected_keys_below_bos():
    """A selector width whose BOS scores 3e-8 above its selected keys still passes (the spread is
    within TV_MAX), and its printed margin is that of the selected keys, not BOS's."""
    program = lib.make_hist()
    ct = compile_to_transformer(program, ABC, N)
    attn = ct.model.blocks[0].attn
    e = int(np.nonzero(attn.W_K[0, ct.layout.bos].detach().numpy())[0][-1])    # BOS's key column
    with torch.no_grad():
        attn.W_Q[0, ct.layout.one, e] += 3e-8
    cert = certify(ct)
    assert cert.verdict == "PASS" and cert.heads[0].spread >= 3e-8
    assert_bounds_hold(ct, program, cert, [batch for n, batch in _inputs(ABC) if n <= 3])
