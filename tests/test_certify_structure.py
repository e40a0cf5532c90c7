"""Every structure check of the addition and copy/reverse certificates (docs/certificate.md,
"What the tests pin") has a model that breaks exactly there: the certificate must FAIL with
reason "structure" and name that check, never PASS or raise."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from constructions.addition import build_model as build_addition
from constructions.addition.certify.margins import certify as certify_addition
from constructions.copying import build_model as build_copying
from constructions.copying.certify import margins as copying_margins
from lengthgen.model import Transformer
from lengthgen.proof.keys import MAX_CODE_VALUES


def _copy_model(n: int = 20, d: int | None = None) -> Transformer:
    return build_copying("copy", n_digits=n, d_model=d, dtype="float64")[0]


def _assert_structure(cert, fragment: str) -> None:
    assert not cert.passed and cert.reason == "structure", cert.message
    assert fragment in cert.message, cert.message


def test_two_ids_with_one_key_vector_fail() -> None:
    """proof/keys.py: W_pos·W_K must be injective on the IDs the format uses."""
    model = _copy_model()
    with torch.no_grad():
        model.pos_embed.W_pos[7] = model.pos_embed.W_pos[8]
    _assert_structure(copying_margins.certify(model, "copy", 20, "real"), "have the same key vector")
    model, _ = build_addition(n_digits=30, d_model=27, dtype="float64")
    with torch.no_grad():
        model.pos_embed.W_pos[7] = model.pos_embed.W_pos[8]
    _assert_structure(certify_addition(model, 30, "real"), "have the same key vector")


def test_a_key_coordinate_with_too_many_values_fails() -> None:
    """proof/keys.py: each coordinate of W_pos·W_K may take at most MAX_CODE_VALUES values."""
    model = _copy_model()
    col = model.annotations.residual.index("POS[0]")
    with torch.no_grad():
        model.pos_embed.W_pos[1:, col] *= 1 + 1e-3 * torch.arange(model.cfg.n_ctx - 1, dtype=torch.float64)
    assert model.cfg.n_ctx - 1 > MAX_CODE_VALUES
    _assert_structure(copying_margins.certify(model, "copy", 20, "real"), f"more than {MAX_CODE_VALUES} values")


def test_key_vectors_spanning_more_than_2_to_the_62_fail() -> None:
    """proof/keys.py: the mixed-radix codes of the key tuples must fit in 62 bits (32
    coordinates with 4 values each need 64)."""
    model = _copy_model(n=20, d=23 + 2 * 32)
    L = model.annotations.residual
    with torch.no_grad():
        for c in range(32):
            ids = torch.arange(1, model.cfg.n_ctx)
            model.pos_embed.W_pos[1:, L.index(f"POS[{c}]")] = 1.0 + ((ids + c) % 4).to(torch.float64)
    _assert_structure(copying_margins.certify(model, "copy", 20, "real"), "more than 2^62 combinations")


def test_an_attended_id_that_depends_on_the_query_digit_fails() -> None:
    """proof/attention.py: q* may not depend on which digit the query holds."""
    model = _copy_model()
    L = model.annotations.residual
    a = model.blocks[0].attn
    with torch.no_grad():  # digit 3 flips the sign of the first query coordinate
        a.W_Q[0][L.index("DIGIT[3]")] = -2 * a.W_Q[0][L.index("POS_NEXT[0]")].abs().max() * (a.W_Q[0][L.index("POS_NEXT[0]")] != 0)
    _assert_structure(copying_margins.certify(model, "copy", 20, "real"), "the attended ID depends on the query's digit")


def test_attention_to_far_significances_fails() -> None:
    """addition/certify/ffn.py: a class may read digits of at most two adjacent significances."""
    model, _ = build_addition(n_digits=30, d_model=27, dtype="float64")
    with torch.no_grad():  # IDs 6 and 16 swap their position rows: a head reads a digit ten places away
        model.pos_embed.W_pos[[6, 16]] = model.pos_embed.W_pos[[16, 6]]
    _assert_structure(certify_addition(model, 30, "real"), "reads significances")


def test_more_free_digits_than_enumerated_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """copying/certify/margins.py: a class is enumerated over at most MAX_FREE_DIGITS input
    digits; with the limit lowered to 1, the built model's classes (query digit, attended digit,
    target) exceed it."""
    monkeypatch.setattr(copying_margins, "MAX_FREE_DIGITS", 1)
    _assert_structure(copying_margins.certify(_copy_model(), "copy", 20, "real"), "input digits (at most 1")


def test_models_outside_the_covered_shape_fail() -> None:
    """proof/weights.py: 1 layer, learned positions, no LayerNorm; ReLU MLP for addition, no MLP
    for copy/reverse."""
    model, _ = build_addition(n_digits=2, d_model=21, dtype="float64")
    two = Transformer(dataclasses.replace(model.cfg, n_layers=2))
    _assert_structure(certify_addition(two, 2, "real"), "the certificate covers 1-layer")
    copy_model = _copy_model()
    with_mlp = Transformer(dataclasses.replace(copy_model.cfg, d_mlp=4))
    _assert_structure(copying_margins.certify(with_mlp, "copy", 20, "real"), "attention-only")
