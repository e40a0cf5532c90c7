"""rasp.weights on large integer values: refused, or equal to the interpreter (never silently wrong).

Equality atoms score ``beta*(2 c_k c_q - c_k**2)`` in the integer codes and an ordinal output's
logits are ``2 c x - c**2``, so a value set of large integers (tokens 10**8 .. 10**8 + 39) drives
them past what float64 holds exactly. Before the guard of rasp/weights/precision.py such programs
compiled and the model answered wrong: ``make_hist`` over tokens 10**8 + i gave 12 for every
position of a 7-token input. The oracle is the interpreter's dense path (``evaluate(fast=False)``).
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from rasp import lib
from rasp.core import Aggregate, Comparison, Map, Select, SelectorWidth, SequenceMap, indices, tokens
from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer
from rasp.weights.values import CompileLimitError

PROGRAMS = {
    "hist": lambda: SelectorWidth(Select(tokens, tokens, Comparison.EQ)),
    "identity": lambda: Map(lambda t: t, tokens),
    "firsts": lambda: lib.firsts(tokens, tokens),
    "lasts": lambda: lib.lasts(tokens, tokens),
    "shift": lambda: lib.shift_right(tokens, 1, 0),
    "positions": lambda: Aggregate(Select(Map(lambda i: i + 4097, indices), Map(lambda i: i + 4097, indices),
                                          Comparison.EQ), tokens),
    "shifted sum": lambda: lib.shift_right(SequenceMap(lambda t, i: t + i % 3, tokens, indices), 1, 0),
    "sort": lambda: lib.make_sort_unique(tokens, tokens),
}


def _agree_or_refuse(program, vocab, xs, causal, n=12, dtype=torch.float64):
    try:
        ct = compile_to_transformer(program, vocab, n, causal=causal, dtype=dtype)
    except CompileLimitError as exc:
        return exc
    want = list(evaluate(program, xs, causal=causal, fast=False).column(program))
    assert ct.run(xs) == want, (vocab[:2], xs)
    return ct


@settings(max_examples=40, deadline=None)
@given(base=st.sampled_from([4097, 10**5, 3 * 10**6, 10**7, 10**8 + 1, 2**26 + 1, 2**53 + 1, 2**62]),
       onehot=st.booleans(), name=st.sampled_from(sorted(PROGRAMS)), causal=st.booleans(),
       picks=st.lists(st.integers(0, 4), min_size=1, max_size=12))
def test_large_integer_values_are_refused_or_exact(base, onehot, name, causal, picks):
    """Three values (one-hot, codes 0, 1, base) or forty (ordinal, codes base .. base + 39)."""
    vocab = [0, 1, base] if onehot else [base + i for i in range(40)]
    xs = [vocab[p % len(vocab)] if p < 3 else vocab[-1 - p % 2] for p in picks]
    _agree_or_refuse(PROGRAMS[name](), vocab, xs, causal)


@settings(max_examples=40, deadline=None)
@given(base=st.sampled_from([2, 100, 1000, 3000, 4097, 5000, 10**4, 2**24 + 1]),
       onehot=st.booleans(), name=st.sampled_from(sorted(PROGRAMS)), causal=st.booleans(),
       picks=st.lists(st.integers(0, 4), min_size=1, max_size=12))
def test_float32_weights_are_refused_or_exact(base, onehot, name, causal, picks):
    """The guard in float32's unit roundoff (2^-24): codes whose squares pass 2^24, scores that
    are not integer arithmetic below 2^24 and logits of large codes are refused."""
    vocab = [0, 1, base] if onehot else [base + i for i in range(40)]
    xs = [vocab[p % len(vocab)] if p < 3 else vocab[-1 - p % 2] for p in picks]
    _agree_or_refuse(PROGRAMS[name](), vocab, xs, causal, dtype=torch.float32)


def test_float32_refuses_codes_near_5000_that_it_used_to_compile_wrong():
    """``shift_right(t + i % 3)`` over the tokens 5000..5039: the code 5039's square passes 2^24.
    float32 weights used to compile and answer wrong on every input tried; float64 compiles, and
    agrees with the interpreter."""
    program = lib.shift_right(SequenceMap(lambda t, i: t + i % 3, tokens, indices), 1, 5000)
    vocab = list(range(5000, 5040))
    exc = _agree_or_refuse(program, vocab, [5000], True, n=16, dtype=torch.float32)
    assert isinstance(exc, CompileLimitError) and "float32" in str(exc) and "2^24" in str(exc)
    assert exc.limit == 2.0**24
    ct = _agree_or_refuse(program, vocab, [5039, 5001, 5020, 5000, 5038, 5011, 5007], True, n=16)
    assert not isinstance(ct, Exception)


@pytest.mark.parametrize("name", ["hist", "firsts", "identity"])
def test_the_guard_names_the_limit(name):
    """Tokens 10**8 .. 10**8 + 39: the code's square passes 2^53, which the message names."""
    exc = _agree_or_refuse(PROGRAMS[name](), [10**8 + i for i in range(40)], [10**8], True)
    assert isinstance(exc, CompileLimitError) and "2^53" in str(exc) and exc.limit == 2.0**53


def test_codes_of_a_few_thousand_still_compile_exactly():
    """Positions shifted by 4097 (odd squares above 2^24, exact in float64) and tokens 4097..4136:
    far inside the guard, so they must compile and agree."""
    vocab = [4097 + i for i in range(40)]
    xs = [4097, 4136, 4100, 4097, 4101, 4136]
    for name in ("hist", "identity", "firsts", "lasts", "positions"):
        for causal in (True, False):
            assert not isinstance(_agree_or_refuse(PROGRAMS[name](), vocab, xs, causal, n=40), Exception)


def test_mlp_biases_past_2_to_the_24_are_exact():
    """An affine table on 2^24 + 1 + (0..39): its output bias and its hidden biases need float64
    (float32 would round 2^24 + 1 to 2^24); a lookup reads the result."""
    last = Aggregate(Select(tokens, tokens, Comparison.EQ), indices, reduce="max", default=1)
    program = Map(lambda v: v % 3, last + (2**24 + 1))
    xs = [0, 1, 2, 3, 0, 2] * 6
    assert not isinstance(_agree_or_refuse(program, [0, 1, 2, 3], xs, False, n=40), Exception)
