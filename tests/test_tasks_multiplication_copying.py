"""Multiplication (N×1, N×2), copy and reverse tasks (Cho et al. 2024; docs/training.md), and the
task registry. Answers and position IDs are re-derived here from the paper's rules with plain
Python, never through the code under test."""
from __future__ import annotations

import itertools
import re
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lengthgen.tasks import ADDITION, COPY, MULTIPLICATION_NX1, MULTIPLICATION_NX2, REVERSE, TASKS, get_task

NEW_TASKS = [MULTIPLICATION_NX1, MULTIPLICATION_NX2, COPY, REVERSE]


def full_answer(task_name: str, prompt: str) -> str:
    """Independent oracle: the whole answer (reversed product / copy / reverse) and '$'."""
    if task_name.startswith("multiplication"):
        a, b = re.fullmatch(r"\$(\d+)\*(\d+)=", prompt).groups()
        return str(int(a) * int(b)).zfill(len(a) + len(b))[::-1] + "$"
    if task_name == "addition":
        a, b = re.fullmatch(r"\$(\d+)\+(\d+)=", prompt).groups()
        return str(int(a) + int(b)).zfill(len(a) + 1)[::-1] + "$"
    x = re.fullmatch(r"\$(\d+)=", prompt).group(1)
    return (x[::-1] if task_name == "reverse" else x) + "$"


def test_registry_lists_every_task_and_keeps_get_task_behaviour():
    assert set(TASKS) == {"addition", "multiplication_nx1", "multiplication_nx2", "copy", "reverse"}
    assert get_task("addition") is ADDITION
    for task in NEW_TASKS:
        assert get_task(task.name) is task
    with pytest.raises(ValueError, match="unknown task 'division'; choose one of addition, copy"):
        get_task("division")


@pytest.mark.parametrize("task", NEW_TASKS, ids=lambda t: t.name)
def test_vocabulary_ids_are_indices_and_round_trip(task):
    assert list(task.vocab[:10]) == list("0123456789") and task.vocab[-1] == "$"
    assert len(set(task.vocab)) == len(task.vocab)
    text = "$" + "".join(task.vocab) + "$"
    ids = task.encode(text)
    assert [task.vocab[i] for i in ids] == list(text)
    assert task.decode(ids) == text
    with pytest.raises(ValueError, match="not in the vocabulary"):
        task.encode("$12+3=" if task is not ADDITION else "$12*3=")


@given(a=st.integers(0, 10**30), b=st.integers(0, 99), data=st.data())
def test_multiplication_answer_and_next_tokens_match_integer_arithmetic(a, b, data):
    task = data.draw(st.sampled_from([MULTIPLICATION_NX1, MULTIPLICATION_NX2]))
    b = b % 10 ** task.m
    a_text, b_text = str(a), str(b).zfill(task.m)
    prompt = f"${a_text}*{b_text}="
    assert task.prompt(a, b) == prompt
    want = full_answer(task.name, prompt)
    assert task.answer(a, b) == want
    assert len(want) == len(a_text) + task.m + 1
    for k in range(len(want)):  # teacher forcing along the whole answer
        assert task.next_token(prompt + want[:k]) == want[k]


@given(x=st.text("0123456789", min_size=1, max_size=40))
def test_copy_and_reverse_answers_and_next_tokens(x):
    for task in (COPY, REVERSE):
        prompt = f"${x}="
        want = (x[::-1] if task.reverse else x) + "$"
        assert task.prompt(x) == prompt and task.answer(x) == want
        for k in range(len(want)):
            assert task.next_token(prompt + want[:k]) == want[k]


@pytest.mark.parametrize("task,bad", [
    (MULTIPLICATION_NX2, "$12*3="), (MULTIPLICATION_NX1, "$12*34="), (MULTIPLICATION_NX1, "$12+3="),
    (MULTIPLICATION_NX2, "$12*03=9"), (MULTIPLICATION_NX2, "$12*03=63000$"), (COPY, "$12=2"), (COPY, "12="),
    (REVERSE, "$12=1"), (REVERSE, "$=")])
def test_next_token_rejects_malformed_or_wrong_prefixes(task, bad):
    with pytest.raises(ValueError):
        task.next_token(bad)


def test_second_operand_longer_than_m_is_rejected():
    with pytest.raises(ValueError, match="at most 1 digit"):
        MULTIPLICATION_NX1.instance(12, 34)


def test_multiplication_position_ids_follow_the_paper_era_rule():
    # the N×M coupling rule with N = 3, M = 2, s = 1: e = 6
    inst = MULTIPLICATION_NX2.instance(653, 7, start=1)
    assert MULTIPLICATION_NX2.decode(inst.tokens) == "$653*07=17540$"
    assert inst.pos_ids.tolist() == [0, 3, 4, 5, 6, 4, 5, 6, 5, 4, 3, 2, 1, 0]
    for n, m, s in itertools.product((1, 4, 7), (1, 2), (1, 5)):
        task = MULTIPLICATION_NX1 if m == 1 else MULTIPLICATION_NX2
        ids = task.instance("9" * n, "1" * m, start=s).pos_ids.tolist()
        e = s + n + m
        a = [e - n + k for k in range(n)]       # MSB first
        b = [e - m + k for k in range(m)]
        c = [e - 1 - i for i in range(n + m)]   # c_i gets e - 1 - i
        assert ids == [0] + a + [e] + b + [e] + c + [0]
        assert task.position_ids(task.prompt("9" * n, "1" * m), s).tolist() == ids[: n + m + 3]


def test_copy_and_reverse_position_ids():
    # the poster's reverse example "$ a c a b = b a c a $" -> 0 5 6 7 8 9 8 7 6 5 0 (s = 5)
    assert REVERSE.instance("4546", start=5).pos_ids.tolist() == [0, 5, 6, 7, 8, 9, 8, 7, 6, 5, 0]
    assert COPY.instance("4546", start=1).pos_ids.tolist() == [0, 2, 3, 4, 5, 1, 2, 3, 4, 5, 0]
    for n, s in itertools.product((1, 3, 9), (1, 4)):
        x = "".join(str(k % 10) for k in range(n))
        rev = REVERSE.instance(x, start=s)
        # every output token shares its ID with the input digit it copies
        for j in range(n):
            out_tok, out_id = rev.tokens[n + 2 + j], rev.pos_ids[n + 2 + j]
            src = n - 1 - j
            assert out_tok == rev.tokens[1 + src] and out_id == rev.pos_ids[1 + src]
        cp = COPY.instance(x, start=s)
        assert cp.pos_ids[1 : n + 1].tolist() == cp.pos_ids[n + 2 : 2 * n + 2].tolist() == list(range(s + 1, s + n + 1))
        assert COPY.position_ids(f"${x}=", s).tolist() == cp.pos_ids[: n + 2].tolist()


def _sensitive_groups(task_name: str, template: str) -> int:
    """Independently: fill the slots every way, group by (token multiset, last token), count the groups
    whose prompts have different correct next tokens."""
    slots = template.count("_")
    groups: dict[tuple, set[str]] = defaultdict(set)
    for digits in itertools.product("0123456789", repeat=slots):
        it = iter(digits)
        prompt = "".join(next(it) if c == "_" else c for c in template)
        groups[(tuple(sorted(prompt)), prompt[-1])].add(full_answer(task_name, prompt)[0])
    return sum(len(answers) > 1 for answers in groups.values())


@pytest.mark.parametrize("task_name,template_1,template_2", [
    ("addition", "$_+_=", "$__+__="), ("multiplication_nx1", "$_*_=", "$__*_="), ("copy", "$_=", "$__="),
    ("reverse", "$_=", "$__="),
])
def test_no_permutation_sensitive_pair_below_min_digits(task_name, template_1, template_2):
    """The claim behind the 'n_digits >= 2' rule: no pair at length 1, pairs at length 2."""
    assert _sensitive_groups(task_name, template_1) == 0
    assert _sensitive_groups(task_name, template_2) > 0
    assert getattr(get_task(task_name), "min_digits", 2) == 2


def test_nx2_has_pairs_with_a_one_digit_first_operand():
    assert _sensitive_groups("multiplication_nx2", "$_*__=") > 0
    assert MULTIPLICATION_NX2.min_digits == 1
    assert MULTIPLICATION_NX2.query_template(1) == "$_*__="


def test_instances_accept_digit_arrays():
    inst = MULTIPLICATION_NX1.instance(np.array([0, 4], np.uint8), np.array([3], np.uint8))
    assert MULTIPLICATION_NX1.decode(inst.tokens) == "$04*3=210$"
    assert REVERSE.decode(REVERSE.instance(np.array([1, 2, 3])).tokens) == "$123=321$"
