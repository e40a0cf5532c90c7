"""Magnitude guard of the weights compiler: refuse what the weights' float format would round past
the margins (docs/turing-programs.md, "Exactness and the leak bound").

The heads compare integer codes through quadratic forms (``beta*(2 c_k c_q - c_k**2)``) and an
ordinal output is read as ``2 c x - c**2``; both grow with the square of the codes. A value set
of large integers (tokens 10**8 .. 10**8 + 39 in float64, 5000 .. 5039 in float32) makes those
terms so large that the format rounds a score by more than the margin 40, or a logit by more than
the gap 1 between two codes, and the model is silently wrong. This module bounds that rounding
from the magnitudes of the residual's coordinates, in the unit roundoff ``u`` of the weights'
format (float64: ``2^-53``, float32: ``2^-24``), and refuses (:class:`CompileLimitError`) where it
could exceed ``SCORE_SLACK`` (a score) or ``LOGIT_SLACK`` (a logit):

* a coordinate's bound is 1 for ``one``, ``tokens:BOS``, one-hot and scratch coordinates,
  ``max |c|`` and ``max c**2`` over an ordinal s-op's codes, ``max |v|`` over a numerical s-op's
  known values (infinite when unknown);
* a head's score bound is ``S = sum_e Q_e K_e``, ``Q_e`` (``K_e``) the sum of |coefficient| times
  bound over the query (key) feature of head dimension ``e``, a one-hot s-op counting only its
  largest coefficient (one of its coordinates is 1, the others 0); its scores round by at most
  ``(2k + d_head + 1) u S`` (:func:`rounding_bound`), and by nothing where every coefficient and
  every coordinate read is an integer and ``S <= 1/u`` (integer arithmetic the format holds);
* an ordinal output's logits are at most ``L = max_c (2 |c| X + c**2)`` over the class codes
  ``c``, ``X`` the largest code of the output, and round by at most ``(k + 2) u L``.

Every code written into an ordinal coordinate must also have ``c**2 <= 1/u``, so that the
embedding holds it exactly. The guard bounds the rounding of one head's scores and of the logits
of the exact residual; what earlier layers pass on (the attention leak, the rounding of an
attention average, the lookup tables' sums) is not part of it: section 4 of the document measures
it, and :mod:`rasp.certify` proves float64 models whole.
"""
from __future__ import annotations

import math
from typing import Sequence

from rasp.weights.graph import CompileLimitError, Program
from rasp.weights.heads import MARGIN, HeadSpec
from rasp.weights.layout import Feature, Layout
from rasp.weights.values import integral

UNIT = 2.0 ** -53          # unit roundoff of float64
EXACT = 2.0 ** 53          # integers up to this are exact in float64
SCORE_SLACK = 2.0          # largest score rounding allowed (the margin is MARGIN = 40)
LOGIT_SLACK = 1 / 4        # largest logit rounding allowed (two codes' logits differ by >= 1)


def _format(unit: float) -> str:
    """The name of the float format whose unit roundoff is ``unit``."""
    return {UNIT: "float64", 2.0 ** -24: "float32"}.get(unit, f"a format with unit roundoff {unit:g}")


def coordinate_bounds(layout: Layout, unit: float = UNIT) -> list[float]:
    """``max |x_d|`` over the exact residual values of every position, per coordinate. ``unit``:
    the unit roundoff of the weights' format (float32: ``2^-24``); a code whose square exceeds
    ``1/unit`` (float32: ``2^24``) cannot be held exactly and is refused."""
    prog = layout.program
    bounds = [1.0] * len(layout)
    for node in prog.nodes:
        dims = layout.dims.get(id(node))
        if not dims or node.encoding == "onehot":
            continue
        if node.encoding == "ordinal":
            top = max(abs(prog.code(v)) for v in node.values)
            if top * top > 1 / unit:
                bits = round(-math.log2(unit))
                raise CompileLimitError(
                    f"{node.label!r} holds the integer code {top}, whose square {top * top} "
                    f"{_format(unit)} cannot hold exactly (over 2^{bits})",
                    what=f"an integer code of {top}", limit_name=f"2^{bits} (a code squared)", limit=1 / unit)
            bounds[dims[0]], bounds[dims[1]] = float(top), float(top * top)
        elif node.encoding == "numerical":
            bounds[dims[0]] = (math.inf if node.values is None else
                               max((abs(float(v)) for v in node.values), default=0.0))
    return bounds


def integer_coordinates(layout: Layout) -> list[bool]:
    """Per coordinate, whether every exact residual value it holds is an integer: ``one``, BOS,
    one-hot and bit coordinates, integer codes and their squares, numerical s-ops whose known
    values are all integers (not a selector width's ``1/(w+1)`` scratch)."""
    prog = layout.program
    integer = [True] * len(layout)
    for node in prog.nodes:
        dims = layout.dims.get(id(node))
        if not dims:
            continue
        if node.encoding == "numerical":
            integer[dims[0]] = node.values is not None and all(integral(v) is not None for v in node.values)
        if node.kind == "width":
            integer[layout.scratch(node)] = False
    return integer


def _integer_feature(feature: Feature, integer: Sequence[bool]) -> bool:
    return all(float(c).is_integer() and integer[d] for d, c in feature.items() if c != 0)


def onehot_groups(layout: Layout) -> list[int]:
    """Per coordinate, the one-hot s-op it belongs to (an index), or -1: at every position exactly
    one coordinate of a group is 1 and the others are 0."""
    groups = [-1] * len(layout)
    for g, dims in enumerate(layout.value_dims.values()):
        for d in dims.values():
            groups[d] = g
    return groups


def _parts(feature: Feature, bounds: Sequence[float], groups: Sequence[int] | None) -> list[float]:
    """The largest magnitudes of the terms ``c_d x_d`` of a dot product that can be non-zero at
    once: one per coordinate, except one per one-hot group (the largest ``|c_d|`` in it)."""
    parts: list[float] = []
    largest: dict[int, float] = {}
    for d, c in feature.items():
        if c == 0:
            continue
        g = -1 if groups is None else groups[d]
        if g < 0:
            parts.append(abs(c) * bounds[d])
        else:
            largest[g] = max(largest.get(g, 0.0), abs(c))
    return parts + list(largest.values())


def _size(feature: Feature, bounds: Sequence[float], groups: Sequence[int] | None = None) -> float:
    return sum(_parts(feature, bounds, groups))


def score_bound(head: HeadSpec, bounds: Sequence[float], groups: Sequence[int] | None = None) -> float:
    """``S = sum_e Q_e K_e`` of the module docstring; with ``groups`` (:func:`onehot_groups`) a
    one-hot s-op counts its largest coefficient once instead of the sum of all of them."""
    return sum(_size(q, bounds, groups) * _size(k, bounds, groups) for q, k in head.qk)


def rounding_bound(head: HeadSpec, bounds: Sequence[float], unit: float = UNIT,
                   groups: Sequence[int] | None = None, integer: Sequence[bool] | None = None) -> float:
    """Bound on the rounding error of any score of ``head`` in a format of unit roundoff ``unit``:
    each coordinate of the query or key is a dot product of at most ``k`` non-zero terms (the
    largest feature; a one-hot group is one term), the score a sum of ``d_head`` products, so the
    error is at most ``(2k + d_head + 1) u S`` (Higham's ``gamma_n`` to first order).

    It is 0 where integer arithmetic is exact: with ``integer`` (:func:`integer_coordinates`), every
    coefficient of the head's features an integer, every coordinate they read integer-valued and
    ``S <= 1/u``, every product and partial sum is an integer of magnitude at most ``1/u`` (each
    non-zero ``Q_e`` and ``K_e`` is at least 1, so neither exceeds ``Q_e K_e``), which the format
    holds exactly, in any order of summation."""
    size = score_bound(head, bounds, groups)
    if (integer is not None and size <= 1 / unit
            and all(_integer_feature(f, integer) for pair in head.qk for f in pair)):
        return 0.0
    k = max((len(_parts(f, bounds, groups)) for pair in head.qk for f in pair), default=0)
    return (2 * k + len(head.qk) + 1) * unit * size


def check_heads(layout: Layout, heads: Sequence[Sequence[HeadSpec]], unit: float = UNIT) -> list[float]:
    """Refuse a head whose scores the format (unit roundoff ``unit``) could round by more than
    ``SCORE_SLACK``; return the coordinate bounds."""
    bounds, groups, integer = coordinate_bounds(layout, unit), onehot_groups(layout), integer_coordinates(layout)
    for hs in heads:
        for head in hs:
            error = rounding_bound(head, bounds, unit, groups, integer)
            if error > SCORE_SLACK:
                raise CompileLimitError(
                    f"{head.text}: its attention scores reach {score_bound(head, bounds, groups):.3g}, so "
                    f"{_format(unit)} could round a score by {error:.3g}, over {SCORE_SLACK:g} (the margin is "
                    f"{MARGIN:g}); use smaller integer values (codes)",
                    what=f"a score rounding bound of {error:.3g}", limit_name="SCORE_SLACK", limit=SCORE_SLACK)
    return bounds


def check_logits(prog: Program, layout: Layout, classes: Sequence, bounds: Sequence[float],
                 unit: float = UNIT) -> None:
    """Refuse an ordinal output whose logits' error could exceed ``LOGIT_SLACK``."""
    out = prog.output
    if out.encoding != "ordinal":
        return
    top = bounds[layout.dims[id(out)][0]]
    codes = []
    for c in classes:
        try:
            codes.append(abs(float(prog.code(c))))
        except (KeyError, TypeError):
            continue                                     # a class the program never outputs
    logit = max((2 * c * top + c * c for c in codes), default=0.0)
    error = (len(layout.code(out)) + 2) * unit * logit       # 2 c x - c**2: two terms
    if error > LOGIT_SLACK:
        raise CompileLimitError(
            f"the output {out.label!r}: its logits reach {logit:.3g}, so {_format(unit)} could round a logit "
            f"by {error:.3g}, over {LOGIT_SLACK:g} (two codes' logits differ by at least 1); use "
            "smaller integer values (codes)",
            what=f"a logit rounding bound of {error:.3g}", limit_name="LOGIT_SLACK", limit=LOGIT_SLACK)
