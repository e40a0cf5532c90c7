"""Addition batches for training and evaluation, built vectorized with numpy.

Format (Cho et al. 2024; docs/training.md, "Data formats"): ``$ a + b = reversed(c) $``
with both operands zero-padded to ``n = max(len a, len b)`` and the sum to ``n + 1`` digits, LSB
first. A batch mixes lengths: every row is right-padded with ``$`` to ``3·max(n) + 5`` tokens. The
model is causal, so right padding never changes an earlier position; the loss mask covers the
answer tokens and the final EOS only, as in the authors' code.

Position schemes:

* ``coupled`` — learned absolute positions indexed by coupled IDs (Cho et al. 2024, Section 3;
  :func:`lengthgen.positions.coupled_addition_ids`): a_i, b_i, c_i share ``s + n − 1 − i``, ``+``/``=``
  get ``s + n``, ``$`` and padding 0. Training draws ``s`` per sample, uniform on ``2 .. max_id − n``
  (the authors' random shift), evaluation fixes ``s = 2``.
* ``coupled-sink`` — ``coupled`` with both ``$`` at the overflow digit's ID ``s − 1`` instead of 0
  (:func:`lengthgen.positions.coupled_sink_addition_ids`; this project's addition, not the paper's):
  the query that predicts the top carry finds a key at the ID it reads at every length.
* ``ape`` — plain learned absolute positions ``0 .. T−1`` (the usual baseline).
* ``nope`` / ``hard-alibi`` — no position IDs at all (the model ignores them; Hard-ALiBi
  windows live in the model config, Jelassi et al. 2024).

Operand lengths are sampled as the authors do: each operand independently uniform on
``lo .. hi`` digits; a 1-digit number is uniform on 0–9, longer ones have a non-zero leading digit.
Evaluation at length n uses two n-digit operands. Carries are propagated without a Python loop
over digits (:func:`add_digits`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .positions import random_start
from .tasks import ADDITION

SCHEMES = ("coupled", "coupled-sink", "ape", "nope", "hard-alibi")
COUPLED = ("coupled", "coupled-sink")  # the schemes with coupled IDs (they differ only in the IDs of $)
EVAL_START = 2  # the construction's start ID s (START_ID of the Theorem 5.1 construction)
DIGIT, PLUS, EQUALS, DOLLAR = 0, ADDITION.PLUS, ADDITION.EQUALS, ADDITION.EOS


class DataError(ValueError):
    """A request the data layer cannot satisfy (unknown scheme, lengths the table cannot hold)."""


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise DataError(f"unknown position scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    return scheme


def parse_digit_range(text: str) -> tuple[int, int]:
    """``"1-5"`` → (1, 5); ``"6"`` → (6, 6). Raises :class:`DataError` on anything else."""
    parts = str(text).strip().split("-")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise DataError(f"bad digit range {text!r}; write e.g. 1-5 or 6") from None
    if lo < 1 or hi < lo:
        raise DataError(f"bad digit range {text!r}; need 1 <= low <= high")
    return lo, hi


def parse_digit_list(text: str) -> list[int]:
    """Comma-separated ranges with an optional step: ``"1-10,15-100:5"`` → 1..10, 15, 20, ..., 100.

    Each item is what :func:`parse_digit_range` takes, optionally followed by ``:STEP``; the result is
    sorted and without repeats. Raises :class:`DataError` on anything else."""
    out: set[int] = set()
    for item in str(text).split(","):
        span, sep, step_text = item.strip().partition(":")
        try:
            step = int(step_text) if sep else 1
        except ValueError:
            step = 0
        if step < 1:
            raise DataError(f"bad step in {item.strip()!r}; write e.g. 15-100:5 (a step of at least 1)")
        lo, hi = parse_digit_range(span)
        out.update(range(lo, hi + 1, step))
    return sorted(out)


def is_coupled(scheme: str) -> bool:
    """Whether ``scheme`` gives equal significance one ID (``coupled`` or ``coupled-sink``)."""
    return check_scheme(scheme) in COUPLED


def uses_positions(scheme: str) -> bool:
    return is_coupled(scheme) or scheme == "ape"


def table_size(scheme: str, max_digits: int) -> int:
    """Rows of ``W_pos`` (``n_ctx``) needed to evaluate up to ``max_digits`` digits.

    Coupled at start 2 uses IDs up to ``2 + n``; APE uses ``0 .. 3n + 4``;
    NoPE/Hard-ALiBi need none (1 row, unused)."""
    if is_coupled(scheme):
        return EVAL_START + max_digits + 1
    if scheme == "ape":
        return 3 * max_digits + 5
    return 1


def table_digits(scheme: str, n_ctx: int) -> int | None:
    """Longest operands a table of ``n_ctx`` rows can hold (``None``: unlimited)."""
    if is_coupled(scheme):
        return n_ctx - 1 - EVAL_START
    if scheme == "ape":
        return (n_ctx - 5) // 3
    return None


def check_digits(scheme: str, n_ctx: int, n: int, what: str = "this model") -> None:
    limit = table_digits(scheme, n_ctx)
    if limit is not None and n > limit:
        raise DataError(
            f"{n}-digit operands do not fit the position table of {what} "
            f"({scheme}, {n_ctx} position rows: at most {limit} digits)"
        )


@dataclass
class Batch:
    """``tokens`` [B, T]; ``pos_ids`` [B, T] or ``None`` (NoPE); ``loss_mask`` [B, T−1] marks the
    inputs ``tokens[:, :-1]`` whose next token ``tokens[:, 1:]`` is an answer digit or the final EOS;
    ``n`` [B] operand lengths."""

    tokens: np.ndarray
    pos_ids: np.ndarray | None
    loss_mask: np.ndarray
    n: np.ndarray

    def to_torch(self, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(tokens, pos_ids, loss_mask) as tensors on ``device``."""
        tok = torch.from_numpy(self.tokens).to(device)
        pos = None if self.pos_ids is None else torch.from_numpy(self.pos_ids).to(device)
        return tok, pos, torch.from_numpy(self.loss_mask).to(device)


def sample_numbers(rng: np.random.Generator, lengths: np.ndarray, width: int) -> np.ndarray:
    """Digits [B, width] LSB first, zero above each row's length; the leading digit of a number
    with ≥ 2 digits is uniform on 1–9, every other digit on 0–9 (authors' balanced sampling)."""
    lengths = np.asarray(lengths)
    digits = rng.integers(0, 10, size=(len(lengths), width), dtype=np.int64)
    col = np.arange(width)[None, :]
    lead = rng.integers(1, 10, size=len(lengths), dtype=np.int64)
    digits = np.where(col < lengths[:, None], digits, 0)
    rows = np.nonzero(lengths >= 2)[0]
    digits[rows, lengths[rows] - 1] = lead[rows]
    return digits


def add_digits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b for LSB-first digit arrays [B, W] → [B, W + 1], carries resolved without a loop.

    Column i receives a carry iff the nearest column j < i whose digit sum is not 9 has sum ≥ 10
    (9s propagate a carry, everything else decides it): a running maximum of indices finds j."""
    s = a + b
    B, W = s.shape
    idx = np.where(s != 9, np.arange(W)[None, :], -1)
    last = np.maximum.accumulate(idx, axis=1)  # last deciding column at or below i
    generates = s >= 10
    carry_out = np.where(last >= 0, np.take_along_axis(generates, np.maximum(last, 0), axis=1), False)
    carry_in = np.concatenate([np.zeros((B, 1), dtype=bool), carry_out[:, :-1]], axis=1)
    c = (s + carry_in) % 10
    return np.concatenate([c, carry_out[:, -1:].astype(np.int64)], axis=1)


def layout(a: np.ndarray, b: np.ndarray, n: np.ndarray, scheme: str, start: np.ndarray | int = EVAL_START) -> Batch:
    """Lay out rows ``$ a + b = c $`` (operands LSB-first digit arrays [B, W], lengths ``n``) with
    the position IDs of ``scheme``; ``start`` is the coupled start ID s per row (or one for all)."""
    check_scheme(scheme)
    n = np.asarray(n, dtype=np.int64)
    B = len(n)
    c = add_digits(a, b)
    T = 3 * int(n.max()) + 5
    t = np.arange(T)[None, :]
    nn = n[:, None]
    in_a = (t >= 1) & (t <= nn)
    in_b = (t >= nn + 2) & (t <= 2 * nn + 1)
    in_c = (t >= 2 * nn + 3) & (t <= 3 * nn + 3)
    sig = np.where(in_a, nn - t, np.where(in_b, 2 * nn + 1 - t, np.where(in_c, t - 2 * nn - 3, 0)))
    W = c.shape[1]
    sig_c = np.clip(sig, 0, W - 1)
    gather = lambda arr: np.take_along_axis(np.pad(arr, ((0, 0), (0, W - arr.shape[1]))), sig_c, axis=1)
    tokens = np.full((B, T), DOLLAR, dtype=np.int64)
    tokens = np.where(in_a, gather(a), tokens)
    tokens = np.where(in_b, gather(b), tokens)
    tokens = np.where(in_c, gather(c), tokens)
    sep = (t == nn + 1) | (t == 2 * nn + 2)
    tokens = np.where(t == nn + 1, PLUS, np.where(t == 2 * nn + 2, EQUALS, tokens))
    if is_coupled(scheme):
        s = np.broadcast_to(np.asarray(start, dtype=np.int64), (B,))[:, None]
        digit = in_a | in_b | in_c
        dollar = s - 1 if scheme == "coupled-sink" else 0
        ends = (t == 0) | (t == 3 * nn + 4)                           # the opening and the final $
        pos = np.where(digit, s + nn - 1 - sig, np.where(sep, s + nn, np.where(ends, dollar, 0))).astype(np.int64)
    elif scheme == "ape":
        pos = np.where(t <= 3 * nn + 4, t, 0).astype(np.int64)
    else:
        pos = None
    ti = t[:, :-1]
    mask = (ti >= 2 * nn + 2) & (ti <= 3 * nn + 3)
    return Batch(tokens=tokens, pos_ids=pos, loss_mask=mask, n=n)


def training_batch(
    rng: np.random.Generator, batch_size: int, lo: int, hi: int, scheme: str, n_ctx: int
) -> Batch:
    """A fresh training batch: operand lengths independently uniform on ``lo..hi``; coupled rows get
    a random start ``s ~ U{2 .. max_id − n}`` so every row of the position table is trained."""
    check_scheme(scheme)
    check_digits(scheme, n_ctx, hi, "the model being trained")
    la = rng.integers(lo, hi + 1, size=batch_size)
    lb = rng.integers(lo, hi + 1, size=batch_size)
    a, b = sample_numbers(rng, la, hi), sample_numbers(rng, lb, hi)
    n = np.maximum(la, lb)
    start = random_start(rng, n, n_ctx - 1) if is_coupled(scheme) else EVAL_START
    return layout(a, b, n, scheme, start)


def check_pack_fits(hi: int, n_ctx: int, problems: int = 2, gap: int = 2, width: int | None = None,
                    start: int = EVAL_START) -> None:
    """``problems`` ``hi``-digit problems of ``width`` IDs each (an addition's ``hi + 2``, the
    default; copy and reverse take ``hi + 1``), ``gap`` IDs apart, must fit in IDs ``1 .. n_ctx − 1``;
    the advice names the ``--max-digits`` whose table (IDs up to ``start + max_digits``) holds them."""
    max_id = n_ctx - 1
    need = problems * (hi + 2 if width is None else width) + (problems - 1) * gap
    if need > max_id:
        what = "--pack needs two" if problems == 2 else f"--pack-problems {problems} needs {problems}"
        lower = "" if problems == 2 else " or lower --pack-problems"
        raise DataError(f"{what} {hi}-digit problems {gap} IDs apart in IDs 1..{max_id}: "
                        f"raise --max-digits to at least {need - start}{lower}")


def packed_training_batch(
    rng: np.random.Generator, batch_size: int, lo: int, hi: int, n_ctx: int, pack: float, gap: int = 2,
    scheme: str = "coupled",
) -> Batch:
    """Coupled training rows of which a fraction ``pack`` hold two additions back to back,
    ``$ a+b=c $ a'+b'=c' $`` (the first problem's final ``$`` is the second one's BOS, as in packed
    language-model training), the loss covering both answers.

    Not in the paper (an addition of this project, docs/training.md): each problem is still a 1–``hi``-digit
    addition with its own coupled IDs, but the two ID ranges ``[s−1, s+n]`` are disjoint and at
    least ``gap`` apart, placed at random inside ``1 .. max_id``. The second problem's queries thus
    meet keys whose IDs are up to ``max_id − 1`` away, a pair of IDs that one ≤ ``hi``-digit problem
    never shows, and training pushes their scores down; with one problem per row those scores are
    never trained (docs/training.md, "Packed rows"). Gap ≥ 2 keeps every key of the other problem off the
    IDs ``i`` and ``i − 1`` that a query at ID ``i`` reads. Rows that are not packed are ordinary
    :func:`training_batch` rows. ``scheme`` is ``coupled`` or ``coupled-sink``; under the latter the
    shared ``$`` takes the second problem's ``$`` ID (it is that problem's opening ``$``)."""
    if not is_coupled(scheme):
        raise DataError(f"packed rows need coupled IDs (coupled or coupled-sink), not {scheme}")
    check_pack_fits(hi, n_ctx, gap=gap)
    max_id = n_ctx - 1
    probs = []
    for _ in range(2):
        la, lb = rng.integers(lo, hi + 1, size=batch_size), rng.integers(lo, hi + 1, size=batch_size)
        probs.append((sample_numbers(rng, la, hi), sample_numbers(rng, lb, hi), np.maximum(la, lb)))
    (_, _, n1), (_, _, n2) = probs
    packed = rng.random(batch_size) < pack
    w1, w2 = n1 + 2, n2 + 2  # IDs used by a problem: s−1 .. s+n
    slack = max_id - (w1 + w2 + gap)
    o1 = rng.integers(0, slack + 1)
    o2 = rng.integers(0, slack - o1 + 1)
    first_low = rng.random(batch_size) < 0.5
    low_begin = 1 + o1
    high_begin = low_begin + np.where(first_low, w1, w2) + gap + o2
    s1 = np.where(packed, np.where(first_low, low_begin, high_begin) + 1, random_start(rng, n1, max_id))
    s2 = np.where(first_low, high_begin, low_begin) + 1
    one = layout(*probs[0], scheme, s1)
    two = layout(*probs[1], scheme, s2)
    len1 = (3 * n1 + 5)[:, None]
    len2 = np.where(packed, 3 * n2 + 5, 1)[:, None]  # an unpacked row takes nothing from the second problem
    t = np.arange(int((len1 + len2 - 1).max()))[None, :]
    from_one, in_two = t < len1, (t >= len1) & (t - len1 + 1 < len2)
    i, j = np.clip(t, 0, one.tokens.shape[1] - 1), np.clip(t - len1 + 1, 0, two.tokens.shape[1] - 1)

    def pick(x1: np.ndarray, x2: np.ndarray, fill, shared_from_two: bool = False) -> np.ndarray:
        """Row-wise: ``x1`` up to its problem's final ``$`` (or, with ``shared_from_two``, up to just
        before it on packed rows), then ``x2`` from its BOS or after it, then ``fill``."""
        one_, two_ = (from_one, in_two)
        if shared_from_two:
            shared = packed[:, None] & (t == len1 - 1)
            one_, two_ = from_one & ~shared, in_two | shared
        return np.where(one_, np.take_along_axis(x1, i, 1), np.where(two_, np.take_along_axis(x2, j, 1), fill))

    def predicted(b: Batch) -> np.ndarray:
        """Loss mask moved onto the predicted token (``loss_mask[:, t]`` scores token ``t + 1``)."""
        return np.concatenate([np.zeros((len(b.loss_mask), 1), bool), b.loss_mask], axis=1)

    tokens = pick(one.tokens, two.tokens, DOLLAR)
    pos = pick(one.pos_ids, two.pos_ids, 0, shared_from_two=True)  # the shared $ is problem two's BOS
    mask = pick(predicted(one), predicted(two), False)[:, 1:]
    return Batch(tokens=tokens, pos_ids=pos, loss_mask=mask, n=np.maximum(n1, np.where(packed, n2, 0)))


def eval_batch(rng: np.random.Generator, batch_size: int, n: int, scheme: str) -> Batch:
    """Two n-digit operands per row (paper's test sets), coupled start fixed at ``s = 2``."""
    lengths = np.full(batch_size, n, dtype=np.int64)
    a, b = sample_numbers(rng, lengths, n), sample_numbers(rng, lengths, n)
    return layout(a, b, lengths, scheme, EVAL_START)


def batch_from_operands(pairs: list[tuple[int, int]], scheme: str, start: int = EVAL_START) -> Batch:
    """A batch from explicit ``(a, b)`` pairs (tests, figures)."""
    strs = [(str(a), str(b)) for a, b in pairs]
    n = np.array([max(len(x), len(y)) for x, y in strs], dtype=np.int64)
    W = int(n.max())
    def digits(s: str) -> np.ndarray:
        d = np.zeros(W, dtype=np.int64)
        d[: len(s)] = np.frombuffer(s[::-1].encode(), dtype=np.uint8) - 48
        return d
    a = np.stack([digits(x) for x, _ in strs])
    b = np.stack([digits(y) for _, y in strs])
    return layout(a, b, n, scheme, start)
