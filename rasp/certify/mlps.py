"""MLPs of a compiled program, checked as tables against their s-ops' own functions.

Hidden units are grouped by the s-op whose dimensions their ``W_out`` row writes (a unit writing
two s-ops, or an s-op not computed in this MLP, fails ``structure``); ``b_out`` joins the group
of the s-op owning its dimension. For each group the inputs are the s-ops owning the non-zero
rows of its ``W_in`` columns plus those its function reads; every state of their sources
(:mod:`rasp.certify.state`) gives a residual enclosure ``write + [-eps, eps]``, pushed through
``ReLU(x W_in + b_in) W_out + b_out`` in interval arithmetic (:mod:`lengthgen.proof.interval`)
and compared with ``layout.write(node, f(values))``, ``f`` the Map's or SequenceMap's own
function (a selector width: ``w`` itself, read from ``1/(w+1) + e`` in the scratch dimension).
A value of ``f`` outside the node's value set fails ``lookup`` (this checks the value sets'
closure); the largest deviation becomes the node's ``eps``, and one above ``LOOKUP_TOL`` times
``1 + |target|`` fails ``lookup`` (``FLOAT32_TOL`` for a float32 statement).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lengthgen.proof import interval as I
import rasp.certify.floats as floats
from rasp.certify.heads import tolerances
from rasp.certify.linear_states import linear_states
from rasp.certify.state import COMBO_BUDGET, Fail, State

CHUNK = 20_000     # input states pushed through one MLP at once


@dataclass
class MLPRow:
    """One MLP table: the s-op it computes, its input states and the error it leaves."""

    layer: int
    writes: str
    units: int
    states: int
    error: float


def _groups(st: State, layer: int, W_out: np.ndarray, b_out: np.ndarray) -> dict[int, tuple]:
    """``id(node) -> (node, units, dims)`` for the s-ops this MLP computes."""
    groups: dict[int, tuple] = {}
    here = [n for n in st.prog.nodes if n.kind in ("mlp", "width") and n.slot == 2 * layer + 1]
    for node in here:
        dims = st.value_dims(node)
        groups[id(node)] = (node, [], dims)

    def group_of(dims: np.ndarray, what: str) -> list[int]:
        owners = st.owners(dims)
        node = owners[0] if len(owners) == 1 and all(st.owner[x] is not None for x in dims) else None
        if node is None or id(node) not in groups or not set(dims.tolist()) <= set(groups[id(node)][2]):
            mine = set(groups[id(node)][2]) if node is not None and id(node) in groups else set()
            label = st.layout.labels[int(next((x for x in dims if x not in mine), dims[0]))]
            raise Fail("structure", f"layer {layer} MLP: {what} writes {label!r}, which is not the "
                                    f"value of one s-op computed by this MLP")
        return groups[id(node)][1]

    for u in np.nonzero(np.any(W_out != 0, axis=1))[0]:
        group_of(np.nonzero(W_out[u])[0], f"unit {u}").append(int(u))
    for x in np.nonzero(b_out)[0]:
        group_of(np.array([x]), "b_out")
    return groups


def check_mlps(st: State, layer: int) -> list[tuple[MLPRow, object, list[int], np.ndarray]]:
    """Certify the MLP of ``layer``; per s-op its row, its dimensions and their new ``eps``."""
    m = f"blocks.{layer}.mlp."
    W_in, b_in, W_out, b_out = (st.p[m + k] for k in ("W_in", "b_in", "W_out", "b_out"))
    out = []
    rounding = floats.mlp_error(floats.magnitudes(st), W_in, b_in, W_out, b_out, st.unit)
    for node, units, dims in _groups(st, layer, W_out, b_out).values():
        in_dims = np.nonzero(np.any(W_in[:, units] != 0, axis=1))[0] if units else np.array([], dtype=np.int64)
        reduced = linear_states(st, node, units, in_dims, W_in) if units else None
        if reduced is not None:                    # by the value of a linear argument (halted)
            boxes, W_read, states, count = reduced
        else:
            sops = [o.sop for o in st.owners(in_dims)]
            sops += [node.sop] if node.kind == "width" else list(node.sop.children)
            names, ranges = st.sources(sops)
            count = st.count(ranges)
            if count > COMBO_BUDGET:
                raise Fail("budget", f"layer {layer} MLP of {node.label!r}: {count} input states, over "
                                     f"COMBO_BUDGET = {COMBO_BUDGET}")
            states = st.combos(names, ranges)
            W_read = W_in[in_dims][:, units]
        dev = np.zeros(len(dims))
        peak = np.zeros(len(dims))
        for s in range(0, len(states), CHUNK):
            part = states[s:s + CHUNK]
            target = np.array([st.target(node, _want(st, node, asg), dims) for asg in part]).reshape(len(part), len(dims))
            got = I.Iv.exact(np.broadcast_to(b_out[dims], target.shape))
            if units:
                X = boxes[s:s + CHUNK] if reduced is not None else _read_box(st, part, in_dims)
                got = enclose(X, W_read, b_in[units], W_out[np.ix_(units, dims)], b_out[dims])
            got = floats.widen(got, rounding[dims])             # float32: the MLP's own rounding
            dev = np.maximum(dev, np.maximum(I.up(got.hi - target), I.up(target - got.lo)).max(0))
            peak = np.maximum(peak, np.abs(target).max(0))
        lookup_tol = tolerances(st)[1]
        if np.any(~(dev <= lookup_tol * (1 + peak))):
            i = int(np.argmax(dev - lookup_tol * (1 + peak)))
            raise Fail("lookup", f"layer {layer} MLP of {node.label!r}: misses the table in "
                                 f"{st.layout.labels[dims[i]]!r} by up to {dev[i]:.3g}")
        row = MLPRow(layer, node.label, len(units), count, float(dev.max(initial=0.0)))
        out.append((row, node, dims, dev))
    return out


def enclose(X: I.Iv, W_in: np.ndarray, b_in: np.ndarray, W_out: np.ndarray, b_out: np.ndarray,
            rows: int = 64) -> I.Iv:
    """Enclosure of ``ReLU(x W_in + b_in) W_out + b_out`` for ``x`` in each row's box.

    Per row, a unit whose pre-activation is ``>= 0`` on the whole box is linear there and one
    that is ``<= 0`` is 0, so on the box the MLP equals ``x M + c`` plus the straddling units,
    with ``M = W_in[:, A] W_out[A]`` and ``c = b_in[A] W_out[A]`` over the active units ``A``
    (each enclosed in interval arithmetic). Evaluating ``x M`` rather than the units one by one
    lets the slopes of a piecewise-linear table cancel, so the enclosure's width is that of the
    table's local slope times the box, not the sum of every unit's (the dependency problem of
    naive interval evaluation); a straddling unit adds ``[0, max pre] W_out``."""
    pre = I.affine(X, W_in, b_in)
    out_lo = np.empty((X.shape[0], W_out.shape[1]))
    out_hi = np.empty_like(out_lo)
    M_all, c_all = _active_maps(pre.lo >= 0, W_in, b_in, W_out, rows)
    for s in range(0, X.shape[0], rows):
        act = pre.lo[s:s + rows] >= 0
        mid = (pre.hi[s:s + rows] > 0) & ~act
        M, c = M_all[s:s + rows], c_all[s:s + rows]
        x = X[s:s + rows]
        lin = I.matmul(I.Iv(x.lo[:, None, :], x.hi[:, None, :]), M)          # [r, 1, d_out]
        tail = I.matmul(I.Iv(np.zeros_like(mid, dtype=float), np.where(mid, pre.hi[s:s + rows], 0.0)), W_out)
        res = I.Iv(lin.lo[:, 0], lin.hi[:, 0]) + c + tail + b_out
        out_lo[s:s + rows], out_hi[s:s + rows] = res.lo, res.hi
    return I.Iv(out_lo, out_hi)


SPLIT = 134217729.0          # 2^27 + 1, Veltkamp's splitting constant for float64


def _two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's TwoProduct: ``p + e == a*b`` exactly (no overflow or underflow: checked by the caller)."""
    p = a * b
    ca, cb = SPLIT * a, SPLIT * b
    ah, bh = ca - (ca - a), cb - (cb - b)
    al, bl = a - ah, b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _sum(x: np.ndarray) -> I.Iv:
    """Enclosure of the exact sum of ``x`` along axis 1: a pairwise tree of Knuth's TwoSum
    (``s + t == a + b`` exactly) leaves one float plus the exact errors ``t``, whose sum is
    enclosed by :meth:`Iv.sum` (Higham's bound), so the radius is about ``u`` times the errors,
    not ``u`` times the terms (compensated summation, Ogita, Rump and Oishi 2005)."""
    errs = []
    while x.shape[1] > 1:
        if x.shape[1] % 2:
            x = np.concatenate([x, np.zeros_like(x[:, :1])], axis=1)
        a, b = x[:, 0::2], x[:, 1::2]
        s = a + b
        bb = s - a
        errs.append((a - (s - bb)) + (b - bb))
        x = s
    rest = I.Iv.exact(np.concatenate(errs, axis=1) if errs else np.zeros_like(x)).sum(axis=1)
    return rest + x[:, 0]


def _prefix_sums(p: np.ndarray, e: np.ndarray) -> I.Iv:
    """Enclosures of ``sum_{i<j} (p_i + e_i)`` for ``j = 0..U`` (rows): a running TwoSum of the
    ``p`` leaves ``s_j`` plus the exact errors ``t_i``; the prefix sums of the ``t`` and ``e``
    (``2j`` terms) are enclosed with Higham's bound ``2 gamma_2j sum |terms|`` (any order)."""
    U, K = p.shape
    s = np.zeros((U + 1, K))
    t = np.zeros((U, K))
    acc = np.zeros(K)
    for i in range(U):
        new = acc + p[i]
        bb = new - acc
        t[i] = (acc - (new - bb)) + (p[i] - bb)
        acc = new
        s[i + 1] = acc
    pair = np.stack([t, e], axis=1).reshape(2 * U, K)
    cs = np.vstack([np.zeros((1, K)), np.cumsum(pair, axis=0)[1::2]])
    mag = np.vstack([np.zeros((1, K)), np.cumsum(np.abs(pair), axis=0)[1::2]])
    n = 2 * np.arange(U + 1, dtype=float)[:, None]
    err = I.up(I.up(mag * I.up_sum_factor(2 * U)) * (2 * I.gamma(n)))
    err = I.up_add(np.where(err == 0, 0.0, np.nextafter(err, np.inf)), n * 2 * I.TINY)
    return I.Iv.exact(s) + I.Iv(I.down(cs - err), I.up(cs + err))


def _active_maps(act: np.ndarray, W_in: np.ndarray, b_in: np.ndarray, W_out: np.ndarray,
                 rows: int) -> tuple[I.Iv, I.Iv]:
    """``M_r = W_in[:, A_r] W_out[A_r]`` and ``c_r = b_in[A_r] W_out[A_r]`` for each row's active
    units, enclosed with error-free products and compensated sums: a table's slope changes cancel
    in these sums, and plain interval products would be as wide as ``u`` times their sizes."""
    A = np.concatenate([W_in, b_in[None]], axis=0)                       # [d_in + 1, U]
    a, b = np.broadcast_arrays(A.T[:, :, None], W_out[:, None, :])        # [U, d_in + 1, d_out]
    nz = (a != 0) & (b != 0)
    big, small = 2.0 ** 900, 2.0 ** -900
    if np.any(np.abs(A) > big) or np.any(np.abs(W_out) > big) or np.any(nz & (np.abs(a * b) < small)):
        M = I.matmul(W_in[None] * act[:, None, :], W_out)
        return M, I.matmul(b_in[None] * act, W_out)
    p, e = _two_product(a, b)
    p, e = np.where(nz, p, 0.0).reshape(len(p), -1), np.where(nz, e, 0.0).reshape(len(e), -1)
    order = np.argsort(-act.sum(0), kind="stable")
    nested = act[:, order]
    if np.all(nested[:, :-1] >= nested[:, 1:]):       # active sets are prefixes of one order
        total = _prefix_sums(p[order], e[order])[nested.sum(1)]
    else:
        parts = [_sum(a[:, :, None] * p[None]) + I.Iv.exact(a[:, :, None] * e[None]).sum(axis=1)
                 for a in (act[s:s + rows] for s in range(0, len(act), rows))]
        total = I.Iv(np.concatenate([x.lo for x in parts]), np.concatenate([x.hi for x in parts]))
    shape = (act.shape[0], W_in.shape[0] + 1, W_out.shape[1])
    lo, hi = total.lo.reshape(shape), total.hi.reshape(shape)
    return I.Iv(lo[:, :-1], hi[:, :-1]), I.Iv(lo[:, -1], hi[:, -1])


def _read_box(st: State, states: list[dict], in_dims: np.ndarray) -> I.Iv:
    """The residual enclosures of ``states`` on the dimensions the MLP reads."""
    X = st.box(states, in_dims)
    return I.Iv(X.lo[:, in_dims], X.hi[:, in_dims])


def _want(st: State, node, asg: dict):
    """The RASP value of ``node`` at a position in the state ``asg``."""
    if node.kind == "width":
        return asg[id(node)]
    return st.apply(node.sop, asg)
