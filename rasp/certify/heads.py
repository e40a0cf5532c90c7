"""Attention heads of a compiled program, checked against the RASP semantics of their selectors.

For one head (docs/turing-programs.md, "Certifying a compiled program"), the dimensions it reads
(non-zero rows of ``W_Q``, ``W_K``, ``W_V W_O``) and writes (non-zero columns of ``W_V W_O``) are
found from the weights and mapped to the s-ops that own them. Query states and key states are
enumerated (:mod:`rasp.certify.state`); the *intended* selection is the selector's own RASP
predicate, ``predicate(key value, query value)``, on the s-ops' values (causal: key position <=
query position). With ``s`` the enclosure of ``q.k`` (``attn_scale`` is 1), per query state:

* mean: ``s_sel >= s_BOS + m`` and ``s_BOS >= s_other + m`` (BOS is intended exactly when nothing
  is selected; together they give ``s_sel >= s_other + 2m``);
* max / min: with the selected keys grouped by the aggregated value in rank order, every key of
  a group scores ``m`` above every selected key of a lower-ranked group and above BOS;
  ``s_BOS >= s_other + m``;
* selector width: BOS and the selected keys are intended (weight ``1/(w+1)`` each), the others
  score ``m`` below all of them.

``delta`` is the largest spread of the intended keys' scores. The extremes are taken over
separable parts of the head (:mod:`rasp.certify.scores`), exactly as over all pairs.

**Softmax bound.** Let ``p`` be the softmax over the ``N <= n+1`` visible keys and ``q`` the
intended weights (uniform on the intended set ``S``). Every other key scores at least ``m`` below
``a = min_S s``, so the mass off ``S`` is ``L <= (N - |S|) e^(a-m) / (|S| e^a) <= n e^-m``. On
``S``, ``p`` restricted and renormalised has weights ``u_k / sum u`` with ``u_k`` in ``[1, r]``,
``r = e^delta``; its total variation from uniform is ``max_A p(A) - |A|/|S| <= max_x f(x)``,
``f(x) = x(1-x)(r-1)/(1+x(r-1))`` (``x = |A|/|S|``, the heaviest ``A`` at ratio ``r``), and with
``t = sqrt(r)``: ``(1+x(r-1))(t-1)/(t+1) - f(x) = (t-1)(1-x(t+1))^2/(t+1) >= 0``, so it is at most
``(t-1)/(t+1) = tanh(delta/4) <= delta/4``. By convexity of the total variation,
``TV(p, q) <= L + (1-L) tanh(delta/4)``. Where every intended key has the same target (a
categorical mean under the premise, max, min) only ``L`` matters.

**Output error.** With ``O_k`` the head's exact output for key ``k`` (``x_k W_V W_O``) and
``T_k`` its target (``write(node, value at k)``; BOS: the default, or 1 in a width's scratch),
the head writes ``sum p_k O_k`` where the program wants ``sum q_k T_k``; per dimension,
``|sum p_k O_k - sum q_k T_k| <= max_k |O_k - T_k| + TV * (max_k T_k - min_k T_k)`` (since
``sum (p_k - q_k) = 0``, the second term is at most ``TV`` times the range of ``T``). That bound
becomes the written dimensions' ``eps``; a numerical mean adds the rounding of ``float(i/w)``.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from lengthgen.proof import interval as I
from rasp.core import Aggregate, Comparison, Select, SelectorAnd, SelectorNot, SelectorOr, SelectorWidth
import rasp.certify.floats as floats
from rasp.certify.scores import margins, source_set, union_find
from rasp.certify.state import PAIR_BUDGET, STATE_BUDGET, CertifyError, Fail, State, key_of
from rasp.tracr_ops import ConstantSelector
from rasp.weights.selectors import selection_key

TV_MAX = 1e-6          # a head whose total-variation bound exceeds this fails (margin)
LOOKUP_TOL = 1e-6      # a value map off its target by more than this (times 1 + |target|) fails
FLOAT32_TOL = 1e-3     # both, for a float32 statement (the kernel's rounding alone spreads scores by ~1e-3)


def tolerances(st: State) -> tuple[float, float]:
    """``(TV_MAX, LOOKUP_TOL)`` of the state's statement. Neither is needed for soundness (every
    error goes into ``eps``); they stop a certificate whose errors have grown past any use."""
    return (FLOAT32_TOL, FLOAT32_TOL) if st.unit else (TV_MAX, LOOKUP_TOL)

_NUMERIC = {Comparison.EQ: operator.eq, Comparison.LT: operator.lt, Comparison.LEQ: operator.le,
            Comparison.GT: operator.gt, Comparison.GEQ: operator.ge, Comparison.NEQ: operator.ne}


@dataclass
class HeadRow:
    """One head's certificate: the margin ``m``, the spread ``delta`` of the intended scores, the
    leak bound ``n e^-m``, the total-variation bound and the largest error it adds to ``eps``."""

    layer: int
    head: int
    writes: str
    reduce: str
    pairs: int
    margin: float
    spread: float
    leak: float
    tv: float
    error: float


def _is_number(v: object) -> bool:
    """A float, or an int that float64 holds exactly (``|v| <= 2^53``): comparing such values as
    float64 compares the values themselves. Larger ints (``2^53 + 1`` rounds to ``2^53``, ``10^400``
    overflows) and bools take the Python comparison in :func:`_table`."""
    return isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool) and abs(v) <= 2 ** 53)


def _table(pred, kvals: list, qvals: list) -> np.ndarray:
    """``pred(key, query)`` over distinct key and query values, ``[query, key]``."""
    if isinstance(pred, Comparison) and pred in _NUMERIC and all(_is_number(v) for v in kvals + qvals):
        return _NUMERIC[pred](np.array(kvals, dtype=float)[None, :], np.array(qvals, dtype=float)[:, None])
    return np.array([[bool(pred(k, q)) for k in kvals] for q in qvals], dtype=bool).reshape(len(qvals), len(kvals))


def _distinct(values: list) -> tuple[list, np.ndarray]:
    index: dict = {}
    idx = np.array([index.setdefault(key_of(v), len(index)) for v in values], dtype=np.int64)
    out = [None] * len(index)
    for v, i in zip(values, idx):
        out[i] = v
    return out, idx


def selection(st: State, sel, Q: list[dict], K: list[dict]) -> np.ndarray:
    """The selector's RASP value ``[query state, key state]`` (before causal masking)."""
    if isinstance(sel, Select):
        kd, ki = _distinct([st.value(sel.keys, a) for a in K])
        qd, qi = _distinct([st.value(sel.queries, a) for a in Q])
        return _table(sel.predicate, kd, qd)[qi][:, ki]
    if isinstance(sel, SelectorAnd):
        return selection(st, sel.fst, Q, K) & selection(st, sel.snd, Q, K)
    if isinstance(sel, SelectorOr):
        return selection(st, sel.fst, Q, K) | selection(st, sel.snd, Q, K)
    if isinstance(sel, SelectorNot):
        return ~selection(st, sel.inner, Q, K)
    if isinstance(sel, ConstantSelector) and sel.uniform is not None:
        return np.full((len(Q), len(K)), bool(sel.uniform))
    raise CertifyError(f"selector {sel.label!r}: no rule for a {type(sel).__name__}")


def _writers(st: State, layer: int, h: int, w_dims: np.ndarray) -> tuple[list, str]:
    """The nodes a head writes and its reduction; structure failures for anything else."""
    name = f"layer {layer} head {h}"
    if any(st.owner[x] is None for x in w_dims):
        raise Fail("structure", f"{name} writes the dimension {st.layout.labels[int(w_dims[0])]!r}")
    nodes = st.owners(w_dims)
    for node in nodes:
        ok = ((node.kind == "attn" and node.slot == 2 * layer)
              or (node.kind == "width" and node.slot == 2 * layer + 1
                  and all(x == st.layout.scratch(node) for x in w_dims if st.owner[x] is node)))
        if not ok:
            bad = next(st.layout.labels[x] for x in w_dims if st.owner[x] is node)
            raise Fail("structure", f"{name} writes {bad!r}, which no aggregate or selector width "
                                    f"of layer {layer} owns")
    if any(n.kind == "width" for n in nodes):
        if len(nodes) > 1:
            raise Fail("structure", f"{name} writes a selector width and other s-ops")
        return nodes, "width"
    first = nodes[0].sop
    for node in nodes[1:]:
        s = node.sop
        if (selection_key(s.selector) != selection_key(first.selector) or s.reduce != first.reduce
                or (s.reduce != "mean" and s.sop.uid != first.sop.uid)):
            raise Fail("structure", f"{name} writes {nodes[0].label!r} and {node.label!r}, whose "
                                    "selections or reductions differ")
    return nodes, first.reduce


def head_writes(st: State, layer: int, h: int) -> list:
    """The s-ops a head writes (checked by :func:`_writers`; empty for a head that writes nothing)."""
    a = f"blocks.{layer}.attn."
    WV, WO = st.p[a + "W_V"][h], st.p[a + "W_O"][h]
    used_e = np.any(WV != 0, axis=0) & np.any(WO != 0, axis=1)
    w_dims = np.nonzero(np.any(WO[used_e] != 0, axis=0))[0]
    return _writers(st, layer, h, w_dims)[0] if len(w_dims) else []


def check_head(st: State, layer: int, h: int, bos_x: I.Iv) -> tuple[HeadRow, list, list[int], np.ndarray] | None:
    """Certify one head; returns its row, the nodes it writes, their dimensions and their new
    ``eps`` (None for a head that writes nothing)."""
    a = f"blocks.{layer}.attn."
    WQ, WK, WV, WO = (st.p[a + k][h] for k in ("W_Q", "W_K", "W_V", "W_O"))
    bQ, bK = st.p[a + "b_Q"][h], st.p[a + "b_K"][h]
    used_e = np.any(WV != 0, axis=0) & np.any(WO != 0, axis=1)
    w_dims = np.nonzero(np.any(WO[used_e] != 0, axis=0))[0]
    if not len(w_dims):
        return None
    v_dims = np.nonzero(np.any(WV[:, used_e] != 0, axis=1))[0]
    q_dims, k_dims = (np.nonzero(np.any(W != 0, axis=1))[0] for W in (WQ, WK))
    nodes, reduce = _writers(st, layer, h, w_dims)
    name = f"layer {layer} head {h} ({', '.join(n.label for n in nodes)})"
    sel = nodes[0].sop.selector
    value_sop = nodes[0].sop.sop if isinstance(nodes[0].sop, Aggregate) else None
    if isinstance(nodes[0].sop, SelectorWidth):
        out_dims = [st.layout.scratch(nodes[0])]
    else:
        out_dims = [x for n in nodes for x in st.layout.dims[id(n)]]
    if not set(w_dims.tolist()) <= set(out_dims):
        raise Fail("structure", f"{name} writes a dimension outside the s-ops it computes")
    parts = [(st.sources(sops), cols, dims)
             for sops, cols, dims in value_parts(st, nodes, v_dims, WV[:, used_e], WO[used_e], out_dims)]
    for (_, ranges), _, _ in parts:
        count = st.count(ranges)
        if count > STATE_BUDGET:
            raise Fail("budget", f"{name}: {count} value states, over STATE_BUDGET = {STATE_BUDGET}")
    margin, spread, pairs = margins(
        st, sel, reduce, value_sop, lambda c, Q, K: selection(st, c, Q, K), q_dims, WQ, bQ, WK, bK, k_dims, bos_x, (PAIR_BUDGET, STATE_BUDGET), name)
    if st.unit:                                            # float32: every score moves by <= ds
        ds = floats.score_error(floats.magnitudes(st), bos_x, WQ, bQ, WK, bK, st.unit, st.n + 1)
        margin = margin if margin == np.inf else float(I.down(margin - 2 * ds))
        spread = float(I.up(spread + 2 * ds))
    leak = 0.0 if margin == np.inf else float(I.up_mul(st.n, I.exp(I.Iv.exact(-margin)).hi))
    # a numerical mean anywhere in the head (it may share the head with categorical means of its
    # selection): its intended keys hold different values, so their spread counts
    numerical_mean = reduce == "mean" and any(n.numerical for n in nodes)
    numeric = reduce == "width" or numerical_mean
    tv = float(I.up_add(leak, I.up(spread / 4))) if numeric else leak
    tv_max, lookup_tol = tolerances(st)
    if not margin > 0 or not tv <= tv_max:
        raise Fail("margin", f"{name}: margin {margin:.6g}, spread {spread:.3g}, total-variation bound "
                             f"{tv:.3g} (needs margin > 0 and a bound <= TV_MAX = {tv_max:g})")
    dev, scale, spans, V = _value_errors(st, nodes, reduce, parts, out_dims, WV, WO, bos_x)
    if np.any(~(dev <= lookup_tol * (1 + scale))):
        i = int(np.argmax(dev - lookup_tol * (1 + scale)))
        raise Fail("lookup", f"{name}: its value map misses the target in {st.layout.labels[out_dims[i]]!r} "
                             f"by up to {dev[i]:.3g}")
    err = I.up_add(dev, I.up_mul(tv, spans))
    if st.unit:                                            # the weighted sum and W_O in float32
        err = I.up_add(err, floats.output_error(V, WO[:, out_dims], st.unit, st.n + 1))
    if numerical_mean:
        err = I.up_add(err, I.up_mul(2.0 ** -53, scale))     # float(i/w) against i/w
    row = HeadRow(layer, h, ", ".join(n.label for n in nodes), reduce, pairs, margin, spread, leak, tv,
                  float(err.max()))
    return row, nodes, out_dims, err


def value_parts(st: State, nodes: list, v_dims: np.ndarray, WV: np.ndarray,
                WO: np.ndarray, out_dims: list[int]) -> list[tuple[list, list[int], list[int]]]:
    """The head's value side split into independent parts: ``[(s-ops, columns, dims)]``, the
    columns indexing ``out_dims`` and the dims those of ``v_dims`` that the part's s-ops own.

    ``WV`` and ``WO`` are restricted to the head dimensions in use. A dimension ``d`` of the key
    reaches a column ``c`` when some head dimension ``e`` has ``WV[d, e] != 0`` and
    ``WO[e, c] != 0``; the written s-op owning ``c`` joins the sources of what it aggregates and
    of every dimension reaching ``c`` (union-find). Each column's output and target then depend on
    its own part's sources only (the other parts' dimensions reach it through no head dimension),
    so enumerating each part's states on its own gives the same maxima as the product of all of
    them: two aggregates of one selection in one head take ``a + b`` states instead of ``a * b``."""
    find, join = union_find()
    index = {id(n): j for j, n in enumerate(nodes)}
    col_node = [index[id(st.owner[d])] for d in out_dims]       # a width's scratch is its own
    for j, node in enumerate(nodes):
        aggregated = source_set(st, node.sop.sop) if isinstance(node.sop, Aggregate) else set()
        join(("node", j), *[("src", x) for x in aggregated])
    reach = (WV[v_dims] != 0) @ (WO[:, out_dims] != 0)                  # boolean: or of ands
    owned = [(i, int(d), st.owner[d]) for i, d in enumerate(v_dims) if st.owner[d] is not None]
    for i, _, owner in owned:
        join(*[("src", x) for x in source_set(st, owner.sop)],
             *[("node", col_node[c]) for c in np.nonzero(reach[i])[0]])
    parts: dict = {}
    for j, node in enumerate(nodes):
        sops = parts.setdefault(find(("node", j)), ([], [], []))[0]
        if isinstance(node.sop, Aggregate):
            sops.append(node.sop.sop)
    for c in range(len(out_dims)):
        parts[find(("node", col_node[c]))][1].append(c)
    for _, d, owner in owned:
        part = parts[find(("src", next(iter(source_set(st, owner.sop)))))]
        part[0].append(owner.sop)                    # a repeat adds no source (State.sources)
        part[2].append(d)
    return list(parts.values())


def _value_errors(st: State, nodes: list, reduce: str, parts: list, out_dims: list[int],
                  WV: np.ndarray, WO: np.ndarray, bos_x: I.Iv):
    """Per column of ``out_dims``: the value map's largest miss of its target over the key states
    and BOS, the largest target magnitude and the targets' range; and (float32) the largest
    magnitude of each head dimension of ``v``. ``parts``: each part's ``(sources, columns, dims)``
    (:func:`value_parts`, its s-ops' sources from ``State.sources``), enumerated on
    its own; a head dimension of another part holds only its constant terms there, so the maximum
    over the parts of ``|v|`` bounds it."""
    dev, scale, spans = (np.zeros(len(out_dims)) for _ in range(3))
    V = np.zeros(WV.shape[1])
    value_error = floats.value_error(floats.magnitudes(st), bos_x, WV, st.unit)
    for (names, ranges), cols, dims in parts:
        K = st.combos(names, ranges)
        part_dims = [out_dims[c] for c in cols]
        targets = _targets(st, nodes, reduce, K, part_dims)
        Xk = st.box(K, dims)
        keys = I.Iv(np.vstack([Xk.lo, bos_x.lo[None]]), np.vstack([Xk.hi, bos_x.hi[None]]))   # last row: BOS
        v = floats.widen(I.affine(keys, WV), value_error)
        O = I.matmul(v, WO[:, part_dims])
        dev[cols] = np.maximum(I.up(O.hi - targets), I.up(targets - O.lo)).max(0)
        scale[cols] = np.abs(targets).max(0)
        spans[cols] = I.up(targets.max(0) - targets.min(0))
        if st.unit:
            V = np.maximum(V, np.asarray(v.mag()).max(0))
    return dev, scale, spans, V


def _targets(st: State, nodes: list, reduce: str, K: list[dict], cols: list[int]) -> np.ndarray:
    """``[len(K) + 1, len(cols)]``: what the head must write on the residual dimensions ``cols``
    for each key state, the last row for BOS (the default; a selector width's scratch: 1)."""
    targets = np.zeros((len(K) + 1, len(cols)))
    if reduce == "width":
        targets[-1, :] = 1.0
        return targets
    for node in nodes:
        node_dims = set(st.layout.dims[id(node)])
        own = [i for i, c in enumerate(cols) if c in node_dims]
        if not own:
            continue
        agg, dims = node.sop, [cols[i] for i in own]
        if node.numerical and agg.reduce == "mean":
            _check_mean_values(st, node)
        for i, asg in enumerate(K):
            targets[i, own] = st.target(node, st.value(agg.sop, asg), dims)
        targets[-1, own] = st.target(node, agg.default, dims)
    return targets


def _check_mean_values(st: State, node) -> None:
    """A numerical mean of values in {0, 1}: its value set must hold every ``i/w`` (``w <= n``)
    and the default; other numerical means are not certified."""
    value = st.node(node.sop.sop)
    vals = value.values
    if vals is None or not set(vals) <= {0, 1}:
        raise CertifyError(f"{node.label!r}: a numerical mean of values outside {{0, 1}} is not certified")
    if node.values is None:               # the compiler leaves it unknown past MEAN_MAX_N positions
        raise CertifyError(f"{node.label!r}: its value set is unknown ({node.unknown}); not certified")
    have = set(node.values)
    missing = [(i, w) for w in range(1, st.n + 1) for i in range(w + 1) if i / w not in have]
    if missing or node.sop.default not in have:
        raise Fail("lookup", f"{node.label!r}: its value set lacks a mean {missing[:1] or node.sop.default}")
