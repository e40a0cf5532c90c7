"""Magnitude guard of the weights compiler: refuse what float64 would round past the margins
(docs/turing-programs.md, "Exactness and the leak bound").

The heads compare integer codes through quadratic forms (``beta*(2 c_k c_q - c_k**2)``) and an
ordinal output is read as ``2 c x - c**2``; both grow with the square of the codes. A value set
of large integers (tokens 10**8 .. 10**8 + 39, say) makes those terms so large that float64
rounds a score by more than the margin 40, or a logit by more than the gap 1 between two codes,
and the model is silently wrong. This module bounds that rounding from the magnitudes of the
residual's coordinates and refuses (:class:`CompileLimitError`) where it could exceed
``SCORE_SLACK`` (a score) or ``LOGIT_SLACK`` (a logit):

* a coordinate's bound is 1 for ``one``, ``tokens:BOS``, one-hot and scratch coordinates,
  ``max |c|`` and ``max c**2`` over an ordinal s-op's codes, ``max |v|`` over a numerical s-op's
  known values (infinite when unknown);
* a head's score bound is ``S = sum_e Q_e K_e``, ``Q_e`` (``K_e``) the sum of |coefficient| times
  bound over the query (key) feature of head dimension ``e``; its scores round by at most
  ``(2k + d_head + 1) u S`` (:func:`rounding_bound`, ``u = 2^-53``);
* an ordinal output's logits are at most ``L = max_c (2 |c| X + c**2)`` over the class codes
  ``c``, ``X`` the largest code of the output, and round by at most ``(k + 2) u L``.

Every code written into an ordinal coordinate must also have ``c**2 <= 2^53``, so that the
embedding holds it exactly. The guard bounds the rounding of one head's scores; the attention
leak that an earlier head passes on is not part of it (section 4 of the document measures it).
"""
from __future__ import annotations

import math
from typing import Sequence

from rasp.weights.graph import CompileLimitError, Program
from rasp.weights.heads import MARGIN, HeadSpec
from rasp.weights.layout import Feature, Layout

UNIT = 2.0 ** -53          # unit roundoff of float64
EXACT = 2.0 ** 53          # integers up to this are exact in float64
SCORE_SLACK = 2.0          # largest score rounding allowed (the margin is MARGIN = 40)
LOGIT_SLACK = 1 / 4        # largest logit rounding allowed (two codes' logits differ by >= 1)


def coordinate_bounds(layout: Layout) -> list[float]:
    """``max |x_d|`` over the exact residual values of every position, per coordinate."""
    prog = layout.program
    bounds = [1.0] * len(layout)
    for node in prog.nodes:
        dims = layout.dims.get(id(node))
        if not dims or node.encoding == "onehot":
            continue
        if node.encoding == "ordinal":
            top = max(abs(prog.code(v)) for v in node.values)
            if top * top > EXACT:
                raise CompileLimitError(
                    f"{node.label!r} holds the integer code {top}, whose square {top * top} float64 "
                    f"cannot hold exactly (over 2^53)", what=f"an integer code of {top}",
                    limit_name="2^53 (a code squared)", limit=EXACT)
            bounds[dims[0]], bounds[dims[1]] = float(top), float(top * top)
        elif node.encoding == "numerical":
            bounds[dims[0]] = (math.inf if node.values is None else
                               max((abs(float(v)) for v in node.values), default=0.0))
    return bounds


def _size(feature: Feature, bounds: Sequence[float]) -> float:
    return sum(abs(c) * bounds[d] for d, c in feature.items() if c != 0)


def score_bound(head: HeadSpec, bounds: Sequence[float]) -> float:
    """``S = sum_e Q_e K_e`` of the module docstring."""
    return sum(_size(q, bounds) * _size(k, bounds) for q, k in head.qk)


def rounding_bound(head: HeadSpec, bounds: Sequence[float]) -> float:
    """Bound on the float64 error of any score of ``head``: each coordinate of the query or key
    is a dot product of at most ``k`` terms (the largest feature), the score a sum of ``d_head``
    products, so the error is at most ``(2k + d_head + 1) u S`` (Higham's ``gamma_n`` to first
    order)."""
    k = max((len(f) for pair in head.qk for f in pair), default=0)
    return (2 * k + len(head.qk) + 1) * UNIT * score_bound(head, bounds)


def check_heads(layout: Layout, heads: Sequence[Sequence[HeadSpec]]) -> list[float]:
    """Refuse a head whose scores float64 could round by more than ``SCORE_SLACK``; return the
    coordinate bounds."""
    bounds = coordinate_bounds(layout)
    for hs in heads:
        for head in hs:
            error = rounding_bound(head, bounds)
            if error > SCORE_SLACK:
                raise CompileLimitError(
                    f"{head.text}: its attention scores reach {score_bound(head, bounds):.3g}, so "
                    f"float64 could round a score by {error:.3g}, over {SCORE_SLACK:g} (the margin is "
                    f"{MARGIN:g}); use smaller integer values (codes)",
                    what=f"a score rounding bound of {error:.3g}", limit_name="SCORE_SLACK", limit=SCORE_SLACK)
    return bounds


def check_logits(prog: Program, layout: Layout, classes: Sequence, bounds: Sequence[float]) -> None:
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
    error = (len(layout.code(out)) + 2) * UNIT * logit       # 2 c x - c**2: two terms
    if error > LOGIT_SLACK:
        raise CompileLimitError(
            f"the output {out.label!r}: its logits reach {logit:.3g}, so float64 could round a logit "
            f"by {error:.3g}, over {LOGIT_SLACK:g} (two codes' logits differ by at least 1); use "
            "smaller integer values (codes)",
            what=f"a logit rounding bound of {error:.3g}", limit_name="LOGIT_SLACK", limit=LOGIT_SLACK)
