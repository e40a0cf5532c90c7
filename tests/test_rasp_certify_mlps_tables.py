"""rasp.certify's MLP tables (rasp/certify/mlps.py, ``_groups`` and ``check_mlps``) on tiny programs.

What is pinned: the printed MLP row (layer, s-op, units, input states, error), the ``eps`` each
output dimension gets, the lookup tolerance ``LOOKUP_TOL * (1 + |target|)`` per dimension (and
which dimension a FAIL names), every input state checked once and none skipped, the state
budget, zero-unit tables (a constant map), an MLP that reads an s-op its function does not, and
the ``structure`` failures of ``_groups`` with the weight and dimension they name.

Expected values come from the programs themselves, worked out by hand (value sets, codes, the
number of input states), from the weights (which units write an s-op), and from the float64
forward pass of tests/hook_oracle.py (the broken models are really off by what the certificate
says); never from the certificate's output on unbroken code.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hook_oracle import reference_forward
from rasp_certify_checks import assert_bounds_hold

from rasp import lib
from rasp.certify import certify
from rasp.certify import mlps as mlps_module
from rasp.core import Map, SequenceMap, indices, tokens
from rasp.weights import compile_to_transformer

AB = ["a", "b"]
N = 3                                  # max_seq_len: inputs of 1..3 tokens
INPUTS = [list(x) for n in range(1, N + 1) for x in itertools.product(AB, repeat=n)]


def sm():
    """``(t == 'a') + i``: one MLP in layer 0 reading tokens (2 values) and indices (0..2), so
    2 * 3 = 6 input states; values {0, 1, 2, 3}."""
    return SequenceMap(lambda t, i: (t == "a") + i, tokens, indices).named("sm")


def compile_(program, **kw):
    return compile_to_transformer(program, AB, N, **kw)


def dim(ct, label: str) -> int:
    return ct.layout.labels.index(label)


def edit(param: torch.nn.Parameter, index: tuple, add: float) -> None:
    with torch.no_grad():
        param[index] = param[index] + add


def resid_post(ct, xs: list, layer: int) -> np.ndarray:
    """The float64 residual after ``layer``'s MLP at the non-BOS positions of ``xs``."""
    _, acts = reference_forward(ct.model, torch.tensor([ct.encode(xs)]))
    return acts[f"blocks.{layer}.hook_resid_post"][0, 1:].numpy()


def writers(ct, layer: int, label: str) -> int:
    """Hidden units of ``layer``'s MLP whose W_out row writes a dimension of the s-op ``label``."""
    W = ct.model.blocks[layer].mlp.W_out.detach().numpy()
    cols = [i for i, x in enumerate(ct.layout.labels) if x == label or x.startswith(label + ":") or x == label + "^2"]
    return int(np.count_nonzero(np.any(W[:, cols] != 0, axis=1)))


# ---------------------------------------------------------------------- rows of unbroken tables
def test_rows_of_exact_tables_and_of_a_constant_table():
    """Rows of ``sm`` (layer 0), ``sm % 2`` (layer 1, 4 input states: sm's values) and the
    constant map ``'k'`` (layer 1, no hidden unit: only ``b_out``, still 4 states). Every table
    is exact in float64 (integer weights), so the printed error is at most 1e-12 (not, say, a
    floor of 1), and the forward pass stays inside every eps. A constant table has error 0:
    ``b_out`` is its value exactly. Catches a wrong layer, label, unit count or state count
    (e.g. the s-op's own value set enumerated as an input), a constant table taken for broken,
    and an ``initial`` of the error that is not 0."""
    for program, rows in [(sm(), [(0, "sm", 6)]),
                          (Map(lambda x: x % 2, sm()).named("parity"), [(0, "sm", 6), (1, "parity", 4)]),
                          (Map(lambda x: "k", sm()).named("const"), [(0, "sm", 6), (1, "const", 4)])]:
        ct = compile_(program)
        cert = certify(ct)
        assert cert.verdict == "PASS", cert.text()
        got = [(r.layer, r.writes, r.units, r.states) for r in cert.mlps]
        assert got == [(layer, label, writers(ct, layer, label), states) for layer, label, states in rows]
        assert all(0.0 <= r.error <= 1e-12 for r in cert.mlps), cert.text()
        assert_bounds_hold(ct, program, cert, [[x for x in INPUTS if len(x) == n] for n in range(1, N + 1)])
    assert cert.mlps[1].units == 0 and cert.mlps[1].error == 0.0


def test_every_input_state_goes_through_the_mlp_once(monkeypatch):
    """``sm % 2``: 6 states in layer 0 and 4 in layer 1, each pushed through ``enclose`` once
    (10 rows in all); a loop that re-checks overlapping slices does the same work many times."""
    seen = []
    real = mlps_module.enclose
    monkeypatch.setattr(mlps_module, "enclose", lambda X, *a, **k: (seen.append(X.shape[0]), real(X, *a, **k))[1])
    assert certify(compile_(Map(lambda x: x % 2, sm()).named("parity"))).passed
    assert sum(seen) == 6 + 4


def test_a_table_wrong_at_its_first_state_only_fails():
    """``sm % 2`` with ``W_in[sm:0, u] = 0.7`` for the unit with threshold 0: only the state
    ``sm = 0`` (where sm:0 holds 1) changes, by 0.7 * W_out[u], so the table is wrong there and
    nowhere else; the first enumerated state must be checked too. The forward pass at 'b' (sm =
    0) holds parity:0 = 1 - 0.7 instead of 1."""
    ct = compile_(Map(lambda x: x % 2, sm()).named("parity"))
    mlp = ct.model.blocks[1].mlp
    u = next(u for u in range(mlp.b_in.shape[0]) if mlp.b_in[u] == 0 and mlp.W_out[u].any())
    edit(mlp.W_in, (dim(ct, "sm:0"), u), 0.7)
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "lookup") and "MLP of 'parity'" in cert.reason
    assert resid_post(ct, ["b"], 1)[0, dim(ct, "parity:0")] == pytest.approx(0.3)
    assert resid_post(ct, ["a", "a"], 1)[:, dim(ct, "parity:0")].tolist() == [0.0, 1.0]   # sm = 1, 2: right


def test_an_mlp_reading_an_s_op_its_function_does_not_fails():
    """``sm % 2`` whose unit 0 also reads tokens:a (+0.5): the table now depends on the token,
    which the function does not read; the token's states must be enumerated too (and FAIL),
    not assumed. At 'a' (sm = 1, parity 1: want [0, 1]) unit 0's pre-activation is 1.5 instead
    of 1, so the forward pass holds [1 - 1.5, 1.5] = [-0.5, 1.5]."""
    ct = compile_(Map(lambda x: x % 2, sm()).named("parity"))
    edit(ct.model.blocks[1].mlp.W_in, (dim(ct, "tokens:a"), 0), 0.5)
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "lookup") and "MLP of 'parity'" in cert.reason
    post = resid_post(ct, ["a"], 1)[0]
    assert post[[dim(ct, "parity:0"), dim(ct, "parity:1")]].tolist() == [-0.5, 1.5]


# ---------------------------------------------------------------------- tolerances per dimension
def ordinal_sm():
    """``sm`` with ``onehot_max=2``: ordinal, dimensions 'sm' (code 0..3, |target| <= 3) and
    'sm^2' (0..9): tolerances LOOKUP_TOL * (1 + 3) = 4e-6 and LOOKUP_TOL * (1 + 9) = 1e-5."""
    return compile_(sm(), onehot_max=2)


def test_eps_is_per_dimension_and_tight():
    """``b_out[sm^2] += 5e-6`` (within its 1e-5): the MLP's eps is 5e-6 on sm^2 (the forward
    pass is off by exactly that at every position) and stays about 0 on 'sm', which the edit
    does not touch: one dimension's error must not become every dimension's."""
    program = sm()
    ct = compile_(program, onehot_max=2)
    edit(ct.model.blocks[0].mlp.b_out, (dim(ct, "sm^2"),), 5e-6)
    cert = certify(ct)
    assert cert.passed, cert.text()
    eps = cert.eps[1]                                   # after layer 0's MLP (sub-layer 1)
    assert eps[dim(ct, "sm")] <= 1e-12
    assert 5e-6 <= eps[dim(ct, "sm^2")] <= 5e-6 + 1e-12
    off = resid_post(ct, ["a", "b", "a"], 0)[:, dim(ct, "sm^2")] - np.array([1.0, 1.0, 9.0])   # sm = 1, 1, 3
    assert np.allclose(off, 5e-6, rtol=0, atol=1e-14)
    assert_bounds_hold(ct, program, cert, [[x for x in INPUTS if len(x) == n] for n in range(1, N + 1)])


@pytest.mark.parametrize("edits, fails, named, by", [
    ({"sm": 4.5e-6}, True, "'sm'", "4.5e-06"),             # over 4e-6 = 1e-6 * (1 + 3), under 5e-6, 1e-5
    ({"sm": 3.9e-6}, False, None, None),                    # under 4e-6
    ({"sm^2": 2e-5}, True, "'sm^2'", "2e-05"),              # over 1e-5: the failing one is not the first
    ({"sm": 4.5e-6, "sm^2": 8e-6}, True, "'sm'", "4.5e-06"),  # sm^2 is within its 1e-5: name 'sm'
])
def test_lookup_tolerance_grows_with_each_dimensions_own_target(edits, fails, named, by):
    """``b_out`` moved by a constant on ordinal dimensions: every position is off by exactly
    that (forward pass). A deviation fails where it is above LOOKUP_TOL * (1 + max |target|) of
    its *own* dimension (4e-6 for 'sm', 1e-5 for 'sm^2'), not of the largest target (9) or with
    2 instead of 1; the reason names the dimension that is over its tolerance and by how much."""
    ct = ordinal_sm()
    for label, delta in edits.items():
        edit(ct.model.blocks[0].mlp.b_out, (dim(ct, label),), delta)
    post = resid_post(ct, ["b", "a", "a"], 0)                              # sm = 0, 2, 3
    assert np.allclose(post[:, dim(ct, "sm")] - [0, 2, 3], edits.get("sm", 0.0), rtol=0, atol=1e-14)
    cert = certify(ct)
    if not fails:
        assert cert.passed, cert.text()
        return
    assert (cert.verdict, cert.kind) == ("FAIL", "lookup")
    assert cert.reason == f"layer 0 MLP of 'sm': misses the table in {named} by up to {by}"


def test_a_deviation_of_exactly_the_tolerance_passes():
    """The constant map 0 with ``onehot_max=0`` (ordinal: 'zero' and 'zero^2' hold 0, peak 0,
    no hidden unit). ``b_out[zero] = x``: the deviation bound is ``up(x)``, the next float. With
    x the float just below 1e-6 it is 1e-6 = LOOKUP_TOL * (1 + 0) exactly, which passes ("above"
    fails, docs); with x = 1e-6 it is above and fails."""
    for x, verdict in [(float(np.nextafter(1e-6, 0.0)), "PASS"), (1e-6, "FAIL")]:
        ct = compile_(Map(lambda v: 0, sm()).named("zero"), onehot_max=0)
        edit(ct.model.blocks[1].mlp.b_out, (dim(ct, "zero"),), x)
        cert = certify(ct)
        assert cert.verdict == verdict, cert.text()
        if verdict == "PASS":
            assert cert.mlps[1].error == 1e-6 and cert.mlps[1].units == 0


# ---------------------------------------------------------------------- budget
def test_state_budget_is_a_strict_limit(monkeypatch):
    """``sm`` has 6 input states: COMBO_BUDGET = 6 is enough, 5 is not (kind budget, its reason
    names the MLP, the count and the limit)."""
    monkeypatch.setattr(mlps_module, "COMBO_BUDGET", 6)
    assert certify(compile_(sm())).passed
    monkeypatch.setattr(mlps_module, "COMBO_BUDGET", 5)
    cert = certify(compile_(sm()))
    assert (cert.verdict, cert.kind) == ("FAIL", "budget")
    assert cert.reason == "layer 0 MLP of 'sm': 6 input states, over COMBO_BUDGET = 5"


# ---------------------------------------------------------------------- structure (_groups)
def hist():
    """``make_hist`` over a, b: a width head and its decoder MLP (dims hist:0..3, then the
    scratch hist:1/(w+1))."""
    return compile_(lib.make_hist())


def test_a_decoder_unit_writing_its_scratch_dimension_fails_structure():
    """A decoder unit that also writes the width's scratch dimension: that dimension belongs to
    the s-op but is not part of its value, so it is not the value of one s-op computed by this
    MLP (the forward pass: the scratch no longer holds 1/(w+1) after the MLP). The reason names
    that unit and the scratch dimension, not one of the value dimensions it writes legitimately."""
    ct = hist()
    W = ct.model.blocks[0].mlp.W_out
    u = int(np.nonzero(W.detach().numpy().any(axis=1))[0][0])
    scratch = dim(ct, "hist:1/(w+1)")
    before = resid_post(ct, ["a", "a", "b"], 0)[:, scratch]
    edit(W, (u, scratch), 0.25)
    assert np.abs(resid_post(ct, ["a", "a", "b"], 0)[:, scratch] - before).max() > 0.01
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "structure")
    assert cert.reason == (f"layer 0 MLP: unit {u} writes 'hist:1/(w+1)', which is not the value "
                           "of one s-op computed by this MLP")


@pytest.mark.parametrize("label", ["tokens:a", "one"])
def test_an_output_bias_outside_the_mlps_s_ops_fails_structure(label):
    """``b_out`` on a token dimension (one owner, not computed in this MLP) or on ``one`` (no
    owner): the invariant breaks (the forward pass holds 0.5 more there after the MLP), and the
    reason names ``b_out`` and that dimension."""
    ct = hist()
    before = resid_post(ct, ["b"], 0)[0, dim(ct, label)]
    edit(ct.model.blocks[0].mlp.b_out, (dim(ct, label),), 0.5)
    assert resid_post(ct, ["b"], 0)[0, dim(ct, label)] == before + 0.5
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "structure")
    assert cert.reason == f"layer 0 MLP: b_out writes {label!r}, which is not the value of one s-op computed by this MLP"
