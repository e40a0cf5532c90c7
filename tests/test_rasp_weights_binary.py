"""rasp.weights: equality on binary codes (docs/turing-programs.md, "Residual layout" and
"Attention"). Past 2^40 an ``==`` atom's quadratic terms ``beta * c**2`` would let float64 round a
score by more than the slack, so both sides carry the bits of their codes and the atom sums
``+-1`` products instead. Every check compares with the interpreter's dense path or the plain-
Python machine simulator; ``BINARY_FROM`` is lowered to 0 to put the binary form everywhere it
applies on small inputs.
"""
from __future__ import annotations

import math
import random

import pytest
import torch

from rasp import lib
from rasp.core import (Aggregate, Comparison, Full, Map, Select, SelectorWidth, SequenceMap, indices, numerical,
                       tokens)
from rasp.evaluate import evaluate
from rasp.turing.library import TASKS, sample_machine
from rasp.turing.machines import Vocab, build_trace, min_ngram, simulate, split_configs
from rasp.turing.transformer import transformer_program
from rasp.weights import compile_to_transformer, heads, precision

VOCAB = [0, 1, 2, 3, 5]


@pytest.fixture
def binary_everywhere(monkeypatch):
    monkeypatch.setattr(heads, "BINARY_FROM", 0.0)


def _interpreter(program, xs, causal):
    return list(evaluate(program, xs, causal=causal, fast=False).column(program))


def test_the_threshold_is_the_documented_literal():
    assert heads.BINARY_FROM == 2.0 ** 40


@pytest.mark.parametrize("top, binary", [(117_234, False), (117_235, True)])
def test_the_threshold_is_where_beta_times_the_code_squared_reaches_2_to_the_40(top, binary):
    """A mean head (beta = 80): 80 * 117234**2 = 1.0999e12 < 2**40 <= 80 * 117235**2."""
    program = Aggregate(Select(tokens, tokens, Comparison.EQ), tokens, default=-1)
    ct = compile_to_transformer(program, list(range(40)) + [top], 6)
    assert (ct.layout.n_bits > 0) == binary
    xs = [top, 3, top, 39, 3, top]
    assert ct.run(xs) == _interpreter(program, xs, True)


def test_float32_weights_compare_bits_from_terms_of_2_to_the_11():
    """float32's unit roundoff is 2**29 times float64's, and so is the threshold: tokens 0..39
    (terms up to 80 * 39**2 = 121 680) compare bits in float32 and quadratic codes in float64."""
    program = Aggregate(Select(tokens, tokens, Comparison.EQ), tokens, default=-1)
    vocab = list(range(40))
    assert compile_to_transformer(program, vocab, 6).layout.n_bits == 0
    ct = compile_to_transformer(program, vocab, 6, dtype=torch.float32)
    assert ct.layout.n_bits == 7
    xs = [39, 3, 39, 38, 3, 0]
    assert ct.run(xs) == _interpreter(program, xs, True)


def test_terms_exactly_at_the_threshold_compare_bits():
    """"Reaches" includes equality: a max head over the values {0, 5, 27} has gamma = 40/5 and
    beta = 2 (8 * 27 + 40) = 512, and with codes 0..2 (onehot_max=0) its terms reach exactly
    512 * 2**2 = 2**11, float32's threshold; so the tokens carry bits."""
    values = Map(lambda t: (0, 5, 27)[t], tokens)
    program = Aggregate(Select(tokens, tokens, Comparison.EQ), numerical(values), reduce="max", default=0)
    ct = compile_to_transformer(program, [0, 1, 2], 6, dtype=torch.float32, onehot_max=0)
    assert heads.head_scale(ct.program.by_uid[program.uid], ct.program) == 512
    assert ct.layout.binary(ct.program.by_uid[tokens.uid]) != []
    xs = [2, 0, 1, 2, 1, 0]
    assert ct.run(xs) == _interpreter(program, xs, True)


def test_an_atom_below_the_threshold_does_not_stop_the_next_one():
    """In float32 (threshold 2**11), ``tokens == tokens`` has terms up to 80 * 2**2 (no bits) and the
    next atom ``indices == indices`` up to 80 * 11**2 (bits): each atom is judged on its own."""
    program = Aggregate(Select(tokens, tokens, Comparison.EQ) & Select(indices, indices, Comparison.EQ),
                        tokens, default=-1)
    ct = compile_to_transformer(program, [0, 1, 2], 12, dtype=torch.float32, onehot_max=0)
    assert ct.layout.binary(ct.program.by_uid[tokens.uid]) == []
    assert ct.layout.binary(ct.program.by_uid[indices.uid]) != []
    xs = [2, 0, 1, 2, 1, 0, 0, 2, 2, 1, 1, 0]
    assert ct.run(xs) == _interpreter(program, xs, True)


def test_program_p_in_float32_is_exact():
    """With its equalities on bits, program P's float32 weights follow the simulator (before,
    ``match`` fell back to its default on every trace tried, 1 to 70 digits)."""
    for text in ("905+97", "31415926535897932384+27182818284590452353"):
        tm, tape = TASKS["addition"].build(text)
        ref, n = _trace(tm, tape)
        compiled = transformer_program(tm, n).to_transformer(len(ref), dtype=torch.float32)
        assert compiled.teacher_forced(ref) == ref[len(tape) + 2:]


def test_a_selector_width_compares_ordinal_codes_by_bits_at_any_size():
    """A width needs its selected keys and BOS to score exactly alike (its decoder tolerates
    about 1/(2 N) of relative error), so its equalities use bits whatever the threshold."""
    program = SelectorWidth(Select(tokens, tokens, Comparison.EQ))
    ct = compile_to_transformer(program, list(range(40)), 6)
    assert ct.layout.n_bits == 7
    xs = [39, 3, 39, 38, 3, 0]
    assert ct.run(xs) == _interpreter(program, xs, True)


def test_an_atom_with_a_side_that_cannot_carry_bits_keeps_the_quadratic_form():
    """In one width, ``tokens == fifth`` (``fifth`` one-hot) stays quadratic while ``indices ==
    shifted`` (both ordinal) goes to bits; in a second program ``tokens`` carries bits from one
    equality and meets the one-hot ``fifth`` in another, which must stay quadratic too (its
    query side has no bits to multiply)."""
    vocab = list(range(40))
    fifth = Map(lambda t: t % 5, tokens).named("fifth")
    shifted = Map(lambda i: i, indices).named("shifted")
    program = SelectorWidth(Select(tokens, fifth, Comparison.LT) & Select(indices, shifted, Comparison.EQ)
                            & Select(tokens, fifth, Comparison.EQ))
    ct = compile_to_transformer(program, vocab, 40)
    nodes = ct.program.by_uid
    assert ct.layout.binary(nodes[indices.uid]) and ct.layout.binary(nodes[shifted.uid])
    assert ct.layout.binary(nodes[tokens.uid]) == [] and ct.layout.binary(nodes[fifth.uid]) == []
    rng = random.Random(2)
    for _ in range(4):
        xs = [rng.choice(vocab) for _ in range(rng.randint(1, 40))]
        assert ct.run(xs) == _interpreter(program, xs, True)
    both = SequenceMap(lambda a, b: a * 10 + b,
                       SelectorWidth(Select(tokens, tokens, Comparison.EQ)),
                       SelectorWidth(Select(tokens, fifth, Comparison.EQ)))
    ct = compile_to_transformer(both, vocab, 12)
    assert ct.layout.binary(ct.program.by_uid[tokens.uid])
    for _ in range(4):
        xs = [rng.choice(vocab[:8]) for _ in range(rng.randint(1, 12))]
        assert ct.run(xs) == _interpreter(both, xs, True)


def test_minus_one_does_not_alias_the_largest_index(binary_everywhere):
    """Indices 0..63 and the code -1: the bit width must hold both (7 bits: -1 is 1111111, 63 is
    0111111); with one bit fewer, -1 would be 63 and select the last key."""
    n = 64
    query = Map(lambda i: -1 if i == 0 else i - 1, indices).named("previous_or_minus_one")
    program = Aggregate(Select(indices, query, Comparison.EQ), tokens, default=4)
    ct = compile_to_transformer(program, VOCAB, n, causal=False)
    assert ct.layout.n_bits == 7
    assert ct.layout.binary(ct.program.by_uid[query.uid])
    xs = [random.Random(s).choice([0, 1, 2, 3]) for s in range(n - 1)] + [5]
    want = _interpreter(program, xs, False)
    assert want[0] == 4 and want[1:] == xs[:-1]
    assert ct.run(xs) == want


def test_an_equality_of_large_tokens_compiles_exactly_at_the_default_threshold():
    """Histogram of tokens 10**7 .. 10**7 + 39: in the quadratic form (beta = 80) its terms reach
    about 2 * 10**16 and the compiler refused it; on 25-bit codes each term is 40."""
    vocab = [10**7 + i for i in range(40)]
    program = SelectorWidth(Select(tokens, tokens, Comparison.EQ))
    ct = compile_to_transformer(program, vocab, 12)
    assert ct.layout.n_bits == 25
    rng = random.Random(1)
    for _ in range(5):
        xs = [rng.choice(vocab[:6]) for _ in range(rng.randint(1, 12))]
        assert ct.run(xs) == _interpreter(program, xs, True)


@pytest.mark.parametrize("causal", [True, False])
def test_an_aggregate_copies_the_bits_of_its_value_and_of_its_default(binary_everywhere, causal):
    """``last5``: the index of the last 5 (max over indices), -1 where there is none; the bits
    travel from ``indices`` through the max head (BOS carries the default's bits), and an
    equality on ``last5`` reads them."""
    n = 40
    is5 = Map(lambda t: t == 5, tokens)
    last5 = Aggregate(Select(is5, Full(True), Comparison.EQ), indices, reduce="max", default=-1)
    key = Map(lambda i: -1 if i == 0 else i, indices)
    program = Aggregate(Select(key, last5, Comparison.EQ), tokens, default=4)
    ct = compile_to_transformer(program, VOCAB, n, causal=causal)
    layout, nodes = ct.layout, ct.program.by_uid
    assert all(layout.binary(nodes[s.uid]) for s in (last5, key, indices))
    rng = random.Random(7)
    for trial in range(12):
        xs = [rng.choice(VOCAB if trial % 3 else [0, 1, 2]) for _ in range(rng.randint(1, n))]
        want = _interpreter(program, xs, causal)
        assert ct.run(xs) == want, xs


@pytest.mark.parametrize("n", [40, 200])
def test_measured_leak_of_a_binary_equality_is_below_the_documented_bound(binary_everywhere, n):
    """``index_select`` through bit products: the attention mass off the selected key, summed
    over the other keys, stays below (n + 1) e^-40 (40 is the documented margin, a literal)."""
    rng = random.Random(n)
    xs = [rng.choice([0, 1, 2, 3]) for _ in range(n)]
    where = Map(lambda i: (3 * i) % (i + 1), indices)      # some earlier index (or itself)
    program = lib.index_select(tokens, where, default=-1)
    ct = compile_to_transformer(program, VOCAB, n)
    assert ct.layout.binary(ct.program.by_uid[where.uid])
    assert ct.run(xs) == _interpreter(program, xs, True)
    with torch.no_grad():
        _, acts = ct.model(torch.tensor(ct.encode(xs)), return_cache=True)
    pattern = acts["blocks.0.attn.hook_pattern"][0, 0]
    worst = 0.0
    for r in range(n):
        keep = torch.ones(pattern.shape[-1], dtype=torch.bool)
        keep[(3 * r) % (r + 1) + 1] = False
        worst = max(worst, float(pattern[r + 1][keep].sum()))
    assert worst < (n + 1) * math.exp(-40)


def _trace(tm, tape):
    vocab = Vocab.for_machine(tm)
    ref = build_trace(simulate(tm, tape, 100_000), vocab)
    return ref, min_ngram(split_configs(ref, vocab))


@pytest.mark.parametrize("machine", ["addition", "random"])
def test_program_p_with_binary_codes_matches_the_simulator(binary_everywhere, machine):
    """Every equality of program P on bits (positions, separators, the n-gram's tokens):
    teacher-forced and greedy, against the simulator."""
    if machine == "addition":
        tm, tape = TASKS["addition"].build("9057+968")
    else:
        tape = ["1", "0", "2", "1", "0", "2"]
        sample = sample_machine(n_states=3, n_symbols=3, tape=tape, seed=3, min_steps=6,
                                max_steps=60, max_tries=2000)
        tm = sample.machine
    ref, n = _trace(tm, tape)
    compiled = transformer_program(tm, n).to_transformer(len(ref))
    assert compiled.compiled.layout.n_bits > 0
    L = len(tape)
    assert compiled.teacher_forced(ref) == ref[L + 2:]
    assert compiled.greedy(ref[:L + 2], len(ref)) == ref


def test_a_long_trace_compiles_with_its_lookup_scores_small():
    """At about 15 000 tokens the match head (a max over 15 000 indices, so ``beta`` about
    1.2e6) would reach scores of 1e15 in the quadratic form, over the slack; its position
    equality now uses bits, and no head's scores can round by more than 0.1 (the slack is 2, the
    margin 40)."""
    rng = random.Random(0)
    a, b = ("".join(rng.choice("0123456789") for _ in range(122)) for _ in range(2))
    tm, tape = TASKS["addition"].build(f"{a}+{b}")
    ref, n = _trace(tm, tape)
    assert len(ref) > 15_000
    compiled = transformer_program(tm, n).to_transformer(len(ref)).compiled
    nodes = {node.label: node for node in compiled.program.nodes}
    assert all(compiled.layout.binary(nodes[s]) for s in ("key_sep", "prev_sep", "last_sep"))
    bounds = precision.coordinate_bounds(compiled.layout)
    assert max(precision.rounding_bound(h, bounds) for hs in compiled.heads for h in hs) < 0.1
