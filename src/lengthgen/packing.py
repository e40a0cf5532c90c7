"""Training rows that hold up to K additions each (``--pack F --pack-problems K``, K ≥ 3).

Not in the paper; docs/training.md ("Packed rows") explains why packing helps. Two problems per
row (:func:`lengthgen.data.packed_training_batch`, K = 2, kept as it was so that the committed
recipes reproduce bit for bit) let a query meet keys at far IDs, but at most about 17 of them. At
evaluation a query of an n-digit addition sees about 3n keys, nearly all at IDs it must ignore,
and the one place where *nothing* in the sequence matches (the top carry c_n: no digit has the ID
below the operands') is where a 1–5-digit model trained on two problems per row still errs at
40–50 digits. With K problems per row the last problem's queries see up to K − 1 other problems'
keys, ``(K − 1)·(3·hi + 4)`` of them, spread over the table.

A packed row is ``$ p_1 $ p_2 $ … $ p_k $`` (each closing ``$`` is the next problem's BOS), k
uniform on ``2 .. K``; every problem is an ordinary 1–``hi``-digit addition with its own coupled
IDs ``[s−1, s+n]``. The k ID ranges are disjoint, at least ``gap`` apart, in a random order along
the ID axis (independent of their order in the row), and placed at random inside ``1 .. max_id``:
the free IDs are split at random among the k + 1 gaps. The loss covers
every problem's answer. A fraction ``1 − F`` of the rows holds one problem with the usual random
start.
"""
from __future__ import annotations

import numpy as np

from .data import DOLLAR, Batch, DataError, check_pack_fits, is_coupled, layout, sample_numbers
from .positions import random_start


def range_begins(rng: np.random.Generator, widths: np.ndarray, max_id: int, gap: int) -> np.ndarray:
    """First IDs of ranges of ``widths`` IDs inside ``1 .. max_id``: disjoint, at least ``gap``
    apart, in a random order, the free IDs split at random among the k + 1 gaps."""
    k = len(widths)
    free = max_id - int(widths.sum()) - (k - 1) * gap
    cuts = np.sort(rng.integers(0, free + 1, size=k))  # k cut points split `free` into k + 1 parts
    spare = np.diff(np.concatenate([[0], cuts]))        # the first k parts: before each range
    order = rng.permutation(k)
    begins = np.empty(k, dtype=np.int64)
    begin = 1
    for slot, j in enumerate(order):
        begin += int(spare[slot])
        begins[j] = begin
        begin += int(widths[j]) + gap
    return begins


def _id_starts(rng: np.random.Generator, widths: np.ndarray, max_id: int, gap: int) -> np.ndarray:
    """Start IDs ``s`` of additions of ``widths = n + 2`` IDs: their range ``[s−1, s+n]`` begins at ``s − 1``."""
    return range_begins(rng, widths, max_id, gap) + 1


def join(parts: list[Batch], lengths: np.ndarray, count: np.ndarray, n: np.ndarray, fill: int) -> Batch:
    """Row ``r`` holds problems ``0 .. count[r] − 1`` of ``parts`` (each a batch of one problem per
    row, ``lengths[j, r]`` tokens with both ``$``) back to back, each closing ``$`` the next one's BOS;
    tokens, IDs and loss targets are the problems' own; padded with ``fill`` and ID 0."""
    problems, batch_size = lengths.shape
    used = np.arange(problems)[:, None] < count[None, :]
    total = 1 + ((lengths - 1) * used).sum(0)                          # consecutive problems share a $
    T = int(total.max())
    tokens = np.full((batch_size, T), fill, dtype=np.int64)
    pos = np.zeros((batch_size, T), dtype=np.int64)
    predicts = np.zeros((batch_size, T), dtype=bool)                   # token t is a loss target
    for r in range(batch_size):
        at = 0
        for j in range(int(count[r])):
            m = int(lengths[j, r])
            tokens[r, at:at + m] = parts[j].tokens[r, :m]
            pos[r, at:at + m] = parts[j].pos_ids[r, :m]
            predicts[r, at + 1:at + m] = parts[j].loss_mask[r, :m - 1]
            at += m - 1
    return Batch(tokens=tokens, pos_ids=pos, loss_mask=predicts[:, 1:], n=(n * used).max(0))


def packed_rows(rng: np.random.Generator, batch_size: int, lo: int, hi: int, n_ctx: int, pack: float,
                problems: int, gap: int = 2, scheme: str = "coupled") -> Batch:
    """``batch_size`` coupled addition rows, a fraction ``pack`` of them holding 2 to ``problems``
    problems (module docstring); ``scheme`` is ``coupled`` or ``coupled-sink`` (each shared ``$``
    then carries the next problem's ``$`` ID, :func:`join` writing the next problem over it)."""
    if not is_coupled(scheme):
        raise DataError(f"packed rows need coupled IDs (coupled or coupled-sink), not {scheme}")
    if problems < 3:
        raise ValueError("packed_rows is for three or more problems per row (two: data.packed_training_batch)")
    check_pack_fits(hi, n_ctx, problems, gap)
    max_id = n_ctx - 1
    ops = []
    for _ in range(problems):
        la, lb = rng.integers(lo, hi + 1, size=batch_size), rng.integers(lo, hi + 1, size=batch_size)
        ops.append((sample_numbers(rng, la, hi), sample_numbers(rng, lb, hi), np.maximum(la, lb)))
    n = np.stack([o[2] for o in ops])                                  # [K, B]
    count = np.where(rng.random(batch_size) < pack, rng.integers(2, problems + 1, size=batch_size), 1)
    starts = np.stack([random_start(rng, n[j], max_id) for j in range(problems)])  # unused where j >= count
    for r in np.nonzero(count > 1)[0]:
        k = int(count[r])
        starts[:k, r] = _id_starts(rng, n[:k, r] + 2, max_id, gap)
    parts = [layout(*ops[j], scheme, starts[j]) for j in range(problems)]
    return join(parts, 3 * n + 5, count, n, DOLLAR)                    # 3n + 5 tokens, both $ included
