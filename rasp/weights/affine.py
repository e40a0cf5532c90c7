"""Affine Maps and SequenceMaps: recognised exactly, compiled without a lookup table.

A Map ``f(x)`` or SequenceMap ``f(x, y)`` on numbers is *affine* when ``f = a*x (+ b*y) + c``
on the whole value set of its inputs (docs/turing-programs.md, "Linear maps"). Then

* a **numerical** affine s-op needs no layer at all: it is the linear functional
  ``a*x + b*y + c`` of the residual, which every reader (a head's value, a numerical lookup,
  the unembedding) applies itself, so it costs no dimension and no hidden unit (tracr's
  numerical ``LinearSequenceMap`` MLP, folded into its readers);
* a **categorical** affine s-op with integer values is one MLP whose input is the scalar
  ``z = a*x + b*y + c`` and whose table is the identity ``z -> z`` on the value set, so its
  size is linear in the number of values (``make_reverse``'s ``length - indices - 1``: O(N)
  hidden units instead of the N^2 of a (length x indices) table).

*Verified* means: with :class:`fractions.Fraction` arithmetic, ``f`` equals the affine form
at every input value (a Map) or at every pair of input values (a SequenceMap with at most
``limit`` pairs). Three functions are affine by their definition and need no enumeration:
tracr's :class:`~rasp.tracr_ops.LinearSequenceMap` (``fst_fac*x + snd_fac*y``) and the
SequenceMaps that the ``+`` and ``-`` operators build (:func:`operator.add`,
:func:`operator.sub`); on integer values with integer factors they are exact integer
arithmetic, so no pair can deviate.
"""
from __future__ import annotations

import itertools
import math
import numbers
import operator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

from rasp.core import Encoding, Map, SequenceMap, SOp
from rasp.tracr_ops import LinearSequenceMap


@dataclass(frozen=True)
class Affine:
    """``f(args) = sum(coeffs[i] * args[i]) + const``; ``integral``: every input value, every
    coefficient and the constant are integers (so every output is an integer)."""

    coeffs: tuple[Fraction, ...]
    const: Fraction
    integral: bool

    def __call__(self, *args: Any) -> Fraction:
        return sum((a * Fraction(x) for a, x in zip(self.coeffs, args)), self.const)

    def text(self, names: Sequence[str]) -> str:
        terms = [f"{_num(a)}*{n}" for a, n in zip(self.coeffs, names) if a != 0]
        if self.const != 0 or not terms:
            terms.append(_num(self.const))
        return " + ".join(terms)


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def exact(v: Any) -> Fraction | None:
    """``v`` as an exact rational (ints, floats, Fractions; not bools), else ``None``."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Rational, float)):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return Fraction(v)


def _structural(sop: SOp) -> tuple[Fraction, ...] | None:
    """Coefficients of a function that is linear by its definition (module docstring)."""
    if isinstance(sop, LinearSequenceMap):
        return (Fraction(sop.fst_fac), Fraction(sop.snd_fac))
    if isinstance(sop, SequenceMap) and sop.f is operator.add:
        return (Fraction(1), Fraction(1))
    if isinstance(sop, SequenceMap) and sop.f is operator.sub:
        return (Fraction(1), Fraction(-1))
    if isinstance(sop, Map) and sop.f is operator.neg:
        return (Fraction(-1),)
    return None


def _all_int(domains: Sequence[Sequence[Any] | None]) -> bool:
    return all(d is not None and all(isinstance(v, int) and not isinstance(v, bool) for v in d)
               for d in domains)


def affine_form(sop: SOp, domains: Sequence[Sequence[Any] | None], limit: int) -> Affine | None:
    """The affine form of ``sop`` (a Map or SequenceMap) on ``domains`` (its inputs' value sets;
    ``None`` = unknown), or ``None`` when it is not verified affine (module docstring)."""
    if not isinstance(sop, (Map, SequenceMap)) or len(domains) != (1 if isinstance(sop, Map) else 2):
        return None
    coeffs = _structural(sop)
    if coeffs is not None:
        integral = _all_int(domains) and all(a.denominator == 1 for a in coeffs)
        return Affine(coeffs, Fraction(0), integral)
    if any(d is None or not d for d in domains) or math.prod(len(d) for d in domains) > limit:
        return None
    try:
        exact_domains = [[_exact_or_fail(x) for x in d] for d in domains]
        base = [d[0] for d in domains]
        f0 = _value(sop, base)
        coeffs = []
        for i, d in enumerate(domains):                 # one step along each input
            if len(d) == 1:
                coeffs.append(Fraction(0))
                continue
            step = list(base)
            step[i] = d[1]
            coeffs.append((_value(sop, step) - f0) / (exact_domains[i][1] - exact_domains[i][0]))
        const = f0 - sum(a * d[0] for a, d in zip(coeffs, exact_domains))
        # the axes first (cheap, and most non-affine functions fail there), then every point
        axes = [tuple(d[0] if j != i else x for j, d in enumerate(domains))
                for i, d in enumerate(domains) for x in d]
        for args in itertools.chain(axes, itertools.product(*domains)):
            want = sum((a * Fraction(x) for a, x in zip(coeffs, args)), const)
            if _value(sop, args) != want:
                return None
    except _NotAffine:
        return None
    integral = (_all_int(domains) and const.denominator == 1
                and all(a.denominator == 1 for a in coeffs))
    return Affine(tuple(coeffs), const, integral)


class _NotAffine(Exception):
    """A value that is not an exact number, or a function that fails."""


def _exact_or_fail(v: Any) -> Fraction:
    x = exact(v)
    if x is None:
        raise _NotAffine
    return x


def _value(sop: SOp, args: Sequence[Any]) -> Fraction:
    try:
        return _exact_or_fail(sop.f(*args))
    except _NotAffine:
        raise
    except Exception:  # noqa: BLE001 - not affine; the lookup path reports the failure
        raise _NotAffine from None


def affine_values(form: Affine, domains: Sequence[Sequence[Any]]) -> list[int] | None:
    """A superset of the integer values of an ``integral`` form: the range between the
    smallest and largest value (the extremes of an affine function lie at the corners)."""
    if not form.integral:
        return None
    corners = [form(*c) for c in itertools.product(*((min(d), max(d)) for d in domains))]
    return list(range(int(min(corners)), int(max(corners)) + 1))


def fold_chains(nodes: Sequence[Any], output: Any, pinned: set[int]) -> None:
    """Fold categorical integral affine s-ops into readers that are such s-ops too.

    ``make_reverse``'s ``opp_idx - 1`` reads ``opp_idx = length - indices``: its identity table can
    read ``z = length - indices - 1`` directly, so ``opp_idx`` needs no MLP of its own when no
    other op reads it. ``nodes`` are the program's nodes in topological order (duck-typed
    :class:`rasp.weights.graph.Node`); ``pinned`` holds the uids of s-ops that a selector reads.
    A folded node becomes kind ``folded``: no dimension, no layer.
    """
    def foldable(n: Any) -> bool:
        return (n.kind == "mlp" and n.affine is not None and n.affine.integral
                and n.sop.encoding == Encoding.CATEGORICAL)

    readers: dict[int, list] = {id(n): [] for n in nodes}
    for n in nodes:
        for d in n.deps:
            readers[id(d)].append(n)

    def absorbed(d: Any) -> bool:
        return (foldable(d) and d is not output and d.sop.uid not in pinned and readers[id(d)]
                and all(foldable(r) for r in readers[id(d)]))

    for n in nodes:
        if not foldable(n) or not any(absorbed(d) for d in n.deps):
            continue
        terms: dict[Any, Fraction] = {}
        const = n.affine.const
        for d, a in zip(n.deps, n.affine.coeffs):
            parts = zip(d.deps, d.affine.coeffs) if absorbed(d) else [(d, Fraction(1))]
            if absorbed(d):
                const += a * d.affine.const
            for dd, b in parts:
                terms[dd] = terms.get(dd, Fraction(0)) + a * b
        n.deps = list(terms)
        n.affine = Affine(tuple(terms.values()), const, True)
    for n in nodes:
        if absorbed(n):
            n.kind = "folded"
