"""The coupled position-ID rule (Cho et al. 2024 §3; docs/theorem-5-1.md, "Position IDs")."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lengthgen.positions import coupled_addition_ids, coupled_sink_addition_ids, random_start
from lengthgen.tasks import ADDITION, get_task


def test_paper_worked_example() -> None:
    inst = ADDITION.instance("653", "49", start=2)
    assert ADDITION.decode(inst.tokens) == "$653+049=2070$"
    assert inst.pos_ids.tolist() == [0, 2, 3, 4, 5, 2, 3, 4, 5, 4, 3, 2, 1, 0]
    # Figure 2 of the paper uses start 6: operands 6 7 8, '+'/'=' 9, answer 8 7 6 5
    assert coupled_addition_ids(3, start=6).tolist() == [0, 6, 7, 8, 9, 6, 7, 8, 9, 8, 7, 6, 5, 0]


@given(n=st.integers(1, 300), start=st.integers(2, 50))
def test_equal_significance_shares_an_id(n: int, start: int) -> None:
    ids = coupled_addition_ids(n, start)
    assert len(ids) == 3 * n + 5 and ids[0] == ids[-1] == 0
    a_ids = {i: ids[1 + (n - 1 - i)] for i in range(n)}
    b_ids = {i: ids[n + 2 + (n - 1 - i)] for i in range(n)}
    c_ids = {i: ids[2 * n + 3 + i] for i in range(n + 1)}
    for i in range(n):
        assert a_ids[i] == b_ids[i] == c_ids[i] == start + n - 1 - i
    assert c_ids[n] == start - 1 and ids[n + 1] == ids[2 * n + 2] == start + n
    assert ids.max() == start + n and sorted(set(ids.tolist()) - {0}) == list(range(start - 1, start + n + 1))


def test_random_start_keeps_ids_in_table() -> None:
    rng = np.random.default_rng(0)
    starts = random_start(rng, n=5, max_id=20, size=2000)
    assert starts.min() == 2 and starts.max() == 15
    with pytest.raises(ValueError, match="cannot hold"):
        random_start(rng, n=19, max_id=20)


def test_addition_task_oracle() -> None:
    task = get_task("addition")
    assert task.next_token("$653+049=") == "2" and task.next_token("$653+049=207") == "0"
    assert task.next_token("$653+049=2070") == "$"
    assert task.answer(99, 1) == "001$"
    with pytest.raises(ValueError):
        get_task("division")
    with pytest.raises(ValueError, match="non-digit"):
        ADDITION.instance("12a", "3")


def test_coupled_sink_rule_moves_only_the_dollars_onto_the_top_carry_id() -> None:
    """The paper's worked example under coupled-sink: both $ take c_n's ID s - 1 (here 1)."""
    assert coupled_sink_addition_ids(3, 2).tolist() == [1, 2, 3, 4, 5, 2, 3, 4, 5, 4, 3, 2, 1, 1]
    assert coupled_sink_addition_ids(1, 7).tolist() == [6, 7, 8, 7, 8, 7, 6, 6]
