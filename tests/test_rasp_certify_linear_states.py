"""rasp.certify's MLPs read through a linear combination (rasp/certify/linear_states.py): enumerated
by the combination's value (2n + 1 states where the pairs are (n + 1)^2), still sound: the bounds
against a float64 forward pass, the sum set against brute force, the boxes against their eps, and a
broken table FAILs on this path while rows that are not exactly proportional leave it."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from rasp_certify_checks import assert_bounds_hold

from rasp.certify import certify
from rasp.certify.linear_states import linear_states, sum_set
from rasp.certify.mlps import _groups
from rasp.certify.run import _embedding, _layer
from rasp.certify.state import State
from rasp.core import Aggregate, Comparison, Full, Map, Select, SequenceMap, indices, numerical, tokens
from rasp.tracr_ops import LinearSequenceMap
from rasp.weights import compile_to_transformer
from lengthgen.proof import interval as I

N = 40           # max_seq_len: 41 values of each max, more than ONEHOT_MAX, so they are ordinal codes


def halted_program():
    """program P's ``halted``: is the last ``h`` after the last ``s``?"""
    last_h = Aggregate(Select(Map(lambda t: t == "h", tokens), Full(True), Comparison.EQ), indices,
                       default=-1, reduce="max").named("last_h")
    last_s = Aggregate(Select(Map(lambda t: t == "s", tokens), Full(True), Comparison.EQ), indices,
                       default=-1, reduce="max").named("last_s")
    gap = numerical(LinearSequenceMap(last_h, last_s, 1, -1)).named("gap")
    return Map(lambda d: d > 0, gap).named("halted")


@pytest.fixture(scope="module")
def compiled():
    return compile_to_transformer(halted_program(), ["h", "s", "x"], N, binary_from=0.0)


def _row(cert):
    return next(r for r in cert.mlps if r.writes == "halted")


def test_the_difference_is_enumerated_by_value_and_the_bounds_hold(compiled):
    cert = certify(compiled)
    assert cert.verdict == "PASS", cert.text()
    assert _row(cert).states == 2 * N + 1            # -N .. N, not (N + 1)^2 = 1681 pairs
    rng = random.Random(0)
    batches = [[[rng.choice("hsx") for _ in range(n)] for _ in range(30)] for n in (1, 2, 7, 23, N)]
    batches.append([list("x" * (N - 2) + "hs"), list("s" * (N - 1) + "h")])
    assert_bounds_hold(compiled, compiled.program.output.sop, cert, batches)


def test_rows_that_are_not_exactly_proportional_are_enumerated_by_pairs(compiled):
    ct = compile_to_transformer(halted_program(), ["h", "s", "x"], N, binary_from=0.0)
    W = ct.model.blocks[0].mlp.W_in
    d = ct.layout.dims[id(next(n for n in ct.program.nodes if n.label == "last_s"))][0]
    units = torch.nonzero(W[d]).flatten()
    with torch.no_grad():
        W[d, units[0]] *= 1 + 2.0 ** -40             # the same table up to 1e-12: not one w any more
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert _row(cert).states == (N + 1) ** 2


@pytest.mark.parametrize("shift", [1.0, -1.0])
def test_a_step_at_the_wrong_difference_fails_on_the_value_path(shift):
    ct = compile_to_transformer(halted_program(), ["h", "s", "x"], N, binary_from=0.0)
    W, b = ct.model.blocks[0].mlp.W_in, ct.model.blocks[0].mlp.b_in
    d = ct.layout.dims[id(next(n for n in ct.program.nodes if n.label == "last_h"))][0]
    units = torch.nonzero(W[d]).flatten()
    with torch.no_grad():
        b[units] += shift * W[d, units]               # the step at d > -shift instead of d > 0
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "lookup") and "'halted'" in cert.reason, cert.text()


@pytest.mark.parametrize("a, b", [(1, -1), (2, 3), (-3, 1), (1, 0), (5, -5)])
def test_the_sum_set_and_its_witnesses_against_brute_force(a, b):
    rng = random.Random(a * 10 + b)
    xs = sorted(rng.sample(range(-20, 40), 17))
    ys = sorted(rng.sample(range(-5, 60), 23))
    z, wx, wy = sum_set(a, xs, b, ys)
    assert z.tolist() == sorted({a * x + b * y for x, y in itertools.product(xs, ys)})
    assert all(a * x + b * y == v and x in xs and y in ys for v, x, y in zip(z.tolist(), wx.tolist(), wy.tolist()))


def test_the_boxes_hold_every_residual_within_eps(compiled):
    """Set eps of the two maxima by hand: every ``a x_d + b y_d`` with ``|x_d - x| <= eps_x`` and
    ``|y_d - y| <= eps_y`` must lie in the box of ``z = a x + b y``, and the box be no wider than needed."""
    st = State(compiled)
    _embedding(st)
    bos = st.p["embed.W_E"].shape[0] - 1
    _layer_heads_only(st, I.Iv.exact(st.p["embed.W_E"][bos]) + st.p["pos_embed.W_pos"][0])
    W_in, W_out, b_out = st.p["blocks.0.mlp.W_in"], st.p["blocks.0.mlp.W_out"], st.p["blocks.0.mlp.b_out"]
    node, units, _ = next(g for g in _groups(st, 0, W_out, b_out).values() if g[0].label == "halted")
    by = {n.label: st.layout.dims[id(n)][0] for n in st.prog.nodes if n.label in ("last_h", "last_s")}
    st.eps[by["last_h"]], st.eps[by["last_s"]] = 0.25, 1e-3
    in_dims = np.nonzero(np.any(W_in[:, units] != 0, axis=1))[0]
    boxes, w, asgs, m = linear_states(st, node, units, in_dims, W_in)
    assert m == 2 * N + 1 and np.all(w[0] == W_in[by["last_h"], units])
    ids = {n.label: id(n) for n in st.prog.nodes}
    for k, asg in enumerate(asgs):
        z = asg[ids["last_h"]] - asg[ids["last_s"]]
        assert boxes.lo[k, 0] <= z - 0.251 + 1e-9 and z + 0.251 - 1e-9 <= boxes.hi[k, 0]
        assert boxes.hi[k, 0] - boxes.lo[k, 0] <= 2 * 0.251 + 1e-12
    del st.status[ids["last_h"]]          # not computed yet (its dimensions hold 0): never read by value
    assert linear_states(st, node, units, in_dims, W_in) is None


def _layer_heads_only(st: State, bos_x) -> None:
    """Run layer 0's head checks (so the maxima are 'full' with their eps) but not its MLP."""
    import rasp.certify.run as run

    real = run.check_mlps
    run.check_mlps = lambda st, layer: []
    try:
        _layer(st, 0, bos_x, run.Certificate("PASS", None, "", "", st.n))
    finally:
        run.check_mlps = real


def test_a_weight_outside_the_two_dimensions_is_not_ignored():
    """The same shift as above, written through ``one`` instead of ``b_in``: the MLP then reads a third
    dimension, so the value path does not apply, and the pairs' enumeration finds the wrong step."""
    ct = compile_to_transformer(halted_program(), ["h", "s", "x"], N, binary_from=0.0)
    W = ct.model.blocks[0].mlp.W_in
    d = ct.layout.dims[id(next(n for n in ct.program.nodes if n.label == "last_h"))][0]
    units = torch.nonzero(W[d]).flatten()
    with torch.no_grad():
        W[ct.layout.one, units] += W[d, units]
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "lookup") and "'halted'" in cert.reason, cert.text()


def _last(ch: str, name: str):
    return Aggregate(Select(Map(lambda t: t == ch, tokens), Full(True), Comparison.EQ), indices,
                     default=-1, reduce="max").named(name)


def _square_mod_7():
    """A numerical s-op computed by an MLP (not affine, so it has a dimension), integer values 0..6."""
    return numerical(Map(lambda j: (j * j) % 7, _last("s", "last_s"))).named("sq")


def _twice(x):
    return Map(lambda d: d % 5, numerical(LinearSequenceMap(x, x, 1, 1))).named("f")


MAXIMA = range(-1, N)         # the values of last_h and last_s
#: program -> (the MLP checked, its input states): by value where the conditions hold, by pairs where not
CASES = {
    # factors 2 and -3, beside another table of the same layer: one state per value of 2x - 3y
    "factors": (lambda: SequenceMap(lambda u, v: u and v,
                                    Map(lambda d: d % 3 == 0, numerical(LinearSequenceMap(_last("h", "last_h"),
                                                                                          _last("s", "last_s"), 2, -3))).named("f"),
                                    Map(lambda j: j % 2 == 0, _last("s", "last_s"))),
                "f", len({2 * x - 3 * y for x in MAXIMA for y in MAXIMA})),
    # a numerical s-op (an MLP's output) minus an ordinal one
    "numerical": (lambda: Map(lambda d: d > 0, numerical(LinearSequenceMap(_square_mod_7(), _last("h", "last_h"), 1, -1))).named("f"),
                  "f", len({(j * j) % 7 - h for j in MAXIMA for h in MAXIMA})),
    # a mean of 0/1 flags: values that are not integers, so the pairs (fractions x maxima)
    "fractions": (lambda: Map(lambda d: d > 0, numerical(LinearSequenceMap(
        numerical(Aggregate(Select(indices, indices, Comparison.LEQ), numerical(Map(lambda t: 1 if t == "h" else 0, tokens)),
                            default=0)).named("frac"), _last("s", "last_s"), 1, -1))).named("f"),
                  "f", None),
    # a position-wise s-op: not a computed one, so the pairs (positions x maxima)
    "position": (lambda: Map(lambda d: d > 0, numerical(LinearSequenceMap(indices, _last("s", "last_s"), 1, -1))).named("f"),
                 "f", N * len(MAXIMA)),
    # one s-op twice: its values, not the pairs of them (which no input has)
    "twice": (lambda: _twice(_last("h", "last_h")), "f", len(MAXIMA)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_mlps_go_by_value_and_the_bounds_hold(case):
    make, label, states = CASES[case]
    program = make()
    ct = compile_to_transformer(program, ["h", "s", "x"], N, binary_from=0.0)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    row = next(r for r in cert.mlps if r.writes == label)
    if states is None:                           # fractions: every (mean, maximum) pair of the value sets
        node = next(n for n in ct.program.nodes if n.label == "frac")
        states = len(node.values) * len(MAXIMA)
    assert row.states == states
    rng = random.Random(1)
    batches = [[[rng.choice("hsx") for _ in range(n)] for _ in range(12)] for n in (1, 5, N)]
    assert_bounds_hold(ct, program, cert, batches)


def test_the_sum_set_of_more_values_than_one_block():
    xs = list(range(-1000, 1100))                # 2100 values: three blocks of ROWS (1024)
    ys = [0, 3, 1000, 2500]
    z, wx, wy = sum_set(1, xs, -2, ys)
    assert z.tolist() == sorted({x - 2 * y for x in xs for y in ys})
    assert all(x - 2 * y == v for v, x, y in zip(z.tolist(), wx.tolist(), wy.tolist()))


def test_units_that_read_a_multiple_of_the_combination_still_go_by_value():
    """The same function with every unit's input weights doubled and its output weights halved: the
    rows are ``2w`` and ``-2w``, still proportional to the factors, so still one state per value."""
    ct = compile_to_transformer(halted_program(), ["h", "s", "x"], N, binary_from=0.0)
    mlp = ct.model.blocks[0].mlp
    d = ct.layout.dims[id(next(n for n in ct.program.nodes if n.label == "last_h"))][0]
    units = torch.nonzero(mlp.W_in[d]).flatten()
    with torch.no_grad():
        mlp.W_in[:, units] *= 2.0
        mlp.b_in[units] *= 2.0
        mlp.W_out[units] /= 2.0
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert _row(cert).states == 2 * N + 1
