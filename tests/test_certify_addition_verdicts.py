"""Verdicts of the Theorem 5.1 certificate (constructions/addition/certify/margins.py) that depend on
where it starts the position IDs, on which check raised, and on the slack threshold, each against
an oracle from outside the certificate: position rows made equal by hand, and the float64 forward
pass of every 1-digit input (tests/forward_oracle.py; docs/certificate.md, "Mutation testing")."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from constructions.addition import START_ID, build_model
from constructions.addition.certify.margins import certify
from forward_oracle import addition_passes


def test_the_position_ids_start_where_the_certificate_is_told() -> None:
    """A 2-digit model certified at n = 1 from s = 3 reads the IDs 0, 2, 3, 4 (from s = 2: 0, 1, 2, 3).
    With the row of ID 4 a copy of the row of ID 3, two IDs that the s = 3 format uses share one
    key vector: FAIL (structure) from s = 3, while the format from s = 2 never reads ID 4 (PASS)."""
    model = build_model(n_digits=2, d_model=21, dtype="float64")[0]
    with torch.no_grad():
        model.pos_embed.W_pos[4] = model.pos_embed.W_pos[3]
    assert START_ID == 2 and certify(model, 1, "real", start=2).passed
    cert = certify(model, 1, "real", start=3)
    assert cert.passed is False and cert.reason == "structure" and "have the same key vector" in cert.message


def test_a_structure_failure_of_the_attention_keeps_its_model_and_arithmetic() -> None:
    """Two IDs with one key vector are found while the attention is bounded (after the weights were
    read): the FAIL still names n, d, P = ⌊(23 − 17)/2⌋ and the arithmetic asked for, and says why."""
    model = build_model(n_digits=3, dtype="float64")[0]
    with torch.no_grad():
        model.pos_embed.W_pos[3] = model.pos_embed.W_pos[4]
    cert = certify(model, 3, "float32")
    assert (cert.passed, cert.reason, cert.n, cert.d_model, cert.P, cert.dtype) == (False, "structure", 3, 23, 3,
                                                                                  "float32")
    assert "have the same key vector" in cert.message


def test_a_slack_between_one_and_two_passes() -> None:
    """M = 4 at n = 1: every margin holds with slack between 1 and 2 (slack > 1 proves margin >
    requirement), and the float64 forward pass is right on all 100 inputs: PASS."""
    model = build_model(n_digits=1, d_model=21, dtype="float64", M=4.0)[0]
    for a in range(10):
        for b in range(10):
            f, _, _, q, want, _, _ = addition_passes(model, str(a), str(b), START_ID)
            assert np.array_equal(f["logits"][q].argmax(1), want)
    cert = certify(model, 1, "real")
    assert 1 < cert.slack < 2 and cert.passed is True and cert.reason == "", cert.message


FAILURE = re.compile(r"(?P<cls>query [^:]+: [^:]+): (?P<where>.+) "
                     r"\((?:gap|min \|pre-activation\|) (?P<margin>[0-9.e+-]+)\) "
                     r"needs more than its margin allows \(slack ×(?P<slack>[0-9.e+-]+)\); "
                     r"the requirement is mostly (?P<src>\w+) \((?P<parts>[^()]*)\)")


def test_a_margin_failure_names_its_class_check_slack_and_the_split_of_the_requirement() -> None:
    """M = 2.8 at n = 1 fails on the leak. The message (printed by the command line) names the class
    and check, the slack, and the requirement split into leak, spread and float, each to 3 digits:
    the slack is the printed margin over their sum, and the reason is the largest of them. Each
    head's printed score gap is a lower bound of the gap between its attended set and the other
    keys that the float64 pass measures on all 100 inputs."""
    model = build_model(n_digits=1, d_model=21, dtype="float64", M=2.8)[0]
    cert = certify(model, 1, "real")
    m = FAILURE.fullmatch(cert.message)
    assert cert.passed is False and m, cert.message
    parts = {name: float(value) for name, value in (item.split(" ") for item in m["parts"].split(", "))}
    assert list(parts) == ["leak", "spread", "float"] and m["src"] == cert.reason == max(parts, key=parts.get)
    assert float(m["slack"]) == pytest.approx(float(m["margin"]) / sum(parts.values()), rel=1e-2)
    assert any(desc == m["cls"] and check.where.startswith(m["where"]) for desc, _, _, check in cert.classes)
    measured = [np.inf] * len(cert.heads)
    for a in range(10):
        for b in range(10):
            f, S, _, q, _, _, _ = addition_passes(model, str(a), str(b), START_ID)
            for h in range(len(cert.heads)):
                for t in q:
                    inside = np.zeros(t + 1, dtype=bool)
                    inside[S[h][t]] = True
                    scores = f["scores"][h, t, : t + 1]
                    if not inside.all():
                        measured[h] = min(measured[h], scores[inside].min() - scores[~inside].max())
    for head, gap in zip(cert.heads, measured):
        assert 0 < head["gap"] <= gap


def test_a_coordinate_that_only_the_embeddings_write_carries_its_rounding() -> None:
    """d = 22 leaves one residual coordinate (UNUSED[0]) that no head, unit or logit reads; with every
    token writing 1/3 there and every position row 1, float32 rounds their sum. The printed bound of
    that coordinate's deviation must hold what the float32 model (torch) measures against the
    float64 pass of the same weights, though no head writes it and its bound is far below 1."""
    from forward_oracle import forward64
    from lengthgen.tasks import ADDITION

    model = build_model(n_digits=2, d_model=22, dtype="float32")[0]
    col = model.annotations.residual.index("UNUSED[0]")
    with torch.no_grad():
        model.embed.W_E[:, col] = 1 / 3
        model.pos_embed.W_pos[:, col] = 1.0
    cert = certify(model, 2, "float32")
    assert cert.passed, cert.message
    measured = 0.0
    for a, b in [("99", "01"), ("37", "48"), ("00", "00")]:
        inst = ADDITION.instance(a, b, start=START_ID)
        tok, pos = inst.tokens[:-1], inst.pos_ids[:-1]
        _, acts = model(torch.tensor(tok[None]), torch.tensor(pos[None]), return_cache=True)
        r32 = acts["blocks.0.hook_resid_mid"][0].double().numpy()
        measured = max(measured, float(np.abs(r32 - forward64(model, tok, pos)["resid_mid"])[:, col].max()))
    assert 0 < measured <= cert.deltas["UNUSED[0]"]["float"] < 1e-6
