"""Every program of tracr's lib.py, ported to rasp.lib: the examples of tracr's docstrings as
literals, then each compiled to weights and compared with the interpreter on random inputs, causal
and non-causal, at several lengths."""
from __future__ import annotations

import random

import pytest

from rasp import lib
from rasp.core import tokens
from rasp.evaluate import evaluate
from tests.rasp_weights_checks import assert_compiled_agrees


def column(program, xs):
    return list(evaluate(program, list(xs)).column(program))


def test_the_examples_of_tracrs_docstrings():
    assert column(lib.make_frac_prevs(tokens == "l"), "hello") == [0, 0, 1 / 3, 1 / 2, 2 / 5]
    assert column(lib.make_pair_balance(tokens, "(", ")"), "a()b(c))") == [0, 1 / 2, 0, 0, 1 / 5, 1 / 6, 0, -1 / 8]
    assert column(lib.make_shuffle_dyck2(), "({)}") == [True] * 4
    assert column(lib.make_shuffle_dyck2(), "(){)}") == [False] * 5
    assert column(lib.make_shuffle_dyck(["()"]), "(()") == [False] * 3
    assert column(lib.shift_by(2, tokens), "abcd") == [None, None, "a", "b"]
    assert column(lib.detect_pattern(tokens, "abc"), "abcabc") == [False, False, True, False, False, True]
    assert column(lib.make_count(tokens, "a"), "aaabbc") == [3] * 6
    assert column(lib.make_count(tokens, "a"), "cabc") == [1] * 4
    assert column(lib.make_count_less_freq(2), "aaabbc") == [3] * 6
    assert column(lib.make_count_less_freq(2), "aacbbc") == [6] * 6
    assert column(lib.make_nary_sequencemap(lambda x, y, z: f"{x}{y}{z}", tokens, lib.shift_by(1, tokens),
                                            tokens), "ab") == ["aNonea", "bab"]


PROGRAMS = {
    "make_frac_prevs": (lambda n: lib.make_frac_prevs(tokens == "("), ["a", "(", ")"]),
    "make_pair_balance": (lambda n: lib.make_pair_balance(tokens, "(", ")"), ["a", "(", ")"]),
    "make_shuffle_dyck2": (lambda n: lib.make_shuffle_dyck2(), ["(", ")", "{", "}", "a"]),
    "shift_by": (lambda n: lib.shift_by(2, tokens), ["a", "b", "c"]),
    "detect_pattern": (lambda n: lib.detect_pattern(tokens, "ab"), ["a", "b", "c"]),
    "make_count": (lambda n: lib.make_count(tokens, "a"), ["a", "b", "c"]),
    "make_count_less_freq": (lambda n: lib.make_count_less_freq(2), ["a", "b", "c"]),
    "make_sort": (lambda n: lib.make_sort(tokens, tokens, max_seq_len=n, min_key=1), [1, 2, 3]),
    "make_nary_sequencemap": (lambda n: lib.make_nary_sequencemap(lambda x, y: x == y, tokens, lib.shift_by(1, tokens)),
                              ["a", "b"]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [5, 12])
def test_each_program_compiles_to_weights_that_equal_the_interpreter(name: str, causal: bool, n: int):
    build, vocab = PROGRAMS[name]
    rng = random.Random(n)
    inputs = [[rng.choice(vocab) for _ in range(length)] for length in (1, 2, n // 2, n, n)]
    assert_compiled_agrees(build(n), vocab, n, causal, inputs)
