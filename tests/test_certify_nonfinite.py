"""A model with a NaN or an infinite weight is never certified: every certificate reads its weights
through one check (lengthgen.proof.weights.require_finite) and FAILs with reason "structure" (the
trained-model certificate refuses it), before any bound is computed.

Why it needs a test: a NaN compares false with everything, so a NaN gap is neither "≤ 0" nor
"below the margin". Before the check, the addition certificate in real arithmetic said PASS for a
4-digit model with one NaN in W_U.
"""
from __future__ import annotations

import math

import pytest
import torch

from constructions.addition import build_model as build_addition
from constructions.addition.certify.margins import certify as certify_addition
from constructions.copying import build_model as build_copying
from constructions.copying.certify.margins import certify as certify_copying
from constructions.multiplication import build_model as build_multiplication
from constructions.multiplication.certify.margins import certify as certify_multiplication
from lengthgen.certify import certify as certify_trained
from lengthgen.proof.weights import StructureError

BAD = [math.nan, math.inf, -math.inf]


def poisoned(model: torch.nn.Module, parameter: str, value: float) -> torch.nn.Module:
    with torch.no_grad():
        dict(model.named_parameters())[parameter].view(-1)[5] = value
    return model


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("parameter", ["unembed.W_U", "blocks.0.attn.b_O", "blocks.0.mlp.W_in"])
def test_the_addition_certificate_fails_a_non_finite_weight(parameter, value):
    model = build_addition(n_digits=4, dtype=torch.float64)[0]
    assert certify_addition(model, 4, dtype="real").passed  # the built model passes
    cert = certify_addition(poisoned(model, parameter, value), 4, dtype="real")
    assert not cert.passed and cert.reason == "structure", cert.message
    assert "not finite" in cert.message and parameter.split(".")[-1] in cert.message


@pytest.mark.parametrize("value", BAD)
def test_the_copying_certificate_fails_a_non_finite_weight(value):
    model = build_copying("copy", n_digits=5, dtype="float64")[0]
    cert = certify_copying(poisoned(model, "unembed.W_U", value), "copy", 5, dtype="real")
    assert not cert.passed and cert.reason == "structure" and "W_U has entries that are not finite" in cert.message


@pytest.mark.parametrize("value", BAD)
def test_the_multiplication_certificate_fails_a_non_finite_weight(value):
    model = build_multiplication(n_digits=3, dtype=torch.float64)[0]
    assert certify_multiplication(model, 3).passed
    cert = certify_multiplication(poisoned(model, "blocks.1.mlp.W_out", value), 3)
    assert not cert.passed and "W_out[layer 2] has entries that are not finite" in cert.message, cert.message


def test_the_trained_model_certificate_refuses_a_non_finite_weight():
    model = build_addition(n_digits=3, dtype=torch.float64)[0]
    with pytest.raises(StructureError, match="W_U has entries that are not finite"):
        certify_trained(poisoned(model, "unembed.W_U", math.nan), 2, 2)


def test_finite_weights_whose_enclosure_overflows_fail_the_addition_certificate():
    """W_U[SUM[5], '5'] = −1e308 is finite, and the model is wrong whenever a digit of the sum is 5
    (its float64 pass, which does not overflow, says so on 995 + 000). The certificate's enclosure of
    the logit gaps overflows to inf − inf = NaN; read as a margin, that made the real-arithmetic
    certificate PASS. A NaN lower bound is now no bound at all."""
    import warnings

    import numpy as np

    from constructions.addition.model import answer_predictions, first_wrong_position
    from lengthgen.tasks import ADDITION

    model, _ = build_addition(n_digits=3, dtype="float64")
    with torch.no_grad():
        model.unembed.W_U[model.annotations.residual.index("SUM[5]"), ADDITION.vocabulary["5"]] = -1e308
    pred, expected = answer_predictions(model, np.array([9, 9, 5]), np.array([0, 0, 0]), "teacher")
    assert first_wrong_position(pred, expected) is not None  # 995 + 000: the '5' is never predicted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cert = certify_addition(model, 3, "real")
    assert cert.passed is False and cert.reason == "hardmax"
