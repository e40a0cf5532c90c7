"""rasp.certify on float32 weights: a statement about the float32 forward pass (rounding included).

The bounds are checked against the model's own float32 forward pass (torch's kernels, the dense
path), never against the certificate: the residual after every sub-layer must lie within ``eps``
of the exact encodings that the RASP interpreter gives, the attention off the intended keys within
the printed leak, the decoded output equal to the interpreter's. A model that float32 computes
wrong must FAIL.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from rasp_certify_checks import assert_bounds_hold, model_forward
from test_rasp_certify import PROGRAMS, _inputs

import rasp.weights.assemble as assemble
from rasp import lib
from lengthgen.proof.interval import Iv
from rasp.certify import certify, floats
from rasp.certify.floats import softmax_theta
from rasp.certify.state import State
from rasp.core import Map, SequenceMap, indices, numerical, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer

N = 6


WIDTHS = ["make_hist", "make_sort_unique", "make_reverse", "cumsum (width of an And)", "width of an Or",
          "width of a Not"]


@pytest.mark.parametrize("name", [p for p in PROGRAMS if p not in WIDTHS])
def test_float32_models_pass_and_their_float32_pass_stays_inside_the_bounds(name):
    make, vocab = PROGRAMS[name]
    program = make()
    ct = compile_to_transformer(program, vocab, N, dtype=torch.float32)
    cert = certify(ct)
    assert cert.verdict == "PASS" and cert.dtype == "float32", cert.text()
    assert "about: the float32 forward pass" in cert.text()
    assert_bounds_hold(ct, program, cert, [batch for _, batch in _inputs(vocab)], forward=model_forward)


@pytest.mark.parametrize("name", WIDTHS)
def test_a_selector_width_read_by_its_decoder_fails_in_float32(name):
    """Under (F3) a float32 attention kernel may move every score by 8 u (S_max + ln N), about
    1.4e-3 for these heads (scores up to 2880), so the width's 1/(w+1) is certified only within
    about 1e-3, while the decoder's steps at w = 5 are 1/42 apart with slopes built for float64's
    errors: the MLP that reads it misses its table, and the certificate does not claim what it
    cannot show. The same programs PASS in float64 (tests/test_rasp_certify.py)."""
    make, vocab = PROGRAMS[name]
    cert = certify(compile_to_transformer(make(), vocab, N, dtype=torch.float32))
    assert cert.verdict == "FAIL" and cert.kind == "lookup" and "MLP" in cert.reason, cert.text()


def test_float32_bounds_exceed_the_real_arithmetic_ones():
    """The same program in float32 carries rounding on every written dimension, so its eps after
    the last sub-layer is at least float64's and somewhere larger; its margins are smaller."""
    program = lib.make_frac_prevs(SequenceMap(lambda t, i: 1 if t == "a" else 0, tokens, indices))
    c64 = certify(compile_to_transformer(program, ["a", "b"], N))
    c32 = certify(compile_to_transformer(program, ["a", "b"], N, dtype=torch.float32))
    assert c64.passed and c32.passed and c64.dtype == "float64"
    e64, e32 = np.array(c64.eps[-1]), np.array(c32.eps[-1])
    assert np.all(e32 >= e64) and np.any(e32 > e64)
    assert all(h32.margin < h64.margin for h32, h64 in zip(c32.heads, c64.heads))


def test_the_softmax_weight_error_counts_every_step():
    """theta = gamma_{N + 2 + 1 + 3*4}: N normaliser terms, exp's 2 ulp, the division and four
    rescalings of 3 operations each (u = 2^-24)."""
    u = 2.0 ** -24
    for n in (1, 7, 100):
        k = n + 2 + 1 + 12
        assert softmax_theta(u, n) == k * u / (1 - k * u)


@pytest.fixture
def unguarded(monkeypatch):
    """The compiler without its magnitude guard (which refuses the model below)."""
    monkeypatch.setattr(assemble, "check_heads", lambda *a, **k: [])
    monkeypatch.setattr(assemble, "check_logits", lambda *a, **k: None)


def test_a_float32_model_that_answers_wrong_fails(unguarded):
    """``shift_right(t + i % 3)`` over the tokens 5000..5039: float32 cannot hold the squares of the
    codes, and the model answers wrong (against the interpreter) on the inputs below; the
    certificate must not PASS it."""
    program = lib.shift_right(SequenceMap(lambda t, i: t + i % 3, tokens, indices), 1, 5000)
    vocab = list(range(5000, 5040))
    ct = compile_to_transformer(program, vocab, 8, dtype=torch.float32)
    inputs = [[5039, 5001, 5020, 5000, 5038, 5011, 5007], [5003, 5039, 5017]]
    wrong = [xs for xs in inputs if ct.run(xs) != list(evaluate(program, xs, causal=True, fast=False).column(program))]
    assert wrong
    assert certify(ct).verdict == "FAIL"


def test_a_float32_model_whose_logits_could_round_past_the_gap_fails(unguarded):
    """The identity on tokens 1000..1039 (an ordinal output read as 2 c x - c**2, about 3 * 10^6):
    float32 could round a logit by more than the gap 1 between two codes, so the readout fails;
    in float64 the same program passes."""
    program = lib.shift_right(tokens, 1, 1000)
    vocab = list(range(1000, 1040))
    cert = certify(compile_to_transformer(program, vocab, 8, dtype=torch.float32))
    assert cert.verdict == "FAIL" and cert.kind == "readout", cert.text()
    assert certify(compile_to_transformer(program, vocab, 8)).passed


def _layer0(program, vocab):
    """float64 and float32 certificates of ``program``, the float32 compilation, and what its
    residual holds before layer 0 (only exact token and position encodings)."""
    c64 = certify(compile_to_transformer(program, vocab, N))
    ct = compile_to_transformer(program, vocab, N, dtype=torch.float32)
    st = State(ct)
    bos = Iv.exact(st.p["embed.W_E"][-1]) + st.p["pos_embed.W_pos"][0]
    return c64, certify(ct), st, floats.magnitudes(st), bos


def test_a_layer0_head_loses_twice_its_score_error_and_adds_its_value_and_output_rounding():
    """``shift_right(tokens)``: one head in layer 0 reading exact encodings. In float32 its printed
    margin is float64's minus 2 ds (ds from rasp/certify/floats.py, pinned by hand in
    tests/test_rasp_certify_floats.py), its spread float64's plus 2 ds, and the eps of the
    dimensions it writes grows by at least its value rounding through |W_O| and by the rounding
    of the weighted sum and W_O (output_error)."""
    c64, c32, st, r, bos = _layer0(lib.shift_right(tokens, 1, 0), [1, 2, 3])
    a = "blocks.0.attn."
    WQ, WK, WV, WO = (st.p[a + k][0] for k in ("W_Q", "W_K", "W_V", "W_O"))
    ds = floats.score_error(r, bos, WQ, st.p[a + "b_Q"][0], WK, st.p[a + "b_K"][0], st.unit, N + 1)
    h64, h32 = c64.heads[0], c32.heads[0]
    assert ds > 0 and h32.margin <= h64.margin - 2 * ds and h32.margin >= h64.margin - 2 * ds - 1e-9
    assert h32.spread >= h64.spread + 2 * ds and h32.spread <= h64.spread + 2 * ds + 1e-9
    written = np.nonzero(np.any(WO != 0, axis=0))[0]
    v_err = floats.value_error(r, bos, WV, st.unit)
    rows = np.vstack([st.p["embed.W_E"][:-1] + st.p["pos_embed.W_pos"][p + 1] for p in range(N)] + [bos.lo])
    V = np.abs(rows @ WV).max(0)                          # the largest exact value of any key
    low = (v_err @ np.abs(WO) + floats.output_error(V, WO, st.unit, N + 1))[written]
    high = (v_err @ np.abs(WO) + floats.output_error(V + 2 * v_err, WO, st.unit, N + 1))[written]
    e64, e32 = np.array(c64.eps[0])[written], np.array(c32.eps[0])[written]
    assert np.all(low > 0) and np.all(e32 >= e64 + low * (1 - 1e-9)) and np.all(e32 <= e64 + high * (1 + 1e-9))


def test_a_layer0_mlp_and_the_readout_add_their_rounding():
    """``(t + i) % 3``: one MLP in layer 0 reading exact encodings, then the readout.
    In float32 the MLP's eps is float64's plus mlp_error exactly (its enclosure is widened by it),
    and the readout's margin loses at least the two smallest logit roundings."""
    c64, c32, st, r, bos = _layer0(SequenceMap(lambda t, i: (t + i) % 3, tokens, indices), [0, 1, 2])
    m = "blocks.0.mlp."
    rounding = floats.mlp_error(r, *(st.p[m + k] for k in ("W_in", "b_in", "W_out", "b_out")), st.unit)
    written = np.nonzero(rounding)[0]
    e64, e32 = np.array(c64.eps[1])[written], np.array(c32.eps[1])[written]
    assert len(written) and np.allclose(e32, e64 + rounding[written], rtol=1e-9, atol=0)
    logit = floats.logit_error(floats.magnitudes(_after(st, c32)), st.p["unembed.W_U"], st.p["unembed.b_U"], st.unit)
    assert c32.readout_margin <= c64.readout_margin - 2 * logit.min()


def _after(st: State, cert) -> State:
    """``st`` with every s-op computed and the certificate's last eps (what the readout sees)."""
    st.eps = np.array(cert.eps[-1])
    for node in st.prog.nodes:
        st.status[id(node)] = "full"
    return st


def test_float32_embeddings_start_eps_at_their_rounding_and_fail_beyond_it():
    """A numerical token map t / 10: float32 stores 0.1, 0.2, 0.3 rounded, so eps starts at the
    largest |float32(v) - v|; an entry moved by 10^-4 is not a rounding of its encoding: FAIL."""
    program = numerical(Map(lambda t: t / 10, tokens))
    vocab = [1, 2, 3]
    ct = compile_to_transformer(program, vocab, N, dtype=torch.float32)
    cert = certify(ct)
    dim = ct.layout.labels.index(ct.program.output.label)
    rounding = max(abs(float(np.float32(v / 10)) - v / 10) for v in vocab)
    assert cert.passed and rounding > 0 and cert.eps[0][dim] >= rounding
    with torch.no_grad():
        ct.model.embed.W_E[1, dim] += 1e-4
    bad = certify(ct)
    assert bad.verdict == "FAIL" and bad.kind == "lookup" and "W_E row 1" in bad.reason


def test_a_numerical_readout_adds_its_rounding():
    """``t / 10`` read out directly (no layer): the output's error is at least the embedding's
    rounding of 0.3 plus the readout's gamma_1 * 0.3 (one term, not an integer)."""
    program = numerical(Map(lambda t: t / 10, tokens))
    cert = certify(compile_to_transformer(program, [1, 2, 3], N, dtype=torch.float32))
    u = 2.0 ** -24
    assert cert.passed and cert.output_error >= abs(float(np.float32(0.3)) - 0.3) + u / (1 - u) * 0.3


def test_a_float32_numerical_output_must_be_within_float32_tol():
    """``10000.1 t``: float32 holds 30000.3 only within 2^-10, over FLOAT32_TOL = 1e-3, so the
    readout fails in float32 and passes in float64 (within NUMERIC_TOL = 1e-9)."""
    program = numerical(Map(lambda t: t * 10000.1, tokens))
    cert = certify(compile_to_transformer(program, [1, 2, 3], N, dtype=torch.float32))
    assert cert.verdict == "FAIL" and cert.kind == "readout" and "> 0.001" in cert.reason
    assert certify(compile_to_transformer(program, [1, 2, 3], N)).passed


def test_cli_dtype(capsys):
    """``--dtype float32``: the float32 statement (exit 0 on PASS, 1 on FAIL); another type is
    refused in one line (exit 2)."""
    from rasp.certify.cli import main

    assert main(["--program", "lib:make_length", "--max-seq-len", "6", "--dtype", "float32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "PASS" and out["dtype"] == "float32"
    assert main(["--program", "lib:make_hist", "--max-seq-len", "6", "--dtype", "float32"]) == 1
    assert "about: the float32 forward pass" in capsys.readouterr().out
    assert main(["--program", "lib:make_hist", "--max-seq-len", "6", "--dtype", "float16"]) == 2
    res = capsys.readouterr()
    assert res.out == "" and len(res.err.strip().splitlines()) == 1


def test_a_float32_head_without_rivals_keeps_an_infinite_margin():
    """make_length's head selects every key (a constant selector): no key competes, so its margin
    is +inf in float32 as in float64 (the score rounding 2 ds is not subtracted from it) and its
    leak is exactly 0."""
    cert = certify(compile_to_transformer(lib.make_length(), ["a", "b"], N, dtype=torch.float32))
    assert cert.passed and cert.heads[0].margin == np.inf and cert.heads[0].leak == 0.0
