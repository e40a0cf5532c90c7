"""Value encodings and the comparison predicates of Select (tracr's names).

Re-exported by :mod:`rasp.core`.
"""
from __future__ import annotations

import enum
import operator
from typing import Any, Callable


class Encoding(str, enum.Enum):
    """tracr's value encodings: one-hot (categorical) or one scalar (numerical)."""

    CATEGORICAL = "categorical"
    NUMERICAL = "numerical"


class Comparison(enum.Enum):
    """tracr's predicates, called as ``predicate(key, query)``: ``LT`` is ``key < query``."""

    EQ = "=="
    LT = "<"
    LEQ = "<="
    GT = ">"
    GEQ = ">="
    NEQ = "!="
    TRUE = "True"
    FALSE = "False"

    def __call__(self, key: Any, query: Any) -> bool:
        return bool(_COMPARE[self](key, query))


_COMPARE: dict[Comparison, Callable[[Any, Any], Any]] = {
    Comparison.EQ: operator.eq,
    Comparison.LT: operator.lt,
    Comparison.LEQ: operator.le,
    Comparison.GT: operator.gt,
    Comparison.GEQ: operator.ge,
    Comparison.NEQ: operator.ne,
    Comparison.TRUE: lambda k, q: True,
    Comparison.FALSE: lambda k, q: False,
}
