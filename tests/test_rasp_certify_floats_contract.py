"""The contracts of rasp/certify/floats.py that its end-to-end float32 tests cannot see.

A rounding bound that is too small by a factor of two is unsound, yet no float32 forward pass of a
small program comes near it (the kernels' real errors are far below the worst case). So each piece
is pinned against its definition, worked out independently of the code under test:

* :func:`floats.magnitudes` against the residual's invariant, rebuilt here from ``layout.write``
  over each s-op's value set and the state's ``eps`` (every position holds ``write(v) + e`` with
  ``|e| <= eps``), after every sub-layer of a float32 certificate run step by step; and against
  the float32 forward pass itself (no coordinate it computes exceeds ``X``);
* the one-hot group labels: a label is shared by the dimensions of one s-op and by no other s-op
  (two s-ops read through one label would count one coefficient for both: a bound too small);
* the integer shortcut of :func:`floats._projection` at its edge: float32 holds every integer up
  to ``2^24 = 1/u`` (so a bound of exactly ``1/u`` needs no rounding term) and not ``2^24 + 1``
  (so a bound between ``1/u`` and ``2/u`` does);
* :func:`floats.output_error` counts only the head dimensions that can be non-zero, including
  those below 1;
* ``u = 0`` (the float64 statement) adds no rounding anywhere, whatever the residual;
* :func:`floats._finite` refuses magnitude plus error at or above ``OVERFLOW``.

``u = 2^-24``, ``gamma_n = n u / (1 - n u)``; ``close`` allows the inflation of a bound evaluated
in float64 (a factor ``1 + 2^-17`` at most, as in tests/test_rasp_certify_floats.py).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from rasp_certify_checks import model_forward
from test_rasp_certify_floats import U, close, g, residual

from lengthgen.proof import interval as I
from lengthgen.proof.rounding import FLOAT_TERM_INFLATION, Projection
from rasp.certify import floats, run
from rasp.certify.run import Certificate
from rasp.certify.state import Fail, State
from rasp.core import Aggregate, Comparison, Map, Select, SequenceMap, indices, numerical, tokens
from rasp.weights import compile_to_transformer

N = 4
VOCAB = ["a", "b", "c"]


def _program():
    """One-hot token and position s-ops, a one-hot aggregate (eps > 0 after its head in float32),
    and an MLP reading it and a token map (two one-hot s-ops in one projection). The token map
    comes after the aggregate among the program's nodes, so before layer 0 a computed s-op sits
    between s-ops that are already there."""
    prev = Aggregate(Select(indices, indices - 1, Comparison.EQ), tokens, default="_")
    return SequenceMap(lambda p, t: p + t, prev, Map(lambda t: t.upper(), tokens))


def _halves():
    """A numerical token map of non-integers read out directly: 0.5 and 1.5 are exact in float32
    (eps stays 0) but not integers, so no integer shortcut may apply to them."""
    return numerical(Map(lambda t: 0.5 if t == "a" else 1.5, tokens))


def _states(program):
    """The float32 compilation and a certificate run step by step: yields the state before layer 0
    and after each layer (``st.status`` and ``st.eps`` as the certificate has them)."""
    ct = compile_to_transformer(program, VOCAB, N, dtype=torch.float32)
    st = State(ct)
    run._embedding(st)
    cert = Certificate("PASS", None, "", "", N, dtype="float32")
    bos = I.Iv.exact(st.p["embed.W_E"][-1]) + st.p["pos_embed.W_pos"][0]
    yield ct, st
    for layer in range(ct.model.cfg.n_layers):
        bos = run._layer(st, layer, bos, cert)
        yield ct, st
    assert cert.verdict == "PASS"


def _invariant(st: State) -> tuple[np.ndarray, np.ndarray]:
    """``(X, exact)`` from the definition: per dimension, the largest ``|write(v)|`` over the owning
    s-op's values plus ``eps`` (1 for ``one``, ``eps`` where no computed s-op writes), and whether
    every value encodes to an integer there with ``eps = 0``."""
    X, integer = st.eps.copy(), np.ones(st.d, dtype=bool)
    X[st.layout.one] = 1.0
    for node in st.prog.nodes:
        if id(node) not in st.status:
            continue
        for v in node.values:
            dims, lo, hi = st.encoding(node, v)
            for d, a, b in zip(dims, lo, hi):
                X[d] = max(X[d], max(abs(a), abs(b)) + st.eps[d])
                integer[d] &= float(a).is_integer() and a == b
    return X, integer & (st.eps == 0)


def test_magnitudes_follow_the_invariant_after_every_sub_layer():
    """After the embedding and after each layer of both programs: ``X`` is the invariant's bound (to
    one rounding up), ``exact`` is False for the 0.5/1.5 map and for every coordinate whose eps is
    not 0, and the dimensions of each one-hot s-op share a label that no other s-op has (all
    others -1)."""
    seen_eps = order_seen = False
    for _, st in itertools.chain(_states(_program()), _states(_halves())):     # one state, step by step
        r = floats.magnitudes(st)
        X, exact = _invariant(st)
        assert np.all(r.X >= X) and np.all(r.X <= I.up(X)), np.nonzero(~((r.X >= X) & (r.X <= I.up(X))))
        assert np.array_equal(r.exact, exact) and np.array_equal(r.eps, st.eps)
        seen_eps |= bool(np.any(st.eps > 0))
        have = [id(n) in st.status for n in st.prog.nodes if st.layout.dims.get(id(n))]
        order_seen |= any(not a and b for a, b in zip(have, have[1:]))
        labels: dict[int, int] = {}
        for node in st.prog.nodes:
            dims = st.layout.dims.get(id(node), [])
            onehot = node.encoding == "onehot" and st.status.get(id(node)) == "full"
            for d in dims:
                if onehot and d in st.layout.value_dims[id(node)].values():
                    assert r.group[d] >= 0 and labels.setdefault(id(node), int(r.group[d])) == r.group[d]
                else:
                    assert r.group[d] == -1, (node.label, d)
        assert len(set(labels.values())) == len(labels)       # no two s-ops share a label
    assert seen_eps                                           # some eps > 0 was exercised
    assert order_seen                                         # a computed s-op came before a full one
    half = st.layout.dims[id(st.prog.output)][0]              # the last state is _halves()'s
    assert st.eps[half] == 0 and not r.exact[half]


def test_the_float32_forward_pass_stays_within_the_magnitudes():
    """Every coordinate of the float32 residual after the last layer, over every input of up to N
    tokens, is at most ``X`` (the bound that every rounding term multiplies)."""
    *_, (ct, st) = _states(_program())
    r = floats.magnitudes(st)
    worst = np.zeros(st.d)
    for n in range(1, N + 1):
        batch = [list(x) for x in itertools.product(VOCAB, repeat=n)]
        _, acts = model_forward(ct.model, torch.tensor([ct.encode(xs) for xs in batch]))
        resid = acts[f"blocks.{ct.model.cfg.n_layers - 1}.hook_resid_post"][:, 1:].abs().amax((0, 1)).numpy()
        worst = np.maximum(worst, resid)
    assert np.all(worst <= r.X), np.nonzero(worst > r.X)


def test_group_label_zero_is_a_group_like_any_other():
    """Labels are s-op indices, so 0 is a label: dimensions 0 and 1 (group 0) count their largest
    coefficient once (max(3, 4) = 4), as do 2 and 3 (group 1): column magnitude 4 + 2 + 1 = 7."""
    r = residual([1, 1, 1, 1, 1], group=[0, 0, 1, 1, -1])
    p = floats._projection(r, np.array([[3.0], [4.0], [2.0], [1.0], [1.0]]), np.zeros(1), U)
    assert close(p.mag, [7.0]) and p.err[0] == 0          # integers on exact coordinates, below 1/u


def _bound_inflating_to(target: float) -> float:
    """The largest float64 ``x`` that :func:`floats.inflate` takes to at most ``target`` (a few ulps
    around ``target / FLOAT_TERM_INFLATION``)."""
    x = float(np.nextafter(target / FLOAT_TERM_INFLATION, 0.0))
    for _ in range(8):
        x = float(np.nextafter(x, 0.0))
    while float(floats.inflate(np.nextafter(x, np.inf))) <= target:
        x = float(np.nextafter(x, np.inf))
    assert float(floats.inflate(x)) <= target
    return x


def test_the_integer_shortcut_holds_up_to_2_to_the_24_and_not_beyond():
    """float32 holds every integer of magnitude at most 2^24 (so does every partial sum of such
    integers), and not 2^24 + 1: a column whose inflated magnitude is exactly 2^24 needs no
    rounding term, one at 1.5 * 2^24 does (gamma_1 times it)."""
    assert float(torch.tensor(2 ** 24, dtype=torch.float32)) == 2 ** 24
    assert float(torch.tensor(2 ** 24 + 1, dtype=torch.float32)) != 2 ** 24 + 1
    x = _bound_inflating_to(2.0 ** 24)
    edge = floats._projection(residual([x]), np.array([[1.0]]), np.zeros(1), U)
    assert edge.mag[0] == 2.0 ** 24 and edge.err[0] == 0.0
    past = floats._projection(residual([3.0]), np.array([[2.0 ** 23]]), np.zeros(1), U)
    assert close(past.mag, [1.5 * 2 ** 24]) and close(past.err, [g(1) * 1.5 * 2 ** 24])


def test_the_output_error_counts_only_dimensions_that_can_be_non_zero():
    """V = (0.5, 0) over two head dimensions, both read by W_O = ((3), (5)), 4 keys: the second
    dimension is always 0 and adds nothing, so z W_O has one term (gamma_1), and the first, at
    0.5 < 1, is one. dz = 0.5 (theta + gamma_16 (1 + theta)), theta = gamma_19."""
    theta = g(19)
    dz = 0.5 * (theta + g(16) * (1 + theta))
    out = floats.output_error(np.array([0.5, 0.0]), np.array([[3.0], [5.0]]), U, 4)
    assert close(out, [3 * dz + g(1) * 3 * (0.5 + dz)])


def test_the_float64_statement_adds_no_rounding_whatever_the_residual():
    """u = 0: exact integer coordinates read by integer weights (where the float32 path takes its
    integer shortcut) and a one-key softmax: every term is 0, and nothing is refused."""
    r = residual([1.0, 2.0])
    W = np.array([[1.0, 2.0], [3.0, 0.0]])
    assert not np.any(floats.logit_error(r, W, np.array([1.0, 0.0]), 0.0))
    assert not np.any(floats.mlp_error(r, W, np.zeros(2), W, np.zeros(2), 0.0))
    assert not np.any(floats.output_error(np.array([1.0, 2.0]), W, 0.0, 1))
    box = I.Iv(np.array([-1.0, 0.0]), np.array([1.0, 2.0]))
    assert not np.any(floats.affine_error(box, W, None, 0.0)) and not np.any(floats.add_error(box, 0.0))


def test_finite_refuses_magnitude_plus_error_at_the_overflow_threshold():
    """(F1) needs every value below OVERFLOW: a magnitude that is below it only without its own
    rounding error fails, and so does a total of exactly OVERFLOW; just below it passes."""
    o = floats.OVERFLOW
    for mag, err in ((0.75 * o, 0.5 * o), (0.5 * o, 0.5 * o)):
        with pytest.raises(Fail) as info:
            floats._finite(Projection(np.array([1.0, mag]), np.array([0.0, err])))
        assert info.value.kind == "float"
    p = Projection(np.array([np.nextafter(0.5 * o, 0.0)]), np.array([np.nextafter(0.5 * o, 0.0)]))
    assert float(p.mag[0] + p.err[0]) < o and floats._finite(p) is p
