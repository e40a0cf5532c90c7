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
from rasp.turing.machines import TuringMachine, Vocab
from rasp.turing.rules import EDGE, NULL, check_lookup, local_rule, lookup_guard, tape_length


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
        of at most ``max_seq_len`` tokens (:func:`rasp.turing.transformer.transformer_program`;
        docs/turing-programs.md). Returns a ``CompiledTuringProgram``."""
        from rasp.turing.transformer import transformer_program

        return transformer_program(self.machine, self.ngram, vocab=self.vocab).to_transformer(max_seq_len, **kwargs)

    def teacher_forced(self, trace: Sequence[int], *, monitor: bool = True) -> list[int]:
        """Causal evaluation on ``trace[:-1]``; returns the predicted continuation
        ``[out[p] for p >= L+1]``, aligned with ``trace[L+2:]``."""
        L = tape_length(trace, self.vocab)
        ev = evaluate(self.output, trace[:-1], causal=True)
        out, m = ev.column(self.output), ev.column(self.match)
        if monitor:
            for p in range(L + 1, len(trace) - 1):
                check_lookup(m[p], p, L, self.ngram)
        return list(out[L + 1:])

    def greedy(self, prompt: Sequence[int], max_tokens: int, *, monitor: bool = True,
               progress: Any = None) -> list[int]:
        """Autoregressive decoding from ``prompt = BOS c_0 SEP`` until EOS or ``max_tokens``
        tokens in total; returns the whole generated trace. ``progress`` is an optional
        tqdm-like object updated once per generated token."""
        L = tape_length(prompt, self.vocab)
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
                check_lookup(m_col[-1], len(trace) - 1, L, self.ngram)
            trace.append(nxt)
            if progress is not None:
                progress.update(1)
            if nxt == eos:
                break
        return trace


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
