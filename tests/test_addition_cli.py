"""``python -m constructions.addition`` end to end: exit codes, JSON, files, bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from constructions.addition.cli import main

REPO = Path(__file__).resolve().parents[1]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    return subprocess.run([sys.executable, "-m", "constructions.addition", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_random_digits_from_another_directory(tmp_path: Path) -> None:
    out = run_cli(["--digits", "300", "--seed", "7", "--json", "--output", "sum.txt"], tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["correct"] is True and result["first_wrong_position"] is None
    assert result["digits"] == 300 and result["n_tokens"] == 3 * 300 + 5 and result["heads"] == 2
    assert {"d_model", "device", "dtype", "mode", "seconds", "peak_memory_bytes"} <= set(result)
    assert (tmp_path / "sum.txt").read_text().strip().isdigit()


def test_operands_from_strings_and_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a, b = "9" * 5000, "1"  # beyond Python's default 4300-digit int<->str limit
    (tmp_path / "a.txt").write_text(a[:2500] + "\n" + a[2500:] + "\n")
    out_file = tmp_path / "sum.txt"
    assert main(["--a", f"@{tmp_path / 'a.txt'}", "--b", b, "--output", str(out_file), "--no-progress"]) == 0
    assert out_file.read_text().strip() == "1" + "0" * 5000
    for mode in ("teacher", "greedy"):
        assert main(["--a", "653", "--b", "49", "--mode", mode, "--json", "--dtype", "float64"]) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert result["mode"] == mode and result["dtype"] == "float64" and result["correct"]


def test_the_sum_is_printed_and_in_the_json(tmp_path: Path) -> None:
    out = run_cli(["--a", "653", "--b", "49"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("EXACT") and "sum: 702\n" in out.stdout
    for mode in ("teacher", "greedy"):
        out = run_cli(["--a", "653", "--b", "49", "--json", "--mode", mode], tmp_path)
        assert out.returncode == 0 and json.loads(out.stdout)["sum"] == "702"


def test_a_long_sum_is_abbreviated_on_screen_and_whole_in_the_file(tmp_path: Path) -> None:
    a, b = int("73" * 700 + "1"), int("58" * 650 + "9")
    (tmp_path / "a.txt").write_text(str(a))
    out = run_cli(["--a", "@a.txt", "--b", str(b), "--output", "sum.txt"], tmp_path)
    assert out.returncode == 0, out.stderr
    total = str(a + b)
    shown = next(line for line in out.stdout.splitlines() if line.startswith("sum: "))
    assert total not in shown and total[:40] in shown and total[-40:] in shown and f"{len(total)} digits" in shown
    assert (tmp_path / "sum.txt").read_text() == total + "\n"


def test_wrong_model_exits_1_and_says_where(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import constructions.addition.model as addition
    from constructions.addition import head_basis, position_dims

    original = addition.build_model

    def broken(*args, **kwargs):
        model, meta = original(*args, **kwargs)
        carry_value = head_basis(position_dims(model.cfg.d_model)).index("val_NUM")
        model.blocks[0].attn.W_O.data[1, carry_value, :] = 0  # head 2 writes no carry information any more
        return model, meta

    monkeypatch.setattr(addition, "build_model", broken)
    assert main(["--a", "199", "--b", "1", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["correct"] is False and result["first_wrong_position"] == 1  # 200 reversed is 0,0,2,0
    assert result["undecided"] is False and result["sum"] != "200"


@pytest.mark.parametrize("mode", ["teacher", "greedy"])
def test_a_tie_is_wrong_in_both_modes(mode: str, capsys: pytest.CaptureFixture) -> None:
    """bfloat16 at d_model = 23 rounds 9 + 9's first logits to a near-tie: no mode may pick a digit."""
    args = ["--a", "9", "--b", "9", "--d-model", "23", "--dtype", "bfloat16", "--mode", mode]
    assert main(args + ["--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["correct"] is False and result["undecided"] is True and result["first_wrong_position"] == 0
    assert main(args) == 1
    assert "undecided" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--a", "12x4", "--b", "1"], "non-digit character 'x'"),
        (["--a", "", "--b", "1"], "empty"),
        (["--a", "-5", "--b", "1"], "negative"),
        (["--digits", "0"], "at least 1"),
        (["--digits", "-3"], "at least 1"),
        (["--digits", "100", "--d-model", "23"], "d_model = 31 fits"),
        (["--digits", "5", "--d-model", "20"], "at least 21"),
        (["--digits", "5", "--dtype", "int4"], "unknown --dtype"),
        (["--digits", "5", "--dtype", "float128"], "choose one of float32, float64, float16, bfloat16"),
        (["--digits", "5", "--mode", "beam"], "invalid choice"),
        (["--a", "@/nonexistent/digits.txt", "--b", "1"], "cannot read --a file"),
        (["--a", "5"], "both --a and --b"),
        (["--digits", "5", "--a", "1", "--b", "2"], "not both"),
        (["--digits", "five"], "expected a whole number in digits 0-9"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cuda_request_without_cuda(capsys: pytest.CaptureFixture) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["--digits", "3", "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_bad_input_through_the_real_entry_point(tmp_path: Path) -> None:
    out = run_cli(["--a", "1.5", "--b", "2"], tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    help_text = run_cli(["--help"], tmp_path)
    assert help_text.returncode == 0 and "--digits" in help_text.stdout and "exit status" in help_text.stdout
