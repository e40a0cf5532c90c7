"""Proposition 5.2 of Cho et al., "Position Coupling" (NeurIPS 2024), as a counterexample finder.

Proposition 5.2 (docs/proposition-5-2.md): a 1-layer decoder-only transformer without positional
information gives the same next token for two prompts that are permutations of each other and end
in the same token. Its last query depends only on the last token; its attention output is a
symmetric function of the multiset of tokens; LayerNorm, MLP and unembedding act token-wise. So it
cannot solve a *permutation-sensitive* task, one with such a pair whose correct next tokens differ.

:func:`search` looks for such a pair on which a given model is wrong and returns a
:class:`SearchReport`; :func:`find_counterexample` returns its :class:`Certificate` or raises
:class:`Distinguished`. Prompts are a task's query template (``$___+___=`` for 3-digit addition,
:mod:`lengthgen.tasks`) with its digit slots filled; rearranging the slot digits gives another valid
prompt with the same last token ``=``. The oracle (``task.next_token``) gives the correct answers.

* **Exhaustive** when the 10^L fillings of the L slots fit the budget: every multiset of digits, every
  arrangement; a model that passes distinguishes every such pair (exit code 3 in the CLI).
* **Guided random search** beyond: random fillings, each with rearrangements (transpositions that
  involve a slot next to a separator, random transpositions, shuffles) kept only when the oracle says
  the correct token changes; pairs that differ in fewest tokens are preferred; after half the budget,
  hill-climbing around the closest pair so far (smallest logit difference relative to tolerance).

A pair is a counterexample only if the model's last-position logits agree to float rounding —
``max|logits_a - logits_b| <= rtol * max(|logits_a|, |logits_b|)``, ``rtol`` 1e-5 for float32
logits, 1e-12 for float64, 0 (bitwise equality) for float16/bfloat16 (:data:`DEFAULT_RTOL`) — *and*
the argmax is wrong on at least one prompt — *and*, for a torch module, a float64 copy of the model
agrees to 1e-12 as well (a 2-layer model's order effect on 100-digit prompts can be as small as 7e-6
relative, within float32 tolerance, but not within float64's). So a model outside the proposition
(2 layers, coupled positions) is reported as distinguishing the pairs unless its outputs really are
identical. For a plain callable (not an ``nn.Module``) the float64 check is unavailable and the
claim rests on the tolerance alone.

``model`` is any callable mapping LongTensor ids ``[batch, seq]`` to logits ``[batch, seq, vocab]``
in the task's vocabulary. A model that needs position IDs gets them through ``pos_ids_fn`` (ids ->
IDs, called on every batch, model called as ``model(ids, pos_ids_fn(ids))``); :func:`coupled_pos_ids`
builds the position-coupling rule of a task (the Theorem 5.1 construction needs it).
"""
from __future__ import annotations

from itertools import combinations_with_replacement, permutations
from typing import Any, Callable, Iterator

import numpy as np
import torch

from constructions.nope.certificate import (
    DEFAULT_RTOL, EXIT_BAD_INPUT, EXIT_COUNTEREXAMPLE, EXIT_DISTINGUISHED, INVARIANCE, BadInput, Certificate,
    Comparison, Distinguished, ModelMismatchError, Prompt, SearchReport, check_vocabulary, coupled_pos_ids,
    float64_recheck, last_logits, proposition_note, resolve_task,
)

DEFAULT_BUDGET = 20_000  # model evaluations (prompts); 10^L <= budget -> exhaustive
DEFAULT_TOKEN_BUDGET = 2_000_000  # the default budget shrinks for long prompts: at most this many tokens
_CHUNK_TOKENS = 1 << 17
_ADDITION_MIN_REASON = "with 1-digit operands the only rearrangement of '$a+b=' swaps a and b, and a+b = b+a"


def chunk_prompts(seq_len: int) -> int:
    """Prompts of ``seq_len`` tokens per forward pass (about :data:`_CHUNK_TOKENS` tokens, 8 to 4096)."""
    return max(8, min(4096, _CHUNK_TOKENS // seq_len))


class SearchSpace:
    """The prompts of one task and length: a template whose ``_`` slots take the digits 0-9."""

    def __init__(self, task: Any, n_digits: int) -> None:
        min_digits = getattr(task, "min_digits", 2)
        if not isinstance(n_digits, (int, np.integer)) or n_digits < 1:
            raise BadInput(f"n_digits must be a positive integer, got {n_digits!r}")
        if n_digits < min_digits:
            reason = getattr(task, "min_digits_reason", _ADDITION_MIN_REASON)
            raise BadInput(f"{task.name} needs n_digits >= {min_digits}: no permutation-sensitive pair exists "
                           f"with {n_digits} digit(s) ({reason})")
        template = task.query_template(n_digits) if hasattr(task, "query_template") else (
            "$" + "_" * n_digits + "+" + "_" * n_digits + "=")
        self.task, self.n_digits, self.template = task, int(n_digits), template
        self.base = np.asarray(task.encode(template.replace("_", "0")), dtype=np.int64)
        self.slots = np.array([i for i, c in enumerate(template) if c == "_"])
        self.digit_ids = np.array([int(task.encode(str(d))[0]) for d in range(10)])
        self._answers: dict[tuple[int, ...], int] = {}

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    def ids(self, digits: np.ndarray) -> np.ndarray:
        """Token ids ``[k, T]`` of the prompts whose slots hold ``digits`` ``[k, L]``."""
        digits = np.atleast_2d(digits)
        out = np.repeat(self.base[None], len(digits), axis=0)
        out[:, self.slots] = self.digit_ids[digits]
        return out

    def answer(self, digits) -> int:
        """The oracle's correct next token id (cached per filling)."""
        key = tuple(int(d) for d in digits)
        if key not in self._answers:
            text = self.task.decode(self.ids(np.array(key))[0])
            self._answers[key] = int(self.task.encode(self.task.next_token(text))[0])
        return self._answers[key]


class _Batch:
    """Fillings to evaluate and the pairs among them to compare (with the slot permutation)."""

    def __init__(self) -> None:
        self.digits: list[np.ndarray] = []
        self.answers: list[int] = []
        self.pairs: list[tuple[int, int, np.ndarray | None]] = []

    def add(self, digits: np.ndarray, answer: int) -> int:
        self.digits.append(np.asarray(digits))
        self.answers.append(answer)
        return len(self.digits) - 1


def _sizes(chunk: int) -> Iterator[int]:
    """Batch sizes 32, 64, ... up to ``chunk``: a model that cannot tell the pairs apart is caught at once."""
    size = min(32, chunk)
    while True:
        yield size
        size = min(2 * size, chunk)


def _exhaustive(space: SearchSpace, chunk: int) -> Iterator[_Batch]:
    """Every multiset of slot digits with >= 2 arrangements whose correct next tokens differ."""
    batch, sizes = _Batch(), _sizes(chunk)
    size = next(sizes)
    for multiset in combinations_with_replacement(range(10), space.n_slots):
        arrangements = sorted(set(permutations(multiset)))
        answers = [space.answer(a) for a in arrangements]
        if len(set(answers)) < 2:
            continue
        idx = [batch.add(np.array(a), ans) for a, ans in zip(arrangements, answers)]
        batch.pairs += [(idx[i], idx[j], None) for i in range(len(idx)) for j in range(i + 1, len(idx))
                        if answers[i] != answers[j]]
        if len(batch.digits) >= size:
            yield batch
            batch, size = _Batch(), next(sizes)
    if batch.digits:
        yield batch


def _rearrangements(x: np.ndarray, rng: np.random.Generator, tries: int, ends: np.ndarray) -> Iterator[np.ndarray]:
    """Slot permutations of ``x`` to try: transpositions of a slot next to a separator (``ends``: where
    the first answer token of addition, multiplication, copy and reverse reads its digits) with any
    other slot, transpositions of two random slots, and shuffles. Identity rearrangements are skipped."""
    L = len(x)
    for t in range(tries):
        kind = t % 3
        if kind < 2:
            i = rng.choice(ends) if kind == 0 else rng.integers(L)
            j = rng.choice(np.delete(np.arange(L), i))
            perm = np.arange(L)
            perm[[i, j]] = perm[[j, i]]
        else:
            perm = rng.permutation(L)
        if not np.array_equal(x[perm], x):
            yield perm


def _random(space: SearchSpace, rng: np.random.Generator, chunk: int, state: "_State") -> Iterator[_Batch]:
    """Guided random search: oracle-filtered rearrangements, then hill-climbing on the closest pair."""
    L = space.n_slots
    padded = space.template + "$"
    ends = np.array([k for k, pos in enumerate(space.slots) if padded[pos - 1] != "_" or padded[pos + 1] != "_"])
    for size in _sizes(chunk):
        batch = _Batch()
        climb = state.evaluated >= state.budget // 2 and state.closest_perm is not None
        attempts = 0
        while len(batch.digits) < min(size, state.budget - state.evaluated):
            attempts += 1
            if attempts > 1000 * size:  # sensitive pairs this rare: give up rather than loop forever
                return
            if climb:  # mutate the closest pair: change one digit of x, or compose its permutation
                x, perm = state.closest_digits.copy(), state.closest_perm.copy()
                if rng.random() < 0.5:
                    x[rng.integers(L)] = rng.integers(10)
                else:
                    i, j = rng.choice(L, size=2, replace=False)
                    perm[[i, j]] = perm[[j, i]]
                candidates = [perm] if not np.array_equal(x[perm], x) else []
            else:
                x = rng.integers(0, 10, size=L)
                candidates = list(_rearrangements(x, rng, tries=6, ends=ends))
            ax = space.answer(x)
            kept = [p for p in candidates if space.answer(x[p]) != ax][:2]
            if not kept:
                continue
            i = batch.add(x, ax)
            for p in kept:
                batch.pairs.append((i, batch.add(x[p], space.answer(x[p])), p))
        yield batch


class _State:
    def __init__(self, budget: int) -> None:
        self.budget, self.evaluated, self.compared = budget, 0, 0
        self.closest: Comparison | None = None
        self.closest_ratio = np.inf
        self.closest_digits: np.ndarray | None = None
        self.closest_perm: np.ndarray | None = None


def _comparison(space: SearchSpace, ids: np.ndarray, logits: np.ndarray, answers: np.ndarray, i: int, j: int,
                rtol: float, cls: type = Comparison, **extra: Any) -> Comparison:
    task = space.task
    la, lb = logits[i], logits[j]
    diff = float(np.max(np.abs(la - lb)))
    scale = float(max(np.max(np.abs(la)), np.max(np.abs(lb))))
    return cls(
        task=task.name, n_digits=space.n_digits,
        prompt_a=Prompt(task.decode(ids[i]), tuple(int(t) for t in ids[i])),
        prompt_b=Prompt(task.decode(ids[j]), tuple(int(t) for t in ids[j])),
        correct_a=int(answers[i]), correct_b=int(answers[j]),
        predicted_a=int(np.argmax(la)), predicted_b=int(np.argmax(lb)),
        logits_a=tuple(float(v) for v in la), logits_b=tuple(float(v) for v in lb),
        max_logit_diff=diff, tolerance=rtol * scale, rtol=rtol, **extra,
    )


def search(
    model: Callable[..., torch.Tensor], task: str | Any = "addition", n_digits: int = 3,
    budget: int | None = None, *, seed: int = 0, rtol: float | None = None,
    pos_ids_fn: Callable[[torch.Tensor], torch.Tensor] | None = None, exhaustive: bool | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SearchReport:
    """Search for a Proposition 5.2 counterexample (see the module docstring); never raises for a
    model that distinguishes the pairs (the report's ``certificate`` is then ``None``).

    ``budget`` bounds the number of prompts the model is evaluated on (default :data:`DEFAULT_BUDGET`,
    fewer for long prompts: at most :data:`DEFAULT_TOKEN_BUDGET` tokens); ``exhaustive`` forces the mode
    (default: exhaustive when all 10^L fillings fit the budget). Raises :class:`BadInput` for an
    unknown task or too few digits, :class:`ModelMismatchError` for a model that does not fit.
    ``progress(done, total)`` is called after every forward pass with the prompts evaluated so far and
    the most the search will evaluate."""
    task_obj = resolve_task(task)
    space = SearchSpace(task_obj, n_digits)
    if budget is None:
        budget = max(200, min(DEFAULT_BUDGET, DEFAULT_TOKEN_BUDGET // len(space.base)))
    if budget < 2:
        raise BadInput(f"budget must allow at least 2 model evaluations, got {budget}")
    check_vocabulary(model, task_obj)
    _, dtype = last_logits(model, space.ids(np.zeros((1, space.n_slots), np.int64)), len(task_obj.vocab),
                               pos_ids_fn)
    rtol = DEFAULT_RTOL.get(dtype, 1e-5) if rtol is None else float(rtol)
    if not rtol >= 0:
        raise BadInput(f"rtol must be a non-negative number, got {rtol}")
    applies, note = proposition_note(model, pos_ids_fn)
    if exhaustive is None:
        exhaustive = 10 ** space.n_slots <= budget
    chunk = chunk_prompts(len(space.base))
    most = 10 ** space.n_slots if exhaustive else budget
    state = _State(budget)
    rng = np.random.default_rng(seed)
    batches = _exhaustive(space, chunk) if exhaustive else _random(space, rng, chunk, state)
    certificate: Certificate | None = None
    for batch in batches:
        if not exhaustive and state.evaluated >= budget:
            break
        ids = space.ids(np.stack(batch.digits))
        parts = []
        for k in range(0, len(ids), chunk):
            parts.append(last_logits(model, ids[k:k + chunk], len(task_obj.vocab), pos_ids_fn)[0])
            if progress is not None:
                progress(min(state.evaluated + k + chunk, state.evaluated + len(ids)), most)
        logits = np.concatenate(parts)
        answers = np.array(batch.answers)
        state.evaluated += len(ids)
        state.compared += len(batch.pairs)
        ii = np.array([p[0] for p in batch.pairs])
        jj = np.array([p[1] for p in batch.pairs])
        la, lb = logits[ii], logits[jj]
        diff = np.abs(la - lb).max(axis=1)
        tol = rtol * np.maximum(np.abs(la).max(axis=1), np.abs(lb).max(axis=1))
        pred = logits.argmax(axis=1)
        wrong = (pred[ii] != answers[ii]) | (pred[jj] != answers[jj])
        hit = (diff <= tol) & wrong
        hits = np.flatnonzero(hit)
        hits = hits[np.argsort((ids[ii[hits]] != ids[jj[hits]]).sum(axis=1), kind="stable")]  # readable pairs first
        rejected: tuple[int, Comparison] | None = None
        for k in hits[:8]:
            i, j = batch.pairs[k][0], batch.pairs[k][1]
            d64 = None if dtype == torch.float64 else float64_recheck(model, ids[[i, j]], len(task_obj.vocab),
                                                                      pos_ids_fn)
            cert = _comparison(space, ids, logits, answers, i, j, rtol, Certificate, float64_diff=d64,
                               invariance=f"{INVARIANCE} Model: {note}.")
            if not cert.problems(model, pos_ids_fn, rtol):  # re-checked from scratch before it is claimed
                certificate = cert
                break
            if rejected is None:  # agrees in the model's precision, but not in float64 (or fails a re-check)
                rejected = (int(k), _comparison(space, ids, logits, answers, i, j, rtol, float64_diff=d64))
        ratio = np.where(diff <= tol, 0.0, diff / np.maximum(tol, np.finfo(float).tiny))
        k = int(np.argmin(ratio)) if rejected is None else rejected[0]
        if ratio[k] < state.closest_ratio or (rejected is not None and state.closest_ratio == 0
                                              and state.closest.float64_diff is None):
            i, j, perm = batch.pairs[k]
            state.closest_ratio = float(ratio[k])
            state.closest = (rejected[1] if rejected is not None
                             else _comparison(space, ids, logits, answers, i, j, rtol))
            state.closest_digits, state.closest_perm = batch.digits[i], perm
        if certificate is not None:
            break
    return SearchReport(
        task=task_obj.name, n_digits=space.n_digits, mode="exhaustive" if exhaustive else "random",
        budget=budget, prompts_evaluated=state.evaluated, pairs_compared=state.compared,
        certificate=certificate, closest=state.closest, proposition_applies=applies, model_note=note,
        template=space.template,
    )


def find_counterexample(
    model: Callable[..., torch.Tensor], task: str | Any = "addition", n_digits: int = 3,
    budget: int | None = None, **kwargs: Any,
) -> Certificate:
    """A verified Proposition 5.2 certificate for ``model`` (arguments as for :func:`search`).

    Raises :class:`Distinguished` (carrying the :class:`SearchReport`) when the model distinguishes
    every pair tried — for instance a 2-layer NoPE model or the coupled Theorem 5.1 construction."""
    report = search(model, task, n_digits, budget, **kwargs)
    if report.certificate is None:
        raise Distinguished(report)
    return report.certificate


__all__ = [
    "BadInput", "Certificate", "Comparison", "DEFAULT_BUDGET", "DEFAULT_RTOL", "DEFAULT_TOKEN_BUDGET",
    "Distinguished", "EXIT_BAD_INPUT", "EXIT_COUNTEREXAMPLE", "EXIT_DISTINGUISHED", "INVARIANCE", "ModelMismatchError",
    "Prompt", "SearchReport", "SearchSpace", "coupled_pos_ids", "find_counterexample", "float64_recheck", "last_logits",
    "proposition_note", "search",
]
