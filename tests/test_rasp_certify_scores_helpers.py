"""The helpers of rasp/certify/scores.py against exact rationals and values worked out by hand.

What the tests pin: outward rounding of every sum and difference (``_add``, ``_gap``, ``_over``,
``_sum_lo``/``_sum_up``, compared with ``fractions.Fraction``) and their rules for empty sides
and overflowed end points; ``_combine``'s formulas for mean, width and max heads of several
components (module docstring of scores.py) on hand-made extremes; the union-find; which head
dimensions a set of rows reaches (``_uses``); how a selector is split (``conjuncts``, ``groups``)
and how max/min values are ranked (``_ranks``), on a compiled program's State.
"""
from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from lengthgen.proof import interval as I
from rasp import lib
from rasp.certify import scores
from rasp.certify.state import State
from rasp.core import Comparison, Map, Select, SelectorWidth, SequenceMap, indices, tokens
from rasp.tracr_ops import ConstantSelector
from rasp.weights import compile_to_transformer

inf = np.inf
EQ, LEQ = Comparison.EQ, Comparison.LEQ


def F(x: float) -> Fraction:
    return Fraction(float(x))


def test_add_rounds_outward():
    """0.1 + 0.2 is not a float: the upper sum must be >= the exact sum of the two doubles and
    the lower one <= it, each within two ulps; infinities and NaN pass unchanged."""
    a, b = np.array([0.1, 1e16, 3.0]), np.array([0.2, 1.0, 0.5])
    exact = [F(x) + F(y) for x, y in zip(a, b)]
    up, down = scores._add(a, b, True), scores._add(a, b, False)
    for u, d, e in zip(up, down, exact):
        assert F(d) <= e <= F(u)
        assert np.nextafter(np.nextafter(d, inf), inf) >= u
    assert F(scores._add(np.array(0.1), np.array(0.2), True)) > F(0.1) + F(0.2)
    assert F(scores._add(np.array(0.1), np.array(0.2), False)) < F(0.1) + F(0.2)
    special = scores._add(np.array([inf, -inf, inf]), np.array([1.0, 1.0, -inf]), True)
    assert special[0] == inf and special[1] == -inf and np.isnan(special[2])


@pytest.mark.parametrize("xs", [(1e16, 1.0, -1e16), (0.1, 0.2, -0.3), (1.0, 2.0 ** -60, -1.0, 2.0 ** -60),
                                (3.0, -7.25, 1e-300)])
def test_bound_sums_contain_the_exact_sum(xs):
    """A sum with cancellation: the lower bound is <= the exact rational sum and the upper one
    >= it, and both are close (the error is a few ulps of the largest term)."""
    exact = sum(F(x) for x in xs)
    lo, hi = scores._sum_lo(*xs), scores._sum_up(*xs)
    assert F(lo) <= exact <= F(hi)
    big = max(abs(x) for x in xs)
    assert hi - lo <= 8 * np.spacing(big)


def test_bound_sums_of_empty_sides():
    """A gap with an empty side (+inf: no intended key) is vacuous, +inf, whatever the rest;
    a spread with an empty side (-inf) is -inf; no terms: 0."""
    assert scores._sum_lo(inf, 3.0, -5.0) == inf and scores._sum_lo(-inf, 3.0) == -inf
    assert scores._sum_up(-inf, 3.0, inf) == -inf and scores._sum_up(inf, 3.0) == inf
    assert scores._sum_lo() == 0.0 == scores._sum_up()
    assert scores._sum_lo(2.0, 3.0) <= 5.0 <= scores._sum_up(2.0, 3.0)
    assert scores._sum_lo(2.0, 3.0) >= 5.0 - 1e-14 and scores._sum_up(2.0, 3.0) <= 5.0 + 1e-14


def test_gap_is_a_lower_bound_of_the_difference():
    """``_gap(a, b) <= a - b`` exactly (0.3 - 0.1 is not a float); +inf where a side is empty
    (a = +inf or b = -inf); -inf for a NaN end point; no warning for inf - inf."""
    a = np.array([0.3, inf, 5.0, inf, np.nan, -inf, 2.0])
    b = np.array([0.1, 1.0, -inf, inf, 1.0, 3.0, inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = scores._gap(a, b)
    assert F(g[0]) <= F(0.3) - F(0.1) and g[0] >= 0.2 - 1e-15
    assert list(g[1:]) == [inf, inf, inf, -inf, -inf, -inf]
    big = np.finfo(np.float64).max                      # 1e308 - (-1e308) overflows: still >= max
    assert scores._gap(np.array([1e308]), np.array([-1e308]))[0] >= big


def test_over_is_an_upper_bound_of_the_difference():
    """``_over(hi, lo) >= hi - lo`` exactly; -inf where a side is empty (hi = -inf or lo = +inf,
    also both infinite); +inf where an end point overflowed (hi = +inf) or is NaN."""
    hi = np.array([0.3, -inf, 5.0, inf, inf, np.nan, -inf, 1.0])
    lo = np.array([0.1, 1.0, inf, inf, 1.0, 1.0, -inf, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o = scores._over(hi, lo)
    assert o.dtype == np.float64
    assert F(o[0]) >= F(0.3) - F(0.1) and o[0] <= 0.2 + 1e-15
    assert list(o[1:]) == [-inf, -inf, -inf, inf, inf, -inf, 0.0]
    big = np.finfo(np.float64).max                      # -1e308 - 1e308 overflows: still <= -max
    assert scores._over(np.array([-1e308]), np.array([1e308]))[0] <= -big


def test_a_finite_difference_that_overflows_is_not_read_as_an_empty_side():
    """``1e308 - (-1e308)`` is finite (2e308 as a real number) but overflows float64: a lower bound
    of it is the largest finite float, never ``+inf``, which the bound sums read as an empty side
    that outweighs every other part. So an overflowed gap beside a part that bounds nothing (-inf,
    a NaN enclosure) sums to -inf, not to a vacuous +inf; the same for sums and upper bounds."""
    big = np.finfo(np.float64).max
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gap = float(scores._gap(np.array([1e308]), np.array([-1e308]))[0])
        over = float(scores._over(np.array([-1e308]), np.array([1e308]))[0])
        low = float(scores._add(np.array(1e308), np.array(1e308), False))
        high = float(scores._add(np.array(-1e308), np.array(-1e308), True))
    assert gap == big and over == -big and low == big and high == -big
    assert scores._sum_lo(gap, -inf) == -inf and scores._sum_up(over, inf) == inf


def test_an_empty_side_outweighs_a_part_that_bounds_nothing_and_a_nan_bounds_nothing():
    """A gap sum with an empty part (+inf: no query state has such keys, so the condition over the
    product of the components is vacuous) is +inf even beside a part that bounds nothing (-inf);
    a spread sum likewise -inf beside +inf. A NaN part (an enclosure that overflowed) bounds
    nothing: -inf for a lower bound, +inf for an upper one."""
    assert scores._sum_lo(inf, -inf) == inf and scores._sum_lo(-inf, inf) == inf
    assert scores._sum_up(-inf, inf) == -inf and scores._sum_up(inf, -inf) == -inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scores._sum_lo(np.nan, 1.0) == -inf and scores._sum_up(np.nan, 1.0) == inf


def _stats(**kw) -> dict:
    base = {k: inf for k in ("AV", "AB", "Ab", "bV", "bB", "AM")} | {"sAM": -inf, "sAb": -inf, "sbA": -inf,
                                                                      "classes": None}
    return base | kw


# the constant parts: query-key constant 10 (exact), BOS's constant 4: d_sel_bos = 10 - 4 = 6,
# d_bos_sel = 4 - 10 = -6
CONST, BOS0 = I.Iv.exact(10.0), I.Iv.exact(4.0)


def test_combine_mean():
    """Two components. g2 = Ab_1 + Ab_2 + (10 - 4) = 30 + 20 + 6 = 56; g3 = min(bB_1 + bV_2,
    bB_2 + bV_1) + (4 - 10) = min(70 + 5, 60 + 8) - 6 = 62; margin min(56, 62) = 56. Spread:
    sAM_1 + sAM_2 = 1.5 + 2.25 = 3.75. With Ab_2 = 40: g2 = 76 and the margin is g3 = 62."""
    s1 = _stats(AV=1.0, AB=2.0, Ab=30.0, bV=8.0, bB=70.0, sAM=1.5, sAb=100.0, sbA=100.0)
    s2 = _stats(AV=3.0, AB=4.0, Ab=20.0, bV=5.0, bB=60.0, sAM=2.25, sAb=100.0, sbA=100.0)
    m, s = scores._combine("mean", [s1, s2], CONST, BOS0)
    assert 56.0 - 1e-12 <= m <= 56.0 and 3.75 <= s <= 3.75 + 1e-12
    m, _ = scores._combine("mean", [s1, s2 | {"Ab": 40.0}], CONST, BOS0)
    assert 62.0 - 1e-12 <= m <= 62.0
    _, s = scores._combine("mean", [s1 | {"sAM": -inf}, s2 | {"sAM": -inf}], CONST, BOS0)
    assert s == 0.0                                        # nothing spreads: 0, not -inf


def test_combine_width():
    """g1 = min(AB_1 + AV_2, AB_2 + AV_1) = min(50 + 7, 40 + 9) = 49; g3 = min(bB_1 + bV_2,
    bB_2 + bV_1) + (4 - 10) = min(70 + 5, 60 + 8) - 6 = 62; margin 49. Spread: max(0, sAM sum
    = 1 + 2 = 3, sAb sum - (4 - 10) = -3 - 2 + 6 = 1, sbA sum - (10 - 4) = 5 + 4 - 6 = 3) = 3;
    with sAb_1 = 2: 2 - 2 + 6 = 6; with sbA_1 = 9: 9 + 4 - 6 = 7."""
    s1 = _stats(AV=9.0, AB=50.0, Ab=-100.0, bV=8.0, bB=70.0, sAM=1.0, sAb=-3.0, sbA=5.0)
    s2 = _stats(AV=7.0, AB=40.0, Ab=-100.0, bV=5.0, bB=60.0, sAM=2.0, sAb=-2.0, sbA=4.0)
    m, s = scores._combine("width", [s1, s2], CONST, BOS0)
    assert 49.0 - 1e-12 <= m <= 49.0 and 3.0 <= s <= 3.0 + 1e-12
    m, _ = scores._combine("width", [s1 | {"AB": 80.0}, s2 | {"AB": 90.0}], CONST, BOS0)
    assert 62.0 - 1e-12 <= m <= 62.0                       # g1 = min(87, 99) = 87 > g3
    _, s = scores._combine("width", [s1 | {"sAb": 2.0}, s2], CONST, BOS0)
    assert 6.0 <= s <= 6.0 + 1e-12
    _, s = scores._combine("width", [s1 | {"sbA": 9.0}, s2], CONST, BOS0)
    assert 7.0 <= s <= 7.0 + 1e-12


def test_combine_max():
    """The rank's component is the second (index 1). Its classes: below = [inf, 12], b = [30, 25],
    spread = [0.5, 1.25]; the other component: AM = 3, Ab = 2, sAM = 0.75, bB = 90, bV = 1
    (and the rank's bB = 80, bV = 2). Gaps: g3 = min(90 + 2, 80 + 1) - 6 = 75; class 0: below
    inf + 3 = inf, b: 30 + 2 + 6 = 38; class 1: below 12 + 3 = 15, b: 25 + 2 + 6 = 33; margin
    15. Spread max(0.125, 0.25) + 0.25 = 0.5. With class 1's below = 40 the margin is class 1's
    b, 33; with b = [20, 45] it is class 0's b, 28; with the other component's bB = 10, g3 =
    min(10 + 2, 80 + 1) - 6 = 6."""
    other = _stats(AM=3.0, Ab=2.0, sAM=0.25, bB=90.0, bV=1.0, AV=-100.0, AB=-100.0)
    rank = _stats(AM=-100.0, Ab=-100.0, sAM=100.0, bB=80.0, bV=2.0, AV=-100.0, AB=-100.0,
                  classes={"below": [inf, 12.0], "b": [30.0, 25.0], "spread": [0.125, 0.25]})
    m, s = scores._combine("max", [other, rank], CONST, BOS0)
    assert 15.0 - 1e-12 <= m <= 15.0 and 0.5 <= s <= 0.5 + 1e-12
    rank["classes"]["below"][1] = 40.0
    m, _ = scores._combine("max", [other, rank], CONST, BOS0)
    assert 33.0 - 1e-12 <= m <= 33.0
    rank["classes"]["b"] = [20.0, 45.0]
    m, _ = scores._combine("max", [other, rank], CONST, BOS0)
    assert 28.0 - 1e-12 <= m <= 28.0
    m, _ = scores._combine("min", [other | {"bB": 10.0}, rank], CONST, BOS0)
    assert 6.0 - 1e-12 <= m <= 6.0


def test_union_find():
    """join(1, 2), join(3, 4), join(2, 5): {1, 2, 5}, {3, 4} and {6} are three classes."""
    find, join = scores.union_find()
    join(1, 2)
    join(3, 4)
    join(2, 5)
    assert find(1) == find(2) == find(5) != find(3) == find(4)
    assert find(6) == 6 and len({find(x) for x in range(1, 7)}) == 3


def test_uses():
    """Columns that the rows ``dims`` of W reach: rows 0 and 2 of W reach columns 0 and 2 (an
    entry 1.0 counts like any non-zero); no rows reach nothing."""
    W = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 5.0, 0.0, 0.0], [0.0, 0.0, -2.0, 0.0]])
    assert scores._uses(W, [0, 2]).tolist() == [True, False, True, False]
    assert scores._uses(W, [1]).tolist() == [False, True, False, False]
    assert scores._uses(W, []).tolist() == [False] * 4


def _state(program, vocab=("a", "b", "c"), n=3):
    ct = compile_to_transformer(program, list(vocab), n)
    return State(ct), ct.program.output.sop


def test_conjuncts_split_flat_tuple_equality_and_ands():
    """``(tok, pos) == (tok, pos)`` is two ``==``s, tokens with tokens and indices with indices;
    an And of a LEQ and a tuple ``==`` is the LEQ and the two parts; a non-EQ Select and a
    tuple ``==`` of different nesting stay whole."""
    pair = lib.make_pair(tokens, indices)
    st, out = _state(SelectorWidth(Select(indices, indices, LEQ) & Select(pair, pair, EQ)))
    parts = scores.conjuncts(st, out.selector)
    assert [(type(c).__name__, c.keys.uid, c.queries.uid, c.predicate) for c in parts] == [
        ("Select", indices.uid, indices.uid, LEQ), ("Select", tokens.uid, tokens.uid, EQ),
        ("Select", indices.uid, indices.uid, EQ)]
    nested = lib.make_pair(lib.make_pair(tokens, indices), tokens)
    flat = SequenceMap(lib.tuple_append, pair, tokens)
    st, out = _state(SelectorWidth(Select(nested, flat, EQ)))
    assert scores.conjuncts(st, out.selector) == [out.selector]
    single = Map(lib.tuple_singleton, tokens)
    st, out = _state(SelectorWidth(Select(single, single, EQ)))
    (c,) = scores.conjuncts(st, out.selector)
    assert (c.keys.uid, c.queries.uid, c.predicate) == (tokens.uid, tokens.uid, EQ)


def test_groups_of_a_constant_conjunct():
    """A constant selector has no key source: it is a group of its own, last, with no s-ops;
    the ``==`` conjunct's group holds the key s-op ``tokens``."""
    const = ConstantSelector(True)
    st, out = _state(SelectorWidth(const & Select(tokens, tokens, EQ)))
    parts = scores.conjuncts(st, out.selector)
    res = scores.groups(st, parts, [tokens])
    assert len(res) == 2 and res[1] == ([const], [])
    assert [c.predicate for c in res[0][0]] == [EQ] and res[0][1] == [tokens]


def test_ranks():
    """Ranks of the aggregated value over key states: ascending for max (value 1 is rank 0),
    descending for min, as integers."""
    st, _ = _state(lib.lasts(tokens, tokens), vocab=(1, 2, 3))
    K = [{"tok": t} for t in (2, 0, 1, 2)]              # token ids of 3, 1, 2, 3
    r = scores._ranks(st, tokens, "max", K, "h")
    assert r.tolist() == [2, 0, 1, 2] and r.dtype.kind == "i"
    assert scores._ranks(st, tokens, "min", K, "h").tolist() == [0, 2, 1, 0]
