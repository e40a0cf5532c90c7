"""MLPs of a compiled program: exact lookup tables and linear maps.

tracr turns a Map into a one-hot lookup table and a numerical Map into a "discretising MLP"
(Lindner et al. 2023, Sec. 3.3). Here one construction covers every categorical or numerical
lookup (docs/turing-programs.md, "MLPs"): the inputs are folded into one scalar ``z`` (a
mixed-radix number of the inputs' one-hot positions or integer codes), whose possible values
``z_0 < z_1 < ...`` are known; the table ``z_i -> out(z_i)`` is written as the piecewise-linear
interpolation through its points,

    out(z) = out(z_0) + sum_i c_i * ReLU(z - z_i),   c_i = change of slope at z_i,

which is exact at every ``z_i`` (with integer codes and unit gaps every term is an integer, so
float64 computes it without rounding). One hidden unit per change of slope: a step of the
output costs two, a stretch where the output is constant or linear in ``z`` costs none.
An affine categorical map with integer values (:mod:`rasp.weights.affine`) is the identity
table ``z -> z`` on its value set with ``z = a*x + b*y + c`` read linearly from the residual:
one unit per value, however large its inputs' value sets; an affine numerical map needs no
MLP at all (its readers apply it).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from rasp.weights.graph import CompileError, Node, _op_name
from rasp.weights.values import unknown as _unknown
from rasp.weights.layout import Feature, Layout, add

ORDER_BUDGET = 2_000_000   # table entries sorted while choosing the order of a lookup's inputs


@dataclass
class MLPBlock:
    """Hidden units ``ReLU(w_in . x + bias)`` each writing ``w_out``; plus a constant output."""

    node: Node
    text: str
    units: list[tuple[Feature, float, Feature]] = field(default_factory=list)
    out_bias: Feature = field(default_factory=dict)


def _inputs(node: Node) -> list[Node]:
    return [p for d in node.deps for p in (d.parts if d.kind == "tuple" else [d])]


def _rebuild_args(node: Node, flat: tuple) -> tuple:
    """Regroup a flat tuple of part values into the function's arguments."""
    args, i = [], 0
    for d in node.deps:
        if d.kind == "tuple":
            args.append(tuple(flat[i:i + len(d.parts)]))
            i += len(d.parts)
        else:
            args.append(flat[i])
            i += 1
    return tuple(args)


def compile_mlp(node: Node, layout: Layout, plateau: float = 0.0) -> MLPBlock:
    """The MLP computing ``node`` (a Map, SequenceMap or selector-width decoder); ``plateau``: see
    :func:`_piecewise_linear`."""
    sop = node.sop
    if node.kind == "width":
        return _width_decoder(node, layout, plateau)
    if node.affine is not None and node.affine.integral and not node.numerical:
        return _affine_table(node, layout, plateau)
    ins = _inputs(node)
    numeric_ins = [n for n in ins if n.numerical]
    if numeric_ins and len(ins) > 1:
        raise CompileError(f"{_op_name(sop)}: a non-linear function of a numerical s-op and "
                           "another s-op has no exact lookup MLP (make the inputs categorical)")
    bad = next((n for n in ins if n.values is None), None)
    if bad is not None:
        raise CompileError(f"{_op_name(sop)}: no lookup table exists, because the value set of its "
                           f"input {bad.label!r} is unknown: {_unknown(bad)}")
    # z = sum_c stride_c * pos_c, with pos_c the value's position (one-hot) or code offset
    comps = [_component(n, layout) for n in ins]
    outs: dict[tuple, Any] = {}
    for flat in itertools.product(*(n.values for n in ins)):
        try:
            outs[flat] = sop.f(*_rebuild_args(node, flat))
        except Exception as exc:  # noqa: BLE001
            raise CompileError(f"{_op_name(sop)}: its function fails on {flat!r}: {exc}") from None
    strides = _best_strides(comps, outs)
    z: Feature = {}
    z_bias = 0.0
    for (pos, width, feat, bias), stride in zip(comps, strides):
        z = add(z, {d: c * stride for d, c in feat.items()})
        z_bias += stride * bias
    table: dict[float, Feature] = {}
    for flat, out in outs.items():
        zval = sum(comp[0][v] * st for comp, st, v in zip(comps, strides, flat))
        vec = layout.write(node, out)
        if zval in table and table[zval] != vec:
            raise CompileError(f"{_op_name(sop)}: two inputs share one numeric key; cannot tabulate")
        table[zval] = vec
    return _piecewise_linear(node, z, z_bias, table, f"MLP lookup table: {_describe_map(node)}", plateau)


def _component(n: Node, layout: Layout) -> tuple[dict, int, Feature, float]:
    """``(value -> position, width, feature, bias)``: ``feature . x + bias`` is the position."""
    if n.encoding == "onehot":
        pos = {v: float(i) for i, v in enumerate(n.values)}
        return pos, len(pos), {layout.value_dims[id(n)][v]: p for v, p in pos.items()}, 0.0
    if n.encoding == "ordinal":
        lo = min(layout.program.code(v) for v in n.values)
        pos = {v: float(layout.program.code(v) - lo) for v in n.values}
        return pos, int(max(pos.values())) + 1, layout.code(n), -float(lo)
    return {v: float(v) for v in n.values}, 1, layout.number(n), 0.0


def _best_strides(comps: list, outs: dict[tuple, Any]) -> list[int]:
    """Mixed-radix strides for the inputs, choosing which input is most significant so that the
    interpolation has the fewest output changes (hence hidden units); tried up to 50k entries.
    Every order of the inputs is tried while (orders x entries) stays within ``ORDER_BUDGET``;
    past it (many inputs, as in an n-gram cell of ``k`` flags: k! orders) only the ``k`` orders
    that make one input the most significant, so compiling stays O(k * entries)."""
    k = len(comps)
    orders: list = [None]
    if len(outs) <= 50_000:
        if math.factorial(k) * len(outs) <= ORDER_BUDGET:
            orders = list(itertools.permutations(range(k)))
        else:
            rest = list(reversed(range(k)))
            orders = [tuple(c for c in rest if c != top) + (top,) for top in rest]
    best: tuple[int, list[int]] | None = None
    for order in orders:
        order = order or tuple(reversed(range(len(comps))))
        strides, stride = [0] * len(comps), 1
        for c in order:                     # order[0] is the least significant input
            strides[c] = stride
            stride *= comps[c][1]
        if len(orders) == 1:
            return strides
        ranked = sorted(outs, key=lambda flat: sum(comps[c][0][flat[c]] * strides[c] for c in range(len(comps))))
        changes = sum(outs[a] != outs[b] for a, b in zip(ranked, ranked[1:]))
        if best is None or changes < best[0]:
            best = (changes, strides)
    return best[1]


def _piecewise_linear(node: Node, z: Feature, z_bias: float, table: dict[float, Feature], text: str,
                      plateau: float) -> MLPBlock:
    """The MLP of the module docstring for the table ``z_i -> out(z_i)``: the piecewise-linear
    interpolation ``out(z_0) + sum_i c_i ReLU(z - t_i)``, one unit per change of slope ``c_i``
    (a step costs two units; a run where the output is constant or linear in ``z`` costs none).

    ``plateau`` (``0 <= p < 1/2``): the output is held constant on at least ``p`` of each gap on
    either side of every point, and the change between two points made on a ramp in the middle of
    their gap whose width is the largest power of two within ``(1 - 2p)`` of the gap (so the slope
    ``change / width`` is exact and the ramp adds exactly the change); an input off its point by
    less than ``p`` times the gap gives the point's output exactly, so errors do not pass through
    the table. Two units per gap where the output changes. ``0`` is the interpolation through the
    points (the fewest units; errors pass on times the slope)."""
    points = sorted(table)
    block = MLPBlock(node, text, out_bias=dict(table[points[0]]))
    pieces: list[tuple[float, Feature]] = []        # (t, slope on the right of t), in order of t
    for a, b in zip(points, points[1:]):
        dims = set(table[a]) | set(table[b])
        delta = {d: table[b].get(d, 0.0) - table[a].get(d, 0.0) for d in dims}
        delta = {d: c for d, c in delta.items() if c != 0.0}
        if not plateau:
            pieces.append((a, {d: c / (b - a) for d, c in delta.items()}))
        elif delta:
            ramp = 2.0 ** math.floor(math.log2((1 - 2 * plateau) * (b - a)))   # a power of two: c / ramp
            start = a + ((b - a) - ramp) / 2                                   # is exact, and so is the
            pieces += [(a, {}), (start, {d: c / ramp for d, c in delta.items()}), (start + ramp, {})]  # sum
        else:
            pieces.append((a, {}))
    previous: Feature = {}
    for t, slope in pieces:
        change = {d: slope.get(d, 0.0) - previous.get(d, 0.0) for d in set(slope) | set(previous)}
        change = {d: c for d, c in change.items() if c != 0.0}
        if change:
            block.units.append((z, z_bias - t, change))
        previous = slope
    return block


def _affine_table(node: Node, layout: Layout, plateau: float) -> MLPBlock:
    """The identity table ``z -> z`` on the node's integer values, ``z = a*x + b*y + c`` (the
    verified affine form): its interpolation has one unit per change of slope, so at most one
    per value (an ordinal output's code is linear in ``z``, its square is not)."""
    form = node.affine
    z = add(*(add(layout.number(d), scale=float(a)) for d, a in zip(node.deps, form.coeffs)))
    table = {float(v): layout.write(node, v) for v in node.values}
    text = (f"MLP affine: {node.label} = {form.text([d.label for d in node.deps])} "
            f"(identity table on {len(node.values)} values)")
    return _piecewise_linear(node, z, float(form.const), table, text, plateau)


def _width_decoder(node: Node, layout: Layout, plateau: float) -> MLPBlock:
    """Selector width: the head left ``1/(w+1)`` in the scratch dimension; decode ``w``."""
    table = {1.0 / (v + 1): layout.write(node, v) for v in node.values}
    return _piecewise_linear(node, {layout.scratch(node): 1.0}, 0.0, table,
                             f"MLP decode w from 1/(w+1): {node.label}", plateau)


def _describe_map(node: Node) -> str:
    args = ", ".join(d.label for d in node.deps)
    return f"{node.label} = {type(node.sop).__name__}({args})"
