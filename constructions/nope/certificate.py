"""Certificates, reports and the model adapter of the Proposition 5.2 counterexample search
(:mod:`constructions.nope`; docs/proposition-5-2.md, "The certificate").

A :class:`Certificate` is self-contained: two prompts (text and ids), their correct next tokens
from the task's oracle, the model's last-position logits on both, their largest difference, the
tolerance, which prompt the model gets wrong, and — for a torch module — the relative difference of
a float64 copy of the model, which must vanish too (so float32 rounding cannot hide an order
effect). :meth:`Certificate.verify` re-derives all of it from scratch with only the model and the
task name.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from lengthgen.model import Transformer
from lengthgen.positions import coupled_addition_ids
from lengthgen.tasks import get_task

INVARIANCE = (
    "Proposition 5.2 (Cho et al. 2024; docs/proposition-5-2.md): in a 1-layer decoder-only transformer "
    "without positional information the last position's query depends only on the last token, its attention "
    "output is a symmetric function of the multiset of tokens, and LayerNorm, MLP and unembedding act "
    "token-wise; so two prompts that are permutations of each other and end in the same token get the same "
    "logits, and the model is wrong on one of them whenever their correct next tokens differ."
)
EXIT_COUNTEREXAMPLE = 0  #: a verified counterexample was found
EXIT_BAD_INPUT = 2  #: unknown task, unusable model or checkpoint, too few digits
EXIT_DISTINGUISHED = 3  #: the model distinguished every pair tried (or all pairs, in exhaustive mode)

#: relative tolerance on max|logits_a - logits_b| (relative to max|logits|), per dtype of the logits.
#: 1-layer NoPE models measured at most ~4e-7 in float32 and ~7e-16 in float64 (prompts up to 2003
#: tokens); in 16-bit formats their logits came out bitwise equal, while real order effects of
#: 2-layer models can hide below one 16-bit ulp, so 16-bit logits must be exactly equal.
DEFAULT_RTOL: dict[torch.dtype, float] = {
    torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 0.0, torch.bfloat16: 0.0,
}


class BadInput(ValueError):
    """Unknown task, too few digits, or a model that cannot be searched (CLI exit code 2)."""


class ModelMismatchError(BadInput):
    """The model's output shape or vocabulary does not fit the task."""


class Distinguished(LookupError):
    """No counterexample: the model distinguished every pair tried. ``report`` says how many."""

    def __init__(self, report: "SearchReport") -> None:
        super().__init__(report.summary())
        self.report = report


def resolve_task(task: str | Any) -> Any:
    """A registered task from its name or object (``BadInput`` naming the choices otherwise)."""
    task = task if isinstance(task, str) else getattr(task, "name", repr(task))
    try:
        return get_task(task)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


@dataclass(frozen=True)
class Prompt:
    text: str
    ids: tuple[int, ...]


@dataclass(frozen=True)
class Comparison:
    """A model's next-token logits on two prompts that are permutations with the same last token."""

    task: str
    n_digits: int
    prompt_a: Prompt
    prompt_b: Prompt
    correct_a: int
    correct_b: int
    predicted_a: int
    predicted_b: int
    logits_a: tuple[float, ...]
    logits_b: tuple[float, ...]
    max_logit_diff: float
    tolerance: float  #: rtol times the logit scale max(|logits_a|, |logits_b|)
    rtol: float
    #: max|logits_a - logits_b| / max|logits| of a float64 copy of the model (None: not computed, not a
    #: torch module, or already float64): order effects that the model's precision rounds away show here
    float64_diff: float | None = None

    @property
    def identical(self) -> bool:
        """Logits equal up to float rounding (``max_logit_diff <= tolerance``)."""
        return self.max_logit_diff <= self.tolerance

    @property
    def wrong_on(self) -> tuple[str, ...]:
        """Which prompts ("a", "b") the model's argmax gets wrong."""
        return tuple(name for name, p, c in (("a", self.predicted_a, self.correct_a),
                                             ("b", self.predicted_b, self.correct_b)) if p != c)

    def token(self, token_id: int) -> str:
        return get_task(self.task).vocab[token_id]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(identical=self.identical, wrong_on=list(self.wrong_on))
        for key in ("correct_a", "correct_b", "predicted_a", "predicted_b"):
            out[f"{key}_token"] = self.token(getattr(self, key))
        return out


@dataclass(frozen=True)
class Certificate(Comparison):
    """A Proposition 5.2 counterexample: identical logits (up to rounding), different correct answers,
    and the model wrong on at least one prompt. ``invariance`` states the reason it relies on."""

    invariance: str = INVARIANCE

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Certificate":
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        for key in ("prompt_a", "prompt_b"):
            kwargs[key] = Prompt(kwargs[key]["text"], tuple(kwargs[key]["ids"]))
        for key in ("logits_a", "logits_b"):
            kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    def problems(self, model: Callable[..., torch.Tensor], pos_ids_fn: Callable | None = None,
                 rtol: float | None = None) -> list[str]:
        """Everything wrong with this certificate for ``model``, re-derived from scratch (empty if valid):
        texts vs ids, permutation, same last token, the oracle's answers (valid prompts, different
        answers, equal to the stored ones), the model's logits (identical within ``rtol`` — default
        :data:`DEFAULT_RTOL` of the logits' dtype, never the stored one — equal to the stored ones,
        and wrong on at least one prompt)."""
        out: list[str] = []
        try:
            task = get_task(self.task)
        except ValueError as exc:
            return [str(exc)]
        a, b = self.prompt_a, self.prompt_b
        for name, p in (("a", a), ("b", b)):
            try:
                if [int(t) for t in task.encode(p.text)] != list(p.ids):
                    out.append(f"prompt {name}: text {p.text!r} does not encode to its ids")
            except ValueError as exc:
                out.append(f"prompt {name}: {exc}")
        if sorted(a.ids) != sorted(b.ids):
            out.append("the prompts are not permutations of each other")
        if not a.ids or not b.ids or a.ids[-1] != b.ids[-1]:
            out.append("the prompts do not end in the same token")
        if tuple(a.ids) == tuple(b.ids):
            out.append("the prompts are identical")
        correct = []
        for name, p, stored in (("a", a, self.correct_a), ("b", b, self.correct_b)):
            try:
                c = int(task.encode(task.next_token(p.text))[0])
            except ValueError as exc:
                out.append(f"prompt {name} is not a valid {task.name} prompt: {exc}")
                continue
            correct.append(c)
            if c != stored:
                out.append(f"prompt {name}: the oracle's next token is {task.vocab[c]!r}, not {task.vocab[stored]!r}")
        if len(correct) == 2 and correct[0] == correct[1]:
            out.append("both prompts have the same correct next token")
        if out:
            return out
        try:
            logits, dtype = last_logits(model, np.array([a.ids, b.ids]), len(task.vocab), pos_ids_fn)
        except BadInput as exc:
            return [str(exc)]
        rtol = DEFAULT_RTOL.get(dtype, 1e-5) if rtol is None else rtol
        la, lb = logits
        scale = max(np.abs(la).max(), np.abs(lb).max())
        diff = float(np.abs(la - lb).max())
        if not diff <= rtol * scale:
            out.append(f"the model distinguishes the prompts: max logit difference {diff:.3g} > "
                       f"{rtol:g} × {scale:.3g}")
        stored = np.array([self.logits_a, self.logits_b])
        if stored.shape != logits.shape or not np.abs(stored - logits).max() <= rtol * max(scale, np.abs(stored).max()):
            out.append("the stored logits are not this model's")
        if int(np.argmax(la)) == correct[0] and int(np.argmax(lb)) == correct[1]:
            out.append("the model is right on both prompts")
        if dtype != torch.float64:
            d64 = float64_recheck(model, np.array([a.ids, b.ids]), len(task.vocab), pos_ids_fn)
            if d64 is not None and not d64 <= DEFAULT_RTOL[torch.float64]:
                name = str(dtype).removeprefix("torch.")
                out.append(f"a float64 copy of the model distinguishes the prompts (relative logit difference "
                           f"{d64:.3g} > {DEFAULT_RTOL[torch.float64]:g}): their agreement in {name} is rounding "
                           "hiding a real order effect")
        return out

    def verify(self, model: Callable[..., torch.Tensor], pos_ids_fn: Callable | None = None,
               rtol: float | None = None) -> bool:
        """True when :meth:`problems` finds nothing."""
        return not self.problems(model, pos_ids_fn, rtol)


@dataclass
class SearchReport:
    """What :func:`constructions.nope.search.search` did and found."""

    task: str
    n_digits: int
    template: str
    mode: str  #: "exhaustive" (every pair of fillings) or "random" (guided random search)
    budget: int
    prompts_evaluated: int
    pairs_compared: int
    certificate: Certificate | None
    closest: Comparison | None  #: the pair with the smallest logit difference relative to tolerance
    proposition_applies: bool | None
    model_note: str

    @property
    def status(self) -> str:
        return "counterexample" if self.certificate is not None else "distinguished"

    def summary(self) -> str:
        if self.certificate is not None:
            return (f"counterexample for {self.task} ({self.n_digits} digits): "
                    f"{self.certificate.prompt_a.text} vs {self.certificate.prompt_b.text}")
        scope = ("every pair of prompts " + self.template + " that are permutations with different correct answers"
                 if self.mode == "exhaustive" else f"all {self.pairs_compared} pairs tried")
        return f"no counterexample for {self.task} ({self.n_digits} digits): the model distinguishes {scope}"

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("certificate", "closest")}
        out.update(status=self.status, summary=self.summary(), invariance=INVARIANCE,
                   certificate=None if self.certificate is None else self.certificate.to_dict(),
                   closest=None if self.closest is None else self.closest.to_dict())
        return out


def _device_of(model: Any) -> torch.device:
    if isinstance(model, nn.Module):
        for p in model.parameters():
            return p.device
    return torch.device("cpu")


def last_logits(model: Callable[..., torch.Tensor], ids: np.ndarray, n_vocab: int,
                pos_ids_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[np.ndarray, torch.dtype]:
    """The model's last-position logits ``[batch, n_vocab]`` (float64) on ``ids`` ``[batch, seq]``, and
    the dtype they came in. Puts an ``nn.Module`` in eval mode. Raises :class:`ModelMismatchError` when the
    model fails on the ids or its output is not ``[batch, seq, n_vocab]`` logits."""
    tokens = torch.as_tensor(np.asarray(ids), dtype=torch.long, device=_device_of(model))
    if isinstance(model, nn.Module) and model.training:
        model.eval()
    try:
        with torch.no_grad():
            out = model(tokens) if pos_ids_fn is None else model(tokens, pos_ids_fn(tokens))
    except MemoryError:  # lengthgen.resources refused the pass: that is about the machine, not the model
        raise
    except Exception as exc:  # any failure of a user's model on valid ids means it does not fit the task
        raise ModelMismatchError(
            f"the model failed on prompts of {tokens.shape[1]} tokens from a {n_vocab}-token vocabulary "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(out, torch.Tensor):
        raise ModelMismatchError(f"the model returned {type(out).__name__}, not a logits tensor")
    want = (tokens.shape[0], tokens.shape[1], n_vocab)
    if tuple(out.shape) != want:
        raise ModelMismatchError(
            f"the model's output has shape {tuple(out.shape)}, but the task needs [batch, seq, vocab] = {list(want)} "
            f"(its vocabulary has {n_vocab} tokens)")
    if not out.is_floating_point():
        raise ModelMismatchError(f"the model's output has dtype {out.dtype}, not floating-point logits")
    return out[:, -1].detach().to("cpu", torch.float64).numpy(), out.dtype


def float64_recheck(model: Any, ids: np.ndarray, n_vocab: int, pos_ids_fn: Callable | None = None) -> float | None:
    """max|logits_a - logits_b| / max|logits| at the last position of the two prompts ``ids`` for a float64
    copy of ``model`` — or None when that is unavailable (not an ``nn.Module`` with floating parameters,
    or the copy fails). A model that really cannot tell the prompts apart agrees to ~1e-16 here."""
    if not isinstance(model, nn.Module) or not any(p.is_floating_point() for p in model.parameters()):
        return None
    try:
        model64 = copy.deepcopy(model).to(torch.float64)
        logits, _ = last_logits(model64, ids, n_vocab, pos_ids_fn)
    except Exception:  # a module that cannot run in float64: the check is simply not available
        return None
    scale = np.abs(logits).max()
    diff = float(np.abs(logits[0] - logits[1]).max())
    return 0.0 if diff == 0 else diff / scale


def check_vocabulary(model: Any, task: Any) -> None:
    """For a lengthgen :class:`Transformer`: its vocabulary sizes (and annotated token strings) must
    be the task's. Raises :class:`ModelMismatchError` otherwise."""
    if not isinstance(model, Transformer):
        return
    n, cfg, names = len(task.vocab), model.cfg, model.annotations.vocab
    if cfg.d_vocab_out != n or cfg.d_vocab < n:
        raise ModelMismatchError(f"the model has a vocabulary of {cfg.d_vocab} in / {cfg.d_vocab_out} out tokens, "
                                 f"but {task.name} has {n}: {''.join(task.vocab)}")
    if names and list(names)[:n] != list(task.vocab):
        raise ModelMismatchError(f"the model's vocabulary {''.join(map(str, names))!r} is not "
                                 f"{task.name}'s {''.join(task.vocab)!r}")


def coupled_pos_ids(task: str | Any, start: int | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """``pos_ids_fn`` for the position-coupling rule of ``task`` (addition: docs/theorem-5-1.md, "Position IDs",
    start 2; other tasks: their ``position_ids`` rule in :mod:`lengthgen.tasks`, start 1), computed from each
    prompt's text."""
    task = resolve_task(task)
    if hasattr(task, "position_ids"):
        s = 1 if start is None else start
        rule = lambda text: task.position_ids(text, s)  # noqa: E731
    elif task.name == "addition":
        s = 2 if start is None else start
        rule = lambda text: coupled_addition_ids(max(text.find("+") - 1, 1), s)[: len(text)]  # noqa: E731
    else:
        raise BadInput(f"task {task.name!r} has no position-coupling rule")

    def pos_ids_fn(tokens: torch.Tensor) -> torch.Tensor:
        rows = [rule(task.decode(row.tolist())) for row in tokens.cpu()]
        return torch.as_tensor(np.stack(rows), dtype=torch.long, device=tokens.device)

    return pos_ids_fn


def proposition_note(model: Any, pos_ids_fn: Callable | None = None) -> tuple[bool | None, str]:
    """Whether Proposition 5.2 applies to ``model`` (None: unknown architecture), in words."""
    if not isinstance(model, Transformer):
        return None, ("a model of unknown architecture: Proposition 5.2 may not apply, so only measured "
                      "logits count")
    layers = model.cfg.n_layers
    what = f"{layers}-layer transformer"
    if model.cfg.positional != "none":
        ids = "IDs from pos_ids_fn" if pos_ids_fn is not None else "IDs 0..T-1"
        return False, (f"{what} with learned position embeddings ({ids}): Proposition 5.2 does not apply, "
                       "positions can tell a prompt from its permutation")
    if any(w is not None for w in (model.cfg.attn_windows or [])):
        return False, (f"{what} with Hard-ALiBi attention windows: Proposition 5.2 does not apply, a window "
                       "hides keys by their distance, so order reaches the output")
    if layers != 1:
        return False, (f"{what} without positional information: Proposition 5.2 does not apply, since after "
                       "one causal layer each position's output depends on its own prefix, so later layers see order")
    return True, f"{what} without positional information: Proposition 5.2 applies"
