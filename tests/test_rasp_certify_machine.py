"""rasp.certify on the Turing-program simulator (program P) of the addition machine, and the MLP
enclosure it needs (large lookup tables whose slopes cancel) against exact rational arithmetic."""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
import torch
from rasp_certify_checks import assert_bounds_hold

from rasp.certify import certify
from rasp.certify.mlps import _active_maps, enclose
from rasp.turing.library import TASKS
from rasp.turing.machines import Vocab, build_trace, simulate
from rasp.turing.transformer import transformer_program
from lengthgen.proof.interval import Iv

N = 5          # max_seq_len


@pytest.fixture(scope="module")
def addition():
    tm, tape = TASKS["addition"].build("12+34")
    tp = transformer_program(tm, 1)
    ct = tp.to_transformer(N).compiled
    trace = build_trace(simulate(tm, tape, 10_000), Vocab.for_machine(tm))
    return tp, ct, trace, certify(ct)


def test_addition_simulator_passes(addition):
    tp, ct, _, cert = addition
    assert cert.verdict == "PASS", cert.text()
    assert len(cert.heads) == 9 and len(cert.mlps) == 3
    match = next(r for r in cert.heads if r.writes == "match")
    assert match.reduce == "max" and match.margin > 39 and match.leak < 1e-16
    assert cert.readout_margin > 0.99


def test_addition_bounds_hold_on_traces_and_random_inputs(addition):
    tp, ct, trace, cert = addition
    rng = random.Random(0)
    size = tp.vocab.size
    batches = [[trace[:n]] for n in range(1, N + 1)]
    batches.append([[rng.randrange(size) for _ in range(N)] for _ in range(40)])
    assert_bounds_hold(ct, tp.output, cert, batches)


def _exact(x: np.ndarray, W_in, b_in, W_out, b_out) -> list[Fraction]:
    pre = [sum((Fraction(a) * Fraction(w) for a, w in zip(x, W_in[:, u])), Fraction(b_in[u]))
           for u in range(W_in.shape[1])]
    return [sum((max(p, 0) * Fraction(W_out[u, j]) for u, p in enumerate(pre)), Fraction(b_out[j]))
            for j in range(W_out.shape[1])]


@pytest.mark.parametrize("nested", [True, False])
def test_mlp_enclosure_contains_the_exact_output(nested):
    """Both ways of summing the active units (prefix sums of one unit order, and per row)."""
    rng = np.random.default_rng(1)
    if nested:                       # a table in one scalar z: every unit reads z, thresholds differ
        W_in = np.ones((1, 30)) * 3.0
        b_in = -np.arange(30, dtype=float) * 3.0 + 0.5
        X = np.arange(0, 31, dtype=float)[:, None] / 3.0
    else:
        W_in = rng.normal(size=(3, 30))
        b_in = rng.normal(size=30)
        X = rng.normal(size=(40, 3))
    # slope changes of alternating sign far above the result: float sums of them cancel badly
    big = np.where(np.arange(30) % 4 == 0, 2.0 ** 56, -(2.0 ** 56))[:, None]
    W_out = np.where(np.arange(30)[:, None] % 2 == 0, big, rng.normal(size=(30, 2)))
    b_out = rng.normal(size=2)
    out = enclose(Iv.exact(X), W_in, b_in, W_out, b_out)
    act = X @ W_in + b_in >= 0           # exact here: no pre-activation is within rounding of 0
    M, c = _active_maps(act, W_in, b_in, W_out, rows=7)
    for r in range(len(X)):
        units = np.nonzero(act[r])[0]
        for j in range(2):                # the active units' slopes, summed exactly
            assert Fraction(c.lo[r, j]) <= sum(Fraction(b_in[u]) * Fraction(W_out[u, j]) for u in units) <= Fraction(c.hi[r, j])
            for d in range(W_in.shape[0]):
                want = sum(Fraction(W_in[d, u]) * Fraction(W_out[u, j]) for u in units)
                assert Fraction(M.lo[r, d, j]) <= want <= Fraction(M.hi[r, d, j])
    for r in range(len(X)):
        want = _exact(X[r], W_in, b_in, W_out, b_out)
        for j in range(2):
            assert Fraction(out.lo[r, j]) <= want[j] <= Fraction(out.hi[r, j])
    assert np.all(out.hi - out.lo <= 1e-6 * 2.0 ** 56)


@pytest.mark.parametrize("row, head_dim, factor", [("tokens", 0, 0.999),        # the n-gram's == on tokens
                                                  ("prev_sep:1", 2, 0.5),        # the guard's == on positions
                                                  ("one", 1, -1.0)])             # the max's rank term (with the constant sides of both ==), reversed
def test_broken_lookup_head_fails_margin(row, head_dim, factor):
    tm, _ = TASKS["addition"].build("12+34")
    ct = transformer_program(tm, 1).to_transformer(N).compiled
    W = ct.model.blocks[2].attn.W_Q
    d = ct.layout.labels.index(row)
    with torch.no_grad():
        assert W[0, d, head_dim] != 0
        W[0, d, head_dim] *= factor
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "margin") and "match" in cert.reason


def test_with_bit_codes_the_premise_n_gram_of_a_carry_passes_and_runs_the_trace():
    """``999+1`` needs n-gram 4 (its carry runs through three 9s). Quadratic position equalities
    leave the lookup head's margin to the error of squared codes times its scale (FAIL margin, the
    enclosure's loss, not the model's); with every equality on bits the certificate passes, and
    the certified model reproduces the simulator's trace (26 tokens; the proof covers every input
    of up to 64)."""
    tm, tape = TASKS["addition"].build("999+1")
    trace = build_trace(simulate(tm, tape, 10_000), Vocab.for_machine(tm))
    tp = transformer_program(tm, 4)
    n = 64
    assert certify(tp.to_transformer(n).compiled).verdict == "FAIL"
    bits = tp.to_transformer(n, binary_from=0.0)
    cert = certify(bits.compiled)
    assert cert.verdict == "PASS", cert.text()
    assert max(r.error for r in cert.mlps) > 0.1       # a squared code's error, grown through two tables
    assert bits.greedy(trace[:len(tape) + 2], len(trace), monitor=False) == trace


def test_flat_tables_keep_every_error_of_program_p_at_rounding_level():
    """``plateau=0.25``: an input within a quarter of a gap of its code gives the table's exact
    output, so no MLP passes on the errors of the heads before it (0.12 above, at most 1.2e-10
    here) and the readout wins by 1 - 1e-7 instead of 0.998; the model still runs the trace."""
    tm, tape = TASKS["addition"].build("999+1")
    trace = build_trace(simulate(tm, tape, 10_000), Vocab.for_machine(tm))
    flat = transformer_program(tm, 4).to_transformer(64, binary_from=0.0, plateau=0.25)
    cert = certify(flat.compiled)
    assert cert.verdict == "PASS", cert.text()
    assert max(r.error for r in cert.mlps) <= 1e-9 and max(r.error for r in cert.heads) <= 1e-7
    assert cert.readout_margin >= 0.9999
    assert flat.greedy(trace[:len(tape) + 2], len(trace), monitor=False) == trace
