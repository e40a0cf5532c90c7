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
import warnings
from typing import Callable, Sequence

import numpy as np
import torch

from .kv_cache import StaticKVCache
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
    static_cache: bool | None = None,
    cuda_graph: bool | None = None,
) -> list[int]:
    """Greedy decoding of one prompt: the decided argmax of the last position's logits, appended,
    repeated. ``static_cache`` and ``cuda_graph`` choose how the steps run
    (:func:`greedy_generate_batch`).

    ``new_pos_ids[i]`` is the position ID given to the i-th generated token when it is fed back
    (default: consecutive IDs after the prompt). Stops after ``stop_token`` (included in the output),
    after an undecided step (:data:`UNDECIDED` is the last element: the caller must treat the
    output as wrong) or after ``max_new_tokens`` (default ``len(new_pos_ids) + 1``).
    """
    rows = (_as_tensor(x, model.device) for x in (prompt, prompt_pos_ids, new_pos_ids))
    return greedy_generate_batch(model, *rows, max_new_tokens, stop_token, progress, margin, static_cache,
                                 cuda_graph)[0]


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
    static_cache: bool | None = None,
    cuda_graph: bool | None = None,
) -> list[list[int]]:
    """Greedy decoding of a batch of equal-length prompts ``[B, T]`` with a shared KV cache.

    A row ends after ``stop_token`` or after an :data:`UNDECIDED` step (both kept as its last
    element). Ended rows keep being fed (their later tokens are discarded) until every row has
    ended, so each row's output equals what :func:`greedy_generate` gives for it alone.

    Two ways to run the steps after the prompt, with the same outputs up to float rounding:

    * a growing :class:`~lengthgen.kv_cache.KVCache` (the default on the CPU): each step attends
      to exactly the keys so far;
    * ``static_cache=True`` (the default on CUDA): a :class:`~lengthgen.kv_cache.StaticKVCache`
      of fixed size, so no step reads a value back from the device (whether every row has ended
      is read every :data:`STOP_CHECK_EVERY` steps, and up to that many steps past the end are
      computed and discarded), and on CUDA (``cuda_graph``, default on where the static cache is
      used) the step is recorded once as a CUDA graph and replayed: one launch per token instead
      of dozens of kernels, each with its Python overhead.

    The static path needs every position ID checked up front; where the IDs are out of range
    (the error is then raised at the step that uses one) or hooks are active, the growing cache
    is used."""
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
    if static_cache is None:
        static_cache = device.type == "cuda"
    static_cache = static_cache and max_new_tokens > 1 and _static_step_allowed(model, new_pos_ids)
    if static_cache:
        capacity = length + min(max_new_tokens - 1, new_pos_ids.shape[1])
        stepper = _StaticStepper(model, StaticKVCache(cache, capacity), batch, margin)
        use_graph = device.type == "cuda" if cuda_graph is None else cuda_graph
        step_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = (
            stepper.graph_step if use_graph else stepper.step)
        check_every = STOP_CHECK_EVERY
    else:
        def step_fn(fed: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            return decided_argmax(model(fed, pos, cache=cache)[:, -1], margin)
        check_every = 1
    out = torch.empty(batch, max_new_tokens, dtype=torch.long, device=device)
    out[:, 0] = token = decided_argmax(logits[:, -1], margin)
    stopped = _ends_row(token, stop_token)
    steps = 1
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=max_new_tokens, desc="greedy decoding", unit="tok", file=sys.stderr, leave=False)
    try:
        if bar is not None:
            bar.update(1)
        for step in range(1, max_new_tokens):
            out_of_ids = step > new_pos_ids.shape[1]
            if (step % check_every == 0 or out_of_ids) and bool(stopped.all()):
                break
            if out_of_ids:
                raise ValueError(f"no position ID given for generated token {step}")
            fed = token.clamp_min(0)  # an undecided row has ended: what it is fed is discarded
            token = step_fn(fed[:, None], new_pos_ids[:, step - 1 : step])
            out[:, step] = token
            stopped |= _ends_row(token, stop_token)
            steps = step + 1
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    steps_taken = out[:, :steps]
    ended = _ends_row(steps_taken, stop_token)
    lengths = torch.where(ended.any(dim=1), ended.int().argmax(dim=1) + 1, steps).tolist()
    return [row[:n] for row, n in zip(steps_taken.tolist(), lengths)]


STOP_CHECK_EVERY = 64
"""Steps between two reads of "has every row ended" on the static-cache path (each read makes the
host wait for the device)."""


def _static_step_allowed(model: Transformer, new_pos_ids: torch.Tensor) -> bool:
    """Whether the static-cache steps may skip the per-step ID checks and hooks: every fed token
    (an argmax over ``d_vocab_out`` outputs) and every position ID is in range, no hook is on, and
    the model has a layer whose keys and values there are to cache."""
    if (model.cfg.n_layers == 0 or model.cfg.d_vocab_out > model.cfg.d_vocab
            or any(point.active for point in model.hook_points())):
        return False
    if model.cfg.positional == "none" or new_pos_ids.numel() == 0:
        return True
    return bool(new_pos_ids.min() >= 0) and bool(new_pos_ids.max() < model.cfg.n_ctx)


class _StaticStepper:
    """One decoding step over a :class:`StaticKVCache`, in buffers whose addresses never change,
    so that :meth:`graph_step` can record it once as a CUDA graph and replay it."""

    WARMUP_STEPS = 3  # eager steps before recording (they are real steps, with real outputs)

    def __init__(self, model: Transformer, cache: StaticKVCache, batch: int, margin: float) -> None:
        self.model, self.cache, self.margin = model, cache, margin
        device = model.device
        self.fed = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.token = torch.zeros(batch, dtype=torch.long, device=device)
        self.graph: "torch.cuda.CUDAGraph | None" = None
        self.graph_failed = False
        self.eager_steps = 0
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def _run(self) -> None:
        logits = self.model(self.fed, self.pos, cache=self.cache, check_ids=False)
        self.cache.advance()
        self.token.copy_(decided_argmax(logits[:, -1], self.margin))

    def step(self, fed: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The next token of every row (eagerly, without reading anything back from the device)."""
        self.fed.copy_(fed)
        self.pos.copy_(pos)
        self._run()
        return self.token.clone()

    def graph_step(self, fed: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """:meth:`step` replayed from a CUDA graph, recorded after :attr:`WARMUP_STEPS` eager steps
        on the recording stream (lazily created library state must exist before recording). If
        recording fails, a warning says why and the steps go on eagerly."""
        if self.graph_failed or self.stream is None:
            return self.step(fed, pos)
        if self.graph is None and self.eager_steps < self.WARMUP_STEPS:
            self.eager_steps += 1
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                token = self.step(fed, pos)
            torch.cuda.current_stream().wait_stream(self.stream)
            return token
        if self.graph is None:
            self.fed.copy_(fed)  # the recorded step reads these buffers; recording runs nothing
            self.pos.copy_(pos)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, stream=self.stream):
                    self._run()
            except RuntimeError as err:
                self.graph_failed = True
                warnings.warn(f"greedy decoding goes on without a CUDA graph: recording the step failed ({err})")
                torch.cuda.synchronize()
                return self.step(fed, pos)
            self.graph = graph
        self.fed.copy_(fed)
        self.pos.copy_(pos)
        self.graph.replay()
        return self.token.clone()


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
