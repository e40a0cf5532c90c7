"""Numpy-backed evaluator of mini-RASP programs, batch and incremental.

docs/rasp.md states the semantics. Two modes:

* non-causal (``causal=False``, Weiss' RASP): every query sees every key;
* causal (``causal=True``, RASP-L): query p sees keys 0..p, and ``length``
  is ``p + 1`` (the length of the visible prefix).

:func:`evaluate` computes whole columns, op by op. :class:`IncrementalEvaluator`
appends one token at a time and caches every s-op's column, so autoregressive
decoding costs O(T * ops) instead of O(T^2 * ops). Both return every
intermediate s-op by name (:class:`Evaluation`), and selectors pretty-print for
short inputs. Equality selects never build an n x n matrix; see
:mod:`rasp.kernels`.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np

from rasp.core import (Aggregate, Full, IndicesType, LengthType, Map, RASPExpr, Selector,
                       SelectorWidth, SequenceMap, SOp, TokensType, walk)
from rasp.errors import RASPError, RASPEvaluationError, RASPSizeError, RASPTypeError
from rasp.kernels import AttentionKernel, Columns, dense_row
from rasp.tracr_ops import ConstantSOp, check_constant_length, constant_selectors

DEFAULT_MAX_DENSE = 2048
MAX_SHOW = 64


class _Schedule:
    """The s-ops of a program in topological order, with unique labels."""

    def __init__(self, program: SOp) -> None:
        if not isinstance(program, SOp):
            raise TypeError(f"a program is an s-op, got {program!r}")
        self.program = program
        exprs = list(walk(program))
        self.sops: list[SOp] = [e for e in exprs if isinstance(e, SOp)]
        self.selectors: list[Selector] = [e for e in exprs if isinstance(e, Selector)]
        self.labels: dict[str, RASPExpr] = {}
        for expr in exprs:
            label = expr.label
            if label in self.labels:
                label = f"{label}#{expr.uid}"
            self.labels[label] = expr
        self.label_of = {e.uid: lab for lab, e in self.labels.items()}


def _wrap(op: SOp, position: int | None, exc: Exception) -> RASPError:
    where = "" if position is None else f" at position {position}"
    if isinstance(exc, RASPError):
        return exc
    cls = RASPTypeError if isinstance(exc, TypeError) else RASPEvaluationError
    return cls(f"{type(op).__name__} {op.label!r} failed{where}: {type(exc).__name__}: {exc}")


def evaluate(program: SOp, tokens: Iterable[Any], *, causal: bool = False, fast: bool = True,
             max_dense: int = DEFAULT_MAX_DENSE) -> "Evaluation":
    """Evaluate ``program`` on ``tokens``; every s-op column is kept.

    ``fast=False`` forces the dense row-by-row path for every selector (for testing
    the fast paths against it); ``max_dense`` guards that path.
    """
    sched = program if isinstance(program, _Schedule) else _Schedule(program)
    toks = tokens.tolist() if isinstance(tokens, np.ndarray) else list(tokens)
    n = len(toks)
    cols: Columns = {}
    for op in sched.sops:
        try:
            cols[op.uid] = _batch_column(op, cols, toks, n, causal, fast, max_dense)
        except RASPError:
            raise
        except Exception as exc:  # noqa: BLE001 - re-raised with the op's name
            raise _wrap(op, None, exc) from exc
    return Evaluation(sched, cols, n, causal)


def _batch_column(op: SOp, cols: Columns, toks: list, n: int, causal: bool, fast: bool,
                  max_dense: int) -> list:
    if isinstance(op, TokensType):
        return toks
    if isinstance(op, IndicesType):
        return list(range(n))
    if isinstance(op, LengthType):
        return list(range(1, n + 1)) if causal else [n] * n
    if isinstance(op, Full):
        return [op.fill] * n
    if isinstance(op, ConstantSOp):
        return op.column(n, causal)
    if isinstance(op, Map):
        return list(map(op.f, cols[op.inner.uid]))
    if isinstance(op, SequenceMap):
        return list(map(op.f, cols[op.fst.uid], cols[op.snd.uid]))
    if isinstance(op, (Aggregate, SelectorWidth)):
        return AttentionKernel(op, cols, causal, fast, max_dense).batch(n)
    raise TypeError(f"cannot evaluate {op!r}")


class IncrementalEvaluator:
    """Causal evaluation one token at a time with every column cached.

    ``push(token)`` appends a token and returns the program's output at its
    position in O(ops) time (plus O(log n) per hash-path attention op).
    """

    def __init__(self, program: SOp, *, max_dense: int = DEFAULT_MAX_DENSE) -> None:
        self._sched = _Schedule(program)
        self._tokens: list = []
        self._failed: RASPError | None = None
        self.cols: Columns = {}
        self._steps: list[tuple[SOp, Callable[[int], None]]] = []
        for op in self._sched.sops:
            self._steps.append((op, self._make_step(op, max_dense)))
        self._steps = [(op, f) for op, f in self._steps if f is not None]
        self._fns = [f for _, f in self._steps]
        self._out = self.cols[program.uid]

    def _make_step(self, op: SOp, max_dense: int) -> Callable[[int], None] | None:
        if isinstance(op, TokensType):
            self.cols[op.uid] = self._tokens
            return None
        out: list = []
        self.cols[op.uid] = out
        append = out.append
        if isinstance(op, IndicesType):
            return append
        if isinstance(op, LengthType):
            return lambda p: append(p + 1)
        if isinstance(op, Full):
            fill = op.fill
            return lambda p: append(fill)
        if isinstance(op, ConstantSOp):
            return lambda p: append(op.column(p + 1, True)[p])
        if isinstance(op, Map):
            f, src = op.f, self.cols[op.inner.uid]
            return lambda p: append(f(src[p]))
        if isinstance(op, SequenceMap):
            f, a, b = op.f, self.cols[op.fst.uid], self.cols[op.snd.uid]
            return lambda p: append(f(a[p], b[p]))
        return AttentionKernel(op, self.cols, True, True, max_dense).stepper(out)

    def __len__(self) -> int:
        return len(self._tokens)

    def push(self, token: Any) -> Any:
        """Append ``token``; return the program's output at the new position."""
        if self._failed is not None:
            raise RASPEvaluationError(f"this evaluator stopped after an error: {self._failed}")
        p = len(self._tokens)
        self._tokens.append(token)
        try:
            for step in self._fns:
                step(p)
        except Exception as exc:  # noqa: BLE001 - re-raised with the op's name
            culprit = next((op for op, _ in self._steps if len(self.cols[op.uid]) == p),
                           self._sched.program)
            self._failed = _wrap(culprit, p, exc)
            raise self._failed from exc
        return self._out[p]

    def extend(self, tokens: Iterable[Any]) -> list:
        """Push several tokens; return their outputs."""
        return [self.push(t) for t in tokens]

    def column(self, name: str | SOp) -> list:
        """The live (growing) column of an s-op, by label or by expression."""
        expr = self._sched.labels[name] if isinstance(name, str) else name
        return self.cols[expr.uid]

    def evaluation(self) -> "Evaluation":
        """A snapshot of every column as an :class:`Evaluation`."""
        cols = {uid: list(col) for uid, col in self.cols.items()}
        return Evaluation(self._sched, cols, len(self._tokens), True)


def to_array(col: Sequence[Any]) -> np.ndarray:
    """A column as a 1-D numpy array: numeric dtype when possible, else dtype=object."""
    n = len(col)
    if all(type(v) in (int, float, bool) for v in col):
        try:
            arr = np.asarray(col)
            if arr.ndim == 1 and arr.dtype.kind in "biuf":
                return arr
        except (OverflowError, ValueError):
            pass
    return np.fromiter(col, dtype=object, count=n)


class Evaluation:
    """Result of an evaluation: the output and every intermediate s-op, by label."""

    def __init__(self, sched: _Schedule, cols: Columns, n: int, causal: bool) -> None:
        self._sched, self._cols, self.n, self.causal = sched, cols, n, causal

    @property
    def output(self) -> np.ndarray:
        """The program's output column."""
        return to_array(self._cols[self._sched.program.uid])

    @property
    def names(self) -> list[str]:
        """Labels of every s-op and selector, in evaluation order."""
        return list(self._sched.labels)

    def column(self, name: str | SOp) -> list:
        """The raw Python column of an s-op."""
        expr = self._sched.labels[name] if isinstance(name, str) else name
        if not isinstance(expr, SOp):
            raise KeyError(f"{name!r} is a selector; use .selector()")
        return self._cols[expr.uid]

    def __getitem__(self, name: str | SOp) -> np.ndarray:
        return to_array(self.column(name))

    @property
    def values(self) -> dict[str, np.ndarray]:
        """Every s-op's values as numpy arrays, keyed by label."""
        return {self._sched.label_of[op.uid]: to_array(self._cols[op.uid]) for op in self._sched.sops}

    def selector(self, name: str | Selector) -> np.ndarray:
        """The selector as a dense (query x key) boolean matrix, causal mask included.

        Only for short inputs (n <= 64); long evaluations never build it."""
        sel = self._sched.labels[name] if isinstance(name, str) else name
        if not isinstance(sel, Selector):
            raise KeyError(f"{name!r} is not a selector")
        if self.n > MAX_SHOW:
            raise RASPSizeError(f"selector {sel.label!r}: {self.n} tokens is too long to show "
                                f"(limit {MAX_SHOW})")
        for const in constant_selectors(sel):
            check_constant_length(const, len(const.value), self.n, self.causal)
        mat = np.zeros((self.n, self.n), dtype=bool)
        for p in range(self.n):
            hi = p if self.causal else self.n - 1
            mat[p, :hi + 1] = dense_row(sel, self._cols, p, hi)
        return mat

    def show_selector(self, name: str | Selector) -> str:
        """The selector as text: one row per query, '1' where a key is selected."""
        sel = self._sched.labels[name] if isinstance(name, str) else name
        mat = self.selector(sel)
        has_sops = getattr(sel, "queries", None) is not None
        qs = self._cols[sel.queries.uid] if has_sops else list(range(self.n))
        ks = self._cols[sel.keys.uid] if has_sops else list(range(self.n))
        width = max([len(repr(v)) for v in qs] + [1])
        lines = [f"{sel.label}: rows are queries, columns are keys",
                 " " * (width + 3) + " ".join(repr(k) for k in ks)]
        for q, row in zip(qs, mat):
            lines.append(f"{repr(q):>{width}} | " + " ".join("1" if b else "." for b in row))
        return "\n".join(lines)

    def show(self) -> str:
        """Every s-op column as text, one line per s-op (for short inputs)."""
        if self.n > MAX_SHOW:
            raise RASPSizeError(f"{self.n} tokens is too long to show (limit {MAX_SHOW})")
        width = max(len(self._sched.label_of[op.uid]) for op in self._sched.sops)
        return "\n".join(f"{self._sched.label_of[op.uid]:>{width}}: "
                         + " ".join(repr(v) for v in self._cols[op.uid]) for op in self._sched.sops)
