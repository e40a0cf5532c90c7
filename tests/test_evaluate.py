"""lengthgen.evaluate: exact match / token accuracy (issue 6, items 4 and 8)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lengthgen.data import eval_batch
from lengthgen.decode import greedy_generate
from lengthgen.evaluate import evaluate, load_for_eval, main, score_batch
from lengthgen.runs import load_trained
from lengthgen.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A coupled model trained briefly: right on some additions, wrong on others."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("eval") / "run"
    cfg = TrainConfig(d_model=64, d_mlp=128, batch_size=64, train_digits="1-3", max_digits=6, steps=200, lr=3e-3,
                      checkpoint_every=1000)
    assert train(cfg, out, progress=False) == 0
    return out


def test_construction_scores_100_percent_through_the_cli(capsys):
    assert main(["--checkpoint", "construction", "--digits", "1-12", "--samples", "200", "--json", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["n"] for r in res["results"]] == list(range(1, 13))
    assert all(r["exact_match"] == 1.0 and r["token_accuracy"] == 1.0 and r["samples"] == 200 for r in res["results"])


def test_a_broken_model_scores_zero():
    """The metric can fail: the construction with its unembedding zeroed predicts token 0 everywhere."""
    model, desc = load_for_eval("construction", 4)
    with torch.no_grad():
        model.unembed.W_U.zero_()
    rows = evaluate(model, desc["positions"], [3, 4], 100)
    assert all(r["exact_match"] == 0.0 for r in rows)
    # only answer digits that happen to be 0 are right: about 1 in 10 plus the (often 0) overflow digit
    assert all(0.05 < r["token_accuracy"] < 0.5 for r in rows)


def test_teacher_forced_exact_match_equals_greedy_decoding(tiny_run):
    model, notes, _ = load_trained(tiny_run)
    agree = []
    for n in (1, 2, 3):
        batch = eval_batch(np.random.default_rng(5), 40, n, "coupled")
        tokens, pos, _ = batch.to_torch()
        em, right, _ = score_batch(model, tokens, pos, n)
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
    assert "coupled positions, trained on 1-3 digits" in table and len(table.strip().splitlines()) == 2 + 6
    res = json.loads(out.read_text())
    assert res["positions"] == "coupled" and res["seed"] == 999
    for r in res["results"]:
        assert 0.0 <= r["exact_match"] <= r["token_accuracy"] <= 1.0
    assert res["results"][0]["exact_match"] > res["results"][-1]["exact_match"]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_bad_input(tiny_run, tmp_path, capsys):
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
    assert main(["--checkpoint", "construction", "--digits", "5-2"]) == 2
    assert "bad digit range" in one_error_line(capsys)
    keep = tmp_path / "keep.json"
    keep.write_text("precious")
    assert main(["--checkpoint", "construction", "--digits", "2", "--out", str(keep)]) == 2
    assert "already exists" in one_error_line(capsys)
    assert keep.read_text() == "precious"
