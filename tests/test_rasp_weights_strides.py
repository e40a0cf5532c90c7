"""rasp.weights.mlp: the mixed-radix key ``z`` of a lookup (docs/turing-programs.md, "MLPs"):
which orders of the inputs are tried, against changes counted by hand on small tables, and the
width of an ordinal input, against its integer codes.
"""
from __future__ import annotations

import itertools

from rasp import lib
from rasp.core import Map, tokens
from rasp.weights import compile_to_transformer
from rasp.weights.mlp import _best_strides, _component


def _table(sizes: tuple[int, ...], f) -> tuple[list, dict]:
    """Inputs with positions 0..size-1 (the ``comps`` of _component) and ``f``'s table on them."""
    comps = [({v: float(v) for v in range(s)}, s, {}, 0.0) for s in sizes]
    return comps, {flat: f(*flat) for flat in itertools.product(*(range(s) for s in sizes))}


def _changes(strides: list[int], outs: dict) -> int:
    """Output changes between neighbours of the table sorted by z; z must be one-to-one."""
    keys = {flat: sum(x * s for x, s in zip(flat, strides)) for flat in outs}
    assert len(set(keys.values())) == len(outs), strides
    ranked = sorted(outs, key=keys.__getitem__)
    return sum(outs[a] != outs[b] for a, b in zip(ranked, ranked[1:]))


def test_the_order_with_fewest_changes_counts_neighbours():
    """f(a, b) = b % 2 on 3 x 4 values: b on top changes 3 times, b at the bottom 11 times."""
    comps, outs = _table((3, 4), lambda a, b: b % 2)
    strides = _best_strides(comps, outs)
    assert strides == [1, 3] and _changes(strides, outs) == 3


def test_orders_are_tried_up_to_50000_entries():
    """f(a, b) = b: b on top is best; at 20 x 2500 = 50000 entries it is found, at 21 x 2381 =
    50001 the inputs keep their order (the last one least significant)."""
    comps, outs = _table((20, 2500), lambda a, b: b)
    assert _best_strides(comps, outs) == [1, 20]
    comps, outs = _table((21, 2381), lambda a, b: b)
    assert _best_strides(comps, outs) == [2381, 1]


def test_past_the_budget_only_one_input_is_moved_to_the_top():
    """Seven inputs, 2^6 * 7 = 448 entries: 7! * 448 > ORDER_BUDGET, so only the 7 orders that put
    one input on top are tried; each leaves input 5 or 6 at the bottom. f = (x5, x6 // 4) changes
    127 times with x6 at the bottom (twice per run of its 7 values), 447 with x5 there; all 5040
    orders would find 3 (x5 and x6 on top)."""
    comps, outs = _table((2, 2, 2, 2, 2, 2, 7), lambda *x: (x[5], x[6] // 4))
    strides = _best_strides(comps, outs)
    assert _changes(strides, outs) == 127
    assert sorted(strides) == [1, 7, 14, 28, 56, 112, 224]


def test_an_ordinal_input_is_as_wide_as_its_codes():
    """``lasts`` at 40 positions is ordinal with codes -1..39: positions 0..40, width 41."""
    last = lib.lasts(tokens, tokens)
    ct = compile_to_transformer(Map(lambda j: (j * 7) % 5, last), [0, 1, 2, 3], 40, causal=False)
    node = ct.program.by_uid[last.uid]
    assert node.encoding == "ordinal" and node.values == list(range(-1, 40))
    pos, width, _, bias = _component(node, ct.layout)
    assert (pos, width, bias) == ({v: float(v + 1) for v in range(-1, 40)}, 41, 1.0)
