"""The copy/reverse certificate (constructions/copying/certify/margins.py) on a model with two heads
per layer: the built head plus a second one that attends its own ID (docs/copying.md,
"Certificate"; docs/certificate.md, "Mutation testing"). The certificate covers any number of heads,
but the construction has one, so these paths (the member columns of head h > 0, the deviation summed
over heads, a member holding ``=``) are checked here against the float64 forward pass of
tests/forward_oracle.py and against the task's coupling worked out by hand."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from constructions.copying import build_model
from constructions.copying.certify.margins import certify
from lengthgen.model import Transformer
from lengthgen.tasks import COPY, REVERSE
from forward_oracle import forward64, hardmax64

N = 3
TASKS = {"copy": COPY, "reverse": REVERSE}
INPUTS = [np.array(x) for x in ([0, 1, 2], [7, 7, 7], [5, 0, 5], [9, 8, 9], [3, 3, 8])]


def _two_heads(task: str, w: float, b: float, dtype: str = "float64", sharpen: float = 1.0) -> Transformer:
    """The built model plus head 2: query √M·POS ⊕ √(MP)·ONE, key √M·POS ⊕ √(MP)·IS_BOS, so it
    attends ``$`` and the positions at its own ID (``=`` itself at ``=``; x_j and y_j itself at
    y_j); value DIGIT ⊕ IS_BOS as head 1's, written ×2w into COPIED and ×2b into SINK_SHARE.
    ``sharpen`` multiplies head 2's M."""
    one = build_model(task, n_digits=N, dtype=dtype)[0]
    model = Transformer(dataclasses.replace(one.cfg, n_heads=2), one.annotations)
    lab, hd = one.annotations.residual, one.annotations.head_dims[0]
    P = sum(label.startswith("POS[") for label in lab)
    with torch.no_grad():
        for name, value in model.state_dict().items():
            built = one.state_dict()[name]
            if built.shape == value.shape:
                value.copy_(built)
            else:  # the per-head parameters: head 1 as built, head 2 zero
                value.zero_()
                value[0].copy_(built[0])
        a = model.blocks[0].attn
        M = float(a.W_Q[0, lab.index("ONE"), hd.index("sink")]) ** 2 / P * sharpen
        for i in range(P):
            a.W_Q[1, lab.index(f"POS[{i}]"), hd.index(f"pos[{i}]")] = math.sqrt(M)
            a.W_K[1, lab.index(f"POS[{i}]"), hd.index(f"pos[{i}]")] = math.sqrt(M)
        a.W_Q[1, lab.index("ONE"), hd.index("sink")] = math.sqrt(M * P)
        a.W_K[1, lab.index("IS_BOS"), hd.index("sink")] = math.sqrt(M * P)
        for k in range(10):
            a.W_V[1, lab.index(f"DIGIT[{k}]"), hd.index(f"val_DIGIT[{k}]")] = 1
            a.W_O[1, hd.index(f"val_DIGIT[{k}]"), lab.index(f"COPIED[{k}]")] = 2 * w
        a.W_V[1, lab.index("IS_BOS"), hd.index("val_IS_BOS")] = 1
        a.W_O[1, hd.index("val_IS_BOS"), lab.index("SINK_SHARE")] = 2 * b
    return model.eval().requires_grad_(False)


def _attended(task: str, ids: np.ndarray) -> list[list[list[int]]]:
    """S per head and query, from the coupling: head 1 attends ``$`` and the input digit the next
    answer token copies (``$`` alone after the last one); head 2 attends ``$`` and every position
    up to the query that shares the query's ID."""
    S1, S2 = [], []
    for t in range(len(ids)):
        j = t - (N + 1)
        S1.append([0] + ([] if j < 0 or j >= N else [N - j] if task == "reverse" else [j + 1]))
        S2.append([0] + [p for p in range(1, t + 1) if ids[p] == ids[t]])
    return [S1, S2]


def _gaps(task: str, model, x: np.ndarray, hard: bool) -> tuple[np.ndarray, np.ndarray]:
    """Logit gaps right token − other token at ``=``, y_1 … y_n ([n + 1, V], +inf at the right
    token): float64 softmax, or the hard-max limit (attention uniform on S)."""
    inst = TASKS[task].instance(x.astype(np.uint8), start=1)
    tok, pos = inst.tokens[:-1], inst.pos_ids[:-1]
    out = hardmax64(model, tok, pos, _attended(task, pos)) if hard else forward64(model, tok, pos)
    logits = out["logits"][N + 1:]
    expected = np.concatenate([x[::-1] if task == "reverse" else x, [COPY.EOS]])
    gaps = logits[np.arange(N + 1), expected][:, None] - logits
    gaps[np.arange(N + 1), expected] = np.inf
    return gaps, expected


def _printed_gap(where: str) -> float:
    return float(where.split("gap ≥ ")[1].rstrip(")"))


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_two_head_classes_by_hand(task: str) -> None:
    """Head 2 adds its own S to each class: ``=`` attends itself; y_j attends x_j (reverse:
    x_{n+1−j}, the digit it holds) and itself, which hold one digit: still two free digits (100
    assignments) at y_1 … y_{n−1}, one at ``=`` and at y_n."""
    cert = certify(_two_heads(task, 0.6, 0.5), task, N, "real")
    assert cert.passed, cert.message
    src = (lambda j: N + 1 - j) if task == "reverse" else (lambda j: j)
    nxt = (lambda j: N - j) if task == "reverse" else (lambda j: j + 1)
    got = [(c.description, c.positions, c.configs) for c in cert.classes]
    assert got == [
        (f"query = -> S = {{$, x_{nxt(0)}}}; {{$, =}}, predicts the digit of x_{nxt(0)}", 1, 10),
        (f"query y_1 -> S = {{$, x_{nxt(1)}}}; {{$, y_1, x_{src(1)}}}, predicts the digit of x_{nxt(1)}", N - 1, 100),
        (f"query y_{N} -> S = {{$}}; {{$, y_{N}, x_{src(N)}}}, predicts '$'", 1, 10)]


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_a_second_head_that_makes_the_model_wrong_fails(task: str) -> None:
    """Head 2 writes 2.25× the digit y_j holds (twice: x_j and y_j, each 1/3): it beats the copied
    digit by 0.5 wherever they differ (hard-max margin 1 − 1.5), so the forward pass is wrong there
    and the certificate must FAIL at the hard-max limit. (Counting one of its two members, or
    none, would leave a margin of 0.25 or 1.)"""
    model = _two_heads(task, 1.125, 0.0)
    gaps, _ = _gaps(task, model, INPUTS[0], hard=False)
    assert gaps[1:N].min() < -0.49
    cert = certify(model, task, N, "real")
    assert not cert.passed and cert.reason == "hardmax", cert.message
    assert cert.message.startswith("query y_1 -> ")


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_a_second_head_that_keeps_the_model_right_passes(task: str) -> None:
    """w = 0.6, b = 0.5: hard-max margins 0.25 at ``=`` (head 2 reads ``$`` and ``=``, which
    writes nothing), 0.2 at y_j (the held digit at 0.8), 1.2 at y_n. The certificate must pass,
    and each class's printed gap (its binding pair) must be the smallest hard-max gap that the
    float64 pass measures on the inputs at that class's positions, to the 4 printed digits."""
    model = _two_heads(task, 0.6, 0.5)
    cert = certify(model, task, N, "real")
    assert cert.passed, cert.message
    hard = np.min([_gaps(task, model, x, hard=True)[0].min(1) for x in INPUTS], axis=0)  # per answer position
    assert hard == pytest.approx([0.25, 0.2, 0.2, 1.2], abs=1e-12)
    by_class = [hard[0], hard[1:N].min(), hard[N]]
    assert [_printed_gap(c.where) for c in cert.classes] == pytest.approx(by_class, rel=1e-3)
    for x in INPUTS:  # and the model is right
        assert _gaps(task, model, x, hard=False)[0].min() > 0.19


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_the_deviation_bound_adds_both_heads(task: str) -> None:
    """Head 2 four times sharper than head 1: the residual at the answer positions deviates from
    the hard-max limit mostly through head 1 (COPIED and SINK_SHARE, both heads write there); the
    printed per-coordinate bound Δ (leak + spread, summed over the heads) must contain what the
    float64 pass measures, with head 1's share alone too small for it."""
    model = _two_heads(task, 0.6, 0.5, sharpen=4.0)
    cert = certify(model, task, N, "real")
    assert cert.passed, cert.message
    labels = model.annotations.residual
    bound = np.array([sum(cert.deltas.get(label, {}).values()) for label in labels])
    measured = np.zeros(len(labels))
    for x in INPUTS:
        inst = TASKS[task].instance(x.astype(np.uint8), start=1)
        tok, pos = inst.tokens[:-1], inst.pos_ids[:-1]
        dev = np.abs(forward64(model, tok, pos)["resid_mid"] - hardmax64(model, tok, pos, _attended(task, pos))["resid_mid"])
        measured = np.maximum(measured, dev[N + 1:].max(0))
    assert measured.max() > 1e-4  # the leak moves the residual measurably: the check can fail
    assert np.all(measured <= bound * (1 + 1e-9) + 1e-15), (measured, bound)
