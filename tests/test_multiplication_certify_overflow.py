"""Finite weights whose float64 enclosures overflow (docs/multiplication.md, "Certificate"): the
multiplication certificate reads a NaN end point (inf − inf, inf·0) as no bound at all
(lengthgen.proof.interval.lower_bound / upper_bound), never as a margin.

Before, ``W_U[DIGIT[5], '5'] = −1e308`` made the certificate PASS a model that a float64 forward
pass (which does not overflow: every logit stays finite) shows wrong on every product with a digit 5:
the enclosure of W_out·W_U overflowed, every logit gap's lower end was NaN, and ``NaN ≤ 0`` is false.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from constructions.multiplication import build_model
from constructions.multiplication.certify.margins import certify
from constructions.multiplication.certify.mlp import check
from constructions.multiplication.layout import START_ID
from constructions.multiplication.model import TASK
from multiplication_checks import class_checks
from multiplication_oracle import measure

N = 2
#: products with a digit 5 in the answer (55·1, 5·1, 25·21 = 525, 95·99 = 9405) and without
PAIRS = [("55", 1), ("05", 1), ("25", 21), ("95", 99), ("99", 99), ("12", 34)]


def _model():
    return build_model(n_digits=N, dtype="float64")[0]


def _unembed(row: str, token: str, value: float):
    def edit(model) -> None:
        model.unembed.W_U[model.annotations.residual.index(row), TASK.vocabulary[token]] = value
    return edit


@pytest.mark.parametrize("edit, why", [
    (_unembed("DIGIT[5]", "5", -1e308), "'5' loses by ~1e308 wherever the answer digit is 5"),
    (_unembed("DIGIT[5]", "6", 1e308), "'6' wins by ~1e308 wherever the answer digit is 5"),
    (_unembed("IS_EOS", "5", 1e308), "'5' wins by ~1e308 where the answer ends"),
])
def test_finite_weights_whose_enclosures_overflow_fail(edit, why: str) -> None:
    """The float64 forward pass stays finite and is wrong (its worst logit gap is a finite negative
    number, so no overflow decided it); the certificate must FAIL. Each of these PASSed when a NaN
    lower bound of a logit gap was compared with 0 as it was."""
    model = _model()
    with torch.no_grad():
        edit(model)
    m = measure(model, N, PAIRS)
    assert m.wrong and np.isfinite(m.min_gap) and m.min_gap < -1e300, (why, m.wrong, m.min_gap)
    with np.errstate(over="ignore", invalid="ignore"):  # the overflows are the point
        cert = certify(model, N)
    assert not cert.passed and cert.reason == "hardmax" and "margin lower bound -inf" in cert.message, cert.message


def test_an_overflowing_attention_score_fails_instead_of_raising() -> None:
    """W_pos[START_ID, POS[0]] = 1.7e308: the layer-1 score enclosures of that ID overflow to NaN. Read
    as they were, no key class was within the tie width of a NaN best score, S was empty and the
    mean over it divided by |S| = 0 (an exception); now a NaN score end point is ±inf, S holds
    every class it cannot exclude, and the certificate FAILs."""
    model = _model()
    with torch.no_grad():
        model.pos_embed.W_pos[START_ID, model.annotations.residual.index("POS[0]")] = 1.7e308
    with np.errstate(over="ignore", invalid="ignore"):
        cert = certify(model, N)
    assert not cert.passed, cert.message


def test_a_nan_slope_or_deviation_is_no_bound() -> None:
    """check() on the built model's tables: every class passes (slack > 1). A NaN in |∂gap/∂x| on a
    coordinate that can move (ρ > 0), or a NaN ρ on a coordinate layer 3 reads, bounds nothing: the
    class must fail. Compared as they were, a NaN requirement gave a NaN ratio that the minimum over
    the ratios skipped (readout), and a NaN shift of a unit counted as no shift (stability)."""
    tables, rho = class_checks(_model(), N)
    moving = np.nonzero(rho > 0)[0]
    read3 = np.nonzero(tables[0].W3_abs.any(1) & (rho > 0))[0]
    assert len(moving) and len(read3)
    for t in tables:
        assert check(t, rho).slack > 1
        slope = t.slope.copy()
        slope[..., moving[0]] = np.nan
        res = check(dataclasses.replace(t, slope=slope), rho)
        assert not res.slack > 1 and res.reason == "readout", res
        nan_rho = rho.copy()
        nan_rho[read3[0]] = np.nan
        with np.errstate(invalid="ignore"):
            res = check(t, nan_rho)
        assert not res.slack > 1 and res.reason in ("readout", "stability"), res
