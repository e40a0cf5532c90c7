"""lengthgen.train --task trains what it names: every task's batches are correct instances of that
task (checked against Python integers and string slicing), with its vocabulary and coupled IDs."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from lengthgen import task_batches
from lengthgen.evaluate import evaluate, load_for_eval
from lengthgen.evaluate import main as evaluate_main
from lengthgen.tasks import TASKS
from lengthgen.train import TrainConfig, main, train

PATTERNS = {  # the text of one whole example, answer and final '$' included
    "addition": r"\$(\d+)\+(\d+)=(\d+)\$",
    "multiplication_nx1": r"\$(\d+)\*(\d+)=(\d+)\$",
    "multiplication_nx2": r"\$(\d+)\*(\d+)=(\d+)\$",
    "copy": r"\$(\d+)=(\d+)\$",
    "reverse": r"\$(\d+)=(\d+)\$",
}


def check_instance(task: str, text: str) -> tuple[str, list[str]]:
    """Assert ``text`` is a correct example of ``task`` (Python ints / strings); return the prompt
    and the tokens, in order, whose IDs must be shared (equal significance) under coupling."""
    match = re.fullmatch(PATTERNS[task], text)
    assert match, (task, text)
    if task == "addition":
        a, b, c = match.groups()
        n = len(a)
        assert len(b) == n and c == str(int(a) + int(b)).zfill(n + 1)[::-1]
    elif task.startswith("multiplication"):
        a, b, c = match.groups()
        m = int(task[-1])
        assert len(b) == m and (len(a) == 1 or a[0] != "0")
        assert c == str(int(a) * int(b)).zfill(len(a) + m)[::-1]
    else:
        x, y = match.groups()
        assert y == (x[::-1] if task == "reverse" else x)
    return text[: text.index("=") + 1], list(text)


def coupled_pairs(task: str, text: str) -> list[tuple[int, int]]:
    """Index pairs (in ``text``) of tokens that coupling must give the same position ID:
    digits of equal significance (addition, multiplication), or an output digit and the input digit
    it copies (copy, reverse)."""
    eq = text.index("=")
    out_start = eq + 1
    if task in ("copy", "reverse"):
        n = eq - 1
        src = (lambda j: 1 + j) if task == "copy" else (lambda j: n - j)
        return [(src(j), out_start + j) for j in range(n)]
    op = text.index("+" if task == "addition" else "*")
    a_lsb, b_lsb = op - 1, eq - 1
    pairs = [(a_lsb - i, out_start + i) for i in range(op - 1)]  # a_i and c_i
    pairs += [(b_lsb - i, out_start + i) for i in range(eq - op - 1)]  # b_i and c_i
    return pairs


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("positions", ["coupled", "ape"])
def test_training_batches_are_correct_instances_of_the_task(task, positions, tmp_path, monkeypatch):
    seen = []
    real = task_batches.training_batch

    def recording(*args, **kw):
        batch = real(*args, **kw)
        seen.append(batch)
        return batch

    monkeypatch.setattr(task_batches, "training_batch", recording)
    torch.set_num_threads(1)
    cfg = TrainConfig(task=task, positions=positions, d_model=16, d_mlp=32, batch_size=24, train_digits="1-4",
                      max_digits=6, steps=3, checkpoint_every=100)
    assert train(cfg, tmp_path / "run", progress=False) == 0
    assert len(seen) == 3
    vocab = TASKS[task].vocab
    for batch in seen:
        for row in range(len(batch.tokens)):
            text = "".join(vocab[t] for t in batch.tokens[row])
            end = text.index("$", text.index("=")) + 1  # the rest is padding
            assert set(text[end:]) <= {"$"} and (batch.pos_ids[row, end:] == 0).all()
            prompt, _ = check_instance(task, text[:end])
            # the loss covers exactly the answer and the final '$'
            assert np.flatnonzero(batch.loss_mask[row]).tolist() == list(range(len(prompt) - 1, end - 1))
            ids = batch.pos_ids[row]
            assert ids.max() < 8 + 2 * 6 + 4 and ids[0] == 0
            if positions == "coupled":
                assert all(ids[i] == ids[j] for i, j in coupled_pairs(task, text[:end])), (text[:end], ids[:end])
                assert (ids[1:end - 1] > 0).all()
            else:
                assert (ids[:end] == np.arange(end)).all()
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["config"]["task"] == task
    model, desc = load_for_eval(str(tmp_path / "run"), 6)
    assert desc["task"] == task and model.annotations.vocab == list(vocab) and model.cfg.d_vocab == len(vocab)
    rows = evaluate(model, positions, [2, 6], 10, task=task)  # evaluation follows the task
    assert [r["n"] for r in rows] == [2, 6] and all(0 <= r["token_accuracy"] <= 1 for r in rows)


def test_evaluation_batches_follow_the_task():
    rng = np.random.default_rng(0)
    for task in TASKS:
        batch = task_batches.eval_batch(task, rng, 20, 7, "coupled")
        vocab = TASKS[task].vocab
        for row in batch.tokens:
            text = "".join(vocab[t] for t in row)
            prompt, _ = check_instance(task, text)
            first_operand = re.match(r"\$(\d+)", prompt).group(1)
            assert len(first_operand) == 7


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_a_task_trained_and_evaluated_through_the_clis(tmp_path, capsys):
    out = tmp_path / "rev"
    tiny = ["--d-model", "16", "--d-mlp", "32", "--batch-size", "16", "--train-digits", "1-3", "--max-digits", "5",
            "--no-progress", "--threads", "1"]
    assert main(["--task", "reverse", "--steps", "2", "--out", str(out), *tiny]) == 0
    capsys.readouterr()
    assert evaluate_main(["--checkpoint", str(out), "--digits", "1-5", "--samples", "8", "--json", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["task"] == "reverse" and [r["n"] for r in res["results"]] == [1, 2, 3, 4, 5]
    assert evaluate_main(["--checkpoint", str(out), "--digits", "6", "--no-progress"]) == 2
    assert "do not fit the position table" in one_error_line(capsys)
    # what cannot be trained is refused with one line, before anything is written
    assert main(["--task", "multiplication_nx1", "--pack", "0.5", "--out", str(tmp_path / "p"), *tiny]) == 2
    assert "--pack is defined for addition, copy and reverse" in one_error_line(capsys)
    assert main(["--task", "copy", "--pack", "0.5", "--out", str(tmp_path / "p"), *tiny]) == 2
    assert "raise --max-digits to at least" in one_error_line(capsys)     # packable, but the table is too small
    assert main(["--task", "division", "--out", str(tmp_path / "p"), *tiny]) == 2
    assert "unknown task" in one_error_line(capsys)
    assert not (tmp_path / "p").exists()
