"""rasp.certify's residual enclosures (rasp/certify/state.py: ``State.encoding``, ``State.box``).

What is pinned: the box of a state holds ``one`` = 1 exactly, every computed s-op's encoding
widened by ``eps`` on *both* sides, a selector width's value dimensions as 0 until its MLP has
decoded it, and 0 for s-ops not computed yet, whatever other s-ops the same weights read.

Each model is a correct compilation with weights moved where they change nothing (the forward
pass and every printed bound are checked against tests/hook_oracle.py's float64 pass), or
changed so that the model is really wrong (shown by running it against the RASP interpreter),
or changed by 1e-7 so that ``eps`` is not 0 and the printed readout margin can be compared with
the margin measured on every input.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch
from rasp_certify_checks import all_inputs, assert_bounds_hold, shift

from hook_oracle import reference_forward
from rasp import lib
from rasp.certify import certify
from rasp.core import Aggregate, Comparison, Map, Select, SequenceMap, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 4




def _measured_margin(ct, program) -> float:
    """The smallest lead of the interpreter's value over every other class in the float64
    logits, over every input of 1..N tokens."""
    measured = np.inf
    for batch in all_inputs(ABC, N):
        logits, _ = reference_forward(ct.model, torch.tensor([ct.encode(xs) for xs in batch]))
        for b, xs in enumerate(batch):
            want = evaluate(program, xs, causal=True, fast=False).column(program)
            for i, v in enumerate(want):
                row = logits[b, i + 1].numpy()
                c = ct.classes.index(v)
                measured = min(measured, float(row[c] - np.delete(row, c).max()))
    return measured


def test_a_bias_moved_into_the_mlps_one_row_still_passes():
    """Fault: ``one`` enclosed as anything but 1. ``make_hist``'s decoding MLP with ``b_in``
    moved into the ``one`` row of ``W_in`` computes the same function (``one`` is 1 at every
    position); its certificate must PASS with every bound holding on all inputs."""
    program = lib.make_hist()
    ct = compile_to_transformer(program, ABC, N)
    mlp = ct.model.blocks[0].mlp
    with torch.no_grad():
        mlp.W_in[ct.layout.one] += mlp.b_in
        mlp.b_in.zero_()
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, program, cert, all_inputs(ABC, 3))


def test_a_logit_raised_through_the_one_row_fails_the_readout():
    """Fault: ``one`` enclosed as 2: then ``W_U[one, b] -= 2`` and ``b_U[b] += 4`` would look
    like no change. In the model they raise b's logit by 4 - 2 = 2 at every position, so that
    ``shift_right`` answers 'b' where the interpreter says 'a'; the certificate must FAIL."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, N)
    b = ct.classes.index("b")
    with torch.no_grad():
        ct.model.unembed.W_U[ct.layout.one, b] -= 2.0
        ct.model.unembed.b_U[b] += 4.0
    assert evaluate(program, ["a", "a"], causal=True, fast=False).column(program)[1] == "a"
    assert ct.run(["a", "a"])[1] == "b"
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "readout"), cert.text()


def test_a_width_holds_zero_in_its_value_dimensions_until_its_mlp():
    """Fault: a selector width's value dimensions enclosed as its encoding right after its head
    (status "scratch"), where the residual still holds 0 there. The decoding MLP of
    ``make_hist`` is given a weight of 5 from ``hist:0`` (which it writes itself, and which
    holds 0 when the MLP reads it) into a unit that reads the scratch dimension: the model is
    unchanged (every bound holds against the forward pass), and the certificate must PASS."""
    program = lib.make_hist()
    ct = compile_to_transformer(program, ABC, N)
    node = ct.program.output
    mlp = ct.model.blocks[0].mlp
    u = int(np.nonzero(mlp.W_in[ct.layout.scratch(node)].detach().numpy())[0][0])
    with torch.no_grad():
        mlp.W_in[ct.layout.dims[id(node)][0], u] += 5.0
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, program, cert, all_inputs(ABC, 3))


def test_an_s_op_not_computed_yet_leaves_the_other_readers_in_the_box():
    """Fault: the box stops at the first s-op read that is not computed yet, so the s-ops after
    it in the layout hold 0 in the box. Here ``A = shift(shift(tokens))`` (layer 1) has lower
    dimensions than ``B`` (a layer-0 max head), and ``C = (B == 'a')`` is an MLP of layer 0; its
    unit reading ``B`` is given a weight of 3 from ``A``'s first dimension, which holds 0 in
    layer 0. The model is unchanged; the certificate must PASS, every bound holding."""
    A = shift(shift(tokens))
    B = Aggregate(Select(tokens, tokens, Comparison.EQ), tokens, reduce="max", default="_")
    C = Map(lambda b: b == "a", B)
    program = SequenceMap(lambda a, c: a if c else "_", A, C)
    ct = compile_to_transformer(program, ABC, N)
    a_dims = ct.layout.dims[id(ct.program.by_uid[A.uid])]
    b_dims = ct.layout.dims[id(ct.program.by_uid[B.uid])]
    assert max(a_dims) < min(b_dims)                 # A comes first in the layout
    mlp = ct.model.blocks[0].mlp
    u = int(np.nonzero(mlp.W_in.detach().numpy()[b_dims].any(0))[0][0])
    with torch.no_grad():
        mlp.W_in[a_dims[0], u] += 3.0
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert_bounds_hold(ct, program, cert, all_inputs(ABC, 3))


def test_the_readout_margin_contains_the_measured_one_when_eps_is_not_zero():
    """Fault: the box ``encoding +- eps`` shifted (``[a + e, b + e]`` or ``[a - e, b - e]``)
    instead of widened, so that the printed readout margin is not a lower bound.

    ``shift_right``'s value map is scaled by ``1 - 1e-7`` (within LOOKUP_TOL), so every output
    dimension is off its encoding by up to 1e-7 (``eps``). W_U is the identity on the output's
    one-hot dimensions and ``b_U = 0``, so the measured margin is about ``1 - 1e-7`` (the winning
    dimension holds ``1 - 1e-7``, the others about ``e^-40``), and the sound bound is
    ``(1 - e) - (0 + e) ~ 1 - 2e-7``: it must be at most the measured margin on every input of
    1..4 tokens and within 2 * 1e-7 + 1e-12 of it."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, N)
    dims = ct.layout.dims[id(ct.program.output)]
    with torch.no_grad():
        ct.model.blocks[0].attn.W_O[0, :, dims] *= 1 - 1e-7
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    measured = _measured_margin(ct, program)
    assert 1 - 1.1e-7 < measured < 1 - 0.9e-7
    assert cert.readout_margin <= measured
    assert cert.readout_margin >= measured - (2e-7 + 1e-12)


def _leaky_shift(weight: float, into: str = "b", leak: float = 1e-7, reader: str | None = None):
    """``shift_right(tokens)`` whose head also writes ``leak`` into ``out:<into>`` where it writes
    ``out:a`` (within LOOKUP_TOL), and whose logit of ``reader`` (``into`` unless given) reads
    ``out:<into>`` times ``weight``."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, N)
    label = ct.program.output.label
    da, db = (ct.layout.labels.index(f"{label}:{v}") for v in ("a", into))
    W_O = ct.model.blocks[0].attn.W_O
    e = int(np.nonzero(W_O[0, :, da].detach().numpy())[0][0])
    with torch.no_grad():
        W_O[0, e, db] += leak
        ct.model.unembed.W_U[db, ct.classes.index(reader or into)] = weight
    return program, ct


@pytest.mark.parametrize("into", ["b", "c"])     # c: the s-op's last dimension, the one a width's scratch would take
def test_a_one_hot_s_ops_other_dimensions_hold_zero_plus_eps(into):
    """Defect fixed in ``State.box``: only the dimension encoding the value was widened by
    ``eps``; a one-hot s-op's other dimensions were taken as exactly 0, though the invariant
    allows ``|e_d| <= eps[d]`` in each of them. Here a key holding 'a' also writes 1e-7 into
    ``out:b`` (within LOOKUP_TOL, so ``eps[out:b] ~ 1e-7``) and b's logit reads ``out:b`` times
    2e7: where the program says 'a', b's logit is ``2e7 * 1e-7 = 2`` against a's 1, so the model
    answers 'b' (measured below); the certificate PASSed it. It must FAIL (readout)."""
    program, ct = _leaky_shift(2e7, into)
    assert evaluate(program, ["a", "a"], causal=True, fast=False).column(program) == ["_", "a"]
    assert ct.run(["a", "a"]) == ["_", into]
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "readout"), cert.text()


def test_the_readout_margin_counts_eps_in_the_other_one_hot_dimensions():
    """The same cross-term, with b's logit reading ``out:b`` times 10 only: the model is right,
    and its measured margin is ``1 - 10 * 1e-7 = 1 - 1e-6`` (at the positions holding 'a').
    The printed margin must be at most that (before the fix it printed ``1 - 1e-14``), and
    within 2e-6 of it."""
    program, ct = _leaky_shift(10.0)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    measured = _measured_margin(ct, program)
    assert abs(measured - (1 - 1e-6)) < 1e-9
    assert measured - 2e-6 <= cert.readout_margin <= measured


def test_a_widths_other_value_dimensions_hold_zero_plus_eps_after_its_mlp():
    """The box fix for a selector width: after its decoding MLP, ``hist`` is a one-hot s-op like
    any other, and its dimensions other than the value's hold 0 +- eps. The two units that write
    ``hist:1`` (a bump, 6 r_2 - 8 r_3 = [w == 1]) also write 1e-8 times it into ``hist:2`` (within
    LOOKUP_TOL), and the logit of 2 reads ``hist:2`` times 2e8: where the program says 1, the
    model answers 2 (measured below). The certificate must FAIL (readout)."""
    program = lib.make_hist()
    ct = compile_to_transformer(program, ABC, N)
    lab, node = ct.layout.labels, ct.program.output
    d1, d2 = lab.index(f"{node.label}:1"), lab.index(f"{node.label}:2")
    W_out = ct.model.blocks[0].mlp.W_out
    with torch.no_grad():
        for u in np.nonzero(W_out[:, d1].detach().numpy())[0]:
            W_out[u, d2] += 1e-8 * W_out[u, d1]
        ct.model.unembed.W_U[d2, ct.classes.index(2)] = 2e8
    assert evaluate(program, ["a", "b"], causal=True, fast=False).column(program) == [1, 1]
    assert ct.run(["a", "b"]) == [2, 2]
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "readout"), cert.text()


def test_a_negative_leak_into_another_one_hot_dimension_is_in_the_box():
    """The other one-hot dimensions hold 0 +- eps: the *lower* side too (``[+eps, eps]`` would
    pass a leak of the other sign). Where the head writes ``out:a`` it also writes -1e-7 into
    ``out:b``, and c's logit reads ``out:b`` times -2e7: where the program says 'a', c's logit is
    ``-2e7 * -1e-7 = 2`` against a's 1, so the model answers 'c' (measured below; where the
    value is 'b', c's logit is -2e7 and 'b' wins). c's logit reads ``out:c`` times 5, so that
    where the value is 'c' it wins even against ``-2e7 * eps``: the box ``[+eps, eps]`` PASSes
    this model. The certificate must FAIL (readout)."""
    program, ct = _leaky_shift(-2e7, "b", leak=-1e-7, reader="c")
    dc = ct.layout.labels.index(f"{ct.program.output.label}:c")
    with torch.no_grad():
        ct.model.unembed.W_U[dc, ct.classes.index("c")] = 5.0
    assert evaluate(program, ["a", "a"], causal=True, fast=False).column(program) == ["_", "a"]
    assert ct.run(["a", "a"]) == ["_", "c"]
    assert ct.run(["b", "b"]) == ["_", "b"] and ct.run(["c", "c"]) == ["_", "c"]
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "readout"), cert.text()


def test_the_upper_side_of_a_value_dimension_above_its_encoding_is_in_the_box():
    """The dimension encoding the value is widened upwards too (``[a - e, b - e]`` is not an
    enclosure). ``out:a`` is written as ``1 + 1e-7`` (within LOOKUP_TOL, so ``eps ~ 1e-7``); the
    logit of 'b' reads ``out:a`` times 2 and the logit of 'a' has a bias of 2, and every other
    class reads its own dimension times 5, so the model is right everywhere: where the value is
    'a', a's logit is ``2 + (1 + d)`` and b's ``2 (1 + d)``, a lead of ``1 - d`` with ``d = 1e-7``;
    elsewhere the value's logit is 5 against a's 2 (a lead of 3, so the state 'a' binds). The printed margin must be at most the
    measured one and within ``4 eps`` of it (the sound bound is ``3 - e - 2 (1 + e) = 1 - 3e``;
    the upper side cut to ``1 - e`` prints ``1 + e``, above the measured lead)."""
    program = lib.shift_right(tokens, 1, "_")
    ct = compile_to_transformer(program, ABC, N)
    label = ct.program.output.label
    da = ct.layout.labels.index(f"{label}:a")
    W_U, b_U = ct.model.unembed.W_U, ct.model.unembed.b_U
    with torch.no_grad():
        ct.model.blocks[0].attn.W_O[0, :, da] *= 1 + 1e-7
        b_U[ct.classes.index("a")] += 2.0
        W_U[da, ct.classes.index("b")] = 2.0
        for c, v in enumerate(ct.classes):
            if v != "a":
                W_U[ct.layout.labels.index(f"{label}:{v}"), c] *= 5.0
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    measured = _measured_margin(ct, program)
    assert 1 - 1.1e-7 < measured < 1 - 0.9e-7
    assert measured - 4e-7 <= cert.readout_margin <= measured
