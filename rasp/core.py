"""Immutable expression graph of the mini-RASP language, with tracr's names.

tracr's API and names, with the differences listed in docs/rasp.md. An s-op is a
sequence-to-sequence operation; a selector is a (query x key) boolean pattern.
Nothing here evaluates anything: :mod:`rasp.evaluate` does.

Differences from tracr, by design (docs/rasp.md, "Differences from tracr"):

* ``Aggregate`` has an explicit ``reduce`` in {"mean", "max", "min"} and an
  explicit ``default``. A *categorical* mean must select at most one distinct
  value; a *numerical* mean averages numbers.
* ``Select`` accepts a :class:`Comparison` or any ``callable(key, query) -> bool``.
* ``Map(..., simplify=True)`` fuses nested unnamed Maps only when asked
  (tracr fuses by default); the default keeps every op visible for inspection.
* ``None`` is an ordinary value: Map functions are called on it.
* ``&`` / ``|`` on s-ops return ``bool(x and y)`` / ``bool(x or y)`` (tracr: ``x and y``).
"""
from __future__ import annotations

import itertools
import operator
from typing import Any, Callable, Iterator

from rasp.predicates import Comparison, Encoding

__all__ = ["Comparison", "Encoding", "RASPExpr", "SOp", "tokens", "indices", "length", "Map",
           "SequenceMap", "Full", "Aggregate", "SelectorWidth", "Selector", "Select", "SelectorAnd",
           "SelectorOr", "SelectorNot", "numerical", "categorical", "walk", "REDUCTIONS"]

_ids = itertools.count()


REDUCTIONS = ("mean", "max", "min")


class RASPExpr:
    """Base of the expression DAG (tracr ``RASPExpr``): ``children``, ``label``, ``.named()``.

    Expressions are immutable; ``named``/``annotated`` return a copy with a fresh id.
    Python equality is overloaded on s-ops, so graphs are keyed by ``uid``.
    """

    _kind = "expr"

    def __init__(self) -> None:
        object.__setattr__(self, "uid", next(_ids))
        object.__setattr__(self, "name", None)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use .named() or .annotated()")

    __hash__ = object.__hash__

    @property
    def label(self) -> str:
        """The user's name, or ``<kind>_<uid>`` like tracr's default labels."""
        return self.name if self.name is not None else f"{self._kind}_{self.uid}"

    @property
    def children(self) -> tuple["RASPExpr", ...]:
        return ()

    def annotated(self, **changes: Any) -> "RASPExpr":
        """Copy with some attributes (``name``, ``encoding``) replaced and a fresh uid."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        for key, value in changes.items():
            if key not in new.__dict__:
                raise AttributeError(f"{type(self).__name__} has no annotation {key!r}")
            new.__dict__[key] = value
        new.__dict__["uid"] = next(_ids)
        return new

    def named(self, name: str) -> "RASPExpr":
        """Copy of this expression labelled ``name`` (tracr ``.named``)."""
        return self.annotated(name=str(name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label})"


# ----------------------------------------------------------------------------- s-ops


def _lift(op: Callable[[Any, Any], Any], sym: str, reflected: bool = False) -> Callable:
    """Build a Python operator that makes a Map (constant operand) or SequenceMap (s-op operand)."""

    def method(self: "SOp", other: Any) -> "SOp":
        if isinstance(other, Selector):
            return NotImplemented
        if isinstance(other, SOp):
            a, b = (other, self) if reflected else (self, other)
            return SequenceMap(op, a, b)
        if reflected:
            out = Map(lambda x: op(other, x), self)
        else:
            out = Map(lambda x: op(x, other), self)
        offset = self.index_offset
        if offset is not None and isinstance(other, int) and not isinstance(other, bool):
            if sym == "+":
                out.__dict__["index_offset"] = offset + other
            elif sym == "-" and not reflected:
                out.__dict__["index_offset"] = offset - other
        return out

    method.__name__ = f"__{'r' if reflected else ''}{sym}__"
    return method


class SOp(RASPExpr):
    """A sequence operation. Python operators build Map / SequenceMap (as in tracr).

    ``index_offset`` is ``c`` when the s-op is statically known to equal ``indices + c``
    (built with ``indices + c`` / ``indices - c``); the evaluator uses it for the
    direct-addressing fast path of shifts and ``index_select`` (docs/rasp.md, "Fast paths").
    """

    _kind = "sop"

    def __init__(self, encoding: Encoding = Encoding.CATEGORICAL) -> None:
        super().__init__()
        object.__setattr__(self, "encoding", Encoding(encoding))
        object.__setattr__(self, "index_offset", None)

    def __bool__(self) -> bool:
        raise TypeError("an s-op has no truth value; build a Map/SequenceMap or a Select instead")

    __add__ = _lift(operator.add, "+")
    __radd__ = _lift(operator.add, "+", reflected=True)
    __sub__ = _lift(operator.sub, "-")
    __rsub__ = _lift(operator.sub, "-", reflected=True)
    __mul__ = _lift(operator.mul, "*")
    __rmul__ = _lift(operator.mul, "*", reflected=True)
    __truediv__ = _lift(operator.truediv, "/")
    __rtruediv__ = _lift(operator.truediv, "/", reflected=True)
    __lt__ = _lift(operator.lt, "<")
    __le__ = _lift(operator.le, "<=")
    __gt__ = _lift(operator.gt, ">")
    __ge__ = _lift(operator.ge, ">=")
    __eq__ = _lift(operator.eq, "==")  # type: ignore[assignment]
    __ne__ = _lift(operator.ne, "!=")  # type: ignore[assignment]
    __and__ = _lift(lambda a, b: bool(a and b), "&")
    __rand__ = _lift(lambda a, b: bool(a and b), "&", reflected=True)
    __or__ = _lift(lambda a, b: bool(a or b), "|")
    __ror__ = _lift(lambda a, b: bool(a or b), "|", reflected=True)
    __hash__ = RASPExpr.__hash__

    def __invert__(self) -> "SOp":
        return Map(operator.not_, self)

    def __neg__(self) -> "SOp":
        return Map(operator.neg, self)


class _Primitive(SOp):
    """A primitive s-op; its default label is its kind (``tokens``, ``indices``, ``length``)."""

    @property
    def label(self) -> str:
        return self.name or self._kind


class TokensType(_Primitive):
    """The primitive ``tokens``: the input sequence."""

    _kind = "tokens"


class IndicesType(_Primitive):
    """The primitive ``indices``: 0, 1, ..., n-1."""

    _kind = "indices"

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "index_offset", 0)


class LengthType(_Primitive):
    """The primitive ``length``: n everywhere (non-causal), ``p + 1`` at position p (causal)."""

    _kind = "length"


tokens = TokensType()
indices = IndicesType()
length = LengthType()


class Map(SOp):
    """Elementwise ``f(x)`` over one s-op (an MLP in the transformer view)."""

    _kind = "map"

    def __init__(self, f: Callable[[Any], Any], inner: SOp, simplify: bool = False,
                 encoding: Encoding = Encoding.CATEGORICAL) -> None:
        _check_sop(inner, "Map", "inner")
        if not callable(f):
            raise TypeError(f"Map needs a callable, got {f!r}")
        if simplify and isinstance(inner, Map) and inner.name is None:
            g, inner_f = f, inner.f
            f, inner = (lambda x: g(inner_f(x))), inner.inner
        super().__init__(encoding)
        object.__setattr__(self, "f", f)
        object.__setattr__(self, "inner", inner)

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.inner,)


class SequenceMap(SOp):
    """Elementwise ``f(x, y)`` over two s-ops (an MLP over two residual subspaces)."""

    _kind = "sequencemap"

    def __init__(self, f: Callable[[Any, Any], Any], fst: SOp, snd: SOp,
                 encoding: Encoding = Encoding.CATEGORICAL) -> None:
        _check_sop(fst, "SequenceMap", "fst")
        _check_sop(snd, "SequenceMap", "snd")
        if not callable(f):
            raise TypeError(f"SequenceMap needs a callable, got {f!r}")
        super().__init__(encoding)
        object.__setattr__(self, "f", f)
        object.__setattr__(self, "fst", fst)
        object.__setattr__(self, "snd", snd)

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.fst, self.snd)


class Full(SOp):
    """The constant s-op ``fill`` at every position (tracr ``Full``, np-rasp ``full``)."""

    _kind = "full"

    def __init__(self, fill: Any) -> None:
        super().__init__()
        object.__setattr__(self, "fill", fill)


class Aggregate(SOp):
    """Attention: per query row, reduce the selected values of ``sop`` (docs/rasp.md).

    ``reduce="mean"``: categorical -> the single selected value (error if several
    different ones), numerical -> the arithmetic mean (error on non-numbers);
    ``"max"``/``"min"``: the largest/smallest selected value. No selection -> ``default``.
    The encoding is the value s-op's unless given.
    """

    _kind = "aggregate"

    def __init__(self, selector: "Selector", sop: SOp, default: Any = None, reduce: str = "mean",
                 encoding: Encoding | None = None) -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"Aggregate needs a selector, got {selector!r}")
        _check_sop(sop, "Aggregate", "sop")
        if reduce not in REDUCTIONS:
            raise ValueError(f"Aggregate reduce must be one of {REDUCTIONS}, got {reduce!r}")
        super().__init__(sop.encoding if encoding is None else encoding)
        object.__setattr__(self, "selector", selector)
        object.__setattr__(self, "sop", sop)
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "reduce", reduce)

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.selector, self.sop)


class SelectorWidth(SOp):
    """The number of selected keys per query row (tracr ``SelectorWidth``)."""

    _kind = "selectorwidth"

    def __init__(self, selector: "Selector") -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"SelectorWidth needs a selector, got {selector!r}")
        super().__init__()
        object.__setattr__(self, "selector", selector)

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.selector,)


# ------------------------------------------------------------------------- selectors


class Selector(RASPExpr):
    """A query x key boolean pattern; ``&``, ``|``, ``~`` build And/Or/Not."""

    _kind = "selector"

    def __and__(self, other: "Selector") -> "Selector":
        return SelectorAnd(self, other)

    def __or__(self, other: "Selector") -> "Selector":
        return SelectorOr(self, other)

    def __invert__(self) -> "Selector":
        return SelectorNot(self)


class Select(Selector):
    """``Select(keys, queries, predicate)``: entry (q, k) is ``predicate(keys[k], queries[q])``."""

    _kind = "select"

    def __init__(self, keys: SOp, queries: SOp, predicate: Comparison | Callable[[Any, Any], Any]) -> None:
        _check_sop(keys, "Select", "keys")
        _check_sop(queries, "Select", "queries")
        if not callable(predicate):
            raise TypeError(f"Select predicate must be a Comparison or a callable, got {predicate!r}")
        super().__init__()
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "queries", queries)
        object.__setattr__(self, "predicate", predicate)

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.keys, self.queries)


class _BinarySelector(Selector):
    """Shared shape of SelectorAnd / SelectorOr."""

    def __init__(self, fst: Selector, snd: Selector) -> None:
        super().__init__()
        object.__setattr__(self, "fst", _check_selector(fst))
        object.__setattr__(self, "snd", _check_selector(snd))

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.fst, self.snd)


class SelectorAnd(_BinarySelector):
    """Both selectors hold."""

    _kind = "selectorand"


class SelectorOr(_BinarySelector):
    """Either selector holds."""

    _kind = "selectoror"


class SelectorNot(Selector):
    """The complement of a selector (before causal masking)."""

    _kind = "selectornot"

    def __init__(self, inner: Selector) -> None:
        super().__init__()
        object.__setattr__(self, "inner", _check_selector(inner))

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.inner,)


# --------------------------------------------------------------------------- helpers


def _check_sop(value: Any, op: str, arg: str) -> None:
    if not isinstance(value, SOp):
        raise TypeError(f"{op} argument {arg!r} must be an s-op, got {value!r}")


def _check_selector(value: Any) -> Selector:
    if not isinstance(value, Selector):
        raise TypeError(f"expected a selector, got {value!r}")
    return value


def numerical(sop: SOp) -> SOp:
    """Annotate an s-op as numerical (tracr ``rasp.numerical``): means average numbers."""
    return sop.annotated(encoding=Encoding.NUMERICAL)  # type: ignore[return-value]


def categorical(sop: SOp) -> SOp:
    """Annotate an s-op as categorical (the default; tracr ``rasp.categorical``)."""
    return sop.annotated(encoding=Encoding.CATEGORICAL)  # type: ignore[return-value]


def walk(root: RASPExpr) -> Iterator[RASPExpr]:
    """All expressions reachable from ``root``, children before parents (iterative DFS)."""
    seen: set[int] = set()
    stack: list[tuple[RASPExpr, bool]] = [(root, False)]
    while stack:
        expr, expanded = stack.pop()
        if expanded:
            yield expr
            continue
        if expr.uid in seen:
            continue
        seen.add(expr.uid)
        stack.append((expr, True))
        for child in reversed(expr.children):
            if child.uid not in seen:
                stack.append((child, False))

