"""``python -m constructions.copying`` end to end: exact copy and reverse (oracle: string slicing),
runs of repeated digits, greedy decoding, JSON, files, exit codes and one-line errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from constructions.copying.cli import main, random_input
from cli_checks import assert_one_line_error

REPO = Path(__file__).resolve().parents[1]
PROG = "python -m constructions.copying"


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    return subprocess.run([sys.executable, "-m", "constructions.copying", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("task, expected", [("copy", "0031415926"), ("reverse", "6295141300")])
@pytest.mark.parametrize("mode", ["teacher", "greedy"])
def test_exact_copy_and_reverse(task: str, expected: str, mode: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["--task", task, "--x", "0031415926", "--mode", mode, "--json", "--dtype", "float64"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["output"] == expected and result["correct"] is True and result["first_wrong_position"] is None
    assert result["output_tokens"] == expected + "$"  # the end marker is a token, not a digit of the output
    assert result["task"] == task and result["mode"] == mode and result["digits"] == 10 and result["n_tokens"] == 23
    assert result["layers"] == 1 and result["heads"] == 1 and result["pattern"] is None
    for key in ("d_model", "device", "dtype", "threads", "seconds", "peak_memory_bytes", "M", "leak_bound"):
        assert key in result


def test_runs_pattern_has_long_runs_and_is_reversed_exactly(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    x = random_input(np.random.default_rng(3), 4000, "runs")
    starts = np.flatnonzero(np.diff(x.astype(int)) != 0) + 1
    runs = np.diff(np.concatenate([[0], starts, [len(x)]]))
    assert len(x) == 4000 and runs.max() >= 100 and len(runs) >= 3  # long runs, and more than one of them
    out = tmp_path / "y.txt"
    assert main(["--task", "reverse", "--digits", "4000", "--seed", "3", "--pattern", "runs", "--output", str(out),
                 "--no-progress"]) == 0
    text = "".join(map(str, x.tolist()))
    assert out.read_text().strip() == text[::-1]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("EXACT: reverse of 4000 digits (runs), 8003 tokens") and "thread(s)" in lines[0]
    assert lines[1] == f"output: {text[::-1][:40]}...{text[::-1][-40:]} (4000 digits; --output FILE writes all of them)"


def test_input_from_a_file_in_another_directory(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("1203\n9999\n")
    out = run_cli(["--task", "copy", "--x", "@x.txt", "--output", "y.txt"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1] == "output: 12039999" and (tmp_path / "y.txt").read_text() == "12039999\n"


def test_a_wrong_answer_exits_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """A model whose readout of digit 7 is cut: exit 1, and the first wrong position is named."""
    import constructions.copying.model as model_module

    real_build = model_module.build_model

    def broken(*args, **kwargs):
        model, meta = real_build(*args, **kwargs)
        model.unembed.W_U.data[:, 7] = 0
        return model, meta

    monkeypatch.setattr(model_module, "build_model", broken)
    assert main(["--task", "reverse", "--x", "1275"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("WRONG at answer position 1 (expected '7', predicted '?')")
    assert out[1] == "per-position predictions (true prefix): 5?21$"
    assert main(["--task", "copy", "--x", "1275", "--mode", "greedy", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["first_wrong_position"] == 2 and result["output"] == "12?" and result["correct"] is False
    keep = tmp_path / "keep.txt"
    keep.write_text("mine\n")
    assert main(["--task", "copy", "--x", "1275", "--output", str(keep)]) == 1
    assert keep.read_text() == "mine\n"  # a wrong answer never replaces the file
    assert f"--output {keep} was not written: the answer is wrong" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--x", "12"], "the following arguments are required: --task"),
    (["--task", "copy", "--x", "12", "--pattern", "runs"], "--pattern shapes a random --digits input"),
    (["--task", "copy", "--x", "-12"], "negative; only non-negative integers are allowed"),
    (["--task", "copy", "--x", "1x2"], "--x has a non-digit character 'x'"),
    (["--task", "copy"], "give --digits N or --x DIGITS"),
    (["--task", "copy", "--digits", "5", "--x", "5"], "give either --digits or --x, not both"),
    (["--task", "copy", "--digits", "0"], "--digits must be at least 1"),
    (["--task", "copy", "--digits", "3", "--pattern", "zebra"], "argument --pattern: invalid choice"),
    (["--task", "copy", "--x", "1", "--d-model", "26"], "d_model must be at least 27"),
    (["--task", "reverse", "--x", "1234567", "--d-model", "29"], "exceed the bound 2^3 - 2 = 6"),
    (["--task", "copy", "--x", "@/nonexistent/x.txt"], "cannot read --x file"),
    (["--task", "copy", "--x", "1", "--threads", "0"], "--threads must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert_one_line_error(main, args, PROG, message, capsys)


def test_help_has_examples(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "--pattern runs" in text and "exit status: 0" in text
