"""Attention kernels of the evaluator: selector plans and reducers.

docs/rasp.md, "Fast paths, and why they are exact". A selector is classified once:

* **direct**: a conjunction containing ``Select(indices + a, q, EQ)``: the only
  candidate key of row p is ``j = q[p] - a`` (shifts, ``index_select``); O(1) per row.
* **hash**: a conjunction of EQ selects, ``TRUE``, and upper bounds on the key
  index (``Select(indices + a, b, LEQ | LT)``;
  exact for any real bound, see :mod:`rasp.bounds`). Keys are grouped by value in append order; with causal
  masking and upper bounds every row selects a *prefix* of its group, so prefix
  statistics (count, running max/min/sum, first differing value) answer each row
  in O(log n) without ever building an n x n matrix.
* **dense**: anything else (order comparisons on values, custom predicates,
  Or/Not); evaluated row by row with numpy, refused beyond ``max_dense`` tokens.

Reducers implement the Aggregate semantics of :class:`rasp.core.Aggregate` once,
on "buckets" (key positions in increasing order plus prefix statistics); the
dense path feeds its selected keys through the same reducers.
"""
from __future__ import annotations

import numbers
import operator
from bisect import bisect_right
from typing import Any, Callable

import numpy as np

from rasp.core import (Aggregate, Comparison, Encoding, Select, Selector, SelectorAnd,
                       SelectorNot, SelectorOr, SelectorWidth, SOp)
from rasp.bounds import exact_index, index_upper_bound, numpy_compare_is_exact, self_equal
from rasp.errors import AmbiguousAggregateError, RASPSizeError, RASPTypeError
from rasp.tracr_ops import ConstantSelector, check_constant_length, constant_selectors

Columns = dict[int, list]


def _describe(op: SOp) -> str:
    return f"{type(op).__name__} {op.label!r}"


# --------------------------------------------------------------------------- reducers


class Reducer:
    """Count-only reducer (SelectorWidth). A bucket is ``[key positions, stats, aux]``."""

    def __init__(self, op: SOp) -> None:
        self.op = op
        self.default: Any = getattr(op, "default", 0)

    def new_bucket(self) -> list:
        return [[], [], None]

    def add(self, bucket: list, j: int, value: Any) -> None:
        bucket[0].append(j)

    def result(self, bucket: list, r: int, p: int) -> Any:
        return r

    def single(self, j: int, value: Any, p: int) -> Any:
        """The result when exactly one key (j) is selected."""
        return 1


class _ExtremumReducer(Reducer):
    """``reduce="max"`` (``better = operator.gt``) or ``"min"`` (``operator.lt``): running extremum."""

    def __init__(self, op: SOp, better: Callable[[Any, Any], bool]) -> None:
        super().__init__(op)
        self.better = better

    def add(self, bucket: list, j: int, value: Any) -> None:
        idx, stat, _ = bucket
        if stat:
            try:
                best = value if self.better(value, stat[-1]) else stat[-1]
            except TypeError as exc:
                raise RASPTypeError(
                    f"{_describe(self.op)} (reduce={self.op.reduce!r}) cannot compare {value!r} "
                    f"(key {j}) with {stat[-1]!r}: {exc}") from None
        else:
            best = value
        idx.append(j)
        stat.append(best)

    def result(self, bucket: list, r: int, p: int) -> Any:
        return bucket[1][r - 1]

    def single(self, j: int, value: Any, p: int) -> Any:
        return value


class _NumericalMeanReducer(Reducer):
    """Numerical ``reduce="mean"``: running sums; a selected non-number is an error."""

    def add(self, bucket: list, j: int, value: Any) -> None:
        idx, stat, bad = bucket
        numeric = isinstance(value, numbers.Real)
        if not numeric and bad is None:
            bucket[2] = (len(idx), j, value)
        idx.append(j)
        stat.append((stat[-1] if stat else 0) + (value if numeric else 0))

    def result(self, bucket: list, r: int, p: int) -> Any:
        bad = bucket[2]
        if bad is not None and bad[0] < r:
            raise RASPTypeError(
                f"{_describe(self.op)}: numerical mean over the non-numeric value {bad[2]!r} "
                f"(key position {bad[1]}, query position {p}); use reduce='max'/'min' "
                "or a categorical encoding")
        return bucket[1][r - 1] / r

    def single(self, j: int, value: Any, p: int) -> Any:
        bucket = self.new_bucket()
        self.add(bucket, j, value)
        return self.result(bucket, 1, p)


class _CategoricalMeanReducer(Reducer):
    """Categorical ``reduce="mean"``: the single selected value; several different ones is an error."""

    def add(self, bucket: list, j: int, value: Any) -> None:
        idx = bucket[0]
        if not idx:
            bucket[2] = [value, j, None]
        else:
            aux = bucket[2]
            if aux[2] is None and not (value is aux[0] or value == aux[0]):
                aux[2] = (len(idx), j, value)
        idx.append(j)

    def result(self, bucket: list, r: int, p: int) -> Any:
        first, j0, diff = bucket[2]
        if diff is not None and diff[0] < r:
            raise AmbiguousAggregateError(
                f"{_describe(self.op)}: categorical aggregate selected several different values "
                f"at query position {p}: {first!r} (key {j0}) and {diff[2]!r} (key {diff[1]}); "
                "use reduce='max'/'min' or numerical(...) for a mean")
        return first

    def single(self, j: int, value: Any, p: int) -> Any:
        return value


def make_reducer(op: SOp) -> Reducer:
    """The reducer implementing ``op``'s semantics (the Aggregate table of docs/rasp.md)."""
    if isinstance(op, SelectorWidth):
        return Reducer(op)
    assert isinstance(op, Aggregate)
    if op.reduce == "max":
        return _ExtremumReducer(op, operator.gt)
    if op.reduce == "min":
        return _ExtremumReducer(op, operator.lt)
    if op.encoding is Encoding.NUMERICAL:
        return _NumericalMeanReducer(op)
    return _CategoricalMeanReducer(op)


# ------------------------------------------------------------------------------ plans


def conjuncts(selector: Selector) -> list[Selector]:
    """Flatten nested SelectorAnd into its atoms."""
    out: list[Selector] = []
    stack = [selector]
    while stack:
        s = stack.pop()
        if isinstance(s, SelectorAnd):
            stack.extend((s.snd, s.fst))
        else:
            out.append(s)
    return out


Bound = tuple[SOp, int, bool]


def classify(selector: Selector) -> tuple[str, list[Select], list[Bound]]:
    """Return ``(kind, eq_atoms, bounds)`` with kind in {"empty", "direct", "hash", "dense"}.

    ``bounds`` holds ``(queries, c, strict)``: key index j is selected only if
    ``j + c < queries[p]`` (strict, from LT) or ``j + c <= queries[p]`` (LEQ). The
    query may be any real number; :func:`rasp.bounds.index_upper_bound` does the
    exact arithmetic.
    """
    eq: list[Select] = []
    bounds: list[Bound] = []
    empty = False
    for atom in conjuncts(selector):
        if isinstance(atom, ConstantSelector) and atom.uniform is not None:
            empty = empty or not atom.uniform
            continue
        if not isinstance(atom, Select):
            return "dense", [], []
        pred, off = atom.predicate, atom.keys.index_offset
        if pred is Comparison.TRUE:
            continue
        if pred is Comparison.FALSE:
            empty = True
        elif pred is Comparison.EQ:
            eq.append(atom)
        elif pred in (Comparison.LEQ, Comparison.LT) and off is not None:
            bounds.append((atom.queries, off, pred is Comparison.LT))
        else:
            return "dense", [], []
    if empty:
        return "empty", [], []
    direct = [a for a in eq if a.keys.index_offset is not None]
    if direct:
        eq.remove(direct[0])
        return "direct", [direct[0]] + eq, bounds
    return "hash", eq, bounds


class AttentionKernel:
    """Evaluates one Aggregate/SelectorWidth: ``add_key(j)`` then ``query(p, n)``.

    Batch evaluation adds every key then queries every row; incremental (causal)
    evaluation adds key p and queries row p. Both use the same code.
    """

    def __init__(self, op: SOp, cols: Columns, causal: bool, fast: bool, max_dense: int) -> None:
        self.op, self.causal, self.max_dense = op, causal, max_dense
        self.selector: Selector = op.selector
        self.reducer = make_reducer(op)
        self.default = self.reducer.default
        self.cols = cols
        self.values = cols[op.sop.uid] if isinstance(op, Aggregate) else None
        kind, eq, bounds = classify(self.selector) if fast else ("dense", [], [])
        self.kind = kind
        self.bounds = [(cols[q.uid], c, strict) for q, c, strict in bounds]
        self.eq = [(cols[a.keys.uid], cols[a.queries.uid]) for a in eq]
        self.offset = eq[0].keys.index_offset if kind == "direct" else 0
        self.buckets: dict[Any, list] = {}
        self.add_key = self._add_hash if kind == "hash" else (lambda j: None)
        self.query = getattr(self, f"_query_{kind}")

    def check_size(self, n: int) -> None:
        if self.kind == "dense" and n > self.max_dense:
            raise RASPSizeError(
                f"{_describe(self.op)}: selector {self.selector.label!r} needs dense evaluation "
                f"(order comparison, custom predicate, Or/Not) and {n} tokens exceed "
                f"max_dense={self.max_dense}; use EQ selects, index bounds or raise max_dense")

    def _direct_fn(self, append: Callable[[Any], None], n: int | None) -> Callable[[int], None] | None:
        """Hot path for a plain shift / index_select (one direct EQ atom, no bounds);
        ``n=None`` means incremental causal evaluation. None when not applicable."""
        if self.kind != "direct" or len(self.eq) != 1 or self.bounds:
            return None
        keys, off, vals, query = self.eq[0][1], self.offset, self.values, self.query
        single, default, causal = self.reducer.single, self.default, self.causal

        def direct(p: int) -> None:
            q = keys[p]
            if type(q) is not int:
                append(query(p, p + 1 if n is None else n))
                return
            j = q - off
            if 0 <= j and (j <= p if causal else j < n):
                append(single(j, None if vals is None else vals[j], p))
            else:
                append(default)
        return direct

    def stepper(self, out: list) -> Callable[[int], None]:
        """Incremental (causal) step: add key p, append the result of row p to ``out``."""
        append, query = out.append, self.query
        direct = self._direct_fn(append, None)
        if direct is not None:
            return direct
        if self.kind != "hash":
            return lambda p: append(query(p, p + 1))
        add_key = self.add_key

        def step(p: int) -> None:
            add_key(p)
            append(query(p, p + 1))
        return step

    def batch(self, n: int) -> list:
        self.check_size(n)
        for const in constant_selectors(self.selector):
            check_constant_length(const, len(const.value), n, self.causal)
        out: list = []
        direct = self._direct_fn(out.append, n)
        if direct is not None:
            for p in range(n):
                direct(p)
            return out
        for j in range(n):
            self.add_key(j)
        return [self.query(p, n) for p in range(n)]

    # -- helpers
    def _value(self, j: int) -> Any:
        return None if self.values is None else self.values[j]

    def _hi(self, p: int, n: int) -> float:
        """The largest selectable key index of row p (causal mask and index bounds)."""
        hi: float = p if self.causal else n - 1
        for col, c, strict in self.bounds:
            hi = min(hi, index_upper_bound(col[p], c, strict, self.selector.label))
        return hi

    def _key(self, cols_index: int, j: int) -> Any:
        if len(self.eq) == 1:
            return self.eq[0][cols_index][j]
        return tuple(pair[cols_index][j] for pair in self.eq)

    # -- empty
    def _query_empty(self, p: int, n: int) -> Any:
        return self.default

    # -- direct addressing: j = queries[p] - offset
    def _query_direct(self, p: int, n: int) -> Any:
        hi = self._hi(p, n)                 # first, so a bad bound query raises as in dense
        j = exact_index(self.eq[0][1][p])
        if j is None:
            return self.default             # no index equals a non-integer query
        j -= self.offset
        if j < 0 or j > hi:
            return self.default
        for keys, queries in self.eq[1:]:
            if not keys[j] == queries[p]:
                return self.default
        return self.reducer.single(j, self._value(j), p)

    # -- hash groups with prefix statistics
    def _bucket(self, side: int, pos: int) -> tuple[Any, Any]:
        """The EQ key of a key (side 0) or query (side 1) position, and its bucket (or None)."""
        key = self._key(side, pos) if self.eq else None
        try:
            return key, self.buckets.get(key)
        except TypeError:
            raise RASPTypeError(f"selector {self.selector.label!r}: EQ {('key', 'query')[side]} {key!r} "
                                f"at position {pos} is not hashable") from None

    def _add_hash(self, j: int) -> None:
        key, bucket = self._bucket(0, j)
        if not self_equal(key):
            return                          # NaN keys: EQ never selects them
        if bucket is None:
            bucket = self.buckets[key] = self.reducer.new_bucket()
        self.reducer.add(bucket, j, self._value(j))

    def _query_hash(self, p: int, n: int) -> Any:
        hi = self._hi(p, n)                 # first, so a bad bound query raises as in dense
        _, bucket = self._bucket(1, p)
        if bucket is None:
            return self.default
        idx = bucket[0]
        r = len(idx) if idx[-1] <= hi else bisect_right(idx, hi)
        return self.reducer.result(bucket, r, p) if r else self.default

    # -- dense fallback, row by row
    def _query_dense(self, p: int, n: int) -> Any:
        if p >= self.max_dense:
            self.check_size(p + 1)
        hi = p if self.causal else n - 1
        row = dense_row(self.selector, self.cols, p, hi)
        selected = np.flatnonzero(row)
        if selected.size == 0:
            return self.default
        bucket = self.reducer.new_bucket()
        for j in selected.tolist():
            self.reducer.add(bucket, j, self._value(j))
        return self.reducer.result(bucket, len(selected), p)


_NP_COMPARE = {
    Comparison.EQ: np.equal, Comparison.NEQ: np.not_equal, Comparison.LT: np.less,
    Comparison.LEQ: np.less_equal, Comparison.GT: np.greater, Comparison.GEQ: np.greater_equal,
}


def _numeric_array(values: list) -> np.ndarray | None:
    """``values`` as a 1-D numeric numpy array, or None when they are not plain numbers."""
    try:
        arr = np.asarray(values)
    except (OverflowError, ValueError):
        return None
    return arr if arr.ndim == 1 and arr.dtype.kind in "biuf" else None


def dense_row(selector: Selector, cols: Columns, p: int, hi: int) -> np.ndarray:
    """Row ``p`` of ``selector`` over keys ``0..hi`` as a boolean vector (Weiss' semantics)."""
    width = hi + 1
    if isinstance(selector, Select):
        pred = selector.predicate
        if pred is Comparison.TRUE or pred is Comparison.FALSE:
            return np.full(width, pred is Comparison.TRUE)
        keys = cols[selector.keys.uid][:width]
        q = cols[selector.queries.uid][p]
        if pred in _NP_COMPARE and isinstance(q, numbers.Real):
            arr = _numeric_array(keys)
            if arr is not None and numpy_compare_is_exact(arr, q):
                return _NP_COMPARE[pred](arr, q)
        try:
            return np.fromiter((bool(pred(k, q)) for k in keys), dtype=bool, count=width)
        except TypeError as exc:
            raise RASPTypeError(f"selector {selector.label!r}: predicate {pred!r} failed on "
                                f"query {q!r} (position {p}): {exc}") from None
    if isinstance(selector, ConstantSelector):
        return np.array(selector.row(p, width), dtype=bool)
    if isinstance(selector, SelectorAnd):
        return dense_row(selector.fst, cols, p, hi) & dense_row(selector.snd, cols, p, hi)
    if isinstance(selector, SelectorOr):
        return dense_row(selector.fst, cols, p, hi) | dense_row(selector.snd, cols, p, hi)
    if isinstance(selector, SelectorNot):
        return ~dense_row(selector.inner, cols, p, hi)
    raise TypeError(f"unknown selector type {type(selector).__name__}")
