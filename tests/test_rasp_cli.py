"""``python -m rasp.turing``: output, exit codes, and one-line errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_checks import assert_one_line_error as assert_refused
from rasp.turing.cli import PROG, main

REPO = Path(__file__).resolve().parents[1]

FLIP = {"states": ["a", "b", "H"], "start": "a", "halt": ["H"], "alphabet": ["0", "1"], "blank": "0",
        "head": 0, "transitions": [["a", "0", "a", "1", "R"], ["a", "1", "b", "1", "L"],
                                    ["b", "1", "H", "0", "L"], ["b", "0", "H", "0", "R"]]}


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err, culprit):
    assert code == 2 and out == ""
    assert err.startswith(f"{PROG}: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert culprit in err


def test_addition_matches_and_reports(capsys):
    code, out, err = cli(capsys, "--machine", "addition", "--input", "987654321+123456789")
    assert code == 0, err
    fields = dict(line.split(":", 1) for line in out.splitlines())
    assert fields["match"].strip() == "yes"
    assert fields["answer"].strip().startswith(f"{987654321 + 123456789} (Python: {987654321 + 123456789}, correct")
    assert fields["steps"].strip().startswith("10 ")
    assert "4 attention layers" in fields["program"]


def test_json_output_fields(capsys):
    code, out, _ = cli(capsys, "--machine", "addition", "--input", "58+67", "--json", "--mode", "teacher")
    rep = json.loads(out)
    assert code == 0 and rep["match"] is True and rep["first_mismatch"] is None
    assert rep["steps"] == 3 and rep["trace_tokens"] == 1 + 4 * 4 and rep["final_tape"] == ["1", "2", "5"]
    assert rep["answer"] == rep["expected"] == "125" and rep["program_ops"] > 0


@pytest.mark.parametrize("mode", ["teacher", "greedy"])
def test_random_machine_matches(capsys, mode):
    code, out, _ = cli(capsys, "--machine", "random:3", "--input", "0123450123", "--mode", mode, "--json")
    rep = json.loads(out)
    assert code == 0 and rep["match"] and rep["steps"] >= 1 and rep["ngram"] == rep["premise_ngram"]


def test_show_trace_prints_one_configuration_per_line(capsys):
    code, out, _ = cli(capsys, "--machine", "addition", "--input", "99+1", "--show-trace")
    lines = [ln for ln in out.splitlines() if ln.startswith("  c_")]
    assert code == 0 and len(lines) == 4
    assert lines[0].split()[1:] == ["#", "90", "[91|c0]"] and lines[-1].split()[1:] == ["[1|H]", "0", "0"]


def test_json_spec_by_path_and_bundled_spec(capsys, tmp_path):
    path = tmp_path / "flip.json"
    path.write_text(json.dumps(FLIP))
    code, out, _ = cli(capsys, "--machine", str(path), "--input", "001", "--json")
    assert code == 0 and json.loads(out)["final_tape"] == ["1", "0", "1"]
    code, out, _ = cli(capsys, "--machine", "parity", "--input", "1101_", "--json")
    assert code == 0 and json.loads(out)["final_tape"][-1] == "O"


def test_address_track_and_too_small_ngram(capsys):
    code, out, _ = cli(capsys, "--machine", "increment", "--input", "1" * 12, "--address-track", "2", "--json")
    rep = json.loads(out)
    assert code == 0 and rep["ngram"] <= 4 and rep["answer"] == "1" + "0" * 12
    code, out, err = cli(capsys, "--machine", "increment", "--input", "1" * 12, "--ngram", "2", "--json")
    rep = json.loads(out)
    assert code == 1 and rep["match"] is False and rep["first_mismatch"] is not None
    assert "ambiguous" in rep["monitor"] and err.startswith("monitor: ") and err.count("\n") == 1


def bad_spec(tmp_path, **changes):
    path = tmp_path / f"bad{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps({**FLIP, **changes}))
    return str(path)


def test_bad_inputs_exit_2_with_one_line(capsys, tmp_path):
    cases = [
        (["--machine", bad_spec(tmp_path, transitions=[["a", "0", "zz", "1", "R"]]), "--input", "0"],
         "unknown next state 'zz'"),
        (["--machine", bad_spec(tmp_path, transitions=[["a", "9", "a", "1", "R"]]), "--input", "0"],
         "unknown read symbol '9'"),
        (["--machine", bad_spec(tmp_path, transitions=[["a", "0", "a", "1", "R"]]), "--input", "01"],
         "no transition for state 'a' reading '1'"),
        (["--machine", bad_spec(tmp_path), "--input", "0x1"], "input symbol 'x' at cell 1"),
        (["--machine", bad_spec(tmp_path, transitions=[["a", "0", "a", "0", "R"],
                                                         ["a", "1", "a", "1", "R"]]),
          "--input", "01", "--max-steps", "50"], "did not halt within 50 steps"),
        (["--machine", "addition", "--input", "12-3"], "addition input must look like"),
        (["--machine", "nosuch", "--input", "1"], "unknown machine 'nosuch'"),
        (["--machine", str(tmp_path / "absent.json"), "--input", "1"], "cannot read machine file"),
        (["--machine", "random:x", "--input", "1"], "random:SEED"),
    ]
    for argv, culprit in cases:
        assert_one_line_error(*cli(capsys, *argv), culprit)


def test_help_describes_machines_and_exit_codes(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    for text in ("--machine", "--ngram", "--max-steps", "--mode", "--show-trace", "--json",
                 "addition", "random:SEED", "exit status"):
        assert text in out
    tape = out[out.index("\ntape:"):out.index("exit status")]
    for text in ("bounded", "leaves the head in place", "halts on reading the blank", '"1011_"',
                 "--max-steps", "docs/rasp.md"):
        assert text in " ".join(tape.split()), text


def test_halting_on_blank_without_a_blank_names_the_bounded_tape(tmp_path):
    """As a user runs it: parity stops on the blank, and "1011" has none."""
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    run = subprocess.run([sys.executable, "-m", "rasp.turing", "--machine", "parity", "--input", "1011",
                          "--max-steps", "60"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert_one_line_error(run.returncode, run.stdout, run.stderr, "did not halt within 60 steps")
    for text in ("halts on reading the blank '_'", "no blank cell", "tape is bounded",
                 "e.g. '1011_'", "raise --max-steps"):
        assert text in run.stderr, text
    fixed = subprocess.run([sys.executable, "-m", "rasp.turing", "--machine", "parity", "--input",
                            "1011_", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["final_tape"] == list("1011O")


def test_module_runs_as_a_subprocess(tmp_path):
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    ok = subprocess.run([sys.executable, "-m", "rasp.turing", "--machine", "addition", "--input",
                         "4324+139", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["answer"] == str(4324 + 139)
    bad = subprocess.run([sys.executable, "-m", "rasp.turing", "--machine", "addition", "--input", "x"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("argv, message", [
    (["--ngram", "x"], "argument --ngram: expected a whole number"),  # argparse's own errors: one line too
    (["--mode", "fast"], "argument --mode: invalid choice"),
    (["--max-steps", "-3"], "argument --max-steps: expected a whole number >= 1, got '-3'"),
    (["--max-steps", "0"], "argument --max-steps: expected a whole number >= 1"),
    (["--ngram", "0"], "argument --ngram: expected a whole number >= 1"),
    # "12+34": 3 cells (two digit pairs and one for the final carry)
    (["--ngram", "1000000"], "--ngram must be between 1 and 4 (a configuration of 3 cells"),
    (["--address-track", "100000"], "--address-track must be between 2 and 3 letters"),
    (["--address-track", "1"], "--address-track must be between 2 and 3 letters"),
])
def test_sizes_and_usage_errors_are_refused_in_one_line(argv, message, capsys):
    assert_refused(main, ["--machine", "addition", "--input", "12+34", *argv], PROG, message, capsys)


def test_the_largest_meaningful_sizes_are_accepted(capsys):
    """The upper ends of the ranges above still run (and match): 3 cells, n = 4, B = 3."""
    code, out, err = cli(capsys, "--machine", "addition", "--input", "12+34", "--ngram", "4",
                         "--address-track", "3", "--json")
    assert code == 0 and json.loads(out)["answer"] == "46", err


def test_a_huge_random_machine_is_refused_before_it_is_drawn(capsys):
    import time

    t0 = time.perf_counter()
    assert_refused(main, ["--machine", "random:1:100000:100000", "--input", "0123"], PROG,
                   "STATES x SYMBOLS must be at most 1,000,000 transitions, got 10,000,000,000", capsys)
    assert time.perf_counter() - t0 < 5  # drawing 10^10 transitions would take a day


@pytest.fixture
def eight_gb_free(monkeypatch):
    from lengthgen import resources

    monkeypatch.setattr(resources, "available_bytes", lambda: 8 * 10**9)
    monkeypatch.delenv(resources.IGNORE_ENV, raising=False)


def test_a_step_budget_beyond_memory_is_refused_before_the_simulator_runs(eight_gb_free, capsys):
    # 10^9 configurations of 5 cells, at least 40 bytes each: far beyond 8 GB (the machine loops forever)
    assert_refused(main, ["--machine", "increment", "--input", "1011", "--max-steps", "1000000000"], PROG,
                   "GB of memory, 8 GB free", capsys)


def test_a_trace_beyond_memory_is_refused_before_the_interpreter_runs(eight_gb_free, capsys):
    """250-digit addition: a trace of about 251 x 126 = 31,600 tokens; the interpreter's token pairs
    (10^9 of them, at least a byte each) do not fit 8 GB. The simulator's run alone is quick."""
    a = "9" * 250
    assert_refused(main, ["--machine", "addition", "--input", f"{a}+{a}"], PROG, "tokens", capsys)
