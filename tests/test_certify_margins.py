"""The all-inputs certificate (docs/certificate.md): passes for the built model, fails for the
right reason, and its bounds really bound the activations of a conforming evaluation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from constructions.addition import START_ID, build_model
from constructions.addition.certify.emulate import emulated_forward
from constructions.addition.certify.ffn import ROLE_A, ROLE_B, ROLE_C
from constructions.addition.certify.margins import Layout, certify
from lengthgen.tasks import ADDITION

FFN_INPUTS = ("PRE_SUM", "PRE_CARRY", "PRE_EOS")


@pytest.mark.parametrize("n, d, dtype", [(1, 21, "float32"), (6, 23, "float64"), (62, 29, "float32"),
                                         (300, None, "float32"), (30, 27, "real"), (20000, None, "float32")])
def test_passes_for_the_built_model(n: int, d: int | None, dtype: str) -> None:
    model, _ = build_model(n_digits=n, d_model=d, dtype="float64" if dtype == "real" else dtype)
    cert = certify(model, n, dtype)
    assert cert.passed, cert.message
    assert cert.slack > 1 and cert.reason == ""
    assert sum(count for _, count, _, _ in cert.classes) == n + 2  # every answer position is covered


def test_layout_matches_the_task_format() -> None:
    n = 4
    inst = ADDITION.instance("1234", "5678", start=START_ID)
    L = Layout.build(n)
    assert np.array_equal(L.ids, inst.pos_ids[:-1])
    digits = inst.tokens[:-1] <= 9
    assert np.array_equal(np.isin(L.role, (ROLE_A, ROLE_B, ROLE_C)), digits)  # roles a, b, c sit on digit tokens
    assert list(L.queries) == list(range(inst.prompt_len - 1, len(inst.tokens) - 1))


@pytest.mark.parametrize("dtype", ["real", "float32"])
def test_fails_with_leak_when_M_is_too_small(dtype: str) -> None:
    model, _ = build_model(n_digits=30, d_model=27, dtype="float64" if dtype == "real" else dtype, M=1.0)
    cert = certify(model, 30, dtype)
    assert not cert.passed and cert.reason == "leak", cert.message


def _perturbed(edit) -> tuple:
    model, meta = build_model(n_digits=30, d_model=27, dtype="float32")
    labels = model.annotations.residual
    with torch.no_grad():
        edit(model, labels)
    return certify(model, 30)


def test_fails_hardmax_when_the_output_scale_is_perturbed() -> None:
    def edit(model, labels):  # head 1 writes 3.3·mean instead of 3·mean into PRE_SUM
        model.blocks[0].attn.W_O[0][:, labels.index("PRE_SUM")] *= 1.1
    cert = _perturbed(edit)
    assert not cert.passed and cert.reason == "hardmax", cert.message
    assert "instead of" in cert.message


def test_fails_spread_when_the_sink_key_is_perturbed() -> None:
    def edit(model, labels):  # '$' now scores 1% above the digits it should tie with
        model.blocks[0].attn.W_K[0][labels.index("IS_BOS")] *= 1.01
    cert = _perturbed(edit)
    assert not cert.passed and cert.reason == "spread", cert.message


def test_fails_when_a_position_code_is_perturbed() -> None:
    def edit(model, labels):  # flip one coordinate of POS_1 for ID 7
        model.pos_embed.W_pos[7, labels.index("POS_1[0]")] *= -1
    cert = _perturbed(edit)
    assert not cert.passed and cert.reason in ("hardmax", "structure"), cert.message


def _hardmax_ffn_inputs(a: str, b: str) -> np.ndarray:
    """PRE_SUM, PRE_CARRY, PRE_EOS of the hard-max limit at '=', c_0 … c_n (docs/theorem-5-1.md, "Residual stream after attention"),
    from the digits of a, b and the Python integer a + b."""
    n = len(a)
    A, B = [int(ch) for ch in a[::-1]], [int(ch) for ch in b[::-1]]
    C = [int(ch) for ch in str(int(a) + int(b)).zfill(n + 1)[::-1]]
    rows = []
    for k in range(-1, n + 1):
        pre_sum = A[k + 1] + B[k + 1] if k + 1 <= n - 1 else 0
        if k == -1:
            rows.append((pre_sum, 0, 1 / 3))
        elif k <= n - 1:
            rows.append((pre_sum, A[k] + B[k] + C[k], 1 / 4))
        else:
            rows.append((pre_sum, 2 * C[n], 1 / 2))
    return np.array(rows)


@pytest.mark.parametrize("M, dtype, tight", [(2.5, "float32", True), (None, "float32", True), (3.0, "float64", True),
                                             (2.5, "bfloat16", False)])
def test_bounds_dominate_emulated_activations(M: float | None, dtype: str, tight: bool) -> None:
    """|resid_mid − hard-max value| of the kernel-free rounding emulation, on adversarial and random
    inputs, stays below the certified bound — and, for float32/float64, the bound is not vacuous
    (within 10x of it; in bfloat16 the total variation is clamped at 1 and the bound is loose)."""
    n = 30
    model, _ = build_model(n_digits=n, d_model=27, dtype=dtype, M=M)
    cert = certify(model, n, dtype)
    bound = np.array([sum(cert.deltas[name].values()) for name in FFN_INPUTS])
    idx = [model.annotations.residual.index(name) for name in FFN_INPUTS]
    rng = np.random.default_rng(0)
    pairs = [("9" * n, "9" * n), ("9" * n, "0" * (n - 1) + "1"), ("90" * 15, "90" * 15)]
    pairs += [("".join(map(str, rng.integers(0, 10, n))), "".join(map(str, rng.integers(0, 10, n)))) for _ in range(8)]
    insts = [ADDITION.instance(a, b, start=START_ID) for a, b in pairs]
    p = insts[0].prompt_len
    resid = emulated_forward(model, np.stack([i.tokens[:-1] for i in insts]), np.stack([i.pos_ids[:-1] for i in insts]),
                             p - 1)["resid_mid"][..., idx]
    worst = np.max([np.abs(r - _hardmax_ffn_inputs(a, b)).max(0) for r, (a, b) in zip(resid, pairs)], axis=0)
    assert np.all(worst <= bound), (worst, bound)
    assert not tight or np.all(bound <= 10 * np.maximum(worst, 1e-6)), (worst, bound)


def test_float_terms_grow_with_the_unit_roundoff() -> None:
    model, _ = build_model(n_digits=30, d_model=27, dtype="float32")
    terms = {dt: certify(model, 30, dt).float_terms for dt in ("float64", "float32", "bfloat16")}
    errs = [terms[dt].score_error for dt in ("float64", "float32", "bfloat16")]
    assert errs[0] < errs[1] < errs[2]
    assert errs[1] == pytest.approx(errs[0] * 2.0**29, rel=1e-3)  # ∝ u (γ_n ≈ n·u at these sizes)
    cert16 = certify(model, 30, "bfloat16")
    assert not cert16.passed and cert16.reason in ("float", "spread")


def test_score_rounding_widens_the_attention_bound() -> None:
    """Each score may move by the float term's score error, so the certified total variation in
    float32 must exceed the real-arithmetic one by at least the factor e^(2·score error) on the leak."""
    model, _ = build_model(n_digits=30, d_model=27, dtype="float32")
    real, f32 = certify(model, 30, "real"), certify(model, 30, "float32")
    grow = np.expm1(2 * f32.float_terms.score_error)
    for h_real, h_f32 in zip(real.heads, f32.heads):
        assert h_f32["tv"] >= h_real["tv"] + grow * h_real["leak"] > h_real["tv"]


def test_an_overflowing_float_term_fails_instead_of_passing() -> None:
    """bfloat16 at d = 201: γ_n·u·(M·P) is huge; the bounds must FAIL, never turn into nan/PASS."""
    model, _ = build_model(n_digits=2, d_model=201, dtype="bfloat16")
    cert = certify(model, 2)
    assert not cert.passed and cert.reason == "float", cert.message
