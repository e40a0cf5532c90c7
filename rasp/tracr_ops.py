"""The three tracr operations not in :mod:`rasp.core`, for programs ported from tracr.

* :class:`LinearSequenceMap` ``(fst, snd, fst_fac, snd_fac)``: ``fst_fac * x + snd_fac * y``
  per position. It is a :class:`~rasp.core.SequenceMap` whose function is known to be
  linear, so a weights compiler can emit it as an exact linear layer when it is
  ``numerical``; the interpreter evaluates it like any SequenceMap.
* :class:`ConstantSOp` ``(value, check_length=True)``: a fixed column ``value``.
* :class:`ConstantSelector` ``(value, check_length=True)``: a fixed (query x key) boolean
  matrix, or ``True``/``False`` for "every key"/"no key". The form
  ``ConstantSelector(keys, queries, value=True)`` also names the s-ops that an attention
  head would read, which matters only to a compiler (the interpreter ignores them).

Length rule (see docs/rasp.md, "Constants"): a constant of ``m`` positions evaluates an
input of ``n <= m`` tokens by reading its first ``n`` positions (rows and columns).
With ``check_length=True`` (tracr's default) a *non-causal* evaluation also requires
``n == m``, as tracr does; causal and incremental evaluation read prefixes of the
input by definition, so there ``n < m`` is allowed.
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

from rasp.core import Encoding, RASPExpr, Selector, SequenceMap, SOp
from rasp.errors import ConstantLengthError

__all__ = ["LinearSequenceMap", "ConstantSOp", "ConstantSelector", "check_constant_length"]


class LinearSequenceMap(SequenceMap):
    """``fst_fac * fst + snd_fac * snd`` elementwise (tracr ``LinearSequenceMap``).

    Categorical by default, like every tracr s-op; wrap it in ``numerical(...)`` for the
    numerical (scalar-valued) encoding that compiles to a linear layer.
    """

    _kind = "linearsequencemap"

    def __init__(self, fst: SOp, snd: SOp, fst_fac: float, snd_fac: float,
                 encoding: Encoding = Encoding.CATEGORICAL) -> None:
        for arg, fac in (("fst_fac", fst_fac), ("snd_fac", snd_fac)):
            if not isinstance(fac, numbers.Real) or isinstance(fac, bool):
                raise TypeError(f"LinearSequenceMap {arg} must be a real number, got {fac!r}")

        def linear(x: Any, y: Any) -> Any:
            return fst_fac * x + snd_fac * y

        super().__init__(linear, fst, snd, encoding)
        object.__setattr__(self, "fst_fac", fst_fac)
        object.__setattr__(self, "snd_fac", snd_fac)


class ConstantSOp(SOp):
    """A fixed column (tracr ``ConstantSOp``): position ``p`` holds ``value[p]``.

    ``check_length``: in non-causal evaluation, require the input to have exactly
    ``len(value)`` tokens (otherwise at most ``len(value)``; see the module docstring).
    """

    _kind = "constantsop"

    def __init__(self, value: Sequence[Any], check_length: bool = True,
                 encoding: Encoding = Encoding.CATEGORICAL) -> None:
        if isinstance(value, RASPExpr) or not isinstance(value, Sequence):
            raise TypeError(f"ConstantSOp needs a sequence of values, got {value!r} "
                            "(use Full(x) for the same value everywhere)")
        super().__init__(encoding)
        object.__setattr__(self, "value", tuple(value))
        object.__setattr__(self, "check_length", bool(check_length))

    def column(self, n: int, causal: bool) -> list:
        """The first ``n`` values, after the length check."""
        check_constant_length(self, len(self.value), n, causal)
        return list(self.value[:n])


_UNSET: Any = object()


class ConstantSelector(Selector):
    """A fixed selection pattern (tracr ``ConstantSelector``).

    ``ConstantSelector(value, check_length=True)``: ``value`` is a square matrix with
    ``value[q][k]`` true when query ``q`` selects key ``k`` (tracr's orientation), or
    ``True`` / ``False`` (every key / no key, any length).
    ``ConstantSelector(keys, queries, value=True)`` (or ``keys=``, ``queries=`` by name):
    the same, naming the key and query s-ops (they become children; the selection
    ignores their values).
    Causal evaluation still masks keys after the query.
    """

    _kind = "constantselector"

    def __init__(self, *args: Any, keys: SOp | None = None, queries: SOp | None = None,
                 value: Any = _UNSET, check_length: bool = True) -> None:
        if args and isinstance(args[0], SOp):           # (keys, queries[, value])
            if keys is not None or queries is not None:
                raise TypeError("ConstantSelector got keys/queries both by position and by name")
            if len(args) not in (2, 3):
                raise TypeError(f"ConstantSelector(keys, queries, value=True): bad arguments {args!r}")
            keys, queries, *rest = args
            if rest:
                if value is not _UNSET:
                    raise TypeError("ConstantSelector got value twice")
                value = rest[0]
        elif args:                                      # tracr: (value[, check_length])
            if len(args) > 2 or value is not _UNSET:
                raise TypeError(f"ConstantSelector(value, check_length=True): bad arguments {args!r}")
            value = args[0]
            if len(args) == 2:
                check_length = args[1]
        if (keys is None) != (queries is None) or not all(
                x is None or isinstance(x, SOp) for x in (keys, queries)):
            raise TypeError(f"ConstantSelector needs both keys and queries as s-ops, or neither; got "
                            f"keys={keys!r}, queries={queries!r}")
        value = True if value is _UNSET else value
        super().__init__()
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "queries", queries)
        object.__setattr__(self, "value", _selector_value(value))
        object.__setattr__(self, "check_length", bool(check_length))

    @property
    def uniform(self) -> bool | None:
        """``True``/``False`` for an all/none selector, ``None`` for a matrix."""
        return self.value if isinstance(self.value, bool) else None

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return () if self.keys is None else (self.keys, self.queries)

    def row(self, p: int, width: int) -> list[bool]:
        """Query row ``p`` over keys ``0..width-1`` (a matrix must cover them)."""
        if isinstance(self.value, bool):
            return [self.value] * width
        check_constant_length(self, len(self.value), max(p + 1, width), True)
        return list(self.value[p][:width])


def _selector_value(value: Any) -> bool | tuple[tuple[bool, ...], ...]:
    if isinstance(value, bool):
        return value
    if isinstance(value, RASPExpr) or not isinstance(value, Sequence):
        raise TypeError(f"ConstantSelector value must be True, False or a square boolean matrix, "
                        f"got {value!r}")
    rows = tuple(tuple(bool(x) for x in row) for row in value)
    if any(len(row) != len(rows) for row in rows):
        raise ValueError(f"ConstantSelector matrix must be square (one row per query, one column "
                         f"per key); got row lengths {[len(r) for r in rows]}")
    return rows


def check_constant_length(expr: RASPExpr, size: int, n: int, causal: bool) -> None:
    """Raise :class:`ConstantLengthError` unless a constant of ``size`` positions covers ``n`` tokens."""
    exact = getattr(expr, "check_length", True) and not causal
    if n > size or (exact and n != size):
        need = "exactly" if exact else "at most"
        raise ConstantLengthError(f"{type(expr).__name__} {expr.label!r} holds {size} positions, "
                                  f"so the input must have {need} {size} tokens; it has {n}")


def constant_selectors(selector: Selector) -> list[ConstantSelector]:
    """The matrix-valued ConstantSelectors inside ``selector`` (And/Or/Not trees)."""
    out, stack = [], [selector]
    while stack:
        s = stack.pop()
        if isinstance(s, ConstantSelector):
            if s.uniform is None:
                out.append(s)
        elif not hasattr(s, "predicate"):
            stack.extend(c for c in s.children if isinstance(c, Selector))
    return out
