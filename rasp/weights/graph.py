"""Static analysis for the weights compiler: nodes, value sets, encodings, selector atoms, layers.

This is tracr's ``rasp_to_graph`` + ``basis_inference`` + layer allocation (Lindner et al. 2023,
"Tracr: Compiled Transformers as a Laboratory for Interpretability", Sec. 3), adapted to the
mini-RASP of :mod:`rasp.core` and explained in docs/turing-programs.md ("Compiling RASP to
weights"):

* every s-op becomes a :class:`Node` with a *kind* (computed in the token embedding, in the
  position embedding, by an MLP, by an attention head, or a tuple "view" of other nodes) and
  an *encoding* (``onehot``: one residual dimension per value, tracr's categorical;
  ``ordinal``: the value's integer code ``x`` and ``x**2`` in two dimensions; ``numerical``:
  one dimension holding the number; ``tuple``: the parts' own dimensions);
* value sets are inferred from ``vocab`` and ``max_seq_len`` as tracr does, by evaluating
  each Map / SequenceMap on every input value (or pair of values);
* selectors become lists of :class:`Atom` (an And is a sum of atoms; :mod:`rasp.weights.selectors`);
* each node gets the earliest sub-layer slot after its inputs (slot ``2l`` is the attention of
  layer ``l``, ``2l + 1`` its MLP): longest-path scheduling, so independent ops share a layer.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from dataclasses import dataclass, field
from typing import Any, Sequence

from rasp import lib
from rasp.core import (Aggregate, Encoding, Full, IndicesType, LengthType, Map, SelectorWidth,
                       SequenceMap, SOp, TokensType, walk)
from rasp.errors import RASPError
from rasp.evaluate import evaluate
from rasp.tracr_ops import ConstantSOp
from rasp.weights.affine import Affine, affine_form, affine_values, fold_chains
from rasp.weights.order import bitwise_width, is_order_width
from rasp.weights.selectors import Atom, causal_index_constant, plan_attention, selection_key, selector_inputs
from rasp.weights.values import (CompileError, CompileLimitError, integral, mean_unknown,  # noqa: F401
                                  mean_values, sort_values)
from rasp.weights.values import unknown as _unknown

ONEHOT_MAX = 32        # categorical value sets up to this size are one-hot (tracr's layout)
TABLE_MAX = 512        # ... and up to this size when an order/custom predicate needs a table
ORDER_TABLE_MAX = 128  # a selector width of an order comparison over more values counts by bits
LOOKUP_MAX = 400_000   # entries of one MLP lookup table (product of its inputs' value sets)
TUPLE_FUNCS = (lib.tuple_pair, lib.tuple_singleton, lib.tuple_append)


def _op_name(sop: Any) -> str:
    return f"{type(sop).__name__} {sop.label!r}"


@dataclass(eq=False)
class Node:
    """One s-op of the program as the compiler sees it (see the module docstring)."""

    sop: SOp
    label: str
    kind: str                       # token | position | mlp | attn | width | tuple | linear | folded
    deps: list["Node"] = field(default_factory=list)
    parts: list["Node"] = field(default_factory=list)   # tuple nodes: flattened components
    values: list | None = None      # sorted distinct values; None = unknown (numerical only)
    encoding: str = ""              # onehot | ordinal | numerical | tuple
    slot: int = -1                  # -1: embedding; 2l: attention of layer l; 2l+1: its MLP
    needs_table: bool = False
    table: dict | None = None       # embedded nodes: token id / position -> value
    atoms: list["Atom"] = field(default_factory=list)   # attn / width nodes
    affine: Affine | None = None    # a verified affine Map/SequenceMap (rasp.weights.affine)
    unknown: str = ""               # why ``values`` is None

    @property
    def numerical(self) -> bool:
        return self.encoding == "numerical"

    def __repr__(self) -> str:
        return f"Node({self.label}, {self.kind}, {self.encoding})"


class Program:
    """The analysed program: nodes in topological order and the global integer codes."""

    def __init__(self, output: SOp, vocab: Sequence[Any], max_seq_len: int, causal: bool,
                 onehot_max: int = ONEHOT_MAX) -> None:
        if not isinstance(output, SOp):
            raise CompileError(f"a program is an s-op, got {output!r}")
        self.output_sop, self.vocab, self.n, self.causal = output, list(vocab), max_seq_len, causal
        self.onehot_max = onehot_max
        self.nodes: list[Node] = []
        self.by_uid: dict[int, Node] = {}
        labels: set[str] = set()
        for expr in walk(output):
            if isinstance(expr, SOp):
                label = expr.label if expr.label not in labels else f"{expr.label}#{expr.uid}"
                labels.add(label)
                node = self._classify(expr, label)
                self.nodes.append(node)
                self.by_uid[expr.uid] = node
        for node in self.nodes:
            self._infer_values(node)
        self._unroll_order_widths()
        fold_chains(self.nodes, self.by_uid[output.uid], selector_inputs(self.nodes))
        for node in list(self.nodes):
            if node.kind in ("attn", "width"):
                plan_attention(self, node)
        self._choose_encodings()
        self.codes = self._assign_codes()
        self._schedule()
        self.output = self.by_uid[output.uid]
        if self.output.kind == "tuple":
            raise CompileError(f"the output {_op_name(output)} is tuple-valued; decode one part")

    # ------------------------------------------------------------------ classification
    def _classify(self, sop: SOp, label: str) -> Node:
        get = lambda s: self.by_uid[s.uid]  # noqa: E731
        if isinstance(sop, TokensType):
            return Node(sop, label, "token")
        if isinstance(sop, (IndicesType, ConstantSOp)):
            return Node(sop, label, "position")
        if isinstance(sop, LengthType):
            return Node(sop, label, "position" if self.causal else "width")
        if isinstance(sop, Full):
            return Node(sop, label, "token")
        if isinstance(sop, (Map, SequenceMap)):
            deps = [get(sop.inner)] if isinstance(sop, Map) else [get(sop.fst), get(sop.snd)]
            if sop.f in TUPLE_FUNCS:
                parts = [p for d in deps for p in (d.parts if d.kind == "tuple" else [d])]
                return Node(sop, label, "tuple", deps=deps, parts=parts)
            sources = {k for d in deps for k in _sources(d)}
            kind = "mlp"
            if sources <= {"token", "const"}:
                kind = "token"
            elif sources <= {"position", "const"}:
                kind = "position"
            return Node(sop, label, kind, deps=deps)
        if isinstance(sop, Aggregate):
            return Node(sop, label, "attn", deps=[get(sop.sop)])
        if isinstance(sop, SelectorWidth):
            return Node(sop, label, "width")
        raise CompileError(f"{_op_name(sop)}: no weights for this kind of s-op")

    def _unroll_order_widths(self) -> None:
        """An order width over more than ``ORDER_TABLE_MAX`` values becomes a sum of per-bit
        widths (:mod:`rasp.weights.order`), whose nodes take its place: past about 100 values that
        is smaller than the one-hot table, whose ``V`` dimensions every layer carries."""
        for node in list(self.nodes):
            if node.kind != "width" or not is_order_width(node.sop):
                continue
            sel = node.sop.selector
            key, query = self.by_uid[sel.keys.uid], self.by_uid[sel.queries.uid]
            if (key.values is None or query.values is None       # tuples have none either
                    or max(len(key.values), len(query.values)) <= min(ORDER_TABLE_MAX, TABLE_MAX)
                    or causal_index_constant(self, sel) is not None):
                continue
            new = bitwise_width(node.sop, key.values, query.values, max(node.values))
            for expr in walk(new):
                if isinstance(expr, SOp) and expr.uid not in self.by_uid:
                    self.derive(expr, node)
            final = self.by_uid[new.uid]
            self.nodes.remove(node)
            for other in self.nodes:
                other.deps = [final if d is node else d for d in other.deps]
                other.parts = [final if p is node else p for p in other.parts]
            self.by_uid[node.sop.uid] = final

    def derive(self, sop: SOp, before: Node) -> Node:
        """Add a node for ``sop``, an s-op the compiler builds from the program's own (the tuple
        of the s-ops an Or/Not compares), just before the node ``before``."""
        node = self._classify(sop, sop.label)
        self._infer_values(node)
        self.nodes.insert(self.nodes.index(before), node)
        self.by_uid[sop.uid] = node
        return node

    # ------------------------------------------------------------------ value sets
    def _infer_values(self, node: Node) -> None:
        sop = node.sop
        if node.kind == "tuple":
            return
        if node.kind in ("token", "position"):
            self._embed_table(node)
            return
        if isinstance(sop, (LengthType, SelectorWidth)):
            node.values = list(range(1 if isinstance(sop, LengthType) else 0, self.n + 1))
            return
        if isinstance(sop, Aggregate):
            value = node.deps[0]
            if value.kind == "tuple":
                raise CompileError(f"{_op_name(sop)}: aggregating a tuple-valued s-op is not "
                                   "supported; aggregate each part")
            if value.values is None:
                node.values = None
                node.unknown = f"it aggregates {value.label!r}, whose value set is unknown: {value.unknown}"
            elif sop.encoding == Encoding.NUMERICAL and sop.reduce == "mean":
                node.values = mean_values(value.values, sop.default, self.n)
                if node.values is None:
                    node.unknown = mean_unknown(value.label, value.values, self.n)
            else:
                node.values = sort_values(list(value.values) + [sop.default])
            return
        node.values = self._map_values(node)

    def _embed_table(self, node: Node) -> None:
        """Values of an embedded node for every token (token kind) or position (position kind)."""
        try:
            if node.kind == "token":
                col = evaluate(node.sop, self.vocab, causal=False).column(node.sop)
                node.table = dict(enumerate(col))
            else:
                col = evaluate(node.sop, [self.vocab[0]] * self.n, causal=True).column(node.sop)
                node.table = dict(enumerate(col))
        except RASPError as exc:
            raise CompileError(f"{_op_name(node.sop)}: cannot tabulate it over the "
                               f"{'vocabulary' if node.kind == 'token' else 'positions'}: {exc}") from None
        node.values = sort_values(node.table.values())

    def _map_values(self, node: Node) -> list | None:
        sop = node.sop
        domains = [self._domain(d) for d in node.deps]
        if node.kind == "mlp" and all(d.kind != "tuple" for d in node.deps):
            node.affine = affine_form(sop, domains, LOOKUP_MAX)
            if node.affine is not None and sop.encoding == Encoding.NUMERICAL:
                node.kind = "linear"          # folded into its readers (rasp.weights.affine)
        shared = self._shared_mean_values(node) if node.kind == "linear" else None
        if shared is not None:
            return shared
        if any(d is None for d in domains):
            bad = next(d for d, dom in zip(node.deps, domains) if dom is None)
            why = f"the value set of its input {bad.label!r} is unknown: {_unknown(bad)}"
            if node.kind == "linear":
                node.unknown = f"it is a linear function of {bad.label!r}, and {why}"
                return None
            raise CompileError(f"{_op_name(sop)}: no lookup table exists, because {why}")
        size = math.prod(len(d) for d in domains)
        if size > LOOKUP_MAX:
            values = affine_values(node.affine, domains) if node.affine is not None else None
            if values is not None:
                return values
            if node.kind == "linear":
                node.unknown = (f"its value set would take {size} evaluations (more than "
                                f"LOOKUP_MAX = {LOOKUP_MAX}) and its values are not all integers")
                return None
            raise CompileLimitError(f"{_op_name(sop)}: its lookup table would have {size} entries "
                                    f"(the product of its inputs' value-set sizes "
                                    f"{' x '.join(str(len(d)) for d in domains)}), over the limit "
                                    f"LOOKUP_MAX = {LOOKUP_MAX}; factor the function through smaller "
                                    "s-ops", what=f"an MLP lookup table of {size} entries",
                                    limit_name="LOOKUP_MAX", limit=LOOKUP_MAX)
        out = []
        for args in itertools.product(*domains):
            try:
                out.append(sop.f(*args))
            except Exception as exc:  # noqa: BLE001 - reported with the op's name
                raise CompileError(f"{_op_name(sop)}: its function fails on the input value(s) "
                                   f"{args!r}: {type(exc).__name__}: {exc}") from None
        return sort_values(out)

    def _shared_mean_values(self, node: Node) -> list | None:
        """Values of ``c0 + sum_i c_i * mean_i`` when every ``mean_i`` is a numerical mean, over
        one and the same selection, of integers in ``[lo_i, hi_i]``; else ``None``.

        One selection gives one width ``w`` per position, so ``mean_i = a_i / w`` with integers
        ``a_i`` in ``[w lo_i, w hi_i]``: the values are ``c0 + M / (D w)`` with ``D`` the common
        denominator of the ``c_i`` and ``M = sum_i (D c_i) a_i`` an integer between the corners,
        plus ``c0 + sum_i c_i * default_i`` where nothing is selected. A superset of the reachable
        values, about ``N**2`` of them where the product of the means' own value sets would have
        ``N**4`` (``opens - closes`` of tracr's ``make_pair_balance``)."""
        deps, form = node.deps, node.affine
        if not all(d.kind == "attn" and d.sop.encoding == Encoding.NUMERICAL and d.sop.reduce == "mean" for d in deps):
            return None
        if len({selection_key(d.sop.selector) for d in deps}) != 1:
            return None
        sources = [d.deps[0].values for d in deps]
        if any(v is None or not v or any(integral(x) is None for x in v) for v in sources):
            return None
        denominator = math.lcm(*(c.denominator for c in form.coeffs))
        weights = [int(c * denominator) for c in form.coeffs]
        lows = [min(e * integral(x) for x in v) for e, v in zip(weights, sources)]
        highs = [max(e * integral(x) for x in v) for e, v in zip(weights, sources)]
        if sum((sum(highs) - sum(lows)) * w + 1 for w in range(1, self.n + 1)) > LOOKUP_MAX:
            return None
        defaults = [d.sop.default for d in deps]
        if any(integral(x) is None and not isinstance(x, float) for x in defaults):
            return None
        out = {form(*defaults)}
        for w in range(1, self.n + 1):
            out |= {form.const + Fraction(m, denominator * w) for m in range(sum(lows) * w, sum(highs) * w + 1)}
        return sort_values(float(v) for v in out)

    def _domain(self, node: Node) -> list | None:
        """The values a Map/SequenceMap argument can take (tuples: the product of the parts)."""
        if node.kind != "tuple":
            return node.values
        if any(p.values is None for p in node.parts):
            return None
        size = math.prod(len(p.values) for p in node.parts)
        if size > LOOKUP_MAX:
            raise CompileLimitError(f"{_op_name(node.sop)}: the tuple has {size} possible values "
                                    f"(the product {' x '.join(str(len(p.values)) for p in node.parts)} "
                                    f"of its parts' value-set sizes), over the limit LOOKUP_MAX = "
                                    f"{LOOKUP_MAX} of one lookup table",
                                    what=f"an MLP lookup table of {size} entries",
                                    limit_name="LOOKUP_MAX", limit=LOOKUP_MAX)
        return [tuple(t) for t in itertools.product(*(p.values for p in node.parts))]

    # ------------------------------------------------------------------ encodings and codes
    def _choose_encodings(self) -> None:
        for node in reversed(self.nodes):   # a compared aggregate is one-hot, and so is what it copies
            if node.kind == "attn" and node.needs_table:
                node.deps[0].needs_table = True
        for node in self.nodes:
            if node.kind == "tuple":
                node.encoding = "tuple"
            elif node.kind == "folded":
                node.encoding = "folded"
            elif node.sop.encoding == Encoding.NUMERICAL:
                node.encoding = "numerical"
                if node.needs_table:
                    raise CompileError(f"{_op_name(node.sop)}: an order or custom comparison on a "
                                       "numerical s-op is not compiled (make it categorical)")
            else:
                size = len(node.values)
                small = size <= self.onehot_max or (node.needs_table and size <= TABLE_MAX)
                node.encoding = "onehot" if small else "ordinal"
                if node.needs_table and not small:
                    raise CompileLimitError(
                        f"{_op_name(node.sop)} has {size} values; an order or custom comparison on "
                        f"it needs a one-hot table, limited to TABLE_MAX = {TABLE_MAX} values",
                        what=f"a one-hot comparison table over {size} values",
                        limit_name="TABLE_MAX", limit=TABLE_MAX)
        for node in self.nodes:          # an aggregate keeps its value's layout kind
            if node.kind == "attn" and node.encoding in ("onehot", "ordinal"):
                value = node.deps[0]
                if value.encoding in ("onehot", "ordinal"):
                    node.encoding = value.encoding

    def _assign_codes(self) -> dict:
        """Integer codes shared by every s-op, so that == compares codes: a value equal to an
        integer (``1``, ``True``, ``1.0``, ``Fraction(2, 2)``) is coded as that integer, as
        Python's ``==`` identifies them; every other value gets its own code below them (below
        ``min(0, smallest integer)``), so that a program's special values (``None``, a marker
        string) keep small codes however far its integers reach (indices up to ``max_seq_len``)."""
        others = set()
        bottom = 0
        for node in self.nodes:
            if node.encoding in ("onehot", "ordinal"):
                for v in node.values:
                    i = integral(v)
                    if i is not None:
                        bottom = min(bottom, i)
                    else:
                        others.add(v)
        return {v: bottom - 1 - i for i, v in enumerate(sort_values(others))}

    def code(self, value: Any) -> int:
        i = integral(value)
        return i if i is not None else self.codes[value]

    # ------------------------------------------------------------------ layers
    def _schedule(self) -> None:
        for node in self.nodes:
            if node.kind in ("token", "position"):
                node.slot = -1
                continue
            ready = max([d.slot for d in node.deps] + [-1])
            if node.kind in ("tuple", "linear", "folded"):      # no layer of its own
                node.slot = ready
                continue
            slot = ready + 1                            # first sub-layer after the inputs ...
            if (slot % 2 == 0) == (node.kind == "mlp"):  # ... of the right kind (MLP: odd)
                slot += 1
            node.slot = slot + 1 if node.kind == "width" else slot   # width: head, then MLP

    @property
    def n_layers(self) -> int:
        return max([n.slot for n in self.nodes] + [0]) // 2 + 1


def _sources(node: Node) -> set[str]:
    if node.kind == "tuple":
        return {k for p in node.parts for k in _sources(p)}
    if node.kind in ("token", "position"):
        if isinstance(node.sop, Full):
            return {"const"}
        return {node.kind} if not node.deps else {k for d in node.deps for k in _sources(d)}
    return {"computed"}
