"""The floating-point map (docs/certificate.md): only facts that hold on every IEEE-conforming
kernel are asserted — the certificate and the rounding emulation are deterministic, float64 keeps
huge margins, and soundness (certified ≤ exact) must hold whatever the kernel."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from constructions.addition import build_model
from constructions.addition.certify.emulate import emulated_exact, round_to
from constructions.addition.certify.margins import certify
from constructions.addition.certify.precision import (CACHE, _decided_rows, adversarial_pairs, environment,
                                                      environment_label,
                                                      exact_on_adversarial, length_grid, measure, staged_exact,
                                                      table_lines)
from constructions.addition.certify.precision_figure import draw

ALL_9S = 1  # index of 99..9 + 99..9 in adversarial_pairs


def test_float64_is_exact_up_to_the_bound_and_certified() -> None:
    entry = measure("float64", 23, cap=6, log=lambda *_: None)
    assert entry["largest_exact"] == 6 and entry["first_failure"] is None
    assert entry["largest_certified"] == 6 and entry["emulated_exact_at_certified"] is True


def test_bfloat16_at_d23_is_not_certified_and_its_rounding_breaks_9_plus_9() -> None:
    """Kernel-independent facts about bfloat16 at d = 23: the certificate fails at one digit; the
    software emulation of the rounding model gets 9 + 9 wrong; rounding only W_Q and W_K to
    bfloat16 (float64 arithmetic) already does; and whatever the kernel, the measured exact length
    is at least the certified one."""
    entry = measure("bfloat16", 23, cap=2, log=lambda *_: None)
    assert entry["largest_certified"] == 0
    assert entry["largest_certified"] <= entry["largest_exact"]
    assert not emulated_exact(1, 23, "bfloat16", adversarial_pairs(1))[ALL_9S]
    assert not staged_exact(1, 23, "bfloat16", "qk_weights")[ALL_9S]


def test_a_tie_breaking_argmax_is_not_exact() -> None:
    """bfloat16 at d = 23 on 9 + 9: the logits at '=' are (near-)ties; an argmax that breaks the tie
    must not count as exact — also when the tie happens to be broken towards the right token."""
    assert not exact_on_adversarial(1, 23, "bfloat16")[ALL_9S]
    answer = np.array([[0, 2]])
    tie = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])  # argmax would pick 0 (right) by tie-breaking
    near = torch.tensor([[[1.0, 1.0 - 1e-7, 0.0], [0.0, 0.0, 1.0]]])
    clear = torch.tensor([[[1.0, 0.5, 0.0], [0.0, 0.0, 1.0]]])
    assert _decided_rows(tie, answer) == [False] and _decided_rows(near, answer) == [False]
    assert _decided_rows(clear, answer) == [True]


def test_staged_run_in_float64_is_exact() -> None:
    for stage in ("scores", "values", "ffn", "qk_weights"):
        assert all(staged_exact(5, 23, "float64", stage))


@pytest.mark.parametrize("n, d, dtype", [(30, 27, "float32"), (6, 23, "float64")])
def test_certified_lengths_are_exact_under_the_emulated_rounding(n: int, d: int, dtype: str) -> None:
    """Soundness against the software emulation of the rounding model (no torch kernel involved)."""
    model, _ = build_model(n_digits=n, d_model=d, dtype=dtype)
    assert certify(model, n, dtype).passed
    assert all(emulated_exact(n, d, dtype, adversarial_pairs(n)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_round_to_is_round_to_nearest_even(dtype: str) -> None:
    """Against torch's cast from float32 values (a single correct rounding, no double rounding)."""
    rng = np.random.default_rng(0)
    x32 = (rng.standard_normal(20000) * np.exp2(rng.integers(-20, 14, 20000))).astype(np.float32)
    x32 = np.concatenate([x32, np.float32([1 + 2**-8, 1 + 3 * 2**-9, 2**-130, 65520.0])])  # ties, subnormal, overflow
    want = torch.from_numpy(x32).to(getattr(torch, dtype)).double().numpy()
    assert np.array_equal(round_to(x32.astype(np.float64), dtype), want)


def test_adversarial_inputs_and_grid() -> None:
    pairs = adversarial_pairs(5)
    assert ("99999", "00001") in pairs and ("99999", "99999") in pairs and ("90909", "90909") in pairs
    grid = length_grid(4096)
    assert grid[:16] == list(range(1, 17)) and grid[-1] == 4096 and grid == sorted(set(grid))


def test_the_place_of_measurement_is_recorded() -> None:
    env = environment()
    assert env["torch"] == torch.__version__ and env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["cpu"] and env["cpu_capability"] in environment_label(env)


def test_cached_results_are_consistent_and_the_figure_regenerates(tmp_path: Path) -> None:
    data = json.loads(CACHE.read_text())
    assert {"torch", "cpu_capability", "cpu"} <= set(data["measured_on"])
    dtypes = {e["dtype"] for e in data["results"]}
    assert dtypes == {"bfloat16", "float16", "float32", "float64"}
    for e in data["results"]:
        assert 0 <= e["largest_exact"] <= min(e["n_max"], data["cap"])
        assert e["largest_certified"] <= e["largest_exact"] or e["first_failure"] is None  # soundness
        assert e["emulated_exact_at_certified"] in ((None,) if e["largest_certified"] == 0 else (True,))
        if e["first_failure"] is not None:
            assert e["largest_exact"] < e["first_failure"] and e["reason"]
    lines = table_lines(data)
    assert all(any(line.startswith(dt) for line in lines) for dt in dtypes)
    assert lines[-1 - 1].startswith("measured with torch") or any(line.startswith("measured with torch") for line in lines)
    draw(data, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000 and (tmp_path / "p.pdf").exists()
