"""A head's margin and spread over all (query state, key state) pairs, by separable groups.

The selector is split into conjuncts (the parts of an And; an ``==`` of two flat tuples into one
``==`` per part, since Python compares tuples part by part). The key's sources (token, position,
computed s-ops; :mod:`rasp.certify.state`) are grouped so that each conjunct, each s-op whose
dimensions ``W_K`` reads and (max/min) the aggregated value depends on one group only. A key
state is then a tuple of independent group states, and with ``x`` the key's residual,
``q . (x W_K + b_K) = q . c + sum_g q . (x_g W_K)`` (``c`` the ``one`` row of ``W_K`` plus ``b_K``,
``x_g`` the group's dimensions): the score is a sum over groups, the selection an And over groups,
and visibility (key position <= query position) lives in the group holding the position. So for
every query state, exactly,

* min over selected keys = ``q.c + sum_g min_{selected in g} s_g``, and likewise the max;
* max over non-selected keys = ``q.c + max_{g'} (max_{failing in g'} s_g' + sum_{g != g'} max_g s_g)``
  (a key is not selected when some conjunct fails, the others being free);
* max/min heads group the selected keys by the aggregated value's rank inside its group.

Each ``s_g`` is an interval enclosure; sums round outward. One group holding everything is the
plain enumeration of all pairs.
"""
from __future__ import annotations

import numpy as np

from lengthgen.proof import interval as I
from rasp.core import Comparison, Select, SelectorAnd
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


def _sources(st: State, sop) -> set:
    toks, pos, nodes = st.base(sop)
    return ({"tok"} if toks else set()) | ({"pos"} if pos else set()) | {id(n) for n in nodes}


def groups(st: State, parts: list, k_sops: list) -> list[tuple[list, list]]:
    """``[(conjuncts, key s-ops)]`` per group of key sources (union-find)."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def join(xs: set) -> None:
        xs = [find(x) for x in xs]
        for x in xs[1:]:
            parent[x] = xs[0]

    cons = [(c, _sources(st, c.keys) if isinstance(c, Select) else set()) for c in parts]
    ops = [(s, _sources(st, s)) for s in k_sops]
    for _, src in cons + ops:
        join(src)
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
    s = a + b
    return np.where(np.isinf(s) | np.isnan(s), s, I.up(s) if up else I.down(s))


def margins(st: State, sel, reduce: str, value_sop, selection, Q: list[dict], qn: list, q_of,
            WK: np.ndarray, bK: np.ndarray, k_dims: np.ndarray, bos_x: I.Iv, budget: int, name: str):
    """``(margin, spread, pairs)`` of a head (module docstring); ``q_of(states)`` encloses the
    queries ``x W_Q + b_Q`` of some query states, ``selection(sel, Q, K)`` is the RASP selection."""
    rank_sops = [value_sop] if reduce in ("max", "min") else []
    k_sops = [o.sop for o in st.owners(k_dims)] + rank_sops
    parts = conjuncts(st, sel)
    grouped = groups(st, parts, k_sops)
    built = []
    for cons, sops in grouped:
        names, ranges = st.sources(sops + [c.keys for c in cons if isinstance(c, Select)])
        built.append((cons, sops, names, ranges))
    pairs = len(Q) * sum(st.count(r) for *_, r in built)
    if pairs > budget:
        raise Fail("budget", f"{name}: {pairs} (query state, key group state) pairs, over PAIR_BUDGET = {budget}")
    one = st.layout.one
    kc = I.Iv.exact(WK[one]) + bK                 # the key's constant part, enclosed
    kb = I.affine(I.Iv(bos_x.lo[None], bos_x.hi[None]), WK, bK)
    tables = []
    g0 = None
    for i, (cons, sops, names, ranges) in enumerate(built):
        K = st.combos(names, ranges)
        own = {id(st.node(s)) for s in sops}
        dims = [d for d in k_dims if st.owner[d] is not None and id(st.owner[d]) in own]
        X = st.box(K, dims)
        X.lo[:, one] = X.hi[:, one] = 0.0
        kg = I.matmul(X, WK)
        rank = None
        if rank_sops and any(s is value_sop for s in sops):
            g0 = i
            vals = [st.value(value_sop, a) for a in K]
            try:
                order = sorted({key_of(v): v for v in vals}.values())
            except TypeError:
                raise CertifyError(f"{name}: max/min of values that do not compare") from None
            order = order if reduce == "max" else order[::-1]
            pos = {key_of(v): j for j, v in enumerate(order)}
            rank = np.array([pos[key_of(v)] for v in vals], dtype=np.int64)
        tables.append((cons, K, names, I.Iv(kg.lo.T.copy(), kg.hi.T.copy()), rank))
    total = sum(len(t[1]) for t in tables)
    step = max(1, CHUNK // max(1, total))
    margin, spread = np.inf, 0.0
    for s in range(0, len(Q), step):
        part = Q[s:s + step]
        q = q_of(part)
        base = I.matmul(q, I.Iv(kc.lo[:, None], kc.hi[:, None]))[:, 0]
        sb = I.matmul(q, I.Iv(kb.lo.T.copy(), kb.hi.T.copy()))[:, 0]
        m, d = _chunk(reduce, tables, g0, part, qn, q, base, sb, selection)
        margin, spread = min(margin, float(I.lower_bound(m).min())), max(spread, float(I.upper_bound(d).max()))
    return margin, spread, pairs


def _chunk(reduce, tables, g0, Q, qn, q, base: I.Iv, sb: I.Iv, selection):
    """Per query state of one chunk: the margin's lower bound and the intended keys' spread."""
    inf = np.inf
    n = len(Q)
    stats = []                   # per group: (min sel lo, max sel hi, max visible hi, max failing hi, sel, lo, hi, vis)
    for cons, K, names, kgT, rank in tables:
        s = I.matmul(q, kgT)
        vis = np.ones((n, len(K)), dtype=bool)
        if "pos" in names and "pos" in qn:
            vis = np.array([b["pos"] for b in K])[None, :] <= np.array([a["pos"] for a in Q])[:, None]
        ok = vis.copy()
        for c in cons:
            ok &= selection(c, Q, K)
        fail = vis & ~ok if cons else np.zeros_like(vis)
        stats.append((np.where(ok, s.lo, inf).min(1), np.where(ok, s.hi, -inf).max(1),
                      np.where(vis, s.hi, -inf).max(1), np.where(fail, s.hi, -inf).max(1), ok, s, rank))
    selmin, selmax, vismax = base.lo, base.hi, base.hi
    for st_ in stats:
        selmin, selmax, vismax = _add(selmin, st_[0], False), _add(selmax, st_[1], True), _add(vismax, st_[2], True)
    nonmax = np.full(n, -inf)
    for i, st_ in enumerate(stats):
        rest = base.hi
        for j, other in enumerate(stats):
            rest = _add(rest, st_[3] if j == i else other[2], True)
        nonmax = np.maximum(nonmax, rest)
    anysel = np.isfinite(selmin)
    gaps = [_gap(sb.lo, nonmax)]
    if reduce == "width":
        low = np.where(anysel, np.minimum(selmin, sb.lo), sb.lo)
        high = np.where(anysel, np.maximum(selmax, sb.hi), sb.hi)
        return np.minimum(gaps[0], _gap(low, nonmax)), I.up(high - low)
    if reduce == "mean":
        gaps += [_gap(selmin, nonmax), _gap(selmin, sb.hi)]
        return np.minimum.reduce(gaps), np.where(anysel, I.up(selmax - selmin), 0.0)
    others_min, others_max = base.lo, base.hi
    for j, st_ in enumerate(stats):
        if j != g0:
            others_min, others_max = _add(others_min, st_[0], False), _add(others_max, st_[1], True)
    ok, s, rank = stats[g0][4], stats[g0][5], stats[g0][6]
    below = np.full(n, -inf)
    spread = np.zeros(n)
    for c in range(int(rank.max()) + 1 if rank.size else 0):
        in_c = ok & (rank[None, :] == c)
        cmin = _add(others_min, np.where(in_c, s.lo, inf).min(1), False)
        cmax = _add(others_max, np.where(in_c, s.hi, -inf).max(1), True)
        gaps.append(_gap(cmin, np.maximum(np.maximum(below, nonmax), sb.hi)))
        spread = np.maximum(spread, np.where(np.isfinite(cmin), I.up(cmax - cmin), 0.0))
        below = np.maximum(below, cmax)
    return np.minimum.reduce(gaps), spread


def _gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A lower bound of ``a - b``: ``+inf`` where either side is empty (``a = +inf``: no intended
    key; ``b = -inf``: no rival), ``-inf`` for a NaN (an enclosure that overflowed bounds nothing)."""
    with np.errstate(invalid="ignore"):
        d = a - b
    vacuous = (a == np.inf) | (b == -np.inf)
    return np.where(vacuous, np.inf, I.lower_bound(np.where(np.isinf(d), d, I.down(d))))
