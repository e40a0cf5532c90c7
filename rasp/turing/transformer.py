"""The Turing-Program simulator (program P) as transformer weights.

Program P (docs/turing-programs.md, "Program P"; Hou et al., arXiv 2407.03310, the RASP
construction behind their Turing Programs theorem, reconstructed) compiled with
:func:`rasp.weights.compile_to_transformer`. Three rewrites keep it small and shallow; each
computes the same values as :func:`rasp.turing.program.compile_turing_machine` (the tests check the
compiled model against the reference simulator, :func:`rasp.turing.machines.simulate`):

1. ``nc = F(l, c, r)`` reads ``l`` and ``r`` only through small classes (a wall, the state a
   head hands to that side, or nothing), so the lookup MLP enumerates |classes|^2 * |V| triples
   instead of |V|^3; the classes are shifted copies of a token-wise Map (an embedding).
2. Each masked n-gram cell ``u_d`` is one lookup of ``s[i-d]`` and whether a separator lies in
   ``i-d+1..i`` (a numerical sum of shifted 0/1 flags, read linearly, then a step) instead of a
   chain of ORs, so the n-grams cost one MLP layer, not n - 1, and each cell's table has
   2·|values of s| entries: the hidden units grow linearly in n (a lookup over the tuple of the
   d flags would have 2^d·|values| entries). On the key side the flags ``nc[k] == SEP`` are
   ``tokens[k-1] in {SEP, BOS}`` (the first case of F), shifts of a token-wise map.
3. ``halted = last_halt > last_sep`` is the numerical difference (a linear layer) and a step.

The guard of the lookup (:func:`rasp.turing.rules.lookup_guard`: the key lies in the configuration
before the current one) is an equality of two separator positions, compiled like any other
equality, so the transformer computes the interpreter's program value for value. The runtime
monitor reads the transformer's own match index from its residual stream and reports any lookup
that lands off the aligned key, exactly as the interpreter's monitor does.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from lengthgen.decode import decided_argmax, greedy_generate
from lengthgen.sparse import sparse_kernels
from rasp import lib
from rasp.turing.rules import EDGE, NULL, check_lookup, head_moves, local_rule, lookup_guard, tape_length
from rasp.core import Aggregate, Comparison, Full, Map, Select, SequenceMap, SOp, indices, numerical, tokens
from rasp.turing.machines import TuringMachine, Vocab
from rasp.tracr_ops import LinearSequenceMap
from rasp.weights.assemble import CompiledTransformer, compile_to_transformer
from rasp.weights.graph import ONEHOT_MAX


@dataclass(frozen=True)
class TransformerProgram:
    """Program P for one machine in the compilable form above (``output``: out[p] = tok[p+1])."""

    machine: TuringMachine
    vocab: Vocab
    ngram: int
    output: SOp
    match: SOp

    def to_transformer(self, max_seq_len: int, *, dtype: torch.dtype = torch.float64,
                       onehot_max: int = ONEHOT_MAX, binary_from: float | None = None,
                       plateau: float = 0.0) -> "CompiledTuringProgram":
        """Compile to a causal transformer for traces of at most ``max_seq_len`` tokens.

        ``onehot_max`` (:func:`rasp.weights.compile_to_transformer`): with ``0`` the tokens, their
        shifts and the n-gram cells hold integer codes instead of one-hot dimensions, so d_model no
        longer grows as n·|V| (a 4-state, 4-symbol machine at n-gram 16: d_model 2047 and 51 M
        parameters one-hot, 366 and 9 M with codes, 5 to 8 times faster greedy decoding); float64 only:
        float32 rounds the squares of large codes. ``binary_from=0`` puts every equality on bit codes
        (what :mod:`rasp.certify` needs past 2-grams); ``plateau``: flat MLP tables around their
        points, so errors stop at each table (what it needs past a few hundred tokens)."""
        ct = compile_to_transformer(self.output, list(range(self.vocab.size)), max_seq_len,
                                    causal=True, dtype=dtype, output_values=list(range(self.vocab.size)),
                                    onehot_max=onehot_max, binary_from=binary_from, plateau=plateau)
        return CompiledTuringProgram(self, ct)


def _masked_ngram(s: SOp, sep_flag: SOp, n: int, offset: int, flag_offset: int) -> SOp:
    """``lib.masked_ngram`` of ``s`` with each cell a single lookup (rewrite 2 of the module
    docstring). ``sep_flag[i]`` is 1 where the separator stream holds at ``i + offset - flag_offset``
    (0 otherwise), so that it can be a token-wise Map shifted once. Cell ``u_d`` reads
    ``s[i-offset-d]`` and whether any of the separator flags at ``i-offset-d+1 .. i-offset`` holds:
    their numerical sum (no layer: the compiler reads it linearly), then a step, so the cell's table
    has |values of s| x 2 entries, not |values of s| x 2^d."""
    def shifted(x: SOp, d: int, default: Any) -> SOp:
        return lib.shift_right(x, d, default) if d else x

    flags = [shifted(sep_flag, j + flag_offset, 0) for j in range(n - 1)]
    cols, seps = [shifted(s, offset, EDGE)], None
    for d in range(1, n):  # seps: the separators in the cell's window, a numerical sum (no layer)
        seps = flags[0] if d == 1 else numerical(seps + flags[d - 1])
        cut = seps if d == 1 else Map(lambda k: k > 0, seps)
        cols.append(SequenceMap(lambda v, k: NULL if k else v, shifted(s, d + offset, EDGE), cut))
    gram = Map(lib.tuple_singleton, cols[-1])
    for col in reversed(cols[:-1]):
        gram = SequenceMap(lib.tuple_append, gram, col)
    return gram


def transformer_program(tm: TuringMachine, ngram: int, *, vocab: Vocab | None = None) -> TransformerProgram:
    """Program P for ``tm`` in the form that :func:`compile_to_transformer` compiles."""
    if not isinstance(ngram, int) or ngram < 1:
        raise ValueError(f"ngram must be a positive integer, got {ngram!r}")
    vocab = vocab or Vocab.for_machine(tm)
    F = local_rule(tm, vocab)
    _, to_right, to_left = head_moves(tm, vocab)
    SEP, BOS, EOS, n_cells = vocab.SEP, vocab.BOS, vocab.EOS, vocab.BOS

    def side_class(moves: list[int]) -> Any:
        reps: dict[int, int] = {}
        for tok in range(n_cells):
            reps.setdefault(moves[tok], tok)

        def cls(x: Any) -> Any:    # a representative with the same effect on F
            return EDGE if not isinstance(x, int) or not 0 <= x < n_cells else reps[moves[x]]
        return cls

    left_cls, right_cls = side_class(to_right), side_class(to_left)
    tok = tokens
    p1 = lib.shift_right(tok, 1, EDGE)      # shared with the query's first shift (same node)
    kl = lib.shift_right(Map(left_cls, tok).named("left_class"), 2, left_cls(EDGE)).named("l_class")
    kr = Map(right_cls, tok).named("r_class")
    window = lib.make_pair(kl, p1)
    nc = SequenceMap(lambda lc, r: F(lc[0], lc[1], r), window, kr).named("nc")
    is_sb = Map(lambda t: t == SEP or t == BOS, tok).named("is_sep_or_bos")
    query = _masked_ngram(tok, Map(lambda t: int(t == SEP), tok).named("sep_flag"), ngram, 0, 0).named("query")
    # nc[k] is SEP exactly where tokens[k-1] is SEP or BOS (F's first case), so the key's
    # separator flags are shifts of a token-wise Map, one position further back
    key = _masked_ngram(nc, Map(lambda t: int(t == SEP or t == BOS), tok).named("sep_or_bos_flag"),
                        ngram, 1, 2).named("key")
    last_sep = Aggregate(Select(is_sb, Full(True), Comparison.EQ).named("sep_or_bos"), indices,
                         default=-1, reduce="max").named("last_sep")
    match = Aggregate(Select(key, query, Comparison.EQ).named("same_ngram") & lookup_guard(last_sep),
                      indices, default=-1, reduce="max").named("match")
    out0 = Aggregate(Select(indices, match, Comparison.EQ).named("at_match"), nc,
                     default=NULL).named("out0")                 # lib.index_select, named
    halted_heads = {t for t in range(n_cells)
                    if vocab.decode(t)[1] is not None and tm.states[vocab.decode(t)[1]] in tm.halt}
    hlt = Map(lambda t: t in halted_heads, tok).named("is_halted_head")
    last_h = Aggregate(Select(hlt, Full(True), Comparison.EQ).named("halted_head"), indices,
                       default=-1, reduce="max").named("last_halt")
    gap = numerical(LinearSequenceMap(last_h, last_sep, 1, -1)).named("halt_minus_sep")
    halted = Map(lambda d: d > 0, gap).named("halted")
    out = SequenceMap(lambda o, h: EOS if (o == SEP and h) else o, out0, halted).named("out")
    return TransformerProgram(tm, vocab, ngram, out, match)


@dataclass
class CompiledTuringProgram:
    """A compiled program P with the generic decoding loops of :mod:`lengthgen.decode`."""

    program: TransformerProgram
    compiled: CompiledTransformer
    timings: dict = field(default_factory=dict)

    @property
    def model(self):
        return self.compiled.model

    def greedy(self, prompt: Sequence[int], max_tokens: int, *, monitor: bool = True,
               sparse: bool | None = None) -> list[int]:
        """Greedy decoding with a KV cache from ``BOS c_0 SEP`` until EOS or ``max_tokens`` tokens
        in all; the whole trace. ``monitor``: then check every lookup (see :meth:`check_lookups`).
        ``sparse`` (default: on the CPU) runs the products on CSR copies of the mostly-zero weights
        (:func:`lengthgen.sparse.sparse_kernels`: the same sums in another order; 2-3 times faster
        at n-gram 16); ``False``: the dense products."""
        if max_tokens > self.compiled.program.n:
            raise ValueError(f"max_tokens={max_tokens} exceeds the compiled max_seq_len={self.compiled.program.n}")
        start = time.perf_counter()
        ids = self.compiled.encode(prompt)
        if sparse is None:
            sparse = self.model.device.type == "cpu"
        with sparse_kernels(self.model) if sparse else nullcontext():
            new = greedy_generate(self.model, ids, max_new_tokens=max_tokens - len(prompt),
                                  stop_token=self.program.vocab.EOS)
        self.timings["greedy_seconds"] = time.perf_counter() - start
        trace = list(prompt) + new
        if monitor:
            self.check_lookups(trace)
        return trace

    def teacher_forced(self, trace: Sequence[int], *, monitor: bool = True) -> list[int]:
        """One forward pass over ``trace[:-1]``; the predictions aligned with ``trace[L+2:]``
        (a prediction whose top logit does not win by the decision margin is -1)."""
        L = tape_length(trace, self.program.vocab)
        logits = self.compiled.logits(list(trace[:-1]))
        picks = decided_argmax(logits[L + 1:]).tolist()
        if monitor:
            self.check_lookups(trace)
        return [self.compiled.classes[i] if i >= 0 else -1 for i in picks]

    @torch.inference_mode()
    def match_column(self, trace: Sequence[int]) -> list[int]:
        """The lookup's match index at every position, read from the transformer's residual."""
        ct = self.compiled
        node = ct.program.by_uid[self.program.match.uid]
        x = ct.model.embed_input(torch.tensor([ct.encode(trace)]), None)
        for layer in range(node.slot // 2 + 1):
            x = ct.model.blocks[layer](x)
        return [int(ct.layout.read(node, x[0, p + 1])) for p in range(len(trace))]

    def check_lookups(self, trace: Sequence[int]) -> None:
        """The interpreter's runtime monitor on the transformer's own match indices: raise
        :class:`~rasp.errors.AmbiguousLookupError` at the first position whose lookup is off."""
        L = tape_length(trace, self.program.vocab)
        m = self.match_column(trace[:-1])
        for p in range(L + 1, len(trace) - 1):
            check_lookup(m[p], p, L, self.program.ngram)
