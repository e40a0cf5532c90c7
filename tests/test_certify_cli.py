"""``python -m constructions.addition.certify``: help, output, and one-line errors with exit 2."""
# The one-line error of `precision --json MISSING` also guards against a silent recomputation: the
# command would otherwise measure for minutes before printing anything.
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from constructions.addition.certify.cli import main
from cli_checks import assert_one_line_error

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv, needle", [
    (["frobnicate"], "invalid choice"),
    (["bound", "--d-model", "20"], "at least 21"),
    (["margins", "--digits", "0"], "positive"),
    (["margins", "--digits", "-3"], "positive"),
    (["margins", "--digits", "7", "--d-model", "23"], "beyond n_max(23)"),
    (["margins", "--digits", "5", "--d-model", "19"], "at least 21"),
    (["margins", "--digits", "5", "--M", "0"], "--M must be positive"),
    (["exact", "--d-model", "23", "--sample-digits", "9"], "beyond n_max(23)"),
    (["precision", "--d-models", "20"], "at least 21"),
    (["margins"], "required"),
    (["margins", "--digits", "1000000000"], "beyond what this tool certifies"),
    (["bound", "--table", "--max-d", "19"], "at least 21"),
    (["exact", "--exhaustive", "5"], "--exhaustive must be 0 … 3"),
    (["exact", "--exhaustive", "3", "--d-model", "21"], "--exhaustive 3 needs 3-digit operands, beyond n_max(21)"),
    (["exact", "--d-model", "21", "--exhaustive", "1", "--sample-digits", "5"], "--sample-digits 5 needs"),
    (["precision", "--json", "/nonexistent/MISSING.json"], "no such cache file; add --recompute"),
    (["precision", "--json", "/tmp"], "is a folder, not a cache file"),
    (["precision", "--fresh"], "--fresh replaces the cache with new measurements: it needs --recompute"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys) -> None:
    assert_one_line_error(main, argv, "python -m constructions.addition.certify", needle, capsys)


@pytest.mark.parametrize("sub, needle", [("bound", "--table"), ("margins", "--digits"), ("exact", "--exhaustive"),
                                         ("precision", "--recompute")])
def test_every_subcommand_has_help(sub, needle, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([sub, "--help"])
    assert exc.value.code == 0
    assert needle in capsys.readouterr().out


def test_margins_prints_bounds_margins_and_smallest_M(capsys) -> None:
    assert main(["margins", "--digits", "30", "--d-model", "27"]) == 0
    out = capsys.readouterr().out
    for needle in ("head 1:", "head 2:", "PRE_SUM", "PRE_CARRY", "PRE_EOS", "float32 term", "unit roundoff u = 2^-24",
                   "slack ×", "smallest M certified", "PASS (float32)", "interval enclosure"):
        assert needle in out, needle


def test_margins_exit_1_on_fail(capsys) -> None:
    assert main(["margins", "--digits", "30", "--d-model", "27", "--M", "1", "--no-search"]) == 1
    assert "FAIL (leak)" in capsys.readouterr().out


def test_module_runs_as_a_script() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run = subprocess.run([sys.executable, "-m", "constructions.addition.certify", "bound", "--d-model", "512"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "2^247 − 2" in run.stdout and "≈ 2.26 × 10^74" in run.stdout
