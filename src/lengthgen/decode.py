"""Task-agnostic decoding: greedy generation with a KV cache, and teacher-forced predictions.

These loops would serve any weights (AdderBoard rule: "the autoregressive generation loop lives
outside the model"). The position IDs of generated tokens are *input data* supplied by the caller
(under position coupling they are known in advance from the prompt, Cho et al. 2024, Section 3),
never computed here.

One rule decides every prediction, in both loops and wherever a prediction is scored:
:func:`decided_argmax`. A position whose top logit does not beat the runner-up by more than
:data:`DECISION_MARGIN` predicts :data:`UNDECIDED` (−1), which equals no token, so it can never
be counted right, and greedy decoding stops there instead of guessing. To score logits against
targets, use ``decided_argmax(logits) == targets``.
"""
from __future__ import annotations

import sys
from typing import Sequence

import numpy as np
import torch

from .model import KVCache, Transformer
from .tasks.base import digits_to_str

DECISION_MARGIN = 1e-3
"""Default margin of the one rule for "exact" used everywhere in the project: a prediction counts
only if the chosen logit exceeds every other logit by more than this (ties and near-ties fail)."""
UNDECIDED = -1
"""The prediction of a position without a margin. It is not a token id: it never equals a target."""


def decided_argmax(logits: torch.Tensor, margin: float = DECISION_MARGIN) -> torch.Tensor:
    """Argmax over the last dimension, or :data:`UNDECIDED` where the top logit does not beat the
    runner-up by more than ``margin``. A tie-breaking argmax is kernel-dependent (which of two equal
    logits wins is not specified), so a prediction without a margin is never counted as right.

    The comparison is exact: the gap between the two largest logits is compared with ``margin``
    as real numbers (a gap equal to the margin is not enough), with no rounding of the subtraction
    deciding it. A row holding a NaN is never decided; with a single class there is nothing to
    beat, so such a row is decided unless it is NaN. Infinite logits compare as the extended reals
    do (+inf beats any finite logit; two equal infinities tie)."""
    winner = logits.argmax(dim=-1)
    decided = ~torch.isnan(logits).any(dim=-1)  # whatever order a topk kernel gives NaN
    if logits.shape[-1] >= 2:
        top2 = logits.topk(2, dim=-1).values.to(torch.float64)
        first, second = top2[..., 0], -top2[..., 1]
        gap = first + second
        # TwoSum: first - runner-up == gap + err exactly, so a gap that rounds onto the margin is
        # decided only when the exact difference lies above it
        second_part = gap - first
        err = (first - (gap - second_part)) + (second - second_part)
        decided &= (gap > margin) | ((gap == margin) & (err > 0))
    return torch.where(decided, winner, torch.full_like(winner, UNDECIDED))


def _as_tensor(x: Sequence[int] | torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A sequence as a ``[1, T]`` long tensor on ``device``."""
    if x is None:
        return None
    return torch.as_tensor(x, dtype=torch.long, device=device).reshape(1, -1)


def greedy_generate(
    model: Transformer,
    prompt: Sequence[int] | torch.Tensor,
    prompt_pos_ids: Sequence[int] | torch.Tensor | None = None,
    new_pos_ids: Sequence[int] | torch.Tensor | None = None,
    max_new_tokens: int | None = None,
    stop_token: int | None = None,
    progress: bool = False,
    margin: float = DECISION_MARGIN,
) -> list[int]:
    """Greedy decoding of one prompt: the decided argmax of the last position's logits, appended,
    repeated.

    ``new_pos_ids[i]`` is the position ID given to the i-th generated token when it is fed back
    (default: consecutive IDs after the prompt). Stops after ``stop_token`` (included in the output),
    after an undecided step (:data:`UNDECIDED` is the last element: the caller must treat the
    output as wrong) or after ``max_new_tokens`` (default ``len(new_pos_ids) + 1``).
    """
    rows = (_as_tensor(x, model.device) for x in (prompt, prompt_pos_ids, new_pos_ids))
    return greedy_generate_batch(model, *rows, max_new_tokens, stop_token, progress, margin)[0]


@torch.inference_mode()
def greedy_generate_batch(
    model: Transformer,
    prompts: torch.Tensor,
    prompt_pos_ids: torch.Tensor | None = None,
    new_pos_ids: torch.Tensor | None = None,
    max_new_tokens: int | None = None,
    stop_token: int | None = None,
    progress: bool = False,
    margin: float = DECISION_MARGIN,
) -> list[list[int]]:
    """Greedy decoding of a batch of equal-length prompts ``[B, T]`` with a shared KV cache.

    A row ends after ``stop_token`` or after an :data:`UNDECIDED` step (both kept as its last
    element). Ended rows keep being fed (their later tokens are discarded) until every row has
    ended, so each row's output equals what :func:`greedy_generate` gives for it alone."""
    device = model.device
    prompts = prompts.to(device)
    batch, length = prompts.shape
    if max_new_tokens is None:
        if new_pos_ids is None:
            raise ValueError("give max_new_tokens or new_pos_ids")
        max_new_tokens = new_pos_ids.shape[1] + 1
    if new_pos_ids is None:
        new_pos_ids = torch.arange(length, length + max_new_tokens).expand(batch, -1)
    new_pos_ids = new_pos_ids.to(device)
    prompt_pos_ids = None if prompt_pos_ids is None else prompt_pos_ids.to(device)
    cache = KVCache()
    logits = model(prompts, prompt_pos_ids, cache=cache, logits_from=length - 1)
    generated: list[torch.Tensor] = []
    stopped = torch.zeros(batch, dtype=torch.bool, device=device)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=max_new_tokens, desc="greedy decoding", unit="tok", file=sys.stderr, leave=False)
    try:
        for step in range(max_new_tokens):
            token = decided_argmax(logits[:, -1], margin)
            generated.append(token)
            if bar is not None:
                bar.update(1)
            stopped |= _ends_row(token, stop_token)
            if bool(stopped.all()) or step + 1 == max_new_tokens:
                break
            if step >= new_pos_ids.shape[1]:
                raise ValueError(f"no position ID given for generated token {step + 1}")
            fed = token.clamp_min(0)  # an undecided row has ended: what it is fed is discarded
            logits = model(fed[:, None], new_pos_ids[:, step : step + 1], cache=cache)
    finally:
        if bar is not None:
            bar.close()
    steps = torch.stack(generated, dim=1)
    ended = _ends_row(steps, stop_token)
    lengths = torch.where(ended.any(dim=1), ended.int().argmax(dim=1) + 1, steps.shape[1]).tolist()
    return [row[:n] for row, n in zip(steps.tolist(), lengths)]


def _ends_row(tokens: torch.Tensor, stop_token: int | None) -> torch.Tensor:
    """Where a generated row ends: an undecided step, or the stop token."""
    ended = tokens == UNDECIDED
    return ended if stop_token is None else ended | (tokens == stop_token)


@torch.inference_mode()
def teacher_forced_argmax(
    model: Transformer,
    tokens: Sequence[int] | torch.Tensor,
    pos_ids: Sequence[int] | torch.Tensor | None,
    first: int,
    margin: float = DECISION_MARGIN,
) -> torch.Tensor:
    """Decided-argmax predictions of positions ``first .. T-2`` (each predicts the next token) in
    one forward pass; :data:`UNDECIDED` where a position has no margin. If every prediction equals
    ``tokens[first+1:]``, greedy decoding from the prompt ``tokens[:first+1]`` reproduces that
    continuation (induction over steps, up to the rounding differences between a full pass and
    cached single-query steps, which the margin absorbs)."""
    device = model.device
    toks = _as_tensor(tokens, device)
    pos = _as_tensor(pos_ids, device)
    logits = model(toks[:, :-1], None if pos is None else pos[:, :-1], logits_from=first)
    return decided_argmax(logits[0], margin)


class UndecidedPrediction(ArithmeticError):
    """The model gave no answer token a margin over the others (see :func:`decided_argmax`)."""


def answer_to_int(tokens: Sequence[int], eos_token: int, decode, problem: str) -> int:
    """The integer whose digits a model wrote least significant first (``c_0`` first, an optional
    final ``eos_token``). Digit tokens are the digits' own values 0–9 (every arithmetic task here).

    Raises :class:`UndecidedPrediction` at an :data:`UNDECIDED` step (naming ``problem``, e.g.
    ``"653 + 49"``) and ``ArithmeticError`` on a non-digit; ``decode`` turns tokens into text for
    that message. It never guesses a digit."""
    tokens = list(tokens)
    if UNDECIDED in tokens:
        raise UndecidedPrediction(
            f"{problem}: the model's answer token {tokens.index(UNDECIDED)} (counting from the ones digit) is "
            "undecided: its two largest logits are within the decision margin of lengthgen.decode"
        )
    if tokens and tokens[-1] == eos_token:
        tokens = tokens[:-1]
    if not tokens or any(not 0 <= t <= 9 for t in tokens):
        raise ArithmeticError(f"the model produced a non-digit answer: {decode(tokens)!r}")
    return int(digits_to_str(np.array(tokens[::-1], dtype=np.uint8)))
