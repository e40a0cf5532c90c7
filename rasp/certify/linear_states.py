"""An MLP that reads two s-ops only through their linear combination, checked per value of it.

``halted = Map(lambda d: d > 0, LinearSequenceMap(last_halt, last_sep, 1, -1))`` (program P) is
one MLP whose input states are the pairs ``(last_halt, last_sep)``: ``(n + 1)^2`` of them, a
million at 10^3 tokens, where its function and its weights see only the difference, ``2n + 1``
values. This module enumerates the MLP by that value instead, when the following hold (else the
caller enumerates the pairs, :mod:`rasp.certify.mlps`):

* the MLP's s-op is ``Map(f, g)`` with ``g`` exactly a :class:`rasp.tracr_ops.LinearSequenceMap`
  ``g = a x + b y`` of two different computed s-ops ``x`` and ``y`` (the program's own definition
  of ``g``, not the compiler's analysis of it), with integer factors and integer values, each held
  as itself in one dimension (numerical, or the first dimension of an ordinal code);
* the MLP reads only those two dimensions (each holds ``value + e``, ``|e| <= eps``),
  and their ``W_in`` rows are exactly ``a w`` and ``b w`` for one row ``w`` (checked in floats).

Then at every position the pre-activation is ``(a x_d + b y_d) w + b_in`` with
``a x_d + b y_d`` in ``[z - r, z + r]``, ``z = a x + b y`` (exact: integers below 2^52) and
``r >= |a| eps_x + |b| eps_y``, and the RASP value is ``f(g)`` with ``g = z``. One input state per
value ``z`` of the sum set ``a X + b Y`` (``X``, ``Y`` the value sets), with a witness pair
``(x, y)`` at which the target is computed by the program's own functions, covers every position.
"""
from __future__ import annotations

import numpy as np

from lengthgen.proof import interval as I
from rasp.core import Map
from rasp.certify.state import State
from rasp.tracr_ops import LinearSequenceMap

EXACT = 2.0 ** 52        # integers below this add and multiply exactly in float64
PAIR_LIMIT = 10 ** 9     # value pairs scanned to find the sum set (10^8 at 10^4 tokens: about a second)
ROWS = 1024              # values of x per vectorised block of the scan


def _integral(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number_var(st: State, sop) -> tuple[object, int] | None:
    """``(node, dim)`` when ``sop`` is a computed s-op with integer values whose dimension ``dim``
    holds the value itself (``layout.write``: a numerical s-op, or an ordinal code's first
    dimension); else ``None``."""
    node = st.node(sop)
    if st.source(node) != "var" or node.encoding not in ("numerical", "ordinal") or st.status.get(id(node)) != "full":
        return None
    dim = st.layout.dims[id(node)][0]
    if node.values is None or not all(_integral(v) for v in node.values):
        return None
    if any(st.layout.write(node, v).get(dim) != float(v) for v in node.values):
        return None
    return node, dim


def sum_set(a: int, xs: list[int], b: int, ys: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values ``z`` of ``a x + b y`` over ``x`` in ``xs``, ``y`` in ``ys`` (sorted, no repeats)
    and, for each, one pair ``(x, y)`` giving it."""
    X, Y = np.asarray(xs, dtype=np.int64), np.asarray(ys, dtype=np.int64)
    lo = min(a * X.min(), a * X.max()) + min(b * Y.min(), b * Y.max())
    hi = max(a * X.min(), a * X.max()) + max(b * Y.min(), b * Y.max())
    wit = np.full(int(hi - lo) + 1, -1, dtype=np.int64)          # a flat index i * len(Y) + j per value
    for s in range(0, len(X), ROWS):
        z = a * X[s:s + ROWS, None] + b * Y[None, :]
        wit[(z - lo).ravel()] = (np.arange(s, s + len(z))[:, None] * len(Y) + np.arange(len(Y))[None, :]).ravel()
    hit = np.nonzero(wit >= 0)[0]
    return hit + lo, X[wit[hit] // len(Y)], Y[wit[hit] % len(Y)]


def linear_states(st: State, node, units: list[int], in_dims: np.ndarray, W_in: np.ndarray
                  ) -> tuple[I.Iv, np.ndarray, list[dict], int] | None:
    """``(boxes [m, 1], w [1, units], assignments, m)``: the MLP's input states by the value of its
    linear argument, or ``None`` when the conditions of the module docstring do not hold."""
    if node.kind != "mlp" or type(node.sop) is not Map or len(node.sop.children) != 1:
        return None
    g = node.sop.children[0]
    if type(g) is not LinearSequenceMap or not all(float(f).is_integer() for f in (g.fst_fac, g.snd_fac)):
        return None
    x, y = (_number_var(st, c) for c in g.children)
    if x is None or y is None or x[0] is y[0] or not set(in_dims.tolist()) <= {x[1], y[1]}:
        return None
    a, b = int(g.fst_fac), int(g.snd_fac)
    xs, ys = list(x[0].values), list(y[0].values)
    big = max(abs(a) * max(map(abs, xs)) + abs(b) * max(map(abs, ys)), 1)
    if a == 0 or big >= EXACT or len(xs) * len(ys) > PAIR_LIMIT:
        return None
    rows = W_in[np.ix_([x[1], y[1]], units)]
    w = rows[0] / a
    if not (np.all(a * w == rows[0]) and np.all(b * w == rows[1])):
        return None
    z, wx, wy = sum_set(a, xs, b, ys)
    r = I.up_add(I.up_mul(abs(a), st.eps[x[1]]), I.up_mul(abs(b), st.eps[y[1]]))
    zf = z.astype(np.float64)
    boxes = I.Iv(I.down(zf - r)[:, None], I.up(zf + r)[:, None])
    asgs = [{id(x[0]): int(u), id(y[0]): int(v)} for u, v in zip(wx, wy)]
    return boxes, w[None, :], asgs, len(asgs)
