"""Value sets and integer codes of the weights compiler (docs/turing-programs.md, "Value sets").

tracr infers every s-op's value set from the vocabulary and ``max_seq_len`` (Lindner et al.
2023, Sec. 3); these functions order the values, identify equal numbers, and
enumerate a numerical mean's possible averages.
"""
from __future__ import annotations

from typing import Any

from rasp.errors import RASPError
from rasp.weights.affine import exact

MEAN_MAX_N = 512       # a numerical mean's value set is enumerated up to this max_seq_len


class CompileError(RASPError):
    """A RASP construct the weights compiler cannot turn into exact weights (the message names
    the op and the reason)."""


class CompileLimitError(CompileError):
    """A size limit of the compiler was hit: ``what`` (e.g. "an MLP lookup table of 7323648
    entries") is over the limit ``limit_name`` = ``limit``."""

    def __init__(self, message: str, *, what: str, limit_name: str, limit: float) -> None:
        super().__init__(message)
        self.what, self.limit_name, self.limit = what, limit_name, limit


def sort_values(values: Any) -> list:
    """Distinct values in a stable order: natural order when comparable, else by (type, repr)."""
    uniq: list = []
    seen: set = set()
    for v in values:
        try:
            if v in seen:
                continue
            seen.add(v)
        except TypeError:
            raise CompileError(f"unhashable value {v!r} cannot be one-hot encoded") from None
        uniq.append(v)
    try:
        return sorted(uniq)
    except TypeError:
        return sorted(uniq, key=lambda v: (type(v).__name__, repr(v)))


def integral(v: Any) -> int | None:
    """``int(v)`` when the number ``v`` equals an integer (bools included), else ``None``."""
    if isinstance(v, (int, bool)):
        return int(v)
    x = exact(v)
    return int(x) if x is not None and x.denominator == 1 else None


def mean_unknown(label: str, values: list, n: int) -> str:
    """The reason :func:`mean_values` found no value set."""
    if not set(values) <= {0, 1}:
        return (f"it is a numerical mean of {label!r}, whose values are not all in {{0, 1}}, "
                "so the set of possible averages is not enumerated")
    return (f"it is a numerical mean, whose possible averages are enumerated only up to "
            f"max_seq_len = {MEAN_MAX_N} (here {n})")


def mean_values(values: list, default: Any, n: int) -> list | None:
    """tracr's rule: a numerical mean has a known value set only for inputs in {0, 1}."""
    if not set(values) <= {0, 1} or n > MEAN_MAX_N:
        return None
    return sort_values({i / w for w in range(1, n + 1) for i in range(w + 1)} | {default})


def unknown(node: Any) -> str:
    """Why ``node``'s value set is unknown (tuples: their first unknown part)."""
    if node.kind == "tuple":
        part = next(p for p in node.parts if p.values is None)
        return f"its part {part.label!r}: {unknown(part)}"
    return node.unknown or "not inferred"
