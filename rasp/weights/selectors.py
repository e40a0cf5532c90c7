"""Selectors of the weights compiler: each becomes a list of :class:`Atom`, the additive terms of
a head's attention score (docs/turing-programs.md, "Compiling RASP to weights").

An And is the sum of its parts' atoms, ``==`` an ``eq`` atom (a quadratic form in the integer
codes of key and query; one per part of a tuple), and Or, Not, order and custom predicates over
one key s-op and one query s-op a ``table`` atom over one-hot encodings (an Or/Not whose selects
compare several s-ops reads the tuples of them that the compiler adds, :func:`_table_atom`). TRUE, FALSE, constant
selectors and causal comparisons of shifted indices that are constant over the visible keys
select every key (no atom) or none (a ``false`` atom). :func:`plan_attention` is the step of
:class:`rasp.weights.graph.Program` that plans one attention or width node;
:func:`selector_inputs` names the s-ops that some selector compares. Nodes and the program are
duck-typed (:class:`rasp.weights.graph.Node` and ``Program``), as in :mod:`rasp.weights.affine`:
the graph module imports this one.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rasp.core import (Aggregate, Comparison, Select, Selector, SelectorAnd, SelectorNot, SelectorOr,
                       SelectorWidth, SequenceMap, SOp)
from rasp.tracr_ops import ConstantSelector
from rasp.weights.values import CompileError


@dataclass(eq=False)
class Atom:
    """One additive term of a selector's attention score.

    ``eq``: key value == query value (quadratic form in the integer codes);
    ``table``: any predicate, as a (query value x key value) table over one-hot encodings;
    ``false``: selects nothing. ``true`` selectors contribute no atom.
    """

    kind: str
    key: Any = None                 # the key and query s-ops' nodes (rasp.weights.graph.Node)
    query: Any = None
    predicate: Callable[[Any, Any], bool] | None = None
    text: str = ""


def selector_inputs(nodes: Sequence[Any]) -> set[int]:
    """The uids of the s-ops that some selector compares (keys and queries)."""
    out: set[int] = set()
    for node in nodes:
        selector = getattr(node.sop, "selector", None) if node.kind in ("attn", "width") else None
        for sel in _selector_tree(selector) if selector is not None else ():
            out |= {s.uid for s in sel.children if isinstance(s, SOp)}
    return out


def selection_key(sel: Selector) -> tuple:
    """Equal keys for selectors that select the same keys at every query: Selects of the same
    key and query s-ops with the same comparison, and And/Or/Not trees of such."""
    if isinstance(sel, Select):
        pred = sel.predicate if isinstance(sel.predicate, Comparison) else id(sel.predicate)
        return ("select", sel.keys.uid, sel.queries.uid, pred)
    if isinstance(sel, SelectorNot):
        return ("not", selection_key(sel.inner))
    if isinstance(sel, (SelectorAnd, SelectorOr)):
        return (type(sel).__name__, selection_key(sel.fst), selection_key(sel.snd))
    return ("selector", id(sel))


def plan_attention(prog: Any, node: Any) -> None:
    """The atoms of an attention or width node's selector; the s-ops they compare become its inputs,
    and those of a table atom need one-hot tables. ``prog`` is the program being analysed (its
    ``by_uid``, ``causal`` and ``n``), ``node`` one of its nodes."""
    sop = node.sop
    selector = sop.selector if isinstance(sop, (Aggregate, SelectorWidth)) else None
    node.atoms = _atoms(prog, selector, node) if selector is not None else []
    for atom in node.atoms:
        for side in (atom.key, atom.query):
            if side is not None and side not in node.deps:
                node.deps.append(side)
        if atom.kind == "table":
            atom.key.needs_table = atom.query.needs_table = True


def _atoms(prog: Any, sel: Selector, node: Any) -> list[Atom]:
    """The atoms of a selector (see the module docstring)."""
    if isinstance(sel, SelectorAnd):
        return _atoms(prog, sel.fst, node) + _atoms(prog, sel.snd, node)
    if isinstance(sel, ConstantSelector):
        if sel.uniform is None:
            raise CompileError(f"ConstantSelector {sel.label!r}: a fixed selection matrix needs "
                               "one score per (query, key) position pair; not compiled")
        return [] if sel.uniform else [Atom("false", text=sel.label)]
    if isinstance(sel, (SelectorOr, SelectorNot)):
        return [_table_atom(prog, sel, node)]
    assert isinstance(sel, Select)
    key, query, pred = prog.by_uid[sel.keys.uid], prog.by_uid[sel.queries.uid], sel.predicate
    if pred is Comparison.TRUE:
        return []
    if pred is Comparison.FALSE:
        return [Atom("false", text=sel.label)]
    constant = causal_index_constant(prog, sel)
    if constant is not None:
        return [] if constant else [Atom("false", text=sel.label)]
    if pred is Comparison.EQ:
        if (key.kind == "tuple") != (query.kind == "tuple"):
            raise CompileError(f"Select {sel.label!r}: compares a tuple with a non-tuple")
        if key.kind == "tuple":
            if len(key.parts) != len(query.parts):
                raise CompileError(f"Select {sel.label!r}: tuples of different lengths")
            return [Atom("eq", k, q, text=f"{sel.label}[{i}]: {_text(k)} == {_text(q)}")
                    for i, (k, q) in enumerate(zip(key.parts, query.parts))]
        return [Atom("eq", key, query, text=f"{sel.label}: {_text(key)} == {_text(query)}")]
    return [_table_atom(prog, sel, node)]


def _table_atom(prog: Any, sel: Selector, node: Any) -> Atom:
    """Or/Not/order/custom predicates as a table over one key s-op and one query s-op. Where the
    selects of an Or/Not compare several s-ops, the compiler adds the s-op of their tuple on each
    side (``(k_1, k_2, ...)``, one-hot like any table input) before ``node``, and the table
    evaluates the whole tree on the tuples."""
    tree = list(_selector_tree(sel))
    selects = [e for e in tree if isinstance(e, Select)]
    other = next((e for e in tree if not isinstance(e, (Select, SelectorAnd, SelectorOr, SelectorNot))), None)
    if other is not None:
        raise CompileError(f"{type(sel).__name__} {sel.label!r}: Or/Not over the {type(other).__name__} "
                           f"{other.label!r} is not compiled (only over Selects)")
    if any(prog.by_uid[s.uid].kind == "tuple" for e in selects for s in (e.keys, e.queries)):
        raise CompileError(f"{type(sel).__name__} {sel.label!r}: only == compares tuple values")
    keys = list({e.keys.uid: e.keys for e in selects}.values())
    queries = list({e.queries.uid: e.queries for e in selects}.values())
    key = prog.by_uid[_combined(prog, keys, f"{sel.label}_keys", node).uid]
    query = prog.by_uid[_combined(prog, queries, f"{sel.label}_queries", node).uid]
    key_uids, query_uids = [k.uid for k in keys], [q.uid for q in queries]
    pred = getattr(selects[0].predicate, "value", "custom") if len(selects) == 1 else type(sel).__name__
    predicate = _tree_predicate(sel, lambda leaf: (_reader(key_uids, leaf.keys.uid),
                                                   _reader(query_uids, leaf.queries.uid)))
    return Atom("table", key, query, predicate=predicate,
                text=f"{sel.label}: {_text(key)} {pred} {_text(query)} (table)")


def _combined(prog: Any, sops: list[SOp], label: str, before: Any) -> SOp:
    """One s-op, or the s-op of their tuple (added to ``prog`` before the node ``before``)."""
    out = sops[0]
    for i, s in enumerate(sops[1:]):
        out = SequenceMap(_pair if i == 0 else _extend, out, s).named(label if i == len(sops) - 2 else f"{label}{i}")
        prog.derive(out, before)
    return out


# not rasp.lib's tuple_pair/tuple_append: those make tuple views (equality only), and a table needs
# the tuple as one categorical s-op with its own one-hot values
def _pair(a: Any, b: Any) -> tuple:
    return (a, b)


def _extend(a: tuple, b: Any) -> tuple:
    return a + (b,)


def _reader(uids: list[int], uid: int) -> Callable[[Any], Any]:
    """The function that reads the value of the s-op ``uid`` from the combined value of ``uids``."""
    return (lambda v: v) if len(uids) == 1 else operator.itemgetter(uids.index(uid))


def causal_index_constant(prog: Any, sel: Select) -> bool | None:
    """Causal ``Select(indices + a, indices + b, cmp)`` is constant over visible keys j <= i."""
    a, b = sel.keys.index_offset, sel.queries.index_offset
    if not prog.causal or a is None or b is None or not isinstance(sel.predicate, Comparison):
        return None
    # j + a vs i + b depends only on d = i - j >= 0 (translation invariance)
    outcomes = {bool(sel.predicate(a, d + b)) for d in range(prog.n)}
    return outcomes.pop() if len(outcomes) == 1 else None


def _text(node: Any) -> str:
    """A node's name for descriptions (``indices+1`` for a statically shifted index)."""
    offset = node.sop.index_offset
    if offset and node.sop.name is None:
        return f"indices{offset:+d}"
    return node.label


def _tree_predicate(sel: Selector, pick: Callable[[Select], tuple]) -> Callable[[Any, Any], bool]:
    """The predicate of an And/Or/Not tree on (key, query) values; ``pick(leaf)`` gives the
    functions that read the leaf's key and query values from them."""
    if isinstance(sel, Select):
        from_key, from_query = pick(sel)
        return lambda k, q: bool(sel.predicate(from_key(k), from_query(q)))
    if isinstance(sel, SelectorNot):
        inner = _tree_predicate(sel.inner, pick)
        return lambda k, q: not inner(k, q)
    a, b = _tree_predicate(sel.fst, pick), _tree_predicate(sel.snd, pick)
    if isinstance(sel, SelectorAnd):
        return lambda k, q: a(k, q) and b(k, q)
    return lambda k, q: a(k, q) or b(k, q)


def _selector_tree(sel: Selector) -> Any:
    """The selectors of an And/Or/Not tree, without descending into its s-ops."""
    yield sel
    if isinstance(sel, (SelectorAnd, SelectorOr)):
        yield from _selector_tree(sel.fst)
        yield from _selector_tree(sel.snd)
    elif isinstance(sel, SelectorNot):
        yield from _selector_tree(sel.inner)
