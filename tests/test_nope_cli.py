"""``python -m constructions.nope``: output, JSON, exit codes (0 counterexample, 3 distinguished,
2 bad input) and one-line errors. Printed pairs are re-checked here with plain Python."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from constructions.nope.cli import main
from lengthgen.init import random_transformer
from lengthgen.weights import save_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def printed_pair(out: str) -> list[tuple[str, str, str]]:
    """(prompt, correct, model) for the rows 'A ...' and 'B ...' of the text output."""
    rows = re.findall(r"^  ([AB])  ((?:\S )+\S)\s+(\S)\s+(\S)", out, flags=re.M)
    return [(p.replace(" ", ""), c, m) for _, p, c, m in rows]


def test_default_run_prints_a_verified_addition_counterexample(capsys):
    code, out, err = run(capsys, "--task", "addition", "--digits", "3")
    assert code == 0 and err == ""
    assert out.startswith("Proposition 5.2 counterexample")
    assert "certificate re-verified from scratch: yes" in out and "Proposition 5.2 applies" in out
    (pa, ca, ma), (pb, cb, mb) = printed_pair(out)
    assert Counter(pa) == Counter(pb) and pa != pb and pa[-1] == pb[-1] == "="
    for prompt, correct in ((pa, ca), (pb, cb)):
        a, b = re.fullmatch(r"\$(\d{3})\+(\d{3})=", prompt).groups()
        assert correct == str(int(a) + int(b)).zfill(4)[::-1][0]
    assert ca != cb and ma == mb and (ma != ca or mb != cb)
    diff, tol = map(float, re.search(r"= (\S+)\s+\(tolerance (\S+) =", out).groups())
    assert diff <= tol


@pytest.mark.parametrize("task,digits", [("multiplication_nx1", "2"), ("multiplication_nx2", "1"), ("copy", "4"),
                                         ("reverse", "3")])
def test_json_output_for_every_task(capsys, task, digits):
    code, out, _ = run(capsys, "--task", task, "--digits", digits, "--layernorm", "--act", "gelu", "--seed", "5",
                       "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "counterexample" and data["verified"] is True
    cert = data["certificate"]
    a, b = cert["prompt_a"]["text"], cert["prompt_b"]["text"]
    assert Counter(a) == Counter(b) and a[-1] == b[-1] and cert["correct_a_token"] != cert["correct_b_token"]
    assert cert["identical"] and cert["wrong_on"] and cert["max_logit_diff"] <= cert["tolerance"]
    assert len(cert["logits_a"]) == len(cert["logits_b"]) == (13 if task.startswith("mult") else 12)


def test_two_layers_are_reported_distinguished_with_exit_3(capsys):
    code, out, err = run(capsys, "--task", "copy", "--digits", "3", "--layers", "2")
    assert code == 3 and err == ""
    assert out.startswith("No counterexample: the model distinguishes every pair of prompts $___=")
    assert "does not apply" in out and "no counterexample" in out
    (pa, _, _), (pb, _, _) = printed_pair(out)
    assert Counter(pa) == Counter(pb)


def test_the_coupled_construction_is_reported_distinguished(capsys):
    code, out, _ = run(capsys, "--task", "addition", "--digits", "3", "--model", "construction", "--budget", "400",
                       "--json")
    data = json.loads(out)
    assert code == 3 and data["status"] == "distinguished" and data["certificate"] is None
    assert "coupled position IDs" in data["model"]
    closest = data["closest"]
    assert closest["max_logit_diff"] > 0.5 and closest["wrong_on"] == []  # it adds correctly


def test_a_saved_checkpoint_is_searched(capsys, tmp_path):
    path = save_model(random_transformer(12, seed=3, normalization="LN"), tmp_path / "nope.safetensors")
    code, out, _ = run(capsys, "--task", "reverse", "--digits", "3", "--model", str(path))
    assert code == 0 and str(path) in out
    code, _, err = run(capsys, "--task", "addition", "--digits", "3", "--model", str(path))
    assert code == 2 and err.count("\n") == 1 and "vocabulary of 12 in / 12 out tokens, but addition has 13" in err


@pytest.mark.parametrize("argv,message", [
    (["--task", "division"], "invalid choice: 'division'"),
    (["--digits", "1"], "addition needs n_digits >= 2: no permutation-sensitive pair exists with 1 digit"),
    (["--task", "copy", "--digits", "1"], "copy needs n_digits >= 2"),
    (["--digits", "0"], "n_digits must be a positive integer"),
    (["--digits", "three"], "expected a whole number in digits 0-9, got 'three'"),
    (["--model", "no/such/model.safetensors"], "--model no/such/model.safetensors: no such file or directory"),
    (["--model", "missing"], "--model missing: no such file or directory (give a weight file, a checkpoint directory"),
    (["--model", "construction", "--task", "copy"], "the Theorem 5.1 construction adds"),
    (["--model", "construction", "--layers", "2"], "--layers only applies to --model random"),
    (["--layers", "0"], "must be positive"),
    (["--budget", "1"], "--budget must be at least 2"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("python -m constructions.nope: error: ") and message in err and "Traceback" not in err


def test_nx2_accepts_one_digit(capsys):
    assert run(capsys, "--task", "multiplication_nx2", "--digits", "1")[0] == 0


def test_help_documents_exit_codes(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for text in ("--model", "--layers", "--seed", "--json", "exit status", "3 no counterexample", "2 bad input"):
        assert text in out


def test_module_runs_from_any_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "constructions.nope", "--task", "addition", "--digits", "3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Proposition 5.2 counterexample" in proc.stdout and proc.stderr == ""


def test_long_prompts_are_shown_around_the_differences(capsys):
    code, out, _ = run(capsys, "--task", "addition", "--digits", "60")
    assert code == 0 and "[60 digits]" in out and "of 123 tokens shown" in out
    a_row = next(line for line in out.splitlines() if line.startswith("  A  "))
    b_row = next(line for line in out.splitlines() if line.startswith("  B  "))
    assert "…" in a_row and a_row.index("…") == b_row.index("…")  # elided alike, so still aligned
    marks = next(line for line in out.splitlines() if set(line.strip()) == {"^"} or set(line.strip()) == {"^", " "})
    for col, ch in enumerate(marks):
        if ch == "^":
            assert a_row[col] != b_row[col]


# ----------------------------------------------------------------- trained checkpoints, run as a user would
CHECKPOINTS = ROOT / "checkpoints"


def run_module(*argv: str, module: str = "constructions.nope", cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd or ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_coupled_checkpoint_directory_gets_its_coupled_ids():
    """The committed coupled model adds 3-digit numbers exactly; fed 0..T-1 it would look wrong."""
    proc = run_module("--digits", "3", "--model", "checkpoints/addition_coupled_1l2h", "--budget", "300", "--json")
    assert proc.returncode == 3 and proc.stderr == "", proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "distinguished" and "trained with coupled positions, coupled position IDs" in data["model"]
    closest = data["closest"]
    for side in ("a", "b"):  # the printed pair is judged against integer arithmetic, not the code's oracle
        a, b = re.fullmatch(r"\$(\d{3})\+(\d{3})=", closest[f"prompt_{side}"]["text"]).groups()
        assert closest[f"predicted_{side}_token"] == str(int(a) + int(b)).zfill(4)[::-1][0]
    assert closest["wrong_on"] == []


def test_an_explicit_positions_flag_overrides_the_checkpoint(capsys):
    code, out, _ = run(capsys, "--digits", "3", "--model", str(CHECKPOINTS / "addition_coupled_1l2h"),
                       "--positions", "plain", "--budget", "300", "--json")
    assert code == 3 and "overrides that" in json.loads(out)["model"]


def test_a_nope_checkpoint_directory_yields_a_counterexample(capsys):
    code, out, err = run(capsys, "--digits", "3", "--model", str(CHECKPOINTS / "addition_nope_1l2h"))
    assert code == 0 and err == "" and "trained with nope positions" in out
    assert "certificate re-verified from scratch: yes" in out


def test_the_scheme_is_read_from_run_json_when_the_weights_lack_it(capsys, tmp_path):
    from lengthgen.weights import load_model

    model = load_model(CHECKPOINTS / "addition_coupled_1l2h" / "model.safetensors")
    model.annotations.notes = {}
    save_model(model, tmp_path / "model.safetensors")
    (tmp_path / "run.json").write_text((CHECKPOINTS / "addition_coupled_1l2h" / "run.json").read_text())
    code, out, _ = run(capsys, "--digits", "3", "--model", str(tmp_path), "--budget", "200", "--json")
    assert code == 3 and "coupled position IDs" in json.loads(out)["model"]


def test_a_coupled_sink_checkpoint_is_not_fed_ids_it_was_not_trained_on(capsys, tmp_path):
    """Its $ sits at the top carry's ID, a layout this search does not build: refused unless --positions says which."""
    from lengthgen.weights import load_model

    model = load_model(CHECKPOINTS / "addition_coupled_1l2h" / "model.safetensors")
    model.annotations.notes = {**model.annotations.notes, "lengthgen.positions": "coupled-sink"}
    save_model(model, tmp_path / "model.safetensors")
    code, out, err = run(capsys, "--digits", "3", "--model", str(tmp_path), "--budget", "50")
    assert code == 2 and out == "" and err.count("\n") == 1 and "trained with coupled-sink positions" in err
    code, out, _ = run(capsys, "--digits", "3", "--model", str(tmp_path), "--budget", "50", "--positions", "coupled")
    assert code in (0, 3)


@pytest.mark.parametrize("argv,message", [
    (["--model", str(CHECKPOINTS / "addition_coupled_1l2h"), "--digits", "30"],
     "30-digit operands do not fit the position table"),
    (["--model", str(CHECKPOINTS / "addition_nope_1l2h"), "--task", "copy"], "was trained on addition, not copy"),
    (["--model", str(ROOT / "tests")], "no checkpoint in this directory"),
])
def test_bad_checkpoint_requests_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_bad_checkpoint_through_the_real_entry_point():
    proc = run_module("--model", "checkpoints/addition_coupled_1l2h", "--digits", "30")
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("python -m constructions.nope: error: 30-digit operands do not fit")


def test_symbolic_help_prints_help_and_runs_nothing(tmp_path, capsys):
    from constructions.nope.symbolic import main as symbolic_main

    proc = run_module("--help", module="constructions.nope.symbolic", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("usage: python -m constructions.nope.symbolic") and "exit status" in proc.stdout
    assert "same expression" not in proc.stdout  # the checks did not run
    assert symbolic_main(["--digits", "3"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "unrecognized arguments: --digits 3" in err


# ----------------------------------------------------------------- sizes, progress and flags that would do nothing
from cli_checks import assert_one_line_error  # noqa: E402


@pytest.mark.parametrize("argv", [["--positions", "coupled"], ["--positions", "plain"],
                                  ["--positions", "coupled", "--model", str(CHECKPOINTS / "addition_nope_1l2h")]])
def test_positions_on_a_nope_model_are_refused_not_ignored(argv, capsys):
    assert_one_line_error(main, ["--digits", "3", *argv], "python -m constructions.nope",
                          "this model has no position embeddings (NoPE), so it would ignore the position IDs", capsys)


def test_positions_on_a_model_with_a_position_table_are_honoured(capsys):
    code, out, err = run(capsys, "--digits", "3", "--positional", "learned", "--positions", "coupled",
                         "--budget", "200", "--json")
    assert code in (0, 3), err
    assert json.loads(out)["model"].endswith(", coupled position IDs")


@pytest.mark.parametrize("argv, message", [
    # 10^5-digit addition prompts are 2·10^5 + 3 tokens; 8 of them per pass through the default random model
    # (d_model 32) need about 10 GB of activations: refused before the first pass (which alone takes minutes)
    (["--digits", "100000"], "(8 prompts of 200003 tokens per pass) needs about"),
    # 10^6 layers of d_model 32, 2 heads of 16, d_mlp 128: 4,224 attention + 8,352 MLP parameters each,
    # 4 bytes apiece: about 50 GB
    (["--layers", "1000000"], "a model with 1.26e+10 parameters"),
])
def test_a_search_beyond_free_memory_is_refused_up_front(argv, message, monkeypatch, capsys):
    from lengthgen import resources

    monkeypatch.setattr(resources, "available_bytes", lambda: 8 * 10**9)
    monkeypatch.delenv(resources.IGNORE_ENV, raising=False)
    assert_one_line_error(main, argv, "python -m constructions.nope", message, capsys)


def test_the_progress_bar_shows_only_on_a_terminal(monkeypatch, capsys):
    argv = ["--digits", "3", "--layers", "2", "--budget", "300", "--seed", "1"]
    code, _, err = run(capsys, *argv)
    assert code == 3 and err == ""  # stderr is no terminal here: no bar
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = run(capsys, *argv)
    assert code == 3 and "searching" in err and "prompt" in err
    code, _, err = run(capsys, *argv, "--no-progress")
    assert code == 3 and err == ""
