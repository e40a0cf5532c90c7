"""A head's margin and spread over all (query state, key state) pairs, by separable parts.

The selector is split into conjuncts (the parts of an And; an ``==`` of two flat tuples into one
``==`` per part, since Python compares tuples part by part). The key's sources (token, position,
computed s-ops; :mod:`rasp.certify.state`) are grouped so that each conjunct, each s-op whose
dimensions ``W_K`` reads and (max/min) the aggregated value depends on one *key group* only; a
key state is then a tuple of independent group states. A *component* is a key group together
with the query sources its conjuncts compare and the query s-ops whose ``W_Q`` rows share a head
dimension with its ``W_K`` rows (query sources in no such relation form components of their own).
With ``q = sum_C q_C + q_c`` and ``k = sum_g k_g + k_c`` (``q_c``, ``k_c``: the ``one`` rows plus
the biases), ``q . k = q_c . k_c + sum_C [q_C . k_c + sum_{g in C} (q_C + q_c) . k_g]``: the score
is a constant plus one term per component, the selection an And over key groups, and visibility
(key position <= query position) lives inside the component holding both positions. So for every
query state, exactly,

* ``A`` (lowest selected score) is the sum over components and groups of the lowest selected
  group scores, ``M`` (highest) likewise;
* the highest non-selected score is ``max_{g'} (highest failing in g' + sum_{g != g'} highest
  visible in g)`` (a key is not selected when some conjunct fails, the others being free);
* a difference of two such sums is a sum of per-component differences, so its minimum over all
  query states is the sum of the components' minima (``_combine``).

The conditions (:mod:`rasp.certify.heads`): mean heads need ``A >= BOS + m`` and
``BOS >= non-selected + m`` (which imply ``A >= non-selected + 2m``); max/min heads need the same
per class of the aggregated value plus ``class >= every lower selected class + m``; selector
widths need ``min(A, BOS) >= non-selected + m``. Each group score is an interval enclosure and
every sum rounds outward. One component holding everything is the plain enumeration of all pairs.
"""
from __future__ import annotations

import numpy as np

from lengthgen.proof import interval as I
from rasp.core import Comparison, Select, SelectorAnd, SelectorNot, SelectorOr
from rasp.certify.state import CertifyError, Fail, State, key_of
from rasp.lib import tuple_append, tuple_pair, tuple_singleton

CHUNK = 500_000        # (query, key-group) pairs scored at once


def _flat(st: State, node) -> bool:
    """Whether a tuple s-op's value is the flat tuple of its parts."""
    if node.kind != "tuple":
        return False
    kids = [st.node(c) for c in node.sop.children]
    if node.sop.f is tuple_singleton:
        return kids[0].kind != "tuple"
    if node.sop.f is tuple_pair:
        return all(k.kind != "tuple" for k in kids)
    return node.sop.f is tuple_append and _flat(st, kids[0]) and kids[1].kind != "tuple"


def conjuncts(st: State, sel) -> list:
    """The And-parts of a selector; ``==`` on flat tuples of equal length becomes one ``==`` per part."""
    if isinstance(sel, SelectorAnd):
        return conjuncts(st, sel.fst) + conjuncts(st, sel.snd)
    if isinstance(sel, Select) and sel.predicate is Comparison.EQ:
        k, q = st.node(sel.keys), st.node(sel.queries)
        if _flat(st, k) and _flat(st, q) and len(k.parts) == len(q.parts):
            return [Select(a.sop, b.sop, Comparison.EQ) for a, b in zip(k.parts, q.parts)]
    return [sel]


def leaves(sel) -> list:
    """The Selects a selector is built from, through And, Or and Not (an Or or a Not conjunct
    compares the keys and queries of all of its leaves at once)."""
    if isinstance(sel, Select):
        return [sel]
    if isinstance(sel, (SelectorAnd, SelectorOr)):
        return leaves(sel.fst) + leaves(sel.snd)
    if isinstance(sel, SelectorNot):
        return leaves(sel.inner)
    return []


def source_set(st: State, sop) -> set:
    toks, pos, nodes = st.base(sop)
    return ({"tok"} if toks else set()) | ({"pos"} if pos else set()) | {id(n) for n in nodes}


def union_find():
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def join(*xs) -> None:
        roots = [find(x) for x in xs]
        for r in roots[1:]:
            parent[r] = roots[0]
    return find, join


def groups(st: State, parts: list, k_sops: list) -> list[tuple[list, list]]:
    """``[(conjuncts, key s-ops)]`` per group of key sources (union-find)."""
    find, join = union_find()
    cons = [(c, set().union(*[source_set(st, leaf.keys) for leaf in leaves(c)])) for c in parts]
    ops = [(s, source_set(st, s)) for s in k_sops]
    for _, src in cons + ops:
        if src:
            join(*src)
    out: dict = {}
    free: list = []
    for c, src in cons:
        if src:
            out.setdefault(find(next(iter(src))), ([], []))[0].append(c)
        else:
            free.append(c)                           # a constant selector: a group of one state
    for s, src in ops:
        if src:
            out.setdefault(find(next(iter(src))), ([], []))[1].append(s)
    res = list(out.values())
    if free:
        res.append((free, []))
    return res


def _add(a: np.ndarray, b: np.ndarray, up: bool) -> np.ndarray:
    """``a + b`` rounded up (``up``) or down. An infinite operand is an empty side and passes
    through (``inf - inf`` is NaN); a sum of finite operands that overflows is rounded like any
    other, so a lower bound of it is the largest finite float, not ``+inf``."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = a + b
    keep = np.isinf(a) | np.isinf(b) | np.isnan(s)
    return np.where(keep, s, I.up(s) if up else I.down(s))


def _uses(W: np.ndarray, dims: list[int]) -> np.ndarray:
    """The head dimensions that rows ``dims`` of ``W`` reach."""
    return np.any(W[dims] != 0, axis=0) if len(dims) else np.zeros(W.shape[1], dtype=bool)


def margins(st: State, sel, reduce: str, value_sop, selection, q_dims: np.ndarray,
            WQ: np.ndarray, bQ: np.ndarray, WK: np.ndarray, bK: np.ndarray, k_dims: np.ndarray,
            bos_x: I.Iv, budgets: tuple[int, int], name: str):
    """``(margin, spread, pairs)`` of a head (module docstring), ``selection(sel, Q, K)`` being
    the RASP selection, ``budgets`` the most pairs scored and the most states of one enumeration
    held at once (a component's query states, a key group's states). Components: a key group, the query sources its conjuncts compare and the
    query s-ops whose ``W_Q`` rows share a head dimension with its ``W_K`` rows are one component;
    the score is a sum over components, so every bound is a sum of per-component extremes."""
    one = st.layout.one
    rank_sops = [value_sop] if reduce in ("max", "min") else []
    parts = conjuncts(st, sel)
    grouped = groups(st, parts, [o.sop for o in st.owners(k_dims)] + rank_sops)
    find, join = union_find()
    q_nodes = [o for o in st.owners(q_dims)]
    q_all = [leaf.queries for c in parts for leaf in leaves(c)] + [o.sop for o in q_nodes]
    for sop in q_all:
        join(*[("q", x) for x in source_set(st, sop)] or [("none",)])
    key_tabs = []
    for i, (cons, sops) in enumerate(grouped):
        join(("g", i))
        names, ranges = st.sources(sops + [leaf.keys for c in cons for leaf in leaves(c)])
        own = {id(st.node(s)) for s in sops}
        dims = [d for d in k_dims if st.owner[d] is not None and id(st.owner[d]) in own]
        reach = _uses(WK, dims)
        for o in q_nodes:
            if np.any(reach & _uses(WQ, st.layout.dims[id(o)])):
                join(("g", i), *[("q", x) for x in source_set(st, o.sop)])
        for leaf in (leaf for c in cons for leaf in leaves(c)):
            join(("g", i), *[("q", x) for x in source_set(st, leaf.queries)])
        if "pos" in names and any("pos" in source_set(st, q) for q in q_all):
            join(("g", i), ("q", "pos"))
        key_tabs.append((cons, sops, names, ranges, dims))
    comps: dict = {}
    for sop in q_all:
        src = source_set(st, sop)
        comps.setdefault(find(("q", next(iter(src))) if src else ("none",)), ([], []))[0].append(sop)
    for i in range(len(grouped)):
        comps.setdefault(find(("g", i)), ([], []))[1].append(i)
    pair_budget, state_budget = budgets
    built, pairs = [], 0
    for qs, gs in comps.values():
        qn, qr = st.sources(qs)
        held = max([st.count(qr)] + [st.count(key_tabs[i][3]) for i in gs])
        if held > state_budget:
            raise Fail("budget", f"{name}: {held} query or key-group states, over STATE_BUDGET = {state_budget}")
        pairs += st.count(qr) * max(1, sum(st.count(key_tabs[i][3]) for i in gs))
        built.append((qs, gs, qn, qr))
    if pairs > pair_budget:
        raise Fail("budget", f"{name}: {pairs} (query state, key group state) pairs, over PAIR_BUDGET = {pair_budget}")
    kc = I.Iv.exact(WK[one]) + bK                          # the key's constant part
    qc = I.Iv.exact(WQ[one]) + bQ                          # the query's constant part
    kb = I.affine(I.Iv(bos_x.lo[None], bos_x.hi[None]), WK, bK)[0]
    const = _dot(qc, kc)
    bos0 = _dot(qc, kb)
    tables = []
    for cons, sops, names, ranges, dims in key_tabs:
        K = st.combos(names, ranges)
        X = st.box(K, dims)
        X.lo[:, one] = X.hi[:, one] = 0.0
        kg = I.matmul(X, WK)
        rank = _ranks(st, value_sop, reduce, K, name) if any(s is value_sop for s in sops) and rank_sops else None
        tables.append((cons, K, names, I.Iv(kg.lo.T.copy(), kg.hi.T.copy()), rank))
    stats = []
    for qs, gs, qn, qr in built:
        own = {id(st.node(s)) for s in qs}
        dims = [d for d in q_dims if st.owner[d] is not None and id(st.owner[d]) in own]
        stats.append(_component(st, [tables[i] for i in gs], st.combos(qn, qr), qn, dims,
                                WQ, qc, kc, kb, selection))
    return _combine(reduce, stats, const, bos0) + (pairs,)


def _dot(a: I.Iv, b: I.Iv) -> I.Iv:
    r = I.matmul(I.Iv(a.lo[None], a.hi[None]), I.Iv(b.lo[:, None], b.hi[:, None]))
    return I.Iv(r.lo[0, 0], r.hi[0, 0])


def _ranks(st: State, value_sop, reduce: str, K: list[dict], name: str) -> np.ndarray:
    vals = [st.value(value_sop, a) for a in K]
    try:
        order = sorted({key_of(v): v for v in vals}.values())
    except TypeError:
        raise CertifyError(f"{name}: max/min of values that do not compare") from None
    order = order if reduce == "max" else order[::-1]
    pos = {key_of(v): j for j, v in enumerate(order)}
    return np.array([pos[key_of(v)] for v in vals], dtype=np.int64)


def _component(st, tables, Q, qn, dims, WQ, qc, kc, kb, selection) -> dict:
    """Extremes over one component's query states of the differences that the margin sums:
    ``A`` (lowest selected score), ``M`` (highest selected), ``V`` (highest visible), ``B``
    (highest non-selected), ``b`` (BOS), per query state; and, for the rank's component, ``A``
    and ``M`` per class."""
    one = st.layout.one
    out = {k: np.inf for k in ("AV", "AB", "Ab", "bV", "bB", "AM")}
    out.update(sAM=-np.inf, sAb=-np.inf, sbA=-np.inf, classes=None)
    total = max(1, sum(len(t[1]) for t in tables))
    step = max(1, CHUNK // total)
    inf = np.inf
    for s in range(0, len(Q), step):
        part = Q[s:s + step]
        X = st.box(part, dims)
        X.lo[:, one] = X.hi[:, one] = 0.0
        q = I.matmul(X, WQ)
        n = len(part)
        t = I.matmul(q, I.Iv(kc.lo[:, None], kc.hi[:, None]))[:, 0]     # query-only term
        b = I.matmul(q, I.Iv(kb.lo[:, None], kb.hi[:, None]))[:, 0]     # BOS, this component's part
        qk = q + qc                                                     # the key-only terms ride along
        A, M, V = t.lo, t.hi, t.hi
        per = []
        for cons, K, names, kgT, rank in tables:
            sc = I.matmul(qk, kgT)
            vis = np.ones((n, len(K)), dtype=bool)
            if "pos" in names and "pos" in qn:
                vis = np.array([k["pos"] for k in K])[None, :] <= np.array([a["pos"] for a in part])[:, None]
            ok = vis.copy()
            for c in cons:
                ok &= selection(c, part, K)
            a_, m_ = np.where(ok, sc.lo, inf).min(1), np.where(ok, sc.hi, -inf).max(1)
            v_ = np.where(vis, sc.hi, -inf).max(1)
            f_ = np.where(vis & ~ok, sc.hi, -inf).max(1) if cons else None
            per.append((a_, m_, v_, f_, ok, sc, rank))
            A, M, V = _add(A, a_, False), _add(M, m_, True), _add(V, v_, True)
        B = np.full(n, -inf)
        for i, (_, _, _, f_, *_r) in enumerate(per):
            if f_ is None:
                continue
            rest = _add(t.hi, f_, True)
            for j, other in enumerate(per):
                if j != i:
                    rest = _add(rest, other[2], True)
            B = np.maximum(B, rest)
        for key, lo, hi in (("AV", A, V), ("AB", A, B), ("Ab", A, b.hi), ("bV", b.lo, V), ("bB", b.lo, B), ("AM", A, M)):
            out[key] = min(out[key], float(_gap(lo, hi).min(initial=inf)))
        for key, hi, lo in (("sAM", M, A), ("sAb", M, b.lo), ("sbA", b.hi, A)):
            out[key] = max(out[key], float(_over(hi, lo).max(initial=-inf)))
        g0 = next((j for j, x in enumerate(per) if x[6] is not None), None)
        if g0 is not None:
            _classes(out, per, g0, t, b)
    return out


def _over(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """An upper bound of ``hi - lo``; ``-inf`` where either side is empty. ``-inf`` can come from
    nothing else (a difference of finite sides that overflows rounds up to the most negative
    finite float), ``+inf`` stays ``+inf``, a NaN becomes ``+inf``."""
    with np.errstate(over="ignore", invalid="ignore"):
        d = hi - lo
    return np.where((hi == -np.inf) | (lo == np.inf), -np.inf, I.upper_bound(I.up(d)))


def _classes(out: dict, per: list, g0: int, t: I.Iv, b: I.Iv) -> None:
    """Per class of the aggregated value (in rank order), over this chunk's query states: the
    gaps of the class's lowest selected score to the lower classes' highest and to BOS."""
    inf = np.inf
    lo_rest, hi_rest = t.lo, t.hi
    for j, x in enumerate(per):
        if j != g0:
            lo_rest, hi_rest = _add(lo_rest, x[0], False), _add(hi_rest, x[1], True)
    ok, sc, rank = per[g0][4], per[g0][5], per[g0][6]
    count = int(rank.max()) + 1 if rank.size else 0
    cls = out["classes"] or {k: [inf] * count for k in ("below", "b")} | {"spread": [-inf] * count}
    below = np.full(len(t.lo), -inf)
    for c in range(count):
        in_c = ok & (rank[None, :] == c)
        cmin = _add(lo_rest, np.where(in_c, sc.lo, inf).min(1), False)
        cmax = _add(hi_rest, np.where(in_c, sc.hi, -inf).max(1), True)
        for key, rival in (("below", below), ("b", b.hi)):
            cls[key][c] = min(cls[key][c], float(_gap(cmin, rival).min(initial=inf)))
        cls["spread"][c] = max(cls["spread"][c], float(_over(cmax, cmin).max(initial=-inf)))
        below = np.maximum(below, cmax)
    out["classes"] = cls


def _bound_sum(xs: tuple, up: bool) -> float:
    """An upper (``up``) or lower bound of a sum of bounds, rounded outward. An empty side makes
    the sum empty: ``+inf`` for gaps (no query state has such keys: the condition is vacuous),
    ``-inf`` for spreads (no such keys: nothing spreads)."""
    empty = -np.inf if up else np.inf
    if any(x == empty for x in xs):
        return empty
    total = 0.0
    for x in xs:
        total = float(_add(np.array(total), np.array(x), up))
    return float((I.upper_bound if up else I.lower_bound)(np.array(total)))


def _sum_lo(*xs: float) -> float:
    return _bound_sum(xs, up=False)


def _sum_up(*xs: float) -> float:
    return _bound_sum(xs, up=True)


def _combine(reduce: str, stats: list[dict], const: I.Iv, bos0: I.Iv) -> tuple[float, float]:
    """The head's margin and spread from the components' extremes (module docstring)."""
    k = len(stats)

    def others(i: int, key: str) -> list[float]:
        return [stats[j][key] for j in range(k) if j != i]

    d_sel_bos = float(I.down(const.lo - bos0.hi))      # const - bos0, lower bound
    d_bos_sel = float(I.down(bos0.lo - const.hi))
    g1 = min([_sum_lo(stats[i]["AB"], *others(i, "AV")) for i in range(k)], default=np.inf)
    g3 = _sum_lo(min([_sum_lo(stats[i]["bB"], *others(i, "bV")) for i in range(k)], default=np.inf), d_bos_sel)
    if reduce in ("mean", "width"):
        g2 = _sum_lo(_sum_lo(*[x["Ab"] for x in stats]), d_sel_bos)
        if reduce == "mean":              # selected >= BOS + m >= others + 2m: g1 is implied
            return min(g2, g3), max(0.0, _sum_up(*[x["sAM"] for x in stats]))
        spread = max(0.0, _sum_up(*[x["sAM"] for x in stats]),
                     _sum_up(*[x["sAb"] for x in stats], -d_bos_sel),     # selmax - BOS
                     _sum_up(*[x["sbA"] for x in stats], -d_sel_bos))     # BOS - selmin
        return min(g1, g3), spread
    i0 = next(i for i, x in enumerate(stats) if x["classes"] is not None)
    cls = stats[i0]["classes"]
    gaps = [g3]                           # a class above BOS + m, BOS above the others + m
    spread = 0.0
    for c in range(len(cls["below"])):
        gaps.append(_sum_lo(cls["below"][c], *others(i0, "AM")))
        gaps.append(_sum_lo(_sum_lo(cls["b"][c], *others(i0, "Ab")), d_sel_bos))
        spread = max(spread, _sum_up(cls["spread"][c], *others(i0, "sAM")))
    return min(gaps), spread


def _gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A lower bound of ``a - b``: ``+inf`` where either side is empty (``a = +inf``: no intended
    key; ``b = -inf``: no rival), ``-inf`` for a NaN (an enclosure that overflowed bounds nothing).
    A difference of finite sides that overflows to ``+inf`` is bounded by the largest finite float:
    ``+inf`` would read as vacuous and outweigh every other part of a sum (``_bound_sum``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        d = a - b
    vacuous = (a == np.inf) | (b == -np.inf)
    return np.where(vacuous, np.inf, I.lower_bound(I.down(d)))       # down(-inf) = -inf, down(+inf) = max
