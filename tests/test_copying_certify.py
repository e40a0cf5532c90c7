"""The copy/reverse certificate (docs/copying.md, "Certificate"): the length bound agrees with
build_model; margins PASS for built models and FAIL, with the right reason, for perturbed weights
and too small M; its attention bound contains the measured deviation; the smallest certified M
gives an exact model; one-line errors."""
from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch

from constructions.copying import CapacityError, build_model, residual_basis
from constructions.copying.certify.bound import derive_bound, n_max, table_lines
from constructions.copying.certify.cli import main
from constructions.copying.certify.margins import certify
from constructions.copying.certify.search import smallest_sharpness, with_sharpness
from lengthgen.decode import decided_argmax
from lengthgen.tasks import COPY, REVERSE
from cli_checks import assert_one_line_error

TASKS = {"copy": COPY, "reverse": REVERSE}


@functools.lru_cache(maxsize=None)
def model_for(task: str, n: int, dtype: str = "float64", M: float | None = None):
    return build_model(task, n_digits=n, dtype=dtype, M=M)


@pytest.mark.parametrize("d", [27, 28, 29, 31, 33, 36, 40])
def test_bound_agrees_with_build_model(d: int) -> None:
    bound = n_max(d)
    assert bound == 2 ** ((d - 23) // 2) - 2  # the closed form, checked against the derivation
    for task in TASKS:
        _, meta = build_model(task, n_digits=bound, d_model=d)
        assert meta["bound_digits"] == bound
        with pytest.raises(CapacityError):
            build_model(task, n_digits=bound + 1, d_model=d)


def test_bound_derivation_reads_the_layout(capsys: pytest.CaptureFixture) -> None:
    b = derive_bound(57)
    assert b.P == 17 and b.token_dims == 23 and b.alphabet == (-1.0, 1.0) and b.n_codes == 2**17
    assert b.ids_affine == {"copy": (1, 2), "reverse": (1, 1)} and b.n_max == 2**17 - 2
    assert b.token_dims + 2 * b.P + b.unused == len(residual_basis(57))
    assert main(["bound", "--d-model", "512"]) == 0
    out = capsys.readouterr().out
    assert "n_max(512) = 2^244 − 2 = " in out and "copy needs n + 2; reverse needs n + 1" in out
    assert table_lines(27, 30)[1:] == ["   27    2  2", "   28    2  2", "   29    3  6", "   30    3  6"]


@pytest.mark.parametrize("task", ["copy", "reverse"])
@pytest.mark.parametrize("dtype", ["real", "float64", "float32"])
def test_margins_pass_for_built_models(task: str, dtype: str) -> None:
    for n in (1, 2, 3, 6, 7, 300):
        model, _ = model_for(task, n, "float64" if dtype == "real" else dtype)
        cert = certify(model, task, n, dtype)
        assert cert.passed and cert.reason == "" and cert.slack > 1, (n, cert.message)
        assert sum(c.positions for c in cert.classes) == n + 1  # every answer position is in a class


def _perturbed(task: str, n: int, edit) -> torch.nn.Module:
    model, _ = build_model(task, n_digits=n, dtype="float64")
    labels = model.annotations.residual
    with torch.no_grad():
        edit(model, labels)
    return model


def test_a_lowered_sink_key_fails() -> None:
    """The key's IS_BOS -> sink weight at 0.9 of its value: ``$`` no longer ties with the digit it
    shares the attention with, so the scores inside S spread apart."""
    def lower_sink(model, labels):
        model.blocks[0].attn.W_K[0, labels.index("IS_BOS")] *= 0.9

    for task in TASKS:
        cert = certify(_perturbed(task, 20, lower_sink), task, 20, "real")
        assert not cert.passed and cert.reason == "spread", cert.message


def test_a_removed_readout_margin_fails() -> None:
    """logit($) no longer reads SINK_SHARE − ONE: at the last position '$' does not win."""
    def cut_eos(model, labels):
        model.unembed.W_U[labels.index("SINK_SHARE"), COPY.EOS] = 0
        model.unembed.W_U[labels.index("ONE"), COPY.EOS] = 0

    for task in TASKS:
        cert = certify(_perturbed(task, 20, cut_eos), task, 20, "float32")
        assert not cert.passed and cert.reason == "hardmax" and "predicts '$'" in cert.message, cert.message


def test_too_small_M_fails_with_leak() -> None:
    for task in TASKS:
        model, _ = build_model(task, n_digits=50, dtype="float64", M=1.0)
        cert = certify(model, task, 50, "real")
        assert not cert.passed and cert.reason == "leak" and cert.slack < 1, cert.message


def test_with_sharpness_is_build_model_at_that_M() -> None:
    model, _ = model_for("reverse", 40)
    rebuilt, _ = build_model("reverse", n_digits=40, dtype="float64", M=2.5)
    assert all(torch.equal(a, b) for a, b in zip(with_sharpness(model, "reverse", 2.5).state_dict().values(),
                                                 rebuilt.state_dict().values()))


def _attention(model, task: str, x: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
    inst = TASKS[task].instance(x, start=1)
    logits, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
    return logits[0], acts["blocks.0.attn.hook_pattern"][0, 0].double().numpy()


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_certified_attention_bound_contains_the_measured_deviation(task: str) -> None:
    """At a small M, where the leak is visible, the measured total variation between the attention
    row and uniform on S (``$`` and the input digit at the neighbouring ID) stays below the bound."""
    n, M = 60, 1.6
    model, _ = build_model(task, n_digits=n, dtype="float64", M=M)
    cert = certify(model, task, n, "real")
    tv_bound = cert.heads[0]["tv"]
    x = np.repeat(np.arange(6) % 10, 10).astype(np.uint8)
    _, pattern = _attention(model, task, x)
    worst = 0.0
    for j in range(n + 1):  # query rows '=' and y_1 .. y_n
        q = n + 1 + j
        target = ([n - j] if task == "reverse" else [j + 1]) if j < n else []  # x positions: x_i at i
        uniform = np.zeros(q + 1)
        uniform[[0] + [t for t in target if t >= 1]] = 1
        uniform /= uniform.sum()
        worst = max(worst, 0.5 * float(np.abs(pattern[q, : q + 1] - uniform).sum()))
    assert 1e-4 < worst <= tv_bound < 10 * worst


def test_float32_term_contains_the_measured_rounding() -> None:
    """The float32 model against the same weights evaluated in float64 (≈ the real function): every
    logit gap moves by less than the certified float term Σ_r |W_U[r, t] − W_U[r, o]|·Δfloat[r] +
    the readout term, and by a measurable amount (so the comparison can fail)."""
    n = 300
    model, _ = model_for("copy", n, "float32")
    cert = certify(model, "copy", n, "float32")
    labels, W_U = model.annotations.residual, model.unembed.W_U.double().numpy()
    delta = np.zeros(len(labels))
    for name, parts in cert.deltas.items():
        delta[labels.index(name)] = parts["float"]
    x = np.concatenate([np.full(200, 7), np.arange(100) % 10]).astype(np.uint8)
    low, _ = _attention(model, "copy", x)
    high, _ = _attention(copy.deepcopy(model).double(), "copy", x)
    expected = np.concatenate([x, [COPY.EOS]])
    low, high = low[n + 1:].double().detach().numpy(), high[n + 1:].detach().numpy()
    rows = np.arange(n + 1)
    moved = np.abs((low[rows, expected][:, None] - low) - (high[rows, expected][:, None] - high))
    allowed = np.abs(W_U[:, expected].T[:, None, :] - W_U.T[None, :, :]) @ delta + cert.float_terms.logit_error
    assert np.all(moved <= allowed) and moved.max() > 1e-7


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_smallest_certified_M_gives_an_exact_model(task: str) -> None:
    n = 200
    model, meta = model_for(task, n, "float32")
    search = smallest_sharpness(model, task, n, meta["M"], "float32")
    assert search.M is not None and search.M_fail < search.M < meta["M"] and search.certificate.passed
    assert search.fail_reason == "leak"
    sharp = with_sharpness(model, task, search.M)
    x = np.concatenate([np.full(120, 7), np.repeat(np.arange(8), 10)]).astype(np.uint8)
    logits, _ = _attention(sharp, task, x)
    expected = np.concatenate([x[::-1] if task == "reverse" else x, [COPY.EOS]])  # string slicing, not the layout
    assert np.array_equal(decided_argmax(logits[n + 1:]).numpy(), expected)


def test_margins_cli_exit_codes(capsys: pytest.CaptureFixture) -> None:
    assert main(["margins", "--task", "copy", "--digits", "30", "--no-search"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("PASS (float32): the copy of every 30-digit input is predicted correctly")
    assert main(["margins", "--task", "reverse", "--digits", "30", "--M", "1", "--dtype", "real", "--no-search"]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("FAIL (leak) (real arithmetic): ")
    assert main(["margins", "--task", "reverse", "--digits", "30", "--dtype", "float64"]) == 0
    assert "smallest M certified at N = 30 (float64): M* = " in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["margins", "--digits", "5"], "the following arguments are required: --task"),
    (["margins", "--task", "copy", "--digits", "0"], "--digits must be a positive integer"),
    (["margins", "--task", "copy", "--digits", "7", "--d-model", "29"], "beyond n_max(29) = 6; use --d-model 31"),
    (["margins", "--task", "copy", "--digits", "5", "--d-model", "26"], "--d-model must be at least 27"),
    (["margins", "--task", "copy", "--digits", "5", "--M", "-1"], "--M must be positive"),
    (["margins", "--task", "copy", "--digits", "5", "--dtype", "bfloat16"], "argument --dtype: invalid choice"),
    (["bound", "--d-model", "20"], "--d-model must be at least 27"),
    (["precision"], "invalid choice: 'precision'"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert_one_line_error(main, args, "python -m constructions.copying.certify", message, capsys)