"""RASP-L style library and adapters over the expression graph.

np-rasp's ``core.py`` / ``lib.py`` names (Zhou et al.'s RASP-L; predicates called
as ``pred(key, query)``), tracr's ``lib.py`` (``make_length``, ``make_hist``,
``make_reverse``, ``make_sort_unique``, ``make_sort``, ``make_sort_freq``,
``make_count_less_freq``, ``make_frac_prevs``, ``make_pair_balance``, ``make_shuffle_dyck(2)``,
``shift_by``, ``detect_pattern``, ``make_count``, ``make_nary_sequencemap``: every program of
it) and ``masked_ngram`` for program P. Everything returns IR nodes; evaluate them with
:func:`rasp.evaluate.evaluate` (``causal=True`` for RASP-L semantics).
"""
from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

from rasp.core import (Aggregate, Comparison, Full, Map, Select, Selector, SelectorWidth,
                       SequenceMap, SOp, indices, length, numerical, tokens)
from rasp.tracr_ops import LinearSequenceMap

__all__ = [
    "full", "tok_map", "seq_map", "select", "sel_width", "aggr", "kqv", "equals", "leq", "lt",
    "geq", "gt", "shift_right", "index_select", "cumsum", "firsts", "lasts", "where",
    "make_length", "make_hist", "make_reverse", "make_sort_unique", "make_sort", "make_sort_freq",
    "make_count_less_freq", "make_frac_prevs", "make_pair_balance", "make_shuffle_dyck", "make_shuffle_dyck2",
    "shift_by", "detect_pattern", "make_count", "make_nary_sequencemap", "masked_ngram", "shift_selector",
    "make_pair", "tuple_pair", "tuple_singleton", "tuple_append", "indices", "tokens",
]

# np-rasp predicates, called as pred(key, query)
equals = Comparison.EQ
leq = Comparison.LEQ
lt = Comparison.LT
geq = Comparison.GEQ
gt = Comparison.GT


# ----------------------------------------------------------- np-rasp core adapters


def full(value: Any) -> SOp:
    """np-rasp ``full``: the constant s-op."""
    return Full(value)


def tok_map(x: SOp, f: Callable[[Any], Any]) -> SOp:
    """np-rasp ``tok_map(x, f)`` = ``Map(f, x)``."""
    return Map(f, x)


def seq_map(x: SOp, y: SOp, f: Callable[[Any, Any], Any]) -> SOp:
    """np-rasp ``seq_map(x, y, f)`` = ``SequenceMap(f, x, y)``."""
    return SequenceMap(f, x, y)


def select(k: SOp, q: SOp, pred: Comparison | Callable[[Any, Any], Any]) -> Selector:
    """np-rasp ``select(k, q, pred)``; causality is chosen at evaluation time."""
    return Select(k, q, pred)


def sel_width(sel: Selector) -> SOp:
    """np-rasp ``sel_width`` = ``SelectorWidth``."""
    return SelectorWidth(sel)


def aggr(sel: Selector, v: SOp, default: Any = 0, reduction: str = "mean") -> SOp:
    """np-rasp ``aggr``. Note: our categorical mean returns the single selected
    value and refuses several different ones instead of truncating an average."""
    return Aggregate(sel, v, default=default, reduce=reduction)


def kqv(k: SOp, q: SOp, v: SOp, pred: Comparison | Callable[[Any, Any], Any], default: Any = 0,
        reduction: str = "mean") -> SOp:
    """np-rasp ``kqv`` = ``aggr(select(k, q, pred), v, default, reduction)``."""
    return aggr(select(k, q, pred), v, default=default, reduction=reduction)


# ------------------------------------------------------------------- tuple constructors


def tuple_pair(a: Any, b: Any) -> tuple:
    """``(a, b)``. A weights compiler recognises this function (by identity) and keeps a pair
    as the two residual subspaces of its parts instead of one subspace per pair of values."""
    return (a, b)


def tuple_singleton(v: Any) -> tuple:
    """``(v,)``; recognised like :func:`tuple_pair`."""
    return (v,)


def tuple_append(t: tuple, v: Any) -> tuple:
    """``t + (v,)``; recognised like :func:`tuple_pair`."""
    return t + (v,)


def make_pair(x: SOp, y: SOp) -> SOp:
    """The s-op ``(x[i], y[i])`` (a SequenceMap of :func:`tuple_pair`)."""
    return SequenceMap(tuple_pair, x, y)


# ------------------------------------------------------------------------------ helpers


@functools.lru_cache(maxsize=None)
def shift_selector(n: int) -> Selector:
    """``Select(indices + n, indices, EQ)``: row i selects key i - n. Shared by every shift by n
    (one attention pattern, several value heads)."""
    return Select(indices + n, indices, equals).named(f"shift_{n}")


_SHIFTS: "weakref.WeakValueDictionary[tuple, SOp]" = weakref.WeakValueDictionary()


def shift_right(x: SOp, n: int, default: Any = 0) -> SOp:
    """``x[i - n]`` (``default`` before the start): ``kqv(indices + n, indices, x, equals)``.

    Identical calls return the same node, so a program that shifts the same s-op by the
    same amount twice holds one op (hash-consing; nodes are immutable)."""
    try:
        key = (x.uid, n, type(default), default)
        cached = _SHIFTS.get(key)
    except TypeError:                       # unhashable default: no sharing
        return aggr(shift_selector(n), x, default=default)
    if cached is None:
        cached = _SHIFTS[key] = aggr(shift_selector(n), x, default=default)
    return cached


def index_select(x: SOp, idx: SOp, default: Any = 0) -> SOp:
    """``x[idx[i]]``: ``kqv(indices, idx, x, equals)``."""
    return kqv(indices, idx, x, equals, default=default)


def cumsum(b: SOp) -> SOp:
    """Number of true values of ``b`` at positions <= i.

    np-rasp uses ``select(b, b, lambda k, q: k)`` (dense); this equivalent form is an
    EQ select plus an index bound, so it runs on the O(n log n) path in both modes."""
    return SelectorWidth(Select(b, Full(True), equals) & Select(indices, indices, leq))


def firsts(x: SOp, q: SOp, default: Any = -1) -> SOp:
    """Smallest index j with ``x[j] == q[i]`` (np-rasp ``firsts``)."""
    return kqv(x, q, indices, equals, default=default, reduction="min")


def lasts(x: SOp, q: SOp, default: Any = -1) -> SOp:
    """Largest index j with ``x[j] == q[i]`` (np-rasp ``lasts``)."""
    return kqv(x, q, indices, equals, default=default, reduction="max")


def where(cond: SOp, x: SOp, y: SOp) -> SOp:
    """``x if cond else y`` elementwise (np-rasp ``where``)."""
    return SequenceMap(lambda c, xy: xy[0] if c else xy[1], cond, make_pair(x, y))


# ------------------------------------------------------------------------- tracr lib


def make_length() -> SOp:
    """tracr ``make_length``: ``SelectorWidth(Select(tokens, tokens, TRUE))``."""
    return SelectorWidth(Select(tokens, tokens, Comparison.TRUE)).named("length")


def make_hist() -> SOp:
    """tracr ``make_hist``: how often each token occurs."""
    return SelectorWidth(Select(tokens, tokens, Comparison.EQ)).named("hist")


def make_reverse(sop: SOp) -> SOp:
    """tracr ``make_reverse`` (non-causal): ``sop[length - 1 - i]``."""
    opp = (make_length() - indices).named("opp_idx")
    opp = (opp - 1).named("opp_idx-1")
    return Aggregate(Select(indices, opp, Comparison.EQ), sop).named("reverse")


def make_sort_unique(vals: SOp, keys: SOp) -> SOp:
    """tracr ``make_sort_unique`` (non-causal): ``vals`` sorted by unique ``keys``."""
    smaller = Select(keys, keys, Comparison.LT).named("smaller")
    target_pos = SelectorWidth(smaller).named("target_pos")
    sel_new = Select(target_pos, indices, Comparison.EQ)
    return Aggregate(sel_new, vals).named("sort")


def make_sort(vals: SOp, keys: SOp, *, max_seq_len: int, min_key: float) -> SOp:
    """tracr ``make_sort`` (non-causal): ``vals`` sorted by ``keys``, ties broken by position
    (the keys ``key + min_key * i / max_seq_len`` are unique)."""
    keys = SequenceMap(lambda x, i: x + min_key * i / max_seq_len, keys, indices).named("keys")
    return make_sort_unique(vals, keys)


def make_sort_freq(max_seq_len: int) -> SOp:
    """tracr ``make_sort_freq`` (non-causal): the tokens, most frequent first."""
    hist = (-1 * make_hist()).named("hist")
    return make_sort(tokens, hist, max_seq_len=max_seq_len, min_key=1).named("sort_freq")


def make_count_less_freq(n: int) -> SOp:
    """tracr ``make_count_less_freq``: how many positions hold a token that occurs at most
    ``n`` times (tracr's predicate ``lambda key, query: key <= n``)."""
    hist = make_hist().named("hist")
    select_less = Select(hist, hist, lambda x, y: x <= n).named("select_less")
    return SelectorWidth(select_less).named("count_less_freq")


def make_frac_prevs(bools: SOp) -> SOp:
    """tracr ``make_frac_prevs``: at each position, the fraction of positions up to it where
    ``bools`` holds (a numerical mean over ``indices <= i``)."""
    prevs = Select(indices, indices, Comparison.LEQ)
    return numerical(Aggregate(prevs, numerical(bools), default=0)).named("frac_prevs")


def make_pair_balance(sop: SOp, open_token: Any, close_token: Any) -> SOp:
    """tracr ``make_pair_balance``: the fraction of earlier ``open_token`` minus that of
    ``close_token`` (non-negative everywhere and 0 at the end iff the pair is balanced)."""
    opens = numerical(make_frac_prevs(numerical(sop == open_token).named("bools_open"))).named("opens")
    closes = numerical(make_frac_prevs(numerical(sop == close_token).named("bools_close"))).named("closes")
    return numerical(LinearSequenceMap(opens, closes, 1, -1)).named("pair_balance")


def make_shuffle_dyck(pairs: list[str]) -> SOp:
    """tracr ``make_shuffle_dyck``: 1 everywhere if every pair of brackets (each a two-character
    string, opening then closing) is balanced on its own, else 0 everywhere."""
    if not pairs or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"pairs must be two-character strings, got {pairs!r}")
    balances = [make_pair_balance(tokens, pair[0], pair[1]).named(f"balance_{pair}") for pair in pairs]
    any_negative = balances[0] < 0
    for balance in balances[1:]:
        any_negative = any_negative | (balance < 0)
    any_negative = numerical(Map(lambda x: x, any_negative)).named("any_negative")
    select_all = Select(indices, indices, Comparison.TRUE).named("select_all")
    has_neg = numerical(Aggregate(select_all, any_negative, default=0)).named("has_neg")
    all_zero = balances[0] == 0
    for balance in balances[1:]:
        all_zero = all_zero & (balance == 0)
    select_last = Select(indices, length - 1, Comparison.EQ).named("select_last")
    last_zero = Aggregate(select_last, all_zero).named("last_zero")
    return (last_zero & (~has_neg).named("not_has_neg")).named("shuffle_dyck")


def make_shuffle_dyck2() -> SOp:
    """tracr ``make_shuffle_dyck2``: :func:`make_shuffle_dyck` of ``()`` and ``{}``."""
    return make_shuffle_dyck(["()", "{}"]).named("shuffle_dyck2")


def shift_by(offset: int, sop: SOp) -> SOp:
    """tracr ``shift_by``: ``sop`` moved ``offset`` positions right, ``None`` before the start."""
    select_off_by_offset = Select(indices, indices, lambda k, q: q == k + offset)
    return Aggregate(select_off_by_offset, sop, default=None).named(f"shift_by({offset})")


def detect_pattern(sop: SOp, pattern: Any) -> SOp:
    """tracr ``detect_pattern``: True at the last element of each occurrence of ``pattern`` in
    ``sop``. The first ``len(pattern) - 1`` positions are False (tracr's ``&`` returns an operand,
    so its are ``None``; this package's ``&`` is boolean, docs/rasp.md)."""
    if len(pattern) < 1:
        raise ValueError(f"the pattern must have at least one element, got {pattern!r}")
    detectors = [sop == element if i == 0 else shift_by(i, sop == element)
                 for i, element in enumerate(reversed(pattern))]
    detected = detectors.pop()
    while detectors:
        detected = detected & detectors.pop()
    return detected.named(f"detect_pattern({pattern})")


def make_count(sop: SOp, token: Any) -> SOp:
    """tracr ``make_count``: how often ``token`` occurs in ``sop``, at every position."""
    return SelectorWidth(Select(sop, sop, lambda k, q: k == token)).named(f"count_{token}")


def make_nary_sequencemap(f: Callable[..., Any], *sops: SOp) -> SOp:
    """tracr ``make_nary_sequencemap``: ``f`` of n s-ops, as binary SequenceMaps that build the
    tuple of the arguments, then a Map on it."""
    values = SequenceMap(lambda x, y: (x, y), sops[0], sops[1]) if len(sops) > 1 else Map(lambda x: (x,), sops[0])
    for sop in sops[2:]:
        values = SequenceMap(lambda x, y: (*x, y), values, sop)
    return Map(lambda args: f(*args), values)


# ---------------------------------------------------------------------- masked n-grams


def masked_ngram(s: SOp, is_sep: SOp, n: int, *, offset: int = 0, null: Any = None,
                 edge: Any = None) -> SOp:
    """At i, the tuple ``(u_{n-1}, ..., u_0)`` over the stream ``s`` ending at ``i - offset``.

    ``u_0 = s[i - offset]``; for d >= 1, ``u_d = null`` if ``is_sep`` holds somewhere in
    ``s[i-offset-d+1 .. i-offset]``, else ``s[i-offset-d]`` (``edge`` before the start).
    (our reconstruction); ``offset=1`` folds program P's key shift into the shifts,
    which keeps P at 4 attention layers.
    Cost: n + offset - 1 shifts of ``s``, about n shifts of ``is_sep``, ~3n maps.
    """
    if n < 1:
        raise ValueError(f"n-gram order must be >= 1, got {n}")

    def shifted(x: SOp, d: int, default: Any) -> SOp:
        return x if d == 0 else shift_right(x, d, default)

    cols = [shifted(s, offset, edge)]
    seen = shifted(is_sep, offset, False)
    for d in range(1, n):
        s_d = shifted(s, d + offset, edge)
        cols.append(SequenceMap(lambda v, b: null if b else v, s_d, seen))
        if d < n - 1:
            seen = SequenceMap(lambda a, b: bool(a or b), seen, shifted(is_sep, d + offset, False))
    gram = Map(tuple_singleton, cols[-1])
    for col in reversed(cols[:-1]):
        gram = SequenceMap(tuple_append, gram, col)
    return gram
