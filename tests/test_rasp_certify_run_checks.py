"""rasp.certify's driver (rasp/certify/run.py): the form check, the embedding check, the layer
structure (``_layer``), the BOS enclosure and the Certificate's fields.

What is pinned:

* every condition of the form check refuses on its own (a causal program in a non-causal model,
  normalisation, another activation, a score scale, windows, other positions);
* a broken position row fails ``lookup`` and names its row; ``b_V`` must be 0 as ``b_O`` is;
* a head that does not compute its scheduled aggregate or width fails ``structure`` in layer 0
  and in layer 1; a width's value dimensions hold 0 between its head and its MLP;
* BOS's residual is ``W_E[BOS] + W_pos[0]`` (the marker moved into ``W_pos[0]`` still passes);
* a PASS has reason ``""`` and the program's label; ``seconds`` is the run's wall time.

Models are correct compilations with one weight or one config field changed by hand; where the
change keeps the function, the float64 forward pass (tests/hook_oracle.py, ``assert_bounds_hold``)
confirms it and the certificate must PASS.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from rasp_certify_checks import all_inputs, assert_bounds_hold, shift

from rasp import lib
from rasp.certify import CertifyError, certify
from rasp.core import Comparison, Select, SelectorWidth, tokens
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 4


def _dim(ct, label: str) -> int:
    return ct.layout.labels.index(label)


@pytest.mark.parametrize("field, value", [("causal", False), ("normalization", "LN"), ("act_fn", "gelu"),
                                          ("attn_scale", 0.5), ("attn_windows", [2]), ("positional", "none")])
def test_each_condition_of_the_form_check_refuses_alone(field, value):
    """Fault: two conditions of the form check joined by ``and``, so one alone passes. The
    certificate's arithmetic assumes a causal mask, no normalisation, ReLU, scores not scaled,
    no windows and learned positions; a model config differing in one of them is refused."""
    ct = compile_to_transformer(lib.shift_right(tokens, 1, "_"), ABC, N)
    setattr(ct.model.cfg, field, value)
    with pytest.raises(CertifyError):
        certify(ct)


def test_a_broken_position_row_fails_lookup_and_names_it():
    """``W_pos`` row ``p + 1`` holds position ``p``: breaking position 2's ``indices:2`` entry
    (row 3) fails ``lookup``, the reason naming row 3 and position 2."""
    ct = compile_to_transformer(lib.shift_right(tokens, 1, "_"), ABC, N)
    with torch.no_grad():
        ct.model.pos_embed.W_pos[3, _dim(ct, "indices:2")] += 0.5
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "lookup")
    assert "W_pos row 3 is not the encoding of position 2" in cert.reason


def test_a_value_bias_fails_structure():
    """Fault: ``b_V`` not checked. A value bias adds ``b_V W_O`` to every output (softmax weights
    sum to 1), which the certificate does not model: FAIL structure, naming b_V."""
    ct = compile_to_transformer(lib.shift_right(tokens, 1, "_"), ABC, N)
    with torch.no_grad():
        ct.model.blocks[0].attn.b_V[0, 0] = 1e-3
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "structure") and "b_V" in cert.reason


@pytest.mark.parametrize("layer, make", [(0, lib.make_hist),
                                         (1, lambda: shift(shift(tokens))),
                                         (1, lambda: SelectorWidth(Select(shift(tokens), shift(tokens), Comparison.EQ)))],
                         ids=["width in layer 0", "aggregate in layer 1", "width in layer 1"])
def test_a_head_that_computes_nothing_fails_structure(layer, make):
    """Fault: the scheduled aggregate (slot ``2l``) or width (slot ``2l + 1``) of a layer not
    required to have a head. With every ``W_O`` of that layer zeroed, its s-op is never written:
    FAIL structure, 'no head of layer l computes'."""
    ct = compile_to_transformer(make(), ABC, N)
    assert len(ct.model.blocks) > layer
    with torch.no_grad():
        ct.model.blocks[layer].attn.W_O.zero_()
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "structure"), cert.text()
    assert f"no head of layer {layer} computes" in cert.reason


def test_bos_residual_is_the_sum_of_its_token_and_position_rows():
    """Fault: BOS's residual taken as ``W_E[BOS] - W_pos[0]``. Moving BOS's token row into
    ``W_pos[0]`` (BOS always sits at position 0) keeps the model's function: PASS, every bound
    holding on the forward pass."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, N)
    W_E, W_pos = ct.model.embed.W_E, ct.model.pos_embed.W_pos
    bos = W_E.shape[0] - 1
    assert np.any(W_E[bos].detach().numpy() != 0)
    with torch.no_grad():
        W_pos[0] += W_E[bos]
        W_E[bos] = 0.0
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, program, cert, all_inputs(ABC, 3))


def test_a_pass_has_an_empty_reason_its_program_and_its_wall_time():
    """A PASS: kind None, reason "", the output's label, and ``seconds`` between 0 and the wall
    time measured around the call."""
    ct = compile_to_transformer(lib.shift_right(tokens, 1, "_"), ABC, N)
    start = time.perf_counter()
    cert = certify(ct)
    wall = time.perf_counter() - start
    assert (cert.verdict, cert.kind, cert.reason) == ("PASS", None, "")
    assert cert.program == ct.program.output.label and cert.max_seq_len == N
    assert 0.0 <= cert.seconds <= wall
    js = cert.to_json()
    assert js["reason"] == "" and js["program"] == ct.program.output.label
