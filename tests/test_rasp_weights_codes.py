"""``onehot_max``: categorical s-ops as integer codes instead of one-hot dimensions (and, with the
same programs, the ``plateau`` option's flat tables).

With ``onehot_max=0`` every categorical s-op that no order or custom comparison reads holds an
integer code (two residual dimensions, docs/turing-programs.md "Residual layout"). Every program
of the other compiler tests must still equal the interpreter, and program P must match the
machine simulator while shrinking (the n-gram cells of a 4-state, 4-symbol machine: 23 tokens).
"""
from __future__ import annotations

import random

import pytest

from rasp.weights.graph import CompileError
from rasp.turing.library import sample_machine
from rasp.turing.machines import Vocab, build_trace
from rasp.turing.transformer import transformer_program
from rasp.weights import compile_to_transformer
from rasp.core import tokens
from tests.rasp_weights_checks import assert_compiled_agrees
from tests.test_rasp_tracr_lib import PROGRAMS as TRACR_PROGRAMS
from tests.test_rasp_weights_programs import PROGRAMS, VOCAB


#: compile options every program must survive: codes instead of one-hot dimensions, and MLP tables
#: that are flat around their points (tests/test_rasp_weights_plateau.py checks the tables themselves)
OPTIONS = {"codes only": {"onehot_max": 0}, "flat tables": {"plateau": 0.25}}


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("causal", [False, True])
def test_every_program_equals_the_interpreter_with_compile_options(name: str, causal: bool, option: str):
    if name == "length" and not causal or name == "sort_unique" and causal:
        pytest.skip("defined for the other attention direction only")
    rng = random.Random(7)
    inputs = [[rng.choice(VOCAB) for _ in range(k)] for k in (1, 2, 5, 9, 12, 12)]
    if name == "sort_unique":
        inputs = [rng.sample(VOCAB, k) for k in (1, 2, 3, 4, 4)]
    ct = assert_compiled_agrees(PROGRAMS[name](), VOCAB, 12, causal, inputs, **OPTIONS[option])
    if option == "codes only":
        one_hot = [n.label for n in ct.program.nodes if n.encoding == "onehot" and not n.needs_table
                   and not (n.kind == "attn" and n.deps[0].encoding == "onehot")]  # an aggregate copies its value's kind
        assert one_hot == [], f"one-hot s-ops left with onehot_max=0: {one_hot}"


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("name", sorted(TRACR_PROGRAMS))
def test_tracr_library_programs_equal_the_interpreter_with_compile_options(name: str, option: str):
    build, vocab = TRACR_PROGRAMS[name]
    rng = random.Random(3)
    for causal in (False, True):
        inputs = [[rng.choice(vocab) for _ in range(k)] for k in (1, 3, 6, 10, 10)]
        assert_compiled_agrees(build(10), vocab, 10, causal, inputs, **OPTIONS[option])


def test_program_p_with_coded_cells_matches_the_simulator_and_is_narrower():
    sample = sample_machine(n_states=4, n_symbols=4, tape_len=(8, 10), min_steps=20, max_steps=400, seed=1)
    vocab = Vocab.for_machine(sample.machine)
    assert vocab.size <= 32                       # so that the default layout makes its tokens one-hot
    ref = build_trace(sample.run, vocab)
    program = transformer_program(sample.machine, 8)
    wide = program.to_transformer(len(ref), onehot_max=32)
    narrow = program.to_transformer(len(ref), onehot_max=0)
    assert narrow.compiled.stats["d_model"] * 2 < wide.compiled.stats["d_model"]
    start = len(sample.tape) + 2
    assert narrow.greedy(ref[:start], len(ref), monitor=False) == ref
    assert wide.greedy(ref[:start], len(ref), monitor=False) == ref


@pytest.mark.parametrize("bad", [-1, 2.5, True, "32"])
def test_onehot_max_must_be_a_count(bad):
    with pytest.raises(CompileError, match="onehot_max must be an integer >= 0"):
        compile_to_transformer(tokens, VOCAB, 4, onehot_max=bad)


def test_values_that_are_not_integers_get_codes_below_every_integer():
    """Codes follow Python's ``==`` (an integer is its own code); ``None`` and strings sit below
    ``min(0, smallest integer)``, so they stay small however far the indices reach."""
    from rasp.core import Map, SequenceMap, indices
    from rasp.weights.graph import Program

    program = SequenceMap(lambda t, i: None if t == 0 else ("x" if i > 900 else t - 2), tokens, indices)
    p = Program(program, VOCAB, 1000, True)
    assert p.code(-1) == -1 and p.code(999) == 999                 # the smallest integer value is -1
    assert {p.code(None), p.code("x")} == {-2, -3}
    q = Program(Map(lambda t: None if t == 0 else t, tokens), VOCAB, 5, True)
    assert q.code(None) == -1
    r = Program(Map(lambda t: None if t == 1 else t, tokens), [1, 2, 3], 5, True)   # below 0 too
    assert r.code(None) == -1


def test_binary_from_zero_puts_every_equality_that_can_on_bits():
    from rasp.core import Aggregate, Comparison, Select, indices

    from rasp.core import Map

    scrambled = Map(lambda i: (7 * i) % 40, indices)          # 40 values: ordinal, computed by an MLP
    program = Aggregate(Select(indices, scrambled, Comparison.EQ), tokens, default=0)
    default = compile_to_transformer(program, VOCAB, 40)
    rng = random.Random(5)
    bits = assert_compiled_agrees(program, VOCAB, 40, False, [[rng.choice(VOCAB) for _ in range(k)] for k in (3, 40)],
                                  binary_from=0.0)
    assert not any(":bit" in label for label in default.residual_labels)
    assert any(label.startswith("indices:bit") for label in bits.residual_labels)
    with pytest.raises(CompileError, match="binary_from must be a number >= 0"):
        compile_to_transformer(program, VOCAB, 4, binary_from=-1.0)
