"""Program P (the RASP Turing-program simulator) against the reference simulator.

Oracle: :func:`rasp.turing.machines.simulate` + :func:`build_trace` (plain Python) and Python ints.
"""
from __future__ import annotations

import pytest
from hypothesis import assume, given, settings, strategies as st

from rasp.turing.program import compile_turing_machine
from rasp.errors import AmbiguousLookupError, MachineSpecError
from rasp.turing.library import (addition_machine, addition_tape, increment_machine, multiplication_machine,
                          sample_machine)
from rasp.turing.machines import (TuringMachine, Vocab, address_tags, build_trace, min_ngram, simulate,
                           split_configs)


@st.composite
def halting_runs(draw, max_len=10, max_steps=60):
    """A random machine (the first one from a drawn seed that halts on the drawn input after at
    least a drawn number of steps: rejection sampling) and its run."""
    n_states, n_symbols = draw(st.integers(1, 4)), draw(st.integers(2, 6))
    length = draw(st.integers(1, max_len))
    tape = [str(s) for s in draw(st.lists(st.integers(0, n_symbols - 1), min_size=length,
                                          max_size=length))]
    try:
        sample = sample_machine(n_states=n_states, n_symbols=n_symbols, tape=tape,
                                halt_prob=draw(st.sampled_from([0.05, 0.1, 0.25])),
                                min_steps=draw(st.integers(1, 5)), seed=draw(st.integers(0, 10**6)),
                                max_steps=max_steps, max_tries=300)
    except MachineSpecError:        # no such machine among 300 seeds: rare, reject the example
        assume(False)
    return sample.run


def reference(run, tags=None, letters=1):
    vocab = Vocab.for_machine(run.machine, letters)
    return vocab, build_trace(run, vocab, tags)


def check_exact(run, n, vocab, trace):
    tp = compile_turing_machine(run.machine, n, vocab=vocab)
    L = len(run.configs[0].tape)
    assert tp.teacher_forced(trace) == trace[L + 2:]
    assert tp.greedy(trace[:L + 2], max_tokens=len(trace) + 5) == trace


@settings(max_examples=100)
@given(run=halting_runs(), extra=st.integers(0, 2))
def test_program_reproduces_every_premise_satisfying_trace(run, extra):
    vocab, trace = reference(run)
    n = min_ngram(split_configs(trace, vocab)) + extra     # the premise holds for this n
    check_exact(run, n, vocab, trace)


@settings(max_examples=100)
@given(run=halting_runs(), n=st.integers(1, 3))
def test_never_a_silent_wrong_trace(run, n):
    """Whatever n: the run equals the simulator's, or the monitor raises."""
    vocab, trace = reference(run)
    tp = compile_turing_machine(run.machine, n, vocab=vocab)
    L = len(run.configs[0].tape)
    premise = min_ngram(split_configs(trace, vocab)) <= n
    try:
        assert tp.greedy(trace[:L + 2], max_tokens=len(trace)) == trace
    except AmbiguousLookupError as exc:
        assert not premise and exc.position >= L + 1
    try:
        assert tp.teacher_forced(trace) == trace[L + 2:]
    except AmbiguousLookupError:
        assert not premise


@settings(max_examples=60)
@given(run=halting_runs(max_len=12), letters=st.integers(2, 3))
def test_address_track_makes_the_premise_hold(run, letters):
    L = len(run.configs[0].tape)
    tags = address_tags(L, letters)
    order = 1
    while letters ** order + order - 1 < L:
        order += 1
    vocab, trace = reference(run, tags, letters)
    assert min_ngram(split_configs(trace, vocab)) <= order
    check_exact(run, order, vocab, trace)


def test_first_occurrence_lookup_fails():
    """The np-rasp ``induct`` choice (first occurrence) breaks P when the guard only bounds keys
    from above (``k <= last_sep + 1``): unchanged cells repeat in every earlier configuration, so
    the lookup needs the last match. P's own guard keeps only the previous configuration, where
    the premise leaves one match (checked by ``good``)."""
    total = wrong = 0
    checked = False
    for seed in range(0, 4000, 97):
        s = sample_machine(n_states=4, n_symbols=5, seed=seed, ngram=3, min_steps=4, max_steps=40,
                           tape_len=(6, 12))
        vocab, trace = reference(s.run)
        L = len(s.tape)
        good = compile_turing_machine(s.machine, 3, vocab=vocab)
        bad = compile_turing_machine(s.machine, 3, vocab=vocab, _first_occurrence=True)
        assert good.teacher_forced(trace) == trace[L + 2:]
        total += 1
        failed = bad.teacher_forced(trace, monitor=False) != trace[L + 2:]
        wrong += failed
        if failed and not checked:             # the monitor catches it instead of diverging
            checked = True
            with pytest.raises(AmbiguousLookupError, match="matched an earlier key"):
                bad.greedy(trace[:L + 2], len(trace))
    assert checked and total >= 30 and wrong / total > 0.8


@settings(max_examples=40)
@given(a=st.integers(0, 10**12), b=st.integers(0, 10**12))
def test_compiled_addition_matches_python_ints(a, b):
    tape = addition_tape(str(a), str(b))
    run = simulate(addition_machine(), tape, 100)
    tags = address_tags(len(tape), 2)
    vocab, trace = reference(run, tags, 2)
    tp = compile_turing_machine(run.machine, 4, vocab=vocab)   # 2**4 + 3 >= 14 cells
    got = tp.greedy(trace[:len(tape) + 2], len(trace))
    last = split_configs(got, vocab)[-1]
    digits = "".join(addition_machine().alphabet[vocab.decode(t)[0]] for t in last)
    assert got[-1] == vocab.EOS and (digits.lstrip("0") or "0") == str(a + b)


@given(a=st.integers(0, 10**9), d=st.integers(0, 9), x=st.integers(0, 2**12))
def test_compiled_multiplication_and_increment(a, d, x):
    for tm, tape, answer, base in [(multiplication_machine(d), ["#"] + list(str(a)), a * d, 10),
                                   (increment_machine(), ["0"] + list(format(x, "b")), x + 1, 2)]:
        run = simulate(tm, tape, 100)
        tags = address_tags(len(tape), 2)
        vocab, trace = reference(run, tags, 2)
        tp = compile_turing_machine(tm, 4, vocab=vocab)
        got = tp.greedy(trace[:len(tape) + 2], len(trace))
        cells = [tm.alphabet[vocab.decode(t)[0]] for t in split_configs(got, vocab)[-1]]
        assert got == trace and int("".join(cells), base) == answer


def test_halting_exactly_at_the_step_budget_emits_eos():
    tm = TuringMachine.from_dict({"states": ["a", "H"], "start": "a", "halt": ["H"],
                                  "alphabet": ["0", "1", "2"], "blank": "0",
                                  "transitions": [["a", "0", "a", "1", "R"], ["a", "1", "a", "2", "R"],
                                                  ["a", "2", "H", "2", "R"]]})
    run = simulate(tm, list("0012"), max_steps=4)       # halts at exactly step 4
    assert run.steps == 4
    vocab, trace = reference(run)
    tp = compile_turing_machine(tm, min_ngram(split_configs(trace, vocab)), vocab=vocab)
    got = tp.greedy(trace[:6], max_tokens=10_000)
    assert got == trace and got[-1] == vocab.EOS and got.count(vocab.EOS) == 1
    assert tp.greedy(trace[:6], max_tokens=len(trace) - 1) == trace[:-1]   # budget cut: no EOS


def test_program_size_is_linear_in_n_with_four_attention_layers():
    tm = addition_machine()
    stats = {n: compile_turing_machine(tm, n).stats for n in range(1, 10)}
    # O(n): from n = 3 on every extra n-gram position adds the same 12 ops
    # (2 shift heads + 1 mask + 1 OR + 1 concat, for the query and for the key, + a shared shift)
    assert {stats[n + 1].size - stats[n].size for n in range(3, 9)} == {12}
    assert all(s.attention_layers == 4 for s in stats.values())
    for n in range(3, 10):
        assert stats[n].heads_per_layer == (2 * n - 1, 2 * n + 1, 1, 1)   # + prev_sep, key_sep
