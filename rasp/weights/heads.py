"""Attention heads of a compiled program: selectors as scores, aggregates as value copies.

docs/turing-programs.md ("Attention") explains the construction; in short, with scale
``beta`` a selector's score is a sum of *atoms*, each 0 when its comparison holds and at most
``-beta`` when it fails (up to a per-query constant, which softmax ignores):

* ``key == query``: ``-beta * (c_k - c_q)**2 = beta*(2 c_k c_q - c_k**2) - beta*c_q**2`` in the
  integer codes (two head dimensions, any number of values: positions included); where
  ``beta * c**2`` would reach ``BINARY_FROM`` (:func:`binary_nodes`), ``(beta/2) * sum_j
  s_k,j * s_q,j`` over the codes' bits ``s = +-1`` instead (``(beta/2) B`` on a match, at least
  ``beta`` less otherwise), whose terms do not grow with the codes;
* any other predicate: a one-hot (query value x key value) table (tracr's categorical attention);
* And of selectors: the sum of their atoms.

Head dimensions whose one side is an integer multiple of another's share one (:func:`compact`):
the same scores and copies in fewer dimensions.

The compiler's BOS key scores ``beta/2`` below a full match (tracr's trick), so it wins exactly
when nothing is selected, and its value is the Aggregate's default. ``max``/``min`` add
``gamma * rank(value of the key)``, a hard-attention tie-break (with ``beta`` raised above
``gamma * rank range``); the rank is relative to the value set (``v - v_min`` for max,
``v_max - v`` for min), so it is never negative and the BOS key cannot out-score a selected key
whatever the values are, and ``gamma`` is ``MARGIN`` over the smallest gap between two values,
so the largest (smallest) selected value wins by at least ``MARGIN``.
A selector width attends to BOS *and* the selected keys equally and reads ``1/(w+1)`` from
BOS's value (tracr's selector-width trick); an MLP decodes ``w``.

**Leak bound.** In every head the intended keys out-score every other visible key by at least
``MARGIN`` (mean, max, min) or ``2*MARGIN`` (selector width), so the attention mass off the
intended keys is below ``n * exp(-MARGIN)`` for ``n`` visible keys; with ``MARGIN = 40`` and
``n = 10**5`` that is 4.2e-13.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rasp.core import Aggregate
from rasp.weights.graph import Atom, CompileError, Node, Program
from rasp.weights.values import unknown as _unknown
from rasp.weights.layout import Feature, Layout, add

MARGIN = 40.0     # score gap between intended and other keys (mean, max, min)
BOS_QUERY = 4 * MARGIN   # non-causal: the BOS query attends to BOS only
BINARY_FROM = 2.0 ** 40  # an == atom whose quadratic terms would reach this compares binary codes


@dataclass
class HeadSpec:
    """One head: per head dimension a (query feature, key feature) pair; per value dimension a
    (value feature at the key, output feature) pair."""

    node: Node
    text: str
    qk: list[tuple[Feature, Feature]] = field(default_factory=list)
    ov: list[tuple[Feature, Feature]] = field(default_factory=list)
    margin: float = MARGIN


def head_scale(node: Node, program: Program) -> float:
    """``beta``, the drop of a failing atom: ``2*MARGIN`` for mean heads and selector widths,
    ``2*(gamma*R + MARGIN)`` for max/min heads (``R``, ``gamma``: :func:`_rank_range`)."""
    sop = node.sop
    reduce = sop.reduce if isinstance(sop, Aggregate) else "width"
    if reduce not in ("max", "min"):
        return 2 * MARGIN
    rank_range, gamma = _rank_range(node.deps[0], program)
    return 2 * (gamma * rank_range + MARGIN)


def binary_nodes(program: Program, unit: float = 2.0 ** -53, binary_from: float | None = None) -> set[int]:
    """The ordinal s-ops (by ``id``) that also carry a binary code (:mod:`rasp.weights.layout`).

    An ``==`` atom whose quadratic form would reach ``BINARY_FROM`` (``beta * c**2``, ``c`` the
    largest code on either side) compares the codes' bits instead, so both its sides carry them,
    and so does every value an aggregate among them copies (the head copies the bits as well).
    An atom with a side that cannot carry them (a one-hot, numerical or folded s-op, or an
    aggregate of one) keeps the quadratic form, which the magnitude guard
    (:mod:`rasp.weights.precision`) still checks. ``BINARY_FROM`` is for float64 weights; for a
    format with unit roundoff ``unit`` the threshold scales with it (``2**11`` for float32), so
    that the quadratic terms round by the same absolute amount at most. A selector width uses bits
    at any size: its selected keys and BOS must score exactly alike, and an MLP that computes a
    code interpolates ``c**2`` with an error that grows with ``c``. ``binary_from``: the threshold
    for float64 (``None``: ``BINARY_FROM``; ``0``: every equality whose sides can carry bits uses them).
    """
    threshold = (BINARY_FROM if binary_from is None else binary_from) * 2.0 ** -53 / unit

    def copied(node: Node) -> list[Node] | None:       # node and what it copies, if all ordinal
        chain = [node]
        while chain[-1].kind == "attn":
            chain.append(chain[-1].deps[0])
        return chain if all(n.encoding == "ordinal" for n in chain) else None  # affine s-ops are not

    marked: set[int] = set()
    for node in program.nodes:
        beta = None                                      # the head's scale, once it is needed
        for atom in node.atoms:                          # only attention and width nodes have atoms
            if atom.kind != "eq" or copied(atom.key) is None or copied(atom.query) is None:
                continue
            if node.kind != "width":
                beta = head_scale(node, program) if beta is None else beta
                top = max(abs(program.code(v)) for side in (atom.key, atom.query) for v in side.values)
                if beta * top * top < threshold:
                    continue
            marked |= {id(n) for side in (atom.key, atom.query) for n in copied(side)}
    return marked


def compile_head(node: Node, layout: Layout, causal: bool) -> HeadSpec:
    """The head of an Aggregate, a selector width, or the non-causal ``length``."""
    sop = node.sop
    reduce = sop.reduce if isinstance(sop, Aggregate) else "width"
    value = node.deps[0] if isinstance(sop, Aggregate) else None
    beta = head_scale(node, layout.program)
    head = HeadSpec(node, _describe(node), margin=2 * MARGIN if reduce == "width" else MARGIN)
    level: Feature = {}
    for atom in node.atoms:
        level = add(level, _atom_dims(atom, head, layout, beta))
    if reduce in ("max", "min"):
        rank, gamma = _rank_feature(value, layout, reduce)
        head.qk.append(({layout.one: gamma}, rank))
    bos_q = add(level, {} if reduce == "width" else {layout.one: -beta / 2})
    if not causal:
        bos_q = add(bos_q, {layout.bos: BOS_QUERY})
    head.qk.append((bos_q, {layout.bos: 1.0}))
    _value_dims(node, value, head, layout)
    head.qk, head.ov = compact(head.qk), compact(head.ov)
    return head


def compact(pairs: list[tuple[Feature, Feature]]) -> list[tuple[Feature, Feature]]:
    """The same bilinear form ``sum_e a_e(x) b_e(y)`` in fewer head dimensions.

    Two pairs whose left features are integer multiples, ``a_j = r a_i`` with ``r`` an integer,
    share one dimension ``(a_i, b_i + r b_j)``; then the same for the right features. A selector's
    score and an aggregate's copy are unchanged in real arithmetic (the ``-beta * c_k**2`` terms of
    many ``==`` atoms, whose query feature is the constant, become one dimension), and ``d_head``,
    which every head of the model is padded to, shrinks (48 to 32 for program P's lookup at
    n-gram 16, docs/turing-programs.md, "Attention"). The factor is an
    integer so that integer coefficients stay integers: the precision guard
    (:mod:`rasp.weights.precision`) finds a head with integer features exact. A pair with an empty
    side contributes nothing and is dropped."""
    def merged(pairs: list[tuple[Feature, Feature]]) -> list[tuple[Feature, Feature]]:
        out: list[tuple[Feature, Feature]] = []
        by_dims: dict[tuple, list[int]] = {}
        for a, b in pairs:
            a = {d: c for d, c in a.items() if c != 0}
            b = {d: c for d, c in b.items() if c != 0}
            if not a or not b:
                continue
            for i in by_dims.setdefault(tuple(sorted(a)), []):
                base, summed = out[i]
                if (r := _multiple(a, base)) is not None:       # a = r * base
                    out[i] = (base, add(summed, add(b, scale=r)))
                    break
                if (r := _multiple(base, a)) is not None:       # base = r * a
                    out[i] = (a, add(b, add(summed, scale=r)))
                    break
            else:
                by_dims[tuple(sorted(a))].append(len(out))
                out.append((a, b))
        nonzero = [(a, {d: c for d, c in b.items() if c != 0}) for a, b in out]   # sums may cancel
        return [(a, b) for a, b in nonzero if b]

    flipped = merged([(b, a) for a, b in merged(pairs)])
    return [(a, b) for b, a in flipped]


def _multiple(a: Feature, base: Feature) -> float | None:
    """The integer ``r`` with ``a == r * base`` exactly, coordinate by coordinate, or None."""
    d0 = next(iter(base))
    r = a[d0] / base[d0]
    return r if r == int(r) and all(r * base[d] == c for d, c in a.items()) else None


def _atom_dims(atom: Atom, head: HeadSpec, layout: Layout, beta: float) -> Feature:
    """Add the atom's head dimensions; return its full-match score as a query feature."""
    one = layout.constant()
    if atom.kind == "false":
        head.qk.append((one, {layout.one: -beta}))
        return {}
    key, query = atom.key, atom.query
    if atom.kind == "eq":
        for n in (key, query):
            if n.encoding not in ("onehot", "ordinal"):
                raise CompileError(f"Select {atom.text!r}: == on the {n.encoding} s-op {n.label!r} "
                                   "is not compiled (make it categorical)")
        if layout.binary(key) and layout.binary(query):      # (beta/2) * sum_j s_q,j * s_k,j
            for q, k in zip(layout.binary(query), layout.binary(key)):
                head.qk.append(({q: beta / 2}, {k: 1.0}))
            return {layout.one: beta / 2 * len(layout.binary(key))}
        head.qk.append(({d: 2 * beta * c for d, c in layout.code(query).items()}, layout.code(key)))
        head.qk.append(({layout.one: -beta}, layout.square(key)))
        return {d: beta * c for d, c in layout.square(query).items()}
    # table atom: one head dimension per value on the smaller side
    table = {(qv, kv): bool(atom.predicate(kv, qv)) for qv in query.values for kv in key.values}
    if len(key.values) <= len(query.values):
        for kv in key.values:
            q = {layout.value_dims[id(query)][qv]: beta for qv in query.values if table[(qv, kv)]}
            if q:
                head.qk.append((q, layout.indicator(key, kv)))
    else:
        for qv in query.values:
            k = {layout.value_dims[id(key)][kv]: beta for kv in key.values if table[(qv, kv)]}
            if k:
                head.qk.append((layout.indicator(query, qv), k))
    return {layout.one: beta}


def _rank_range(value: Node, program: Program) -> tuple[float, float]:
    """The range ``R`` of a max/min head's rank and its scale ``gamma``: ``MARGIN`` over the
    smallest gap between two values (1 for integer codes and one-hot ranks), so that the largest
    (smallest) selected value out-scores the next one by at least ``MARGIN``."""
    if value.encoding == "numerical":
        if value.values is None:
            raise CompileError(f"{value.label!r}: max/min of a numerical s-op needs its value set "
                               f"(for the tie-break's scale), and it is unknown: {_unknown(value)}")
        nums = sorted({float(v) for v in value.values})
        gap = min((b - a for a, b in zip(nums, nums[1:])), default=1.0)
        return nums[-1] - nums[0], MARGIN / gap
    ordered = _ordered(value)
    if value.encoding == "onehot":
        return float(len(ordered) - 1), MARGIN
    codes = [program.code(v) for v in ordered]
    if any(b <= a for a, b in zip(codes, codes[1:])):
        raise CompileError(f"{value.label!r}: its integer codes do not follow the value order")
    return float(codes[-1] - codes[0]), MARGIN


def _ordered(value: Node) -> list:
    try:
        return sorted(value.values)
    except TypeError:
        raise CompileError(f"{value.label!r}: max/min needs mutually comparable values") from None


def _rank_feature(value: Node, layout: Layout, reduce: str) -> tuple[Feature, float]:
    """The key feature ``rank`` of a max/min head and its scale ``gamma`` (:func:`_rank_range`).

    ``rank`` is relative to the value set: ``v - v_min`` for max and ``v_max - v`` for min
    (numbers, integer codes or one-hot ordinals), so it lies in ``[0, R]`` and the winning key
    never scores below a full match of rank 0; ``BOS``'s ``-beta/2`` with
    ``beta = 2 (gamma R + MARGIN)`` then loses to every selected key.
    """
    sign = 1.0 if reduce == "max" else -1.0
    _, gamma = _rank_range(value, layout.program)
    if value.encoding == "numerical":
        nums = sorted({float(v) for v in value.values})
        low = nums[0] if reduce == "max" else nums[-1]
        return add(layout.number(value), {layout.one: -low}, scale=sign), gamma
    ordered = _ordered(value)
    if value.encoding == "onehot":
        last = len(ordered) - 1
        return ({layout.value_dims[id(value)][v]: float(i if reduce == "max" else last - i)
                 for i, v in enumerate(ordered)}, gamma)
    codes = [layout.program.code(v) for v in ordered]
    low = codes[0] if reduce == "max" else codes[-1]
    return add(layout.code(value), {layout.one: -float(low)}, scale=sign), gamma


def _value_dims(node: Node, value: Node | None, head: HeadSpec, layout: Layout) -> None:
    bos = layout.bos
    if value is None:                                   # selector width: read BOS's 1
        head.ov.append(({bos: 1.0}, {layout.scratch(node): 1.0}))
        return
    default = node.sop.default
    if node.encoding == "numerical":
        head.ov.append((add(layout.number(value), {bos: float(default)}), layout.write(node, 1.0)))
    elif node.encoding == "onehot":
        for v in value.values:
            feat = layout.indicator(value, v)
            if v == default:
                feat = add(feat, {bos: 1.0})
            head.ov.append((feat, layout.write(node, v)))
        if default not in value.values:
            head.ov.append(({bos: 1.0}, layout.write(node, default)))
    else:
        c = float(layout.program.code(default))
        dims = layout.dims[id(node)]
        head.ov.append((add(layout.code(value), {bos: c}), {dims[0]: 1.0}))
        head.ov.append((add(layout.square(value), {bos: c * c}), {dims[1]: 1.0}))
        for v, sign, out in zip(layout.binary(value), layout.signs(default), layout.binary(node)):
            head.ov.append((add({v: 1.0}, {bos: sign}), {out: 1.0}))


def _describe(node: Node) -> str:
    sop = node.sop
    atoms = " & ".join(f"{a.text}" for a in node.atoms) or "True"
    if isinstance(sop, Aggregate):
        return (f"{node.label} = Aggregate({atoms}, {node.deps[0].label}, reduce={sop.reduce}, "
                f"default={sop.default!r})")
    return f"{node.label} = SelectorWidth({atoms}) [attention to BOS + selected]"
