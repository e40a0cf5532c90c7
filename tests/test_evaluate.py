"""lengthgen.evaluate: exact match / token accuracy of any checkpoint, named checkpoints, long inputs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from constructions.addition.export import export
from lengthgen.data import eval_batch
from lengthgen.decode import greedy_generate
from lengthgen.data import batch_from_operands
from lengthgen.evaluate import add_once, bytes_per_row, evaluate, load_for_eval, main, rows_per_batch, score_batch
from lengthgen.runs import CHECKPOINT_GROUP, load_trained, registered_checkpoints
from lengthgen.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def construction(tmp_path_factory) -> str:
    """Theorem 5.1's model exported as an ordinary checkpoint directory (table: 12 digits)."""
    return str(export(tmp_path_factory.mktemp("construction") / "theorem51", n_digits=12))


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture
def registry(tmp_path, monkeypatch) -> None:
    """Installed-package metadata registering ``construction`` as pyproject.toml does, on sys.path
    (the test does not depend on how this checkout was installed)."""
    info = tmp_path / "site" / "lengthgen_test_registry-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lengthgen-test-registry\nVersion: 0\n")
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][CHECKPOINT_GROUP]
    (info / "entry_points.txt").write_text(f"[{CHECKPOINT_GROUP}]\nconstruction = {target['construction']}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A coupled model trained briefly: right on some additions, wrong on others."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("eval") / "run"
    cfg = TrainConfig(d_model=64, d_mlp=128, batch_size=64, train_digits="1-3", max_digits=6, steps=200, lr=3e-3,
                      checkpoint_every=1000)
    assert train(cfg, out, progress=False) == 0
    return out


def test_exported_construction_scores_100_percent_through_the_cli(construction, capsys):
    assert main(["--checkpoint", construction, "--digits", "1-12", "--samples", "200", "--json", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["name"] == "Theorem 5.1 construction" and res["kind"] == "construction" and res["task"] == "addition"
    assert [r["n"] for r in res["results"]] == list(range(1, 13))
    assert all(r["exact_match"] == 1.0 and r["token_accuracy"] == 1.0 and r["samples"] == 200 for r in res["results"])
    assert main(["--checkpoint", construction, "--digits", "13", "--no-progress"]) == 2  # its table holds 12
    assert "do not fit the position table" in one_error_line(capsys)


def test_digits_take_a_comma_list_with_steps(construction, capsys):
    assert main(["--checkpoint", construction, "--digits", "2,9-12:3", "--samples", "20", "--json", "--no-progress"]) == 0
    assert [r["n"] for r in json.loads(capsys.readouterr().out)["results"]] == [2, 9, 12]
    assert main(["--checkpoint", construction, "--digits", "2,13", "--no-progress"]) == 2  # the longest is checked
    assert "do not fit the position table" in one_error_line(capsys)


def test_a_registered_name_resolves_through_entry_points(registry, capsys):
    assert "construction" in registered_checkpoints()
    assert main(["--checkpoint", "construction", "--digits", "14-15", "--samples", "50", "--json", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["name"] == "Theorem 5.1 construction" and "entry point constructions.addition.export" in res["path"]
    assert all(r["exact_match"] == 1.0 for r in res["results"])  # built for the longest requested length


def test_an_unknown_name_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--checkpoint", "no-such-model", "--no-progress"]) == 2
    assert "no registered checkpoint of that name" in one_error_line(capsys)


def test_ties_are_never_right(construction):
    """The one rule for "exact" (lengthgen.decode.decided_argmax): with its unembedding zeroed, the
    construction's logits all tie, and a tie counts as wrong even where argmax would pick the right 0."""
    model, desc = load_for_eval(construction, 4)
    with torch.no_grad():
        model.unembed.W_U.zero_()
    rows = evaluate(model, desc["positions"], [3, 4], 100)
    assert all(r["exact_match"] == 0.0 and r["token_accuracy"] == 0.0 for r in rows)


def test_long_operands_are_batched_by_memory(tmp_path):
    """10^4-digit operands: a few rows per batch, not the 500 that would need tens of GB."""
    from constructions.addition.export import registered

    for n, budget in ((20000, 1 << 30), (200000, 1 << 30)):
        model = registered(n)
        T = 3 * n + 5
        rows = rows_per_batch(model, T, 500, budget)
        assert rows * bytes_per_row(model, T) <= max(budget, bytes_per_row(model, T)) and rows < 10
        assert 500 * bytes_per_row(model, T) > 20 * (1 << 30)  # what one batch of 500 would have needed


@pytest.mark.slow
def test_twenty_thousand_digits_through_the_cli_stay_small(tmp_path):
    ck = export(tmp_path / "c20k", n_digits=20000)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    # the command's own peak: VmHWM of its own address space. Not RUSAGE_CHILDREN (the largest of every
    # child this worker ever ran), nor RUSAGE_SELF: Linux carries the parent's high-water mark across
    # fork and exec into ru_maxrss, so a pytest worker grown past 1.5 GiB failed this test
    peak_of = ("import resource, runpy, sys\n"
               "sys.argv = ['lengthgen.evaluate'] + sys.argv[1:]\n"
               "try:\n    runpy.run_module('lengthgen.evaluate', run_name='__main__')\n"
               "finally:\n"
               "    try:\n"
               "        peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
               "    except (OSError, StopIteration):\n"
               "        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
               "    print('PEAK_KIB', peak, file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", peak_of, "--checkpoint", str(ck), "--digits", "20000",
                          "--samples", "2", "--max-memory", "256", "--threads", "1", "--json", "--no-progress"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["results"][0]
    assert out["exact_match"] == 1.0 and out["batch_size"] == 1
    peak = int(res.stderr.split("PEAK_KIB")[1].split()[0])
    assert peak < 1_500_000  # KiB: well under 1.5 GiB


def test_teacher_forced_exact_match_equals_greedy_decoding(tiny_run):
    model, notes, _ = load_trained(tiny_run)
    agree = []
    for n in (1, 2, 3):
        batch = eval_batch(np.random.default_rng(5), 40, n, "coupled")
        tokens, pos, _ = batch.to_torch()
        em, right, _ = score_batch(model, tokens, pos, 2 * n + 2)
        first = 2 * n + 3
        for row in range(len(em)):
            out = greedy_generate(model, tokens[row, :first], pos[row, :first], new_pos_ids=pos[row, first:],
                                  max_new_tokens=n + 2)
            assert bool(em[row]) == (out == tokens[row, first:].tolist())
            agree.append(bool(em[row]))
    assert 0 < sum(agree) < len(agree), "need a mix of right and wrong rows for this test to mean anything"


def test_evaluate_a_run_directory_table_and_json(tiny_run, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["--checkpoint", str(tiny_run), "--digits", "1-6", "--samples", "50", "--out", str(out),
                 "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert "addition, coupled positions, trained on 1-3 digits" in table and len(table.strip().splitlines()) == 2 + 6
    res = json.loads(out.read_text())
    assert res["positions"] == "coupled" and res["seed"] == 999
    for r in res["results"]:
        assert 0.0 <= r["exact_match"] <= r["token_accuracy"] <= 1.0
    assert res["results"][0]["exact_match"] > res["results"][-1]["exact_match"]


def test_bad_input(tiny_run, construction, tmp_path, capsys):
    assert main(["--checkpoint", str(tiny_run), "--digits", "1-7", "--no-progress"]) == 2
    assert "do not fit the position table" in one_error_line(capsys)
    assert main(["--checkpoint", str(tmp_path / "missing"), "--no-progress"]) == 2
    assert "no such checkpoint" in one_error_line(capsys)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a weight file")
    assert main(["--checkpoint", str(bad), "--no-progress"]) == 2
    assert "not a readable lengthgen weight file" in one_error_line(capsys)
    assert main(["--checkpoint", str(tmp_path), "--no-progress"]) == 2
    assert "no checkpoint in this directory" in one_error_line(capsys)
    assert main(["--checkpoint", construction, "--digits", "5-2"]) == 2
    assert "bad digit range" in one_error_line(capsys)
    keep = tmp_path / "keep.json"
    keep.write_text("precious")
    assert main(["--checkpoint", construction, "--digits", "2", "--out", str(keep)]) == 2
    assert "already exists" in one_error_line(capsys)
    assert keep.read_text() == "precious"
    assert main(["--checkpoint", construction, "--digits", "2", "--samples", "3", "--no-progress",
                 "--out", str(keep / "under-a-file.json")]) == 2
    assert "cannot write --out" in one_error_line(capsys)


def test_the_generic_library_imports_no_construction():
    """Layering: src/lengthgen knows constructions only as checkpoints (a path or a registered name)."""
    import ast

    for path in (ROOT / "src" / "lengthgen").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            assert not any(n.split(".")[0] in ("constructions", "rasp") for n in names), (path, names)
    code = ("import sys, lengthgen.evaluate, lengthgen.plot, lengthgen.train; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('constructions', 'rasp')))")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr


def test_one_addition_is_decoded_greedily_against_python(construction, capsys):
    """--a/--b: the construction gets a 12-digit carry chain right (exit 0); the seed-1 model of the
    late-penalty recipe gets the certificate's counterexample 54004 + 56406 = 110410 wrong at answer
    position 4 (writes 0 for the top digit 1; exit 1); the JSON names every differing position."""
    assert main(["--checkpoint", construction, "--a", "999999999999", "--b", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sum"] == str(999999999999 + 1) and out["right"] and out["written"] == "0" * 12 + "1$"
    assert main(["--checkpoint", construction, "--a", "007", "--b", "1", "--json"]) == 0  # 3 digits as given
    out = json.loads(capsys.readouterr().out)
    assert out["sum"] == "8" and out["right"] and out["written"] == "8000$"
    ckpt = str(ROOT / "checkpoints" / "addition_coupled_1l2h_packed_entropy_001_late_seed1")
    assert main(["--checkpoint", ckpt, "--a", "54004", "--b", "56406", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["sum"] == "110410" and not out["right"]
    assert out["wrong_positions"] == [{"answer_position": 4, "expected": "1", "written": "0"}]
    assert main(["--checkpoint", ckpt, "--a", "54004", "--b", "56406"]) == 1
    assert "answer position 4: expected 1, wrote 0" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["addition_nope_1l2h", "addition_ape_1l2h", "addition_coupled_sink_1l2h_packed_50"])
def test_one_addition_agrees_with_teacher_forced_exact_match(name):
    """Greedy decoding of one addition at a time is right exactly where the teacher-forced batch
    score is, for a model without IDs (NoPE), with absolute ones and with coupled-sink ones."""
    model, desc = load_for_eval(str(ROOT / "checkpoints" / name), 4)
    rng = np.random.default_rng(7)
    greedy, teacher = [], []
    for n in (1, 2, 3, 4):  # one layout per batch: one length at a time
        lo = 10 ** (n - 1) if n > 1 else 0
        pairs = [(int(rng.integers(lo, 10**n)), int(rng.integers(lo, 10**n))) for _ in range(12)]
        batch = batch_from_operands(pairs, desc["positions"])
        tokens, pos, _ = batch.to_torch(model.device)
        teacher += [bool(x) for x in score_batch(model, tokens, pos, int(np.argmax(batch.loss_mask[0])))[0]]
        greedy += [add_once(model, desc["positions"], str(a), str(b))["right"] for a, b in pairs]
    assert greedy == teacher
    assert name.startswith("addition_coupled") or 0 < sum(greedy) < len(greedy)  # both outcomes occur (measured)


@pytest.mark.parametrize("argv,message", [
    (["--a", "12x", "--b", "4"], "--a '12x': expected decimal digits 0-9"),
    (["--a", "12"], "--a and --b go together"),
    (["--a", "1" * 13, "--b", "1"], "do not fit the position table"),
])
def test_one_addition_bad_input(construction, argv, message, capsys):
    assert main(["--checkpoint", construction] + argv) == 2
    assert message in one_error_line(capsys)


def test_one_addition_refuses_another_task(capsys):
    assert main(["--checkpoint", str(ROOT / "checkpoints" / "multiplication_nx2_coupled_2l4h"), "--a", "12",
                 "--b", "3"]) == 2
    assert "decode one addition" in one_error_line(capsys)
