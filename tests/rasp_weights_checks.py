"""A compiled RASP program against the interpreter's dense path (rasp.evaluate with fast=False)."""
from __future__ import annotations

import pytest

from rasp.evaluate import evaluate
from rasp.weights import compile_to_transformer


def assert_compiled_agrees(program, vocab: list, n: int, causal: bool, inputs: list[list], **options):
    """Compile ``program`` for ``n`` positions (``options``: more keywords of
    ``compile_to_transformer``) and check its output on every input: equal for categorical outputs,
    within 1e-9 for numerical ones. Returns the compiled transformer."""
    ct = compile_to_transformer(program, vocab, n, causal=causal, **options)
    for xs in inputs:
        want = list(evaluate(program, xs, causal=causal, fast=False).column(program))
        got = ct.run(xs)
        if ct.program.output.numerical:
            assert got == pytest.approx(want, abs=1e-9), xs
        else:
            assert got == want, xs
    return ct
