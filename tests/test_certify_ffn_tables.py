"""The FFN half of the Theorem 5.1 certificate (constructions/addition/certify/ffn.py) against
oracles from outside it: the local configurations against Python integers, the sensitivities
against the slopes of a float64 evaluation of the FFN and the readout, the margin check on tables
worked out by hand, and the hard-max verdict, its message and its binding checks against the
float64 hard-max pass of every 1-digit input (tests/forward_oracle.py; docs/certificate.md,
"Mutation testing")."""
from __future__ import annotations

import re
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from constructions.addition import START_ID, build_model
from constructions.addition.certify.ffn import (ROLE_BOS, ROLE_C, ClassSpec, FFNTables, _configs, _sensitivities,
                                                ffn_check)
from constructions.addition.certify.margins import certify
from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv
from lengthgen.tasks import ADDITION
from forward_oracle import addition_passes


def _one_digit() -> torch.nn.Module:
    return build_model(n_digits=1, d_model=21, dtype="float64")[0]


def _all_one_digit_passes(model) -> list[tuple]:
    """(a, b, float64 pass, hard-max pass, answer rows, targets) for all 100 one-digit additions:
    at n = 1 they hold every local configuration of every class (no carry into significance 0)."""
    out = []
    for a in range(10):
        for b in range(10):
            f, _, hm, q, want, _, _ = addition_passes(model, str(a), str(b), START_ID)
            out.append((a, b, f, hm, q, want))
    return out


def test_a_class_that_reads_no_digit_above_its_query_still_enumerates_the_next_significance() -> None:
    """c_1 at n = 3 predicts c_2 = (a_2 + b_2 + carry out of significance 1) mod 10, so its local
    configurations run over a_1, b_1, a_2, b_2 and the carry into 1 (10^4·2) even when its heads
    attend only '$' and c_1; the (query, target) pairs are counted here with Python integers."""
    spec = ClassSpec(3, 1, 0, (((ROLE_BOS, -1, 0),), ((ROLE_BOS, -1, 0), (ROLE_C, 1, 0))))
    tokens, query, target, _ = _configs(spec)
    want = Counter()
    for a1 in range(10):
        for b1 in range(10):
            for carry in range(2):
                for a2 in range(10):
                    for b2 in range(10):
                        c1, out = (a1 + b1 + carry) % 10, (a1 + b1 + carry) // 10
                        want[(ADDITION.vocabulary[str(c1)], ADDITION.vocabulary[str((a2 + b2 + out) % 10)])] += 1
    assert len(query) == 20000 and np.array_equal(tokens[(ROLE_C, 1)], query)
    assert Counter(zip(query.tolist(), target.tolist())) == want


def _gap_slopes(W_in, b_in, W_out, W_U, x, t) -> np.ndarray:
    """[R, V]: the derivative of logit(t) − logit(v) in each residual coordinate at x, by central
    differences of the float64 evaluation (x + ReLU(x·W_in + b_in)·W_out)·W_U (piecewise linear,
    so exact up to rounding once the step keeps every unit's sign)."""
    def gaps(y):
        logits = (y + np.maximum(y @ W_in + b_in, 0) @ W_out) @ W_U
        return logits[t] - logits

    h = 1e-6
    eye = np.eye(len(x))
    return np.array([(gaps(x + h * e) - gaps(x - h * e)) / (2 * h) for e in eye])


def test_the_sensitivities_are_the_slopes_of_the_logit_gaps() -> None:
    """On the affine piece of each configuration, |∂(logit_t − logit_v)/∂resid_r| is what the
    readout check multiplies with the deviation bound: the bound must hold it and be tight (the FFN
    term W_in·W_out·W_U is as large as W_U here, so its sign and the difference g_t − g_v both show)."""
    rng = np.random.default_rng(11)
    d, d_mlp, V = 6, 9, 5
    W_in, W_out, W_U = rng.normal(size=(d, d_mlp)), rng.normal(size=(d_mlp, d)), rng.normal(size=(d, V))
    b_in = rng.normal(size=d_mlp)
    xs = rng.normal(size=(12, d))
    pre = xs @ W_in + b_in
    assert np.abs(pre).min() > 1e-3  # the central differences stay on one affine piece
    active, target = pre > 0, rng.integers(0, V, len(xs))
    coords = np.array([0, 2, 3, 5])
    sens = _sensitivities(SimpleNamespace(W_U=W_U, W_in=W_in), active, target, coords, I.matmul(W_out, W_U))
    assert sens.shape == (len(xs), len(coords), V)
    for c, x in enumerate(xs):
        slope = np.abs(_gap_slopes(W_in, b_in, W_out, W_U, x, target[c]))[coords]
        assert slope.max() > 1
        assert np.all(slope <= sens[c] + 1e-7) and np.all(sens[c] <= slope + 1e-7), (c, slope, sens[c])


def _table(wo_wu: np.ndarray, gap: list[float], stab_min: list[float]) -> FFNTables:
    """One configuration with target token 0, one perturbed coordinate that no unit and no logit
    reads (sensitivity 0): only the pre-activation float term ``pre_err`` moves anything."""
    d_mlp, V = wo_wu.shape
    return FFNTables(None, 1, np.array([0]), np.array(stab_min), np.array([True] * d_mlp), np.zeros((1, d_mlp)),
                     np.array([gap]), np.zeros((1, 1, V)), np.array([0]), Iv.exact(wo_wu), None)


def test_the_readout_check_charges_each_gap_with_its_own_pre_activation_term() -> None:
    """Target 0; unit 0 writes +1 to logit 0, −1 to logit 1, 0 to logit 2 and +1 to logit 3, and
    may be off by pre_err = 0.1. Moving it by −0.1 lowers logit 0 − logit 1 by 0.2 and
    logit 0 − logit 2 by 0.1, and leaves logit 0 − logit 3 as it is: with gaps 1, 5 and 0.5 the
    slacks are 1/0.2 = 5, 50 and none (a gap nothing can move needs no margin), so the binding
    check is the gap to '1' at slack 5; the margins and requirements are the hand values."""
    wo_wu = np.array([[1.0, -1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    t = _table(wo_wu, [np.inf, 1.0, 5.0, 0.5], [100.0, 100.0])
    zero = np.zeros(1)
    check = ffn_check(t, {"leak": zero, "spread": zero, "float": zero}, np.array([0.1, 0.0]), 0.0, ["u0", "u1"])
    assert 5 * (1 - 1e-12) <= check.slack <= 5
    assert check.where == "logit gap to '1' (gap 1)"
    assert check.parts["leak"] == check.parts["spread"] == 0 and check.parts["float"] == pytest.approx(0.2, rel=1e-12)
    assert check.stab_margin == 100 and check.stab_required == pytest.approx(0.1, rel=1e-12)
    assert check.logit_margin == 0.5 and check.logit_required == pytest.approx(0.2, rel=1e-12)


def test_a_readout_that_ties_every_token_exactly_is_not_a_right_prediction() -> None:
    """W_U = 0 and b_U = 0: every logit is exactly 0 (an enclosure of width 0), so every answer
    ties with every other token. A margin exactly 0 is no margin: FAIL (hardmax), although no
    deviation can move a logit (which would otherwise need no margin at all)."""
    model = _one_digit()
    with torch.no_grad():
        model.unembed.W_U.zero_(), model.unembed.b_U.zero_()
    cert = certify(model, 1, "real")
    assert cert.passed is False and cert.reason == "hardmax", cert.message
    assert "100 of 100 local configurations not provably right" in cert.message


MESSAGE = re.compile(r"(?P<cls>.*): at the hard-max limit the model predicts '(?P<got>.)' instead of '(?P<want>.)' "
                     r"\((?P<detail>[^;]*); (?P<bad>\d+) of (?P<count>\d+) local configurations not provably right\)")


def test_the_hard_max_failure_names_the_one_wrong_configuration() -> None:
    """The four units of the 18-trapezoid write SUM[3] instead of SUM[8]: at the hard-max limit the
    model is then wrong on 9 + 9 alone (the float64 hard-max pass of all 100 inputs finds it,
    predicting '3' for '8' at '='). The FAIL names that class, what it predicts and should predict,
    the digits it reads there and how many of its 100 configurations are wrong."""
    model = _one_digit()
    names, labels = model.annotations.residual, model.annotations.mlp
    units = [i for i, label in enumerate(labels) if label.startswith("trap_m18_")]
    W_out = model.blocks[0].mlp.W_out
    with torch.no_grad():
        W_out[units, names.index("SUM[3]")] = W_out[units, names.index("SUM[8]")]
        W_out[units, names.index("SUM[8]")] = 0
    wrong = [(a, b, j, int(hm["logits"][q[j]].argmax()), int(want[j]))
             for a, b, _, hm, q, want in _all_one_digit_passes(model) for j in range(len(q))
             if hm["logits"][q[j]].argmax() != want[j]]
    assert len(wrong) == 1
    a, b, row, got, want = wrong[0]
    cert = certify(model, 1, "real")
    assert cert.passed is False and cert.reason == "hardmax"
    m = MESSAGE.fullmatch(cert.message)
    assert m, cert.message
    assert row == 0 and m["cls"] == "query '=': head 1 -> {$, b_0, a_0}; head 2 -> {$, =, +}"
    assert (m["got"], m["want"]) == (ADDITION.decode([got]), ADDITION.decode([want]))
    assert dict(item.split("=") for item in m["detail"].split(", ")) == {"a_0": str(a), "b_0": str(b)}
    assert (int(m["bad"]), int(m["count"])) == (1, 100)


def test_a_position_coordinate_read_by_the_readout_counts_with_its_sign() -> None:
    """W_U reads POS_2[1] (0 or 1 at every ID) into '+' with weight −5: '+' is never an answer and
    only sinks further, so the float64 pass stays right on all 100 inputs and the certificate
    must PASS; read with the wrong sign, '+' would lead by 4 wherever POS_2[1] = 1."""
    model = _one_digit()
    with torch.no_grad():
        model.unembed.W_U[model.annotations.residual.index("POS_2[1]"), ADDITION.PLUS] = -5.0
    lowered = 0
    for _, _, f, hm, q, want in _all_one_digit_passes(model):
        assert np.array_equal(f["logits"][q].argmax(1), want) and np.array_equal(hm["logits"][q].argmax(1), want)
        lowered += int(np.sum(hm["logits"][q, ADDITION.PLUS] == -5.0))
    assert lowered > 0
    cert = certify(model, 1, "real")
    assert cert.passed is True, cert.message


WHERE = re.compile(r"ReLU (?P<unit>\S+) stays (?P<state>on|off) \(min \|pre-activation\| (?P<margin>[0-9.e+-]+)\)")


def test_each_binding_relu_is_named_with_its_state_and_margin() -> None:
    """Every class of the 1-digit model binds on a ReLU check: the unit named must, over all 100
    inputs at the class's answer position, come closest to its kink at the printed distance (4
    digits), on the side printed (on: pre-activation > 0 there). The class-wide stab_margin is the
    smallest such distance over all units, and stab_required bounds how far the softmax moves them."""
    model = _one_digit()
    cert = certify(model, 1, "real")
    assert cert.passed
    labels = model.annotations.mlp
    passes = _all_one_digit_passes(model)
    states = set()
    for row, (_, count, _, check) in enumerate(cert.classes):  # one class per answer position at n = 1
        assert count == 1
        m = WHERE.fullmatch(check.where)
        assert m, check.where
        pre = np.array([hm["pre"][q[row]] for *_, hm, q, _ in passes])
        moved = np.array([f["pre"][q[row]] - hm["pre"][q[row]] for _, _, f, hm, q, _ in passes])
        unit = pre[:, labels.index(m["unit"])]
        closest = unit[np.argmin(np.abs(unit))]
        assert f"{abs(closest):.4g}" == m["margin"] and m["state"] == ("on" if closest > 0 else "off")
        assert check.stab_margin <= np.abs(pre).min() <= check.stab_margin * (1 + 1e-9) + 1e-15
        assert 0 < np.abs(moved).max() <= check.stab_required
        states.add(m["state"])
    assert "off" in states
