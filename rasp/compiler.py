"""Compile a Turing machine into program P, the RASP Turing-Program simulator.

Our reconstruction of the RASP construction in the theorem of Hou et al., arXiv
2407.03310 (not a quote of the paper). Every position k precomputes
``nc[k] = F(tok[k-2], tok[k-1], tok[k])``, the token one period later; the query at
p is the masked n-gram of the last tokens; the answer is ``nc`` at the *last* key
whose masked n-gram of ``nc`` (ending at k-1) equals the query. The three details
that make it correct: last occurrence (``reduce="max"``), SEP masking,
and the guard (:func:`lookup_guard`): key ``k`` lies in the configuration before
the one being written, so ``k <= last_sep(p) + 1``.

Runtime monitor: the aligned key is ``k* = p + 2 - (L + 1)``; if the lookup
returns any other key the premise failed, and the run raises
:class:`~rasp.errors.AmbiguousLookupError` instead of diverging silently.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rasp.analyse import ProgramStats, analyse
from rasp.core import Aggregate, Comparison, Full, Map, Select, SequenceMap, SOp, indices, tokens
from rasp.errors import AmbiguousLookupError
from rasp.evaluate import IncrementalEvaluator, evaluate
from rasp.lib import index_select, masked_ngram, shift_right
from rasp.machines import TuringMachine, Vocab

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


@dataclass(frozen=True)
class TuringProgram:
    """Program P for one machine: ``output`` is the RASP program (out[p] predicts tok[p+1])."""

    machine: TuringMachine
    vocab: Vocab
    ngram: int
    output: SOp
    match: SOp                      # the lookup's key index m (for the monitor)
    stats: ProgramStats = field(repr=False)

    def to_transformer(self, max_seq_len: int, **kwargs: Any) -> Any:
        """This machine's program P compiled to the weights of a lengthgen.Transformer for traces
        of at most ``max_seq_len`` tokens (:func:`rasp.weights.turing.transformer_program`;
        docs/turing-programs.md). Returns a ``CompiledTuringProgram``."""
        from rasp.weights.turing import transformer_program

        return transformer_program(self.machine, self.ngram, vocab=self.vocab).to_transformer(max_seq_len, **kwargs)

    def teacher_forced(self, trace: Sequence[int], *, monitor: bool = True) -> list[int]:
        """Causal evaluation on ``trace[:-1]``; returns the predicted continuation
        ``[out[p] for p >= L+1]``, aligned with ``trace[L+2:]``."""
        L = _tape_length(trace, self.vocab)
        ev = evaluate(self.output, trace[:-1], causal=True)
        out, m = ev.column(self.output), ev.column(self.match)
        if monitor:
            for p in range(L + 1, len(trace) - 1):
                _check_lookup(m[p], p, L, self)
        return list(out[L + 1:])

    def greedy(self, prompt: Sequence[int], max_tokens: int, *, monitor: bool = True,
               progress: Any = None) -> list[int]:
        """Autoregressive decoding from ``prompt = BOS c_0 SEP`` until EOS or ``max_tokens``
        tokens in total; returns the whole generated trace. ``progress`` is an optional
        tqdm-like object updated once per generated token."""
        L = _tape_length(prompt, self.vocab)
        if len(prompt) != L + 2:
            raise ValueError("the prompt must be exactly BOS c_0 SEP")
        inc = IncrementalEvaluator(self.output)
        trace = list(prompt)
        for tok in trace[:-1]:
            inc.push(tok)
        m_col = inc.column(self.match)
        eos = self.vocab.EOS
        while len(trace) < max_tokens:
            nxt = inc.push(trace[-1])
            if monitor:
                _check_lookup(m_col[-1], len(trace) - 1, L, self)
            trace.append(nxt)
            if progress is not None:
                progress.update(1)
            if nxt == eos:
                break
        return trace


def _tape_length(trace: Sequence[int], vocab: Vocab) -> int:
    if not trace or trace[0] != vocab.BOS:
        raise ValueError("a Turing-Program trace starts with BOS")
    try:
        return list(trace).index(vocab.SEP) - 1
    except ValueError:
        raise ValueError("the trace has no SEP after c_0") from None


def _check_lookup(m: int, p: int, L: int, tp: TuringProgram) -> None:
    """Monitor: the lookup at p must land on the aligned key k* = p + 2 - (L + 1)."""
    k_star = p + 1 - L
    if m == k_star:
        return
    t, cell = divmod(p - (L + 1), L + 1)
    where = f"at position {p} (predicting cell {cell} of configuration c_{t + 1})"
    if m > k_star:
        msg = (f"n-gram lookup is ambiguous {where}: it matched a later key (k={m}, aligned "
               f"k*={k_star}) because c_{t + 1} repeats a {tp.ngram}-gram, so the premise of the "
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


def compile_turing_machine(tm: TuringMachine, ngram: int, *, vocab: Vocab | None = None,
                           _first_occurrence: bool = False) -> TuringProgram:
    """Program P for ``tm`` with n-gram order ``ngram``; size O(ngram), 4 attention layers.

    ``_first_occurrence=True`` uses ``reduce="min"`` in the lookup (np-rasp ``induct``) with
    only the upper bound ``k <= last_sep(p) + 1`` as guard: the known regression (first
    occurrence among all earlier configurations), kept only to test that it fails.
    """
    if not isinstance(ngram, int) or ngram < 1:
        raise ValueError(f"ngram must be a positive integer, got {ngram!r}")
    vocab = vocab or Vocab.for_machine(tm)
    F = local_rule(tm, vocab)
    SEP, BOS, EOS = vocab.SEP, vocab.BOS, vocab.EOS
    halted_heads = {t for t in range(vocab.BOS)
                    if vocab.decode(t)[1] is not None and tm.states[vocab.decode(t)[1]] in tm.halt}

    tok = tokens
    p1 = shift_right(tok, 1, EDGE)       # 2 (shared with the query's shifts: same node)
    p2 = shift_right(tok, 2, EDGE)       # 3
    lc = SequenceMap(lambda a, b: (a, b), p2, p1).named("lc")                     # 4
    nc = SequenceMap(lambda lcv, r: F(lcv[0], lcv[1], r), lc, tok).named("nc")   # 5
    is_sep_t = Map(lambda t: t == SEP, tok).named("is_sep")                       # 6
    query = masked_ngram(tok, is_sep_t, ngram, null=NULL, edge=EDGE).named("query")          # 7
    is_sep_n = Map(lambda v: v == SEP, nc).named("nc_is_sep")                     # 8
    key = masked_ngram(nc, is_sep_n, ngram, offset=1, null=NULL, edge=EDGE).named("key")  # 9-10
    is_sb = Map(lambda t: t == SEP or t == BOS, tok).named("is_sep_or_bos")       # 11
    last_sep = Aggregate(Select(is_sb, Full(True), Comparison.EQ), indices,
                         default=-1, reduce="max").named("last_sep")              # 12
    if _first_occurrence:
        guard = Select(indices, Map(lambda v: v + 1, last_sep), Comparison.LEQ).named("guard")
    else:
        guard = lookup_guard(last_sep)                                            # 13-15
    lookup = Select(key, query, Comparison.EQ).named("same_ngram") & guard        # 16
    m = Aggregate(lookup, indices, default=-1,
                  reduce="min" if _first_occurrence else "max").named("match")
    out0 = index_select(nc, m, default=NULL).named("out0")                        # 17
    hlt = Map(lambda t: t in halted_heads, tok).named("is_halted_head")          # 18
    last_h = Aggregate(Select(hlt, Full(True), Comparison.EQ), indices,
                       default=-1, reduce="max").named("last_halt")               # 19
    halted = SequenceMap(lambda a, b: a > b, last_h, last_sep).named("halted")   # 20
    out = SequenceMap(lambda o, h: EOS if (o == SEP and h) else o, out0, halted).named("out")  # 21
    return TuringProgram(machine=tm, vocab=vocab, ngram=ngram, output=out, match=m,
                         stats=analyse(out))
