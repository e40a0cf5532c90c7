"""lengthgen.data: vectorized addition batches."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lengthgen.packing import packed_rows
from lengthgen.data import (
    DataError, add_digits, check_pack_fits, batch_from_operands, check_digits, eval_batch, layout, packed_training_batch,
    parse_digit_list, parse_digit_range, sample_numbers, table_digits, table_size, training_batch,
)
from lengthgen.positions import coupled_addition_ids, coupled_sink_addition_ids
from lengthgen.tasks import ADDITION

numbers = st.one_of(st.integers(0, 10**6), st.integers(0, 10**12), st.sampled_from([0, 9, 99, 999999, 10**9 - 1]))


def digits_lsb(x: int, width: int) -> np.ndarray:
    return np.array([int(c) for c in str(x).zfill(width)[::-1]], dtype=np.int64)


@given(st.lists(st.tuples(numbers, numbers), min_size=1, max_size=6))
def test_coupled_layout_equals_the_task_instance(pairs):
    batch = batch_from_operands(pairs, "coupled")
    T = batch.tokens.shape[1]
    for row, (a, b) in enumerate(pairs):
        inst = ADDITION.instance(a, b, start=2)
        L = len(inst.tokens)
        assert (batch.tokens[row, :L] == inst.tokens).all()
        assert (batch.pos_ids[row, :L] == inst.pos_ids).all()
        assert (batch.tokens[row, L:] == ADDITION.EOS).all() and (batch.pos_ids[row, L:] == 0).all()
        # loss covers exactly the predictions of c_0..c_n and the final EOS
        assert batch.loss_mask[row].sum() == inst.n + 2
        targets = batch.tokens[row, 1:][batch.loss_mask[row]]
        assert (targets == inst.answer_tokens).all()
        assert T == 3 * int(batch.n.max()) + 5


@given(st.lists(st.tuples(numbers, numbers), min_size=1, max_size=20))
def test_add_digits_is_exact(pairs):
    W = max(len(str(x)) for p in pairs for x in p)
    a = np.stack([digits_lsb(x, W) for x, _ in pairs])
    b = np.stack([digits_lsb(y, W) for _, y in pairs])
    c = add_digits(a, b)
    for row, (x, y) in enumerate(pairs):
        assert int("".join(map(str, c[row][::-1]))) == x + y


def test_long_carry_chains():
    a = np.array([digits_lsb(10**40 - 1, 41), digits_lsb(5 * 10**39 + 10**20 - 1, 41)])
    b = np.array([digits_lsb(1, 41), digits_lsb(5 * 10**39 + 1, 41)])
    c = add_digits(a, b)
    assert int("".join(map(str, c[0][::-1]))) == 10**40
    assert int("".join(map(str, c[1][::-1]))) == 10**40 + 10**20


def test_ape_and_nope_layouts():
    ape = batch_from_operands([(653, 49), (5, 7)], "ape")
    assert (ape.pos_ids[0, :14] == np.arange(14)).all() and (ape.pos_ids[0, 14:] == 0).all()
    assert (ape.pos_ids[1, :8] == np.arange(8)).all()
    for scheme in ("nope", "hard-alibi"):
        b = batch_from_operands([(653, 49)], scheme)
        assert b.pos_ids is None
        assert (b.tokens == ape.tokens[:1]).all()


def test_training_batch_shapes_lengths_and_ids():
    rng = np.random.default_rng(0)
    seen_ids, seen_n = set(), []
    for _ in range(40):
        b = training_batch(rng, 256, 1, 5, "coupled", n_ctx=18)
        B, T = b.tokens.shape
        assert B == 256 and T == 3 * int(b.n.max()) + 5 and b.loss_mask.shape == (B, T - 1)
        assert b.n.min() >= 1 and b.n.max() <= 5
        assert b.pos_ids.min() >= 0 and b.pos_ids.max() <= 17
        seen_ids |= set(np.unique(b.pos_ids).tolist())
        seen_n += b.n.tolist()
        for row in range(0, B, 37):  # every row is a correct addition with coupled IDs at its own start
            n = int(b.n[row])
            s = int(b.pos_ids[row, 1])
            assert 2 <= s <= 17 - n
            assert (b.pos_ids[row, : 3 * n + 5] == coupled_addition_ids(n, s)).all()
            text = ADDITION.decode(b.tokens[row, : 3 * n + 5])
            x, rest = text[1:].split("+")
            y, ans = rest.split("=")
            assert int(ans[:-1][::-1]) == int(x) + int(y)
    assert seen_ids == set(range(18))  # the random start trains every row of the table
    # n = max of two independent uniform lengths on 1..5: P(n = k) = (2k - 1) / 25
    freq = np.bincount(seen_n, minlength=6)[1:] / len(seen_n)
    assert np.allclose(freq, (2 * np.arange(1, 6) - 1) / 25, atol=0.015)


def split_problems(tokens: np.ndarray) -> list[tuple[int, int]]:
    """Token-index spans [start, end] of the ``$ a+b=c $`` problems in a packed row (shared ``$``)."""
    text = ADDITION.decode(tokens)
    dollars = [i for i, ch in enumerate(text) if ch == "$"]
    return [(i, j) for i, j in zip(dollars, dollars[1:]) if j > i + 1]


def check_packed_rows(b, max_problems: int, max_id: int, scheme: str = "coupled", hi: int = 5) -> tuple[list[int], int]:
    """Every row holds 1..max_problems correct additions, each with its own coupled IDs and the
    loss on its answer and final $, the ID ranges disjoint, at least 2 apart, inside 1..max_id.
    Each problem's opening $ (the previous one's closing $) and the row's last $ have ID 0, or under
    coupled-sink their problem's top-carry ID s - 1.
    Returns the number of problems per row and the widest ID distance between two problems."""
    rule = coupled_sink_addition_ids if scheme == "coupled-sink" else coupled_addition_ids
    counts, max_gap = [], 0
    assert b.pos_ids.min() >= 0 and b.pos_ids.max() <= max_id
    for row in range(len(b.tokens)):
        spans = split_problems(b.tokens[row])
        assert 1 <= len(spans) <= max_problems
        ranges = []
        for i, j in spans:  # each problem: a correct sum, its own coupled IDs, loss on c and the final $
            text = ADDITION.decode(b.tokens[row, i : j + 1])
            x, rest = text[1:].split("+")
            y, ans = rest.split("=")
            n = len(x)
            assert len(y) == n <= hi and int(ans[:-1][::-1]) == int(x) + int(y)
            s = int(b.pos_ids[row, i + 1])
            ids = rule(n, s)
            assert (b.pos_ids[row, i : j] == ids[:-1]).all()
            assert b.loss_mask[row, j - n - 2 : j].all() and not b.loss_mask[row, i : j - n - 2].any()
            ranges.append((s - 1, s + n))
        assert b.loss_mask[row].sum() == sum(hi - lo + 1 for lo, hi in ranges)  # n + 2 per problem
        assert not b.loss_mask[row, spans[-1][1]:].any()
        end = spans[-1][1]
        assert (b.tokens[row, end:] == ADDITION.EOS).all() and (b.pos_ids[row, end + 1:] == 0).all()
        assert b.pos_ids[row, end] == (0 if scheme == "coupled" else int(b.pos_ids[row, end - 1]))  # c_n's ID
        ranges.sort()
        assert ranges[0][0] >= 1 and ranges[-1][1] <= max_id
        assert all(lo2 - hi1 >= 2 for (_, hi1), (lo2, _) in zip(ranges, ranges[1:]))  # disjoint, 2 apart
        counts.append(len(ranges))
        if len(ranges) > 1:
            max_gap = max(max_gap, ranges[-1][1] - ranges[0][0])
    return counts, max_gap


def test_packed_training_batch_rows_are_one_or_two_correct_additions():
    rng = np.random.default_rng(3)
    counts, max_gap = [], 0
    for _ in range(10):
        c, g = check_packed_rows(packed_training_batch(rng, 128, 1, 5, n_ctx=18, pack=0.5), 2, 17)
        counts, max_gap = counts + c, max(max_gap, g)
    assert 0.4 < counts.count(2) / 1280 < 0.6
    assert max_gap >= 15  # far-apart IDs do meet


def test_rows_packed_with_up_to_five_problems_are_correct_additions_in_every_order():
    rng = np.random.default_rng(4)
    counts, max_gap, orders = [], 0, set()
    for _ in range(6):
        b = packed_rows(rng, 128, 1, 5, n_ctx=53, pack=0.75, problems=5)
        c, g = check_packed_rows(b, 5, 52)
        counts, max_gap = counts + c, max(max_gap, g)
        for row in np.nonzero(np.array(c) >= 3)[0]:  # the order of the ID ranges along the ID axis
            starts = [int(b.pos_ids[row, i + 1]) for i, _ in split_problems(b.tokens[row])]
            orders.add(tuple(np.argsort(starts[:3])))
    assert 0.2 < counts.count(1) / len(counts) < 0.3                 # 1 - pack
    assert all(counts.count(k) > 0.1 * len(counts) for k in (2, 3, 4, 5))  # k uniform on 2..5
    assert max_gap >= 45 and len(orders) == 6                        # far IDs meet; ranges in any order


@pytest.mark.parametrize("hi, problems", [(3, 2), (8, 2), (5, 5)])
def test_the_advised_max_digits_is_the_smallest_table_that_fits(hi, problems):
    """The refusal's advice, read back: its --max-digits gives a table that holds the packed
    problems, one digit fewer does not (the advice once asked for a table one ID short)."""
    import re

    with pytest.raises(DataError) as err:
        check_pack_fits(hi, table_size("coupled", hi), problems)
    advised = int(re.search(r"at least (\d+)", str(err.value)).group(1))
    check_pack_fits(hi, table_size("coupled", advised), problems)
    with pytest.raises(DataError):
        check_pack_fits(hi, table_size("coupled", advised - 1), problems)


def test_rows_of_many_problems_refuse_a_table_too_small():
    with pytest.raises(DataError, match="max-digits"):
        packed_rows(np.random.default_rng(0), 4, 1, 5, n_ctx=40, pack=1.0, problems=5)  # needs 43 IDs
    packed_rows(np.random.default_rng(0), 4, 1, 5, n_ctx=44, pack=1.0, problems=5)    # 43 fit


def test_packed_training_batch_refuses_a_table_too_small():
    with pytest.raises(DataError, match="max-digits"):
        packed_training_batch(np.random.default_rng(0), 4, 1, 8, n_ctx=18, pack=1.0)


def test_sample_numbers_balanced():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 6, size=20000)
    d = sample_numbers(rng, lengths, 5)
    lead = d[np.arange(len(d)), lengths - 1]
    assert (lead[lengths >= 2] >= 1).all()
    assert (lead[lengths == 1] == 0).any()  # 1-digit numbers include 0
    col = np.arange(5)[None, :]
    assert (d[col >= lengths[:, None]] == 0).all()


def test_eval_batch_fixed_start_and_exact_length():
    b1 = eval_batch(np.random.default_rng([999, 7]), 64, 7, "coupled")
    b2 = eval_batch(np.random.default_rng([999, 7]), 64, 7, "coupled")
    assert (b1.tokens == b2.tokens).all()
    assert (b1.pos_ids == coupled_addition_ids(7, 2)[None, :]).all()
    assert (b1.tokens[:, 1] != 0).all() and (b1.tokens[:, 9] != 0).all()  # both operands have 7 digits


def test_digit_lists_take_ranges_with_steps():
    assert parse_digit_list("1-10,15-100:5") == [*range(1, 11), *range(15, 101, 5)]
    assert parse_digit_list("7") == [7] and parse_digit_list("1-3:1") == [1, 2, 3]
    assert parse_digit_list("5, 1-5:2 ,20") == [1, 3, 5, 20]      # sorted, repeats merged, spaces allowed
    assert parse_digit_list("10-12:7") == [10]                     # a step past the end keeps the first
    for bad in ("1-10:0", "1-10:x", "1-10:-2", "0-3", "5-1", "1,,2", "", "1-5:"):
        with pytest.raises(DataError):
            parse_digit_list(bad)


def test_digit_ranges_and_tables():
    assert parse_digit_range("1-5") == (1, 5) and parse_digit_range("6") == (6, 6)
    for bad in ("0-3", "5-1", "a", "1-2-3", ""):
        with pytest.raises(DataError):
            parse_digit_range(bad)
    assert table_size("coupled", 15) == 18 and table_digits("coupled", 18) == 15
    assert table_digits("ape", table_size("ape", 15)) == 15 and table_digits("nope", 1) is None
    with pytest.raises(DataError, match="at most 15 digits"):
        check_digits("coupled", 18, 16)
    with pytest.raises(DataError, match="unknown position scheme"):
        layout(np.zeros((1, 2), np.int64), np.zeros((1, 2), np.int64), np.array([2]), "rope")
    with pytest.raises(DataError):
        training_batch(np.random.default_rng(0), 4, 1, 16, "coupled", n_ctx=18)


@pytest.mark.parametrize("problems", [2, 6])
def test_coupled_sink_rows_differ_from_coupled_ones_only_in_the_ids_of_dollar(problems):
    """The same random draws laid out under both rules: the tokens, the loss and every ID but the
    $ tokens' are equal, and each $ sits at its problem's top-carry ID s - 1 (a shared $ at the
    next problem's, whose opening $ it is), packed or not."""
    def batch(scheme):
        rng = np.random.default_rng([5, problems])
        if problems == 2:
            return packed_training_batch(rng, 96, 1, 10, n_ctx=103, pack=0.5, scheme=scheme)
        return packed_rows(rng, 96, 1, 10, n_ctx=103, pack=0.5, problems=problems, scheme=scheme)

    paper, sink = batch("coupled"), batch("coupled-sink")
    counts, _ = check_packed_rows(sink, problems, 102, scheme="coupled-sink", hi=10)
    check_packed_rows(paper, problems, 102, hi=10)
    assert min(counts) == 1 and max(counts) == problems
    dollar = paper.tokens == ADDITION.EOS
    assert (paper.tokens == sink.tokens).all() and (paper.loss_mask == sink.loss_mask).all()
    assert (paper.pos_ids[~dollar] == sink.pos_ids[~dollar]).all() and (paper.pos_ids[dollar] == 0).all()
    assert (sink.pos_ids[dollar] > 0).sum() == sum(counts) + len(counts)  # every problem's $ and each row's last


def test_coupled_sink_single_rows_and_evaluation():
    rng = np.random.default_rng(6)
    b = training_batch(rng, 64, 1, 7, "coupled-sink", n_ctx=table_size("coupled-sink", 20))
    for row in range(64):
        n = int(b.n[row])
        s = int(b.pos_ids[row, 1])  # token 1 is a_{n-1}, whose ID is the start s
        assert (b.pos_ids[row, : 3 * n + 5] == coupled_sink_addition_ids(n, s)).all()
    e = eval_batch(rng, 4, 9, "coupled-sink")
    assert (e.pos_ids == coupled_sink_addition_ids(9, 2)[None]).all()
    assert table_size("coupled-sink", 50) == table_size("coupled", 50) == 53
    assert table_digits("coupled-sink", 53) == 50
