"""Guards of the RASP -> weights compiler that a value set rarely drawn at random would pass.

Each test was written for a change that the compiler's other tests let through: a max/min over
ordinal values below zero (the rank's range taken as c_max + c_min instead of c_max − c_min
makes BOS win: every answer is the default), a max/min over ordinal values whose integer codes do
not follow the value order (a non-integer value among the integers, coded below every integer:
compiled, the head would pick by code, not by value), a float32 ordinal output whose logits the
float32 rounding could move past the slack (measured with float64's unit roundoff, the guard
would pass it), and a ``binary_from`` that is not a number (a bool, a string). The oracle is the
interpreter's dense path, or the refusal itself.
"""
from __future__ import annotations

import pytest
import torch

from rasp.core import Aggregate, Comparison, Map, Select, indices, tokens
from rasp.evaluate import evaluate
from rasp.weights import CompileError, compile_to_transformer
from rasp.weights.values import CompileLimitError

EVERY = Select(tokens, tokens, Comparison.TRUE)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("kind", ["tokens", "positions"])
def test_max_min_over_negative_ordinal_values_equal_the_interpreter(reduce, kind):
    """40 tokens -300..-261 (more than the one-hot limit of 32: ordinal codes, all negative), or
    positions shifted by -150 at 40 positions: the head must pick the largest (smallest) value."""
    vocab = list(range(-300, -260))
    value = tokens if kind == "tokens" else Map(lambda i: i - 150, indices)
    program = Aggregate(EVERY, value, reduce=reduce, default=0)
    ct = compile_to_transformer(program, vocab, 40, causal=True)
    for xs in ([-280, -300, -261, -290], [-261, -262], vocab[::3]):
        want = list(evaluate(program, xs, causal=True, fast=False).column(program))
        assert ct.run(xs) == want
        assert 0 not in want  # the default never wins: every prefix selects a key


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_min_over_values_whose_codes_do_not_follow_their_order_is_refused(reduce):
    """Values -1, 0.5, 1, 2, ..., 38 (40 of them: ordinal): 0.5 is coded below every integer, so
    the codes of -1, 0.5, 1 are not increasing; a max/min head ranks by code and is refused."""
    vals = {i: (0.5 if i == 1 else i - 1) for i in range(40)}
    program = Aggregate(EVERY, Map(lambda t: vals[t], tokens), reduce=reduce, default=0)
    with pytest.raises(CompileError, match="integer codes do not follow the value order"):
        compile_to_transformer(program, list(range(40)), 8)


def test_a_float32_ordinal_output_whose_logits_could_round_past_the_slack_is_refused():
    """Output codes 1001..1040: logits near 3.2e6, which float32 could round by about 0.6, over
    the slack of 1/4 between two classes; float64 compiles it and answers exactly."""
    program = Map(lambda t: t + 1, tokens)
    vocab = list(range(1000, 1040))
    assert compile_to_transformer(program, vocab, 6, dtype=torch.float64).run([1000, 1039]) == [1001, 1040]
    with pytest.raises(CompileLimitError, match="float32 could round a logit"):
        compile_to_transformer(program, vocab, 6, dtype=torch.float32)


@pytest.mark.parametrize("bad", [True, "8", None.__class__])
def test_binary_from_must_be_a_number(bad):
    with pytest.raises(CompileError, match="binary_from must be a number"):
        compile_to_transformer(Map(lambda t: t + 1, tokens), [0, 1, 2], 4, binary_from=bad)
