"""Training and evaluation batches for every task of :mod:`lengthgen.tasks`.

Addition keeps its vectorized builders (:func:`lengthgen.data.training_batch`, which also packs
rows); the other tasks (``multiplication_nx1``, ``multiplication_nx2``, ``copy``, ``reverse``) lay
out each row with the task's own ``instance``, so the tokens, the vocabulary and the coupled
position IDs are exactly the task's (docs/training.md, "Data formats"):

* multiplication N×M: ``$ a * b = reversed(a·b) $``, ``a`` of N digits, ``b`` zero-padded to M
  digits, the product zero-padded to N + M digits; coupled IDs ``e−1−i`` for a_i, b_i, c_i with
  ``e = s + N + M`` (Cho et al. 2024, the N×2 experiments);
* copy / reverse: ``$ x = y $``; copy couples x_i and y_i, reverse couples y_j with the x it copies.

Rows of different lengths are right-padded with ``$`` and position ID 0; the model is causal, so
padding never changes an earlier prediction. The loss mask covers the answer and the final ``$``.
Sampling follows the addition data: the (first) operand length is uniform on ``lo..hi``, numbers
longer than one digit have a non-zero leading digit (copy and reverse draw every digit freely); the
multiplier ``b`` has a uniform length 1..M in training and exactly M digits in evaluation. Coupled
rows draw their start ID uniformly so that the whole sequence stays inside the position table;
evaluation fixes the start (``EVAL_STARTS``).
"""
from __future__ import annotations

import numpy as np

from . import data, packing
from .data import Batch, DataError, check_scheme
from .tasks import get_task

#: coupled start ID s used at evaluation (addition: the construction's s = 2, see lengthgen.data)
EVAL_STARTS = {"addition": data.EVAL_START}
DEFAULT_EVAL_START = 1


def second_operand_digits(task_name: str) -> int:
    """M for multiplication N×M, 0 for tasks with one operand (copy, reverse), n for addition."""
    return getattr(get_task(task_name), "m", 0)


def sequence_length(task_name: str, n: int) -> int:
    """Tokens of a whole example with an n-digit (first) operand, final ``$`` included."""
    if task_name == "addition":
        return 3 * n + 5
    m = second_operand_digits(task_name)
    return 2 * n + 3 if m == 0 else 2 * (n + m) + 4


def check_task_scheme(task_name: str, scheme: str) -> None:
    """``coupled-sink`` moves addition's ``$`` onto the top carry's ID; other tasks have no such digit."""
    check_scheme(scheme)
    get_task(task_name)
    if scheme == "coupled-sink" and task_name != "addition":
        raise DataError(f"--positions coupled-sink is defined for addition (its $ takes the top carry's ID); "
                        f"use --positions coupled for {task_name}")


def table_size(task_name: str, scheme: str, max_digits: int) -> int:
    """Rows of ``W_pos`` needed to evaluate (first) operands of up to ``max_digits`` digits."""
    check_task_scheme(task_name, scheme)
    if task_name == "addition":
        return data.table_size(scheme, max_digits)
    if scheme == "coupled":  # largest ID s + N + M at the evaluation start
        return DEFAULT_EVAL_START + max_digits + second_operand_digits(task_name) + 1
    if scheme == "ape":
        return sequence_length(task_name, max_digits)
    return 1


def table_digits(task_name: str, scheme: str, n_ctx: int) -> int | None:
    """Longest (first) operands a table of ``n_ctx`` rows can hold (``None``: unlimited)."""
    if task_name == "addition":
        return data.table_digits(scheme, n_ctx)
    check_task_scheme(task_name, scheme)
    if scheme == "coupled":
        return n_ctx - 1 - DEFAULT_EVAL_START - second_operand_digits(task_name)
    if scheme == "ape":
        return (n_ctx - sequence_length(task_name, 0)) // 2
    return None


def check_digits(task_name: str, scheme: str, n_ctx: int, n: int, what: str = "this model") -> None:
    """:class:`DataError` if n-digit operands do not fit the position table."""
    limit = table_digits(task_name, scheme, n_ctx)
    if limit is not None and n > limit:
        raise DataError(f"{n}-digit operands do not fit the position table of {what} "
                        f"({task_name}, {scheme}, {n_ctx} position rows: at most {limit} digits)")


def _number(rng: np.random.Generator, length: int, free_lead: bool) -> str:
    """A ``length``-digit decimal string; its leading digit is non-zero unless ``free_lead`` or length 1."""
    digits = rng.integers(0, 10, size=length)
    if length > 1 and not free_lead:
        digits[0] = rng.integers(1, 10)
    return "".join(map(str, digits))


def _operands(task_name: str, rng: np.random.Generator, n: int, training: bool) -> tuple[str, ...]:
    """One example's operands with an n-digit first operand."""
    m = second_operand_digits(task_name)
    if m == 0:  # copy, reverse
        return (_number(rng, n, free_lead=True),)
    m_len = int(rng.integers(1, m + 1)) if training else m
    return _number(rng, n, free_lead=False), _number(rng, m_len, free_lead=False)


def _rows(task_name: str, scheme: str, operands: list[tuple[str, ...]], starts: np.ndarray) -> Batch:
    """Lay out one row per operand tuple with the task's ``instance`` and pad them to one length."""
    task = get_task(task_name)
    insts = [task.instance(*ops, start=int(s)) for ops, s in zip(operands, starts)]
    T = max(len(i.tokens) for i in insts)
    tokens = np.full((len(insts), T), task.EOS, dtype=np.int64)
    pos = np.zeros((len(insts), T), dtype=np.int64)
    mask = np.zeros((len(insts), T - 1), dtype=bool)
    for row, inst in enumerate(insts):
        L = len(inst.tokens)
        tokens[row, :L] = inst.tokens
        pos[row, :L] = inst.pos_ids if scheme == "coupled" else np.arange(L)
        mask[row, inst.prompt_len - 1 : L - 1] = True
    n = np.array([i.n for i in insts], dtype=np.int64)
    return Batch(tokens=tokens, pos_ids=pos if data.uses_positions(scheme) else None, loss_mask=mask, n=n)


def _starts(task_name: str, rng: np.random.Generator, n: np.ndarray, n_ctx: int, scheme: str) -> np.ndarray:
    """Random coupled start IDs s with every ID of the row inside ``1 .. n_ctx − 1``."""
    if scheme != "coupled":
        return np.full(len(n), DEFAULT_EVAL_START)
    widest = n + second_operand_digits(task_name)  # largest ID is s + widest
    if np.any(n_ctx - 1 - widest < 1):
        raise DataError(f"a position table of {n_ctx} rows cannot hold {int(n.max())}-digit {task_name} examples")
    return rng.integers(1, n_ctx - widest)


PACKABLE = ("copy", "reverse")   # besides addition: tasks whose rows can hold two problems (packed_sequence_rows)


def check_sequence_pack_fits(hi: int, n_ctx: int, gap: int = 2) -> None:
    """Two ``hi``-digit copy/reverse problems (``hi + 1`` IDs each, ``s .. s+n``) must fit the table
    (:func:`lengthgen.data.check_pack_fits`)."""
    data.check_pack_fits(hi, n_ctx, gap=gap, width=hi + 1, start=DEFAULT_EVAL_START)


def packed_sequence_rows(task_name: str, rng: np.random.Generator, batch_size: int, lo: int, hi: int, n_ctx: int,
                         pack: float, gap: int = 2) -> Batch:
    """Copy or reverse rows of which a fraction ``pack`` hold two problems back to back,
    ``$ x=y $ x'=y' $`` (the first closing ``$`` is the second's BOS), the loss covering both answers:
    the addition packing of :func:`lengthgen.data.packed_training_batch` for these tasks (not in the
    paper; docs/training.md, "Packed rows"). Each problem keeps its own coupled IDs ``s .. s+n``; the
    two ranges are disjoint, at least ``gap`` apart, in a random order, at random inside the table
    (:func:`lengthgen.packing.range_begins`). The other rows hold one problem with a random start."""
    check_sequence_pack_fits(hi, n_ctx, gap)
    n = rng.integers(lo, hi + 1, size=(2, batch_size))
    ops = [[_operands(task_name, rng, int(k), training=True) for k in n[j]] for j in range(2)]
    count = np.where(rng.random(batch_size) < pack, 2, 1)
    starts = np.stack([_starts(task_name, rng, n[j], n_ctx, "coupled") for j in range(2)])
    for r in np.nonzero(count == 2)[0]:
        starts[:, r] = packing.range_begins(rng, n[:, r] + 1, n_ctx - 1, gap)
    parts = [_rows(task_name, "coupled", ops[j], starts[j]) for j in range(2)]
    return packing.join(parts, 2 * n + 3, count, n, get_task(task_name).EOS)   # 2n + 3 tokens, both $ included


def training_batch(task_name: str, rng: np.random.Generator, batch_size: int, lo: int, hi: int, scheme: str,
                   n_ctx: int, pack: float = 0.0, pack_problems: int = 2) -> Batch:
    """A fresh training batch of ``task_name`` (operand lengths uniform on ``lo..hi``); addition
    rows may hold up to ``pack_problems`` additions, copy and reverse rows two problems (``pack``:
    the fraction of rows packed)."""
    if task_name == "addition":
        if pack and pack_problems > 2:
            return packing.packed_rows(rng, batch_size, lo, hi, n_ctx, pack, pack_problems, scheme=scheme)
        if pack:
            return data.packed_training_batch(rng, batch_size, lo, hi, n_ctx, pack, scheme=scheme)
        return data.training_batch(rng, batch_size, lo, hi, scheme, n_ctx)
    if pack and task_name not in PACKABLE:
        raise DataError(f"--pack is defined for {', '.join(('addition', *PACKABLE))}, not for {task_name}")
    check_digits(task_name, scheme, n_ctx, hi, "the model being trained")
    if pack:
        return packed_sequence_rows(task_name, rng, batch_size, lo, hi, n_ctx, pack)
    n = rng.integers(lo, hi + 1, size=batch_size)
    operands = [_operands(task_name, rng, int(k), training=True) for k in n]
    return _rows(task_name, scheme, operands, _starts(task_name, rng, n, n_ctx, scheme))


def eval_batch(task_name: str, rng: np.random.Generator, batch_size: int, n: int, scheme: str) -> Batch:
    """``batch_size`` test examples with an n-digit (first) operand, coupled start fixed."""
    if task_name == "addition":
        return data.eval_batch(rng, batch_size, n, scheme)
    operands = [_operands(task_name, rng, n, training=False) for _ in range(batch_size)]
    return _rows(task_name, scheme, operands, np.full(batch_size, EVAL_STARTS.get(task_name, DEFAULT_EVAL_START)))
