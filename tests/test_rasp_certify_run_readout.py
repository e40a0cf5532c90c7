"""rasp.certify's readout (rasp/certify/run.py ``_readout``) and the certificate's text.

What is pinned: the printed readout margin is a lower bound of the margin measured on the float64
forward pass and is exact for an unbroken ``shift_right``; a single-class output wins by
infinity; the margin must be *more* than DECISION_MARGIN and a numerical error *at most* its
tolerance (boundaries taken at the printed value itself); the readout's state budget counts
its states (worked out by hand); a value missing from the classes fails readout; the numerical
output's printed error contains the measured one; the text shows the verdict, the kind and
reason of a FAIL only, and one line per readout.

Measured margins and errors come from tests/hook_oracle.py's float64 forward pass and the RASP
interpreter (rasp.evaluate) on every input of 1..4 tokens.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from hook_oracle import reference_forward
from rasp import lib
from rasp.certify import certify
from rasp.certify import run as run_module
from rasp.core import Map, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer

ABC = ["a", "b", "c"]
N = 4


def _shift():
    return lib.shift_right(tokens, 1, "_")


def _frac():
    return lib.make_frac_prevs(Map(lambda t: 1 if t == "a" else 0, tokens))


def _measured(ct, program) -> float:
    """Categorical: the smallest lead of the interpreter's value in the logits; numerical: the
    largest ``|logit - value|``; over every input of 1..N tokens."""
    worst = np.inf if not ct.program.output.numerical else 0.0
    for k in range(1, N + 1):
        batch = [list(x) for x in itertools.product(ABC, repeat=k)]
        logits, _ = reference_forward(ct.model, torch.tensor([ct.encode(xs) for xs in batch]))
        for b, xs in enumerate(batch):
            for i, v in enumerate(evaluate(program, xs, causal=True, fast=False).column(program)):
                row = logits[b, i + 1].numpy()
                if ct.program.output.numerical:
                    worst = max(worst, abs(float(row[0]) - v))
                else:
                    c = ct.classes.index(v)
                    worst = min(worst, float(row[c] - np.delete(row, c).max()))
    return worst


def test_the_readout_margin_is_the_measured_one():
    """``shift_right``: W_U is the identity on the output's one-hot dimensions, so the measured
    margin is 1 less the attention's leak (~e^-40); the printed margin must be at most the
    measured one and within 1e-9 of it."""
    program = _shift()
    ct = compile_to_transformer(program, ABC, N)
    cert = certify(ct)
    measured = _measured(ct, program)
    assert abs(measured - 1.0) < 1e-12
    assert measured - 1e-9 <= cert.readout_margin <= measured


def test_a_single_class_output_wins_by_infinity():
    """A constant output has one class and no rival: its margin is inf, not an error."""
    ct = compile_to_transformer(Map(lambda t: "x", tokens), ABC, N)
    cert = certify(ct)
    assert cert.verdict == "PASS" and ct.classes == ["x"]
    assert cert.readout_margin == np.inf


def test_the_margin_must_be_more_than_decision_margin(monkeypatch):
    """The decision needs a lead of *more* than DECISION_MARGIN: with DECISION_MARGIN set to the
    printed margin itself, the readout fails, and the reason names the state by its s-op."""
    ct = compile_to_transformer(_shift(), ABC, N)
    margin = certify(ct).readout_margin
    monkeypatch.setattr(run_module, "DECISION_MARGIN", margin)
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "readout")
    assert f"{ct.program.output.label}=" in cert.reason


def test_the_numerical_error_contains_the_measured_one_and_may_equal_the_tolerance(monkeypatch):
    """``make_frac_prevs``: the printed error is at least the measured ``|logit - i/w|`` and at
    most NUMERIC_TOL; with NUMERIC_TOL set to the printed error itself it still passes (the
    error may be *at most* the tolerance), and just below it fails readout."""
    program = _frac()
    ct = compile_to_transformer(program, ABC, N)
    cert = certify(ct)
    assert cert.verdict == "PASS", cert.text()
    assert _measured(ct, program) <= cert.output_error <= run_module.NUMERIC_TOL
    monkeypatch.setattr(run_module, "NUMERIC_TOL", cert.output_error)
    assert certify(ct).verdict == "PASS"
    monkeypatch.setattr(run_module, "NUMERIC_TOL", cert.output_error * (1 - 1e-9))
    again = certify(ct)
    assert (again.verdict, again.kind) == ("FAIL", "readout") and "certified only within" in again.reason


def test_the_readout_budget_counts_its_states(monkeypatch):
    """``shift_right``'s readout reads the output s-op alone, whose value set is '_', 'a', 'b',
    'c': 4 states. COMBO_BUDGET = 4 passes (at most the budget), 3 fails ``budget``."""
    ct = compile_to_transformer(_shift(), ABC, N)
    monkeypatch.setattr(run_module, "COMBO_BUDGET", 4)
    assert certify(ct).verdict == "PASS"
    monkeypatch.setattr(run_module, "COMBO_BUDGET", 3)
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "budget")
    assert "readout: 4 output states, over COMBO_BUDGET = 3" in cert.reason


def test_a_value_without_a_class_fails_readout():
    """A class list lacking 'c' (the model can then never answer 'c', which the program does):
    FAIL readout, naming the value."""
    ct = compile_to_transformer(_shift(), ABC, N)
    ct.classes.remove("c")
    cert = certify(ct)
    assert (cert.verdict, cert.kind) == ("FAIL", "readout")
    assert "'c' is not one of the unembedding's classes" in cert.reason


def test_the_text_shows_verdicts_kinds_and_readouts():
    """The first line ends in the verdict, followed by ``(kind: reason)`` for a FAIL only; one
    line per head, MLP and readout; a numerical output prints its error."""
    ct = compile_to_transformer(_shift(), ABC, N)
    label = ct.program.output.label
    lines = certify(ct).text().split("\n")
    assert lines[0] == f"certificate for {label!r}, inputs of 1..{N} tokens: PASS"
    assert lines[1].startswith("premise: ") and lines[2].startswith("about: ")
    assert lines[3].startswith("  layer 0 head 0 [mean]")
    assert lines[4].startswith("  readout: every class wins by >= 1 ") and lines[5].endswith(" s")
    with torch.no_grad():
        ct.model.unembed.b_U[ct.classes.index("b")] += 2.0
    cert = certify(ct)
    first = cert.text().split("\n")[0]
    assert first == f"certificate for {label!r}, inputs of 1..{N} tokens: FAIL (readout: {cert.reason})"
    text = certify(compile_to_transformer(_frac(), ABC, N)).text().split("\n")
    assert any(r.startswith("  readout: numerical output within ") for r in text)
    assert not any("every class wins" in r for r in text)
