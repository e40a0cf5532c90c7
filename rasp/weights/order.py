"""Selector widths of order comparisons over large value sets, without a one-hot table
(docs/turing-programs.md, "Attention").

An order comparison is a one-hot table, so ``SelectorWidth(Select(k, q, <))`` over ``V`` values
needs ``V`` residual dimensions and is refused past ``TABLE_MAX`` (tracr's ``make_sort`` at 500
positions has 2500 keys). With ``r`` the rank of a value in the sorted union of both value sets,
written in ``B`` bits, ``r_k < r_q`` holds for exactly one bit ``j``: the bits above ``j`` agree,
bit ``j`` of ``r_k`` is 0 and that of ``r_q`` is 1. So

    #{k : r_k < r_q} = sum_j #{k : bit_i(r_k) = bit_i(r_q) for i > j, bit_j(r_k) = 0, bit_j(r_q) = 1}

a sum of ``B`` widths, each an And of equalities of bits and one 2 x 2 table of bits: the ``B``
bits of each side are one-hot s-ops, ``O(B)`` dimensions in all. ``<=`` adds ``#{k : k == q}``; ``>`` and
``>=`` swap the bits. The widths are numerical, their sum a linear map (no MLP of its own), and one
lookup turns the sum back into the categorical count. The bit maps are lookups over ``V`` values
with about ``2 V / 2^j`` hidden units each (two per step of the bit), so the whole costs about
``4 V + B N`` hidden units per side where the table costs ``V`` dimensions in every layer.
"""
from __future__ import annotations

from typing import Any, Sequence

from rasp.core import Comparison, Map, Select, Selector, SelectorWidth, SOp, numerical
from rasp.tracr_ops import LinearSequenceMap
from rasp.weights.values import CompileError, sort_values

# predicate -> (bit of the key, bit of the query, also count equal values)
ORDERS = {Comparison.LT: (0, 1, False), Comparison.LEQ: (0, 1, True),
          Comparison.GT: (1, 0, False), Comparison.GEQ: (1, 0, True)}


def is_order_width(sop: Any) -> bool:
    """``SelectorWidth(Select(k, q, <, <=, > or >=))``."""
    sel = getattr(sop, "selector", None)
    return (isinstance(sop, SelectorWidth) and isinstance(sel, Select)
            and isinstance(sel.predicate, Comparison) and sel.predicate in ORDERS)


def bitwise_width(width: SelectorWidth, key_values: Sequence, query_values: Sequence, top: int) -> SOp:
    """The s-op that equals ``width`` (an order width, :func:`is_order_width`) on every input
    whose key and query values lie in the given sets: the sum of per-bit widths above, read as
    an integer and capped at ``top``, the largest width (which the exact sum never passes), so
    that its value set is the width's own."""
    sel = width.selector
    key_bit, query_bit, with_equal = ORDERS[sel.predicate]
    try:
        union = sorted(sort_values(list(key_values) + list(query_values)))
    except TypeError:
        raise CompileError(f"{width.label!r}: an order comparison needs mutually comparable "
                           "values") from None
    rank = {v: i for i, v in enumerate(union)}
    bits = max(1, (len(union) - 1).bit_length())
    name = width.label
    maps: dict[tuple[int, int], SOp] = {}

    def bit(sop: SOp, j: int) -> SOp:   # one map per s-op and bit (keys and queries may be one s-op)
        if (sop.uid, j) not in maps:
            side = "key" if sop is sel.keys else "query"
            maps[sop.uid, j] = Map(lambda v: rank[v] >> j & 1, sop).named(f"{name}_{side}_bit{j}")
        return maps[sop.uid, j]

    terms: list[SOp] = []
    for j in range(bits):
        selector: Selector = Select(bit(sel.keys, j), bit(sel.queries, j),
                                    lambda k, q: k == key_bit and q == query_bit)
        for i in range(j + 1, bits):                       # the bits above j agree
            selector = selector & Select(bit(sel.keys, i), bit(sel.queries, i), Comparison.EQ)
        terms.append(numerical(SelectorWidth(selector)).named(f"{name}_count{j}"))
    if with_equal:
        terms.append(numerical(SelectorWidth(Select(sel.keys, sel.queries, Comparison.EQ))).named(f"{name}_equal"))
    total = terms[0]
    for i, term in enumerate(terms[1:]):
        total = numerical(LinearSequenceMap(total, term, 1, 1)).named(f"{name}_sum{i}")
    return Map(lambda x: min(int(round(x)), top), total).named(name)
