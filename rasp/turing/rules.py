"""What program P and its compiled form share: the machine's local rule, the lookup guard, the monitor.

Program P (:mod:`rasp.turing.program`, the RASP interpreter's form) and its transformer form
(:mod:`rasp.turing.transformer`) both build on these, so neither imports the other:

- :func:`local_rule`: the radius-1 rule ``F(l, c, r)``, one machine step per cell (Hou et al.,
  arXiv 2407.03310, the Turing Programs construction, reconstructed; docs/turing-programs.md);
- :func:`lookup_guard`: the key lies in the configuration before the one being written;
- :func:`check_lookup`: the runtime monitor, the lookup at p must land on the aligned key
  ``k* = p + 1 - L``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from rasp.core import Aggregate, Comparison, Select, SOp, indices
from rasp.errors import AmbiguousLookupError
from rasp.lib import shift_right
from rasp.turing.machines import TuringMachine, Vocab

EDGE = -1   # what shifts read before the start of the sequence
NULL = -2   # don't-care / masked value


def head_moves(tm: TuringMachine, vocab: Vocab) -> tuple[dict[int, tuple[int, int, int]], list[int], list[int]]:
    """Per cell token: ``head_out[tok] = (blocked-in-place result, leaving result, direction)``
    for a working head, and the state a head hands to its right / left neighbour
    (``to_right[tok]`` / ``to_left[tok]``, -1: none)."""
    n_cells = vocab.BOS
    sym = {s: i for i, s in enumerate(tm.alphabet)}
    st = {q: i for i, q in enumerate(tm.states)}
    halting = {st[q] for q in tm.halt}
    rule = {(st[q], sym[s]): (st[q2], sym[w], d) for (q, s), (q2, w, d) in tm.delta.items()}
    head_out: dict[int, tuple[int, int, int]] = {}
    to_right = [-1] * n_cells
    to_left = [-1] * n_cells
    for tok in range(n_cells):
        s, q, tag = vocab.decode(tok)
        if q is None or q in halting or (q, s) not in rule:
            continue
        q2, w, d = rule[(q, s)]
        head_out[tok] = (vocab.cell(w, q2, tag), vocab.cell(w, None, tag), d)
        (to_right if d > 0 else to_left)[tok] = q2
    return head_out, to_right, to_left


def local_rule(tm: TuringMachine, vocab: Vocab) -> Callable[[Any, Any, Any], Any]:
    """The radius-1 rule ``F(l, c, r)`` (one step of the machine, per cell) on integer tokens, as lookup tables (an MLP)."""
    n_sym, n_cells, sep, bos, eos = len(tm.alphabet), vocab.BOS, vocab.SEP, vocab.BOS, vocab.EOS
    st = {q: i for i, q in enumerate(tm.states)}
    halting = {st[q] for q in tm.halt}
    head_out, to_right, to_left = head_moves(tm, vocab)
    is_head = [vocab.decode(t)[1] is not None for t in range(n_cells)]
    halted = {t for t in range(n_cells) if is_head[t] and vocab.decode(t)[1] in halting}
    block = vocab.block

    def wall(x: Any) -> bool:
        return not isinstance(x, int) or x < 0 or x >= n_cells

    def F(l: Any, c: Any, r: Any) -> Any:  # noqa: N802 - the note's name
        if c == sep or c == bos:
            return sep
        if wall(c) or c == eos:
            return NULL
        if is_head[c]:
            if c in halted:
                return c
            out = head_out.get(c)
            if out is None:          # unreachable pair (the simulator reports it)
                return NULL
            blocked, leaving, d = out
            return blocked if wall(r if d > 0 else l) else leaving
        tag, s = divmod(c, block)
        if not wall(l) and to_right[l] >= 0:
            return vocab.cell(s % n_sym, to_right[l], tag)
        if not wall(r) and to_left[r] >= 0:
            return vocab.cell(s % n_sym, to_left[r], tag)
        return c

    return F


def tape_length(trace: Sequence[int], vocab: Vocab) -> int:
    if not trace or trace[0] != vocab.BOS:
        raise ValueError("a Turing-Program trace starts with BOS")
    try:
        return list(trace).index(vocab.SEP) - 1
    except ValueError:
        raise ValueError("the trace has no SEP after c_0") from None


def check_lookup(m: int, p: int, L: int, ngram: int) -> None:
    """Monitor: the lookup at p must land on the aligned key k* = p + 2 - (L + 1)."""
    k_star = p + 1 - L
    if m == k_star:
        return
    t, cell = divmod(p - (L + 1), L + 1)
    where = f"at position {p} (predicting cell {cell} of configuration c_{t + 1})"
    if m > k_star:
        msg = (f"n-gram lookup is ambiguous {where}: it matched a later key (k={m}, aligned "
               f"k*={k_star}) because c_{t + 1} repeats a {ngram}-gram, so the premise of the "
               "theorem fails; raise --ngram or use --address-track")
    else:
        found = f"matched an earlier key (k={m})" if m >= 0 else "found no matching key"
        msg = (f"n-gram lookup missed the aligned key k*={k_star} {where}: it {found}; "
               "the lookup or the trace prefix is wrong")
    raise AmbiguousLookupError(msg, position=p)


def lookup_guard(last_sep: SOp) -> Select:
    """The guard of the lookup: key ``k`` lies in the configuration before the current one,
    ``last_sep(k - 2) == prev_sep(p)``, where ``prev_sep(p)`` is the separator before
    ``last_sep(p)`` (both are positions of SEP or BOS).

    It implies the reconstruction's guard ``k <= last_sep(p) + 1`` (docs/turing-programs.md,
    "Program P, op by op"), and it excludes besides only keys older than the previous
    configuration. The aligned key ``k* = p + 1 - L`` always lies in the previous configuration,
    so on every correct trace prefix the lookup returns the same key under either guard. Unlike
    the order comparison, this one is an equality of two positions, which compiles to exact
    weights (two ordinal dimensions per side, :mod:`rasp.weights.heads`); the interpreter and the
    transformer run the same guard.
    """
    before = Select(indices + 1, last_sep, Comparison.EQ).named("before_last_sep")
    prev_sep = Aggregate(before, last_sep, default=-1).named("prev_sep")
    key_sep = shift_right(last_sep, 2, -2).named("key_sep")    # last_sep(k - 2); -2 for k < 2
    return Select(key_sep, prev_sep, Comparison.EQ).named("guard")
