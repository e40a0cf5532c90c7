"""``python -m constructions.multiplication`` end to end: exit codes, JSON, files, bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from constructions.multiplication.cli import main
from cli_checks import assert_one_line_error

REPO = Path(__file__).resolve().parents[1]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    return subprocess.run([sys.executable, "-m", "constructions.multiplication", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_random_digits_from_another_directory(tmp_path: Path) -> None:
    out = run_cli(["--digits", "300", "--seed", "7", "--json", "--output", "product.txt"], tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["correct"] is True and result["first_wrong_position"] is None
    assert result["digits"] == 300 and result["n_tokens"] == 2 * 300 + 8 and result["layers"] == 3
    assert 10 <= result["b"] <= 99
    assert (tmp_path / "product.txt").read_text().strip().isdigit()


def test_operands_from_files_carry_through_every_digit(tmp_path: Path) -> None:
    """(10^n − 1)·97 = 96 999…9 03: the carry runs through every digit."""
    n = 5000  # beyond Python's default 4300-digit int<->str limit
    (tmp_path / "a.txt").write_text("9" * (n // 2) + "\n" + "9" * (n - n // 2) + "\n")
    out_file = tmp_path / "product.txt"
    assert main(["--a", f"@{tmp_path / 'a.txt'}", "--b", "97", "--output", str(out_file), "--no-progress"]) == 0
    assert out_file.read_text().strip() == str((10**n - 1) * 97)


@pytest.mark.parametrize("mode", ["teacher", "greedy"])
def test_modes_agree_and_leading_zeros_of_b_are_allowed(mode: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["--a", "653", "--b", "049", "--mode", mode, "--json", "--dtype", "float64"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["correct"] and result["b"] == 49 and result["mode"] == mode
    assert result["product"] == str(653 * 49)


def test_the_product_is_printed(capsys: pytest.CaptureFixture) -> None:
    assert main(["--a", "9" * 1200, "--b", "97"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = str((10**1200 - 1) * 97)
    assert lines[0].startswith("EXACT")
    assert lines[1] == f"product: {expected[:40]}...{expected[-40:]} ({len(expected)} digits; --output FILE writes all of them)"
    assert main(["--a", "653", "--b", "49"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "product: 31997"


def test_a_wrong_answer_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The CLI reports a wrong model (here: digit 7's readout cut) with exit 1 and the position."""
    import constructions.multiplication.model as model_module

    real_build = model_module.build_model

    def broken(*args, **kwargs):
        model, meta = real_build(*args, **kwargs)
        model.unembed.W_U.data[:, 7] = 0
        return model, meta

    monkeypatch.setattr(model_module, "build_model", broken)
    (tmp_path / "p.txt").write_text("kept\n")
    assert main(["--a", "7", "--b", "1", "--output", str(tmp_path / "p.txt")]) == 1
    out = capsys.readouterr().out
    assert "WRONG at answer position 0" in out and "was not written: the answer is wrong" in out
    assert (tmp_path / "p.txt").read_text() == "kept\n"  # a wrong product never replaces the file


@pytest.mark.parametrize("args, message", [
    (["--a", "12", "--b", "123"], "--b must be at most 99"),
    (["--a", "1x2", "--b", "3"], "--a has a non-digit character 'x'"),
    (["--a", "5"], "give --digits N, or both --a and --b"),
    (["--digits", "5", "--a", "5"], "give either --digits or --a/--b"),
    (["--digits", "0"], "--digits must be at least 1"),
    (["--a", "1", "--b", "7", "--d-model", "30"], "d_model must be at least 33"),
    (["--a", "12", "--b", "34", "--d-model", "34"], "d_model = 34 holds no digits (this construction's bound 2^2 - 6 = -2); d_model = 37"),
    (["--a", "12345678901", "--b", "7", "--d-model", "41"], "exceed this construction's bound 2^4 - 6 = 10"),
    (["--a", "@/nonexistent/a.txt", "--b", "7"], "cannot read --a file"),
    (["--a", "1", "--b", "7", "--threads", "0"], "--threads must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert_one_line_error(main, args, "python -m constructions.multiplication", message, capsys)


def test_bad_input_from_a_subprocess(tmp_path: Path) -> None:
    out = run_cli(["--a", "12", "--b", "100"], tmp_path)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.strip() == "python -m constructions.multiplication: error: --b must be at most 99 (N×2 multiplication), got 3 digits"
