"""Mistakes a user types into any command: one ``PROG: error:`` line and exit 2, nothing written.

The option types of :mod:`lengthgen.cli` (ASCII whole numbers, finite reals, seeds >= 0, known
devices) serve every command; these tests run a few commands as a user would."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_checks import assert_one_line_error
from constructions.addition import cli as addition_cli
from lengthgen import evaluate, train

ROOT = Path(__file__).resolve().parents[1]
TINY_RUN = ["--d-model", "8", "--heads", "1", "--steps", "2", "--batch-size", "2", "--train-digits", "1-2",
            "--max-digits", "3", "--checkpoint-every", "1", "--log-every", "1", "--threads", "1", "--no-progress"]


@pytest.mark.parametrize("argv, message", [
    (["--digits", "١٢"], "whole number in digits 0-9"),  # Arabic-Indic digits: int() takes them, operands do not
    (["--digits", "1e3"], "whole number"),
    (["--digits", "12", "--seed", "-1"], "whole number >= 0"),
])
def test_integer_options_take_ascii_digits_only(argv, message, capsys):
    assert_one_line_error(addition_cli.main, argv, "python -m constructions.addition", message, capsys)


@pytest.mark.parametrize("flag, value, message", [
    ("--lr", "inf", "finite number"),
    ("--lr", "nan", "finite number"),
    ("--grad-clip", "-1", "--grad-clip"),
    ("--grad-clip", "0", "--grad-clip"),
    ("--window", "3", "Hard-ALiBi"),
    ("--seed", "-3", "whole number >= 0"),
    ("--device", "tpu", "unknown device 'tpu'"),
])
def test_train_refuses_nonsense_before_making_the_run(flag, value, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert_one_line_error(train.main, ["--out", str(out), flag, value, *TINY_RUN], "python -m lengthgen.train",
                          message, capsys)
    assert not out.exists()


def test_evaluate_refuses_an_unknown_device(capsys):
    assert_one_line_error(evaluate.main, ["--checkpoint", "construction", "--digits", "3", "--device", "tpu"],
                          "python -m lengthgen.evaluate", "unknown device", capsys)


def test_a_run_that_failed_before_its_first_checkpoint_can_be_retried(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")  # what a start that crashed before any checkpoint leaves
    assert train.main(["--out", str(out), *TINY_RUN]) == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["d_model"] == 8
    capsys.readouterr()
    # a run with a checkpoint is still protected
    assert_one_line_error(train.main, ["--out", str(out), *TINY_RUN], "python -m lengthgen.train", "already exists",
                          capsys)


def test_run_json_records_the_command_without_a_machine_path(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(["--out", str(out), *TINY_RUN]) == 0, capsys.readouterr().err
    argv = json.loads((out / "run.json").read_text())["argv"]
    assert not any(a.startswith("/") and "lengthgen" in a for a in argv[:3]), argv


@pytest.mark.parametrize("path", sorted((ROOT / "checkpoints").glob("*/run.json")), ids=lambda p: p.parent.name)
def test_committed_runs_hold_no_absolute_path(path):
    argv = json.loads(path.read_text())["argv"]
    assert argv[:3] == ["python", "-m", "lengthgen.train"], argv[:3]
    assert not any(a.startswith("/") for a in argv), argv


def test_a_closed_pipe_ends_quietly():
    """``certify bound --table | head -1``: the reader goes away; no traceback, exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "constructions.addition.certify", "bound", "--table"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PATH": "/usr/bin:/bin"})
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and err == "", err


# --- sizes beyond the machine: refused before anything is allocated -------------------------------

FREE = 8 * 10**9  # what these tests pretend is free, so the verdict does not depend on the machine


@pytest.fixture
def eight_gb_free(monkeypatch):
    from lengthgen import resources

    monkeypatch.setattr(resources, "available_bytes", lambda: FREE)
    monkeypatch.delenv(resources.IGNORE_ENV, raising=False)


@pytest.mark.parametrize("module, argv", [
    ("constructions.addition", ["--digits", "1000000000"]),
    ("constructions.addition", ["--digits", "12", "--d-model", "100000"]),
    ("constructions.multiplication", ["--a", "5", "--b", "7", "--d-model", "100000"]),
    ("constructions.copying", ["--task", "copy", "--digits", "1000000000"]),
    ("constructions.copying", ["--task", "copy", "--x", "12", "--d-model", "100000"]),
    ("constructions.nope", ["--digits", "1000000000"]),
    ("lengthgen.evaluate", ["--checkpoint", "construction", "--digits", "1000000000"]),
])
def test_a_size_beyond_free_memory_is_refused_with_the_number(module, argv, eight_gb_free, capsys):
    import importlib

    cli = importlib.import_module(module if module.startswith("lengthgen") else f"{module}.cli")
    assert_one_line_error(cli.main, argv, f"python -m {module}", "GB free", capsys)


def test_train_refuses_a_model_beyond_free_memory_and_makes_no_run(eight_gb_free, tmp_path, capsys):
    out = tmp_path / "run"
    assert_one_line_error(train.main, ["--out", str(out), "--d-model", "1000000"], "python -m lengthgen.train",
                          "needs about", capsys)
    assert not out.exists()


def test_the_check_can_be_overridden(monkeypatch):
    from lengthgen import resources

    monkeypatch.setattr(resources, "available_bytes", lambda: FREE)
    with pytest.raises(resources.ResourceError, match="needs about 9 GB of memory, 8 GB free"):
        resources.require_memory(9e9, "a test")
    resources.require_memory(7e9, "a test")  # fits
    monkeypatch.setenv(resources.IGNORE_ENV, "1")
    resources.require_memory(9e9, "a test")  # the user asked to try anyway


@pytest.mark.parametrize("kw", [
    dict(d_vocab=14, d_model=128, n_heads=2, d_head=64, d_mlp=512, n_ctx=20, normalization="LN"),
    dict(d_vocab=15, d_model=51, n_layers=3, n_heads=4, d_head=7, d_mlp=0, n_ctx=300, d_vocab_out=11),
    dict(d_vocab=5, d_model=9, n_heads=1, d_head=3, d_mlp=5, positional="none", dtype="float64"),
])
def test_the_parameter_estimate_is_the_parameter_count(kw):
    from lengthgen.model import Transformer, TransformerConfig

    cfg = TransformerConfig(**kw)
    model = Transformer(cfg)
    assert cfg.parameter_count() == sum(p.numel() for p in model.parameters())
    assert cfg.itemsize == model.embed.W_E.element_size()


# --- figures: a bad place is one line, and an existing figure is kept --------------------------------

def _tiny_figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


@pytest.mark.parametrize("name, message", [("fig.xyz", "cannot write a figure as .xyz"),
                                           ("plain_file/fig.png", "is not a writable folder")])
def test_save_figure_refuses_a_bad_place_in_one_line(name, message, tmp_path):
    from lengthgen.plot import save_figure
    from lengthgen.runs import RunError

    (tmp_path / "plain_file").write_text("a file, not a folder")
    with pytest.raises(RunError, match=message):
        save_figure(_tiny_figure(), [tmp_path / name])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain_file"]  # nothing half-written


def test_the_multiplication_figure_keeps_an_existing_file_without_force(tmp_path, capsys):
    from constructions.multiplication import figure

    out = tmp_path / "att.png"
    out.write_bytes(b"my figure")
    assert_one_line_error(figure.main, ["--a", "12", "--b", "7", "--output", str(out)],
                          "python -m constructions.multiplication.figure", "use --force", capsys)
    assert out.read_bytes() == b"my figure"


def test_plot_names_a_missing_checkpoint_before_an_existing_figure(tmp_path, capsys):
    from lengthgen import plot

    out = tmp_path / "att.png"
    out.write_bytes(b"x")
    assert_one_line_error(plot.main, ["attention", "--checkpoint", str(tmp_path / "missing"), "--construction",
                                      "construction", "--out", str(out)], "python -m lengthgen.plot",
                          "no such checkpoint", capsys)


def test_help_lines_name_their_defaults(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for line in ("--lr LR peak learning rate (linear warm-up, then cosine decay) (default: 0.001)",
                 "--steps STEPS optimizer steps (default: 4000)", "--d-mlp D_MLP MLP hidden width (default: 4 x d-model)"):
        assert line in text


def test_multiplication_advertises_the_smallest_width_that_holds_a_digit(capsys):
    from constructions.multiplication import build_model, cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "embedding dimension d >= 37" in " ".join(capsys.readouterr().out.split())
    assert build_model(d_model=37)[1]["bound_digits"] >= 1  # 37 holds a digit; 36 does not
    with pytest.raises(ValueError, match="d_model = 37 is the smallest that does"):
        build_model(d_model=36)
    with pytest.raises(ValueError, match="d_model = 34 holds no digits"):  # also when digits are asked for
        build_model(n_digits=2, d_model=34)


def test_evaluate_out_on_a_folder_names_the_file_to_give(tmp_path, capsys):
    assert_one_line_error(evaluate.main, ["--checkpoint", "construction", "--digits", "2", "--out", str(tmp_path)],
                          "python -m lengthgen.evaluate", f"give the JSON file to write, e.g. {tmp_path / 'eval.json'}",
                          capsys)


@pytest.mark.parametrize("module", ["constructions.addition.certify", "constructions.multiplication.certify",
                                    "constructions.copying.certify"])
def test_a_bound_for_any_width_is_arithmetic(module, capsys):
    """d = 10^12 has P ≈ 5·10^11 position dimensions: 2^P is never expanded, the answer comes at once."""
    import importlib
    import time

    import mpmath

    cli = importlib.import_module(f"{module}.cli")
    t0 = time.perf_counter()
    assert cli.main(["bound", "--d-model", "1000000000000"]) == 0
    assert time.perf_counter() - t0 < 5  # generous: the work is a few logarithms
    out = capsys.readouterr().out
    line = next(t for t in out.splitlines() if t.startswith("n_max("))
    P = int(line.split("2^")[1].split(" ")[0])  # n_max(d) = 2^P − c
    expected = mpmath.nstr(mpmath.log10(mpmath.mpf(2)) * P, 25)  # log10 of 2^P, independently
    exp = int(float(mpmath.floor(mpmath.mpf(expected))))
    mant = float(mpmath.power(10, mpmath.mpf(expected) - exp))
    assert f"≈ {mant:.2f} × 10^{exp}" in out, out
    assert f"(a number of {exp + 1} digits" in out


def test_scientific_rounds_the_whole_number():
    from constructions.sizing import scientific

    assert scientific(2046) == "2.05 × 10^3"
    assert scientific(12250001) == "1.23 × 10^7"  # half-even on the truncated digits would give 1.22
    assert scientific(999) == "999"


def test_the_turing_figure_refuses_an_input_its_compiled_program_cannot_hold(tmp_path, capsys):
    """A 16-digit addition: its trace is too long for a figure that labels every token; the figure
    command says so in one line and writes nothing."""
    from rasp.turing import plot

    out = tmp_path / "turing.png"
    assert_one_line_error(plot.main, ["--input", "9999999999999999+1", "--out", str(out)],
                          "python -m rasp.turing.plot", "use a shorter input", capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_reference_of_another_task_says_to_pass_construction(tmp_path, capsys):
    from lengthgen import plot

    root = Path(__file__).resolve().parents[1]
    assert_one_line_error(plot.main, ["attention", "--checkpoint", str(root / "checkpoints" / "multiplication_nx2_coupled_2l4h"),
                                      "--out", str(tmp_path / "x.png")],
                          "python -m lengthgen.plot", "pass --construction with a multiplication_nx2 reference", capsys)
    assert not (tmp_path / "x.png").exists()


def test_float32_on_cuda_refuses_a_forced_tf32_environment():
    """TF32 (10-bit mantissa) is not IEEE float32: with TF32 the addition model at d = 41 was measured
    wrong from 2 digits on an H100, while its float32 certificate covers 4094 digits."""
    from constructions.cli_support import tf32_problem

    assert tf32_problem({}) is None and tf32_problem({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0"}) is None
    problem = tf32_problem({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"})
    assert "TF32" in problem and "--dtype float64" in problem and "\n" not in problem


def test_a_forced_tf32_environment_leaves_the_cpu_alone(monkeypatch):
    from constructions.cli_support import resolve_device

    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    assert resolve_device("cpu", "float32") == "cpu"
