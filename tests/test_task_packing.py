"""Packed copy and reverse rows (``lengthgen.task_batches.packed_sequence_rows``): every row read back
into its problems, each checked against plain string slicing and the task's own coupled IDs."""
from __future__ import annotations

import numpy as np
import pytest

from lengthgen.data import DataError
from lengthgen.task_batches import packed_sequence_rows, table_size, training_batch
from lengthgen.tasks import get_task
from lengthgen.train_config import TrainConfig


def _problems(task, tokens: np.ndarray, pos: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """``(x, y, IDs)`` of each problem of one row (split at its ``$`` tokens, padding dropped)."""
    text = "".join(task.vocabulary.tokens[t] for t in tokens)
    out, at = [], 0
    while at + 1 < len(text) and text[at + 1] != "$":
        end = text.index("$", at + 1)
        x, y = text[at + 1:end].split("=")
        out.append((x, y, pos[at:end + 1]))
        at = end
    return out


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_every_packed_row_holds_two_right_problems_with_disjoint_coupled_ids(name):
    task = get_task(name)
    n_ctx = table_size(name, "coupled", 40)
    b = packed_sequence_rows(name, np.random.default_rng(3), 200, 1, 10, n_ctx, pack=1.0)
    for r in range(200):
        probs = _problems(task, b.tokens[r], b.pos_ids[r])
        assert len(probs) == 2, r
        ranges = []
        for x, y, ids in probs:
            assert 1 <= len(x) <= 10 and y == (x[::-1] if name == "reverse" else x)
            s = int(ids[1:-1].min())                          # the task's IDs for its own start
            assert np.array_equal(ids, task.coupled_ids(len(x), s)) and ids.max() <= n_ctx - 1
            ranges.append((s, s + len(x)))
        (a0, a1), (b0, b1) = sorted(ranges)
        assert b0 - a1 - 1 >= 2                               # at least two free IDs between them
        answers = [k for k, t in enumerate(b.tokens[r]) if k and b.loss_mask[r, k - 1]]
        eq = [k for k, t in enumerate(b.tokens[r]) if t == task.EQUALS]
        ends = [k for k, t in enumerate(b.tokens[r]) if t == task.EOS][1:3]
        want = [k for e, f in zip(eq, ends) for k in range(e + 1, f + 1)]   # each y and its closing $
        assert answers == want


def test_half_packed_rows_are_one_problem_or_two():
    task = get_task("copy")
    b = training_batch("copy", np.random.default_rng(0), 400, 1, 10, "coupled", table_size("copy", "coupled", 40),
                       pack=0.5)
    counts = [len(_problems(task, b.tokens[r], b.pos_ids[r])) for r in range(400)]
    assert set(counts) == {1, 2} and 150 < counts.count(2) < 250


def test_pack_options_for_other_tasks_are_refused_in_one_line():
    TrainConfig(task="reverse", train_digits="1-10", max_digits=40, pack=0.5).validate()
    with pytest.raises(DataError, match="--pack is defined for addition, copy and reverse"):
        TrainConfig(task="multiplication_nx2", layers=2, train_digits="1-3", max_digits=6, pack=0.5).validate()
    with pytest.raises(DataError, match="--pack-problems above 2 is defined for addition only"):
        TrainConfig(task="copy", train_digits="1-10", max_digits=40, pack=0.5, pack_problems=3).validate()
    with pytest.raises(DataError, match="raise --max-digits to at least 23"):
        TrainConfig(task="copy", train_digits="1-10", max_digits=22, pack=0.5).validate()
    TrainConfig(task="copy", train_digits="1-10", max_digits=23, pack=0.5).validate()   # the advised table fits
