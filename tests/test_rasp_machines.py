"""Turing-machine specs, reference simulator, traces, premise checker and library machines
(docs/rasp.md, "Turing machines")."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from rasp.errors import MachineInputError, MachineSpecError, StepBudgetExceeded
from rasp.turing.library import (TASKS, addition_machine, addition_tape, increment_machine,
                          multiplication_machine, random_machine, sample_machine)
from rasp.turing.machines import (Config, TuringMachine, Vocab, address_tags, build_trace, min_ngram,
                           repeated_ngram, simulate, split_configs)

FLIP = {"states": ["a", "b", "H"], "start": "a", "halt": ["H"], "alphabet": ["0", "1"], "blank": "0",
        "head": 0, "transitions": [["a", "0", "a", "1", "R"], ["a", "1", "b", "1", "L"],
                                    ["b", "1", "H", "0", "L"], ["b", "0", "H", "0", "R"]]}


def machine(**changes):
    return TuringMachine.from_dict({**FLIP, **changes}, name="flip")


# ------------------------------------------------------------------------ spec checks


@pytest.mark.parametrize("changes, culprit", [
    ({"transitions": FLIP["transitions"] + [["z", "0", "a", "0", "R"]]}, "unknown state 'z'"),
    ({"transitions": [["a", "0", "q9", "1", "R"]]}, "unknown next state 'q9'"),
    ({"transitions": [["a", "7", "a", "1", "R"]]}, "unknown read symbol '7'"),
    ({"transitions": [["a", "0", "a", "x", "R"]]}, "unknown written symbol 'x'"),
    ({"transitions": [["a", "0", "a", "1", "U"]]}, "move must be 'L' or 'R'"),
    ({"transitions": [["a", "0", "a", "1"]]}, "must have 5 entries"),
    ({"transitions": [["a", "0", "a", "1", "R"], ["a", "0", "b", "1", "R"]]}, "both define"),
    ({"transitions": [["H", "0", "a", "1", "R"]]}, "leaves halting state 'H'"),
    ({"start": "nowhere"}, "start state 'nowhere'"),
    ({"start": "H"}, "is a halting state"),
    ({"halt": []}, "never halt"),
    ({"halt": ["X"]}, "halting state 'X'"),
    ({"blank": "_"}, "blank symbol '_'"),
    ({"states": ["a", "a", "H"]}, "duplicate entry 'a'"),
    ({"head": "left"}, "head must be an integer"),
    ({"colour": 3}, "unknown field 'colour'"),
    ({"alphabet": "01"}, "'alphabet' must be a list"),
])
def test_malformed_specs_name_the_culprit(changes, culprit):
    with pytest.raises(MachineSpecError, match=culprit):
        machine(**changes)


def test_missing_field_and_json_files(tmp_path):
    spec = dict(FLIP)
    del spec["blank"]
    with pytest.raises(MachineSpecError, match="missing field 'blank'"):
        TuringMachine.from_dict(spec)
    path = tmp_path / "flip.json"
    path.write_text(json.dumps(FLIP))
    tm = TuringMachine.from_json(path)
    assert tm.name == "flip" and TuringMachine.from_dict(tm.to_dict()) == tm
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(MachineSpecError, match="not valid JSON"):
        TuringMachine.from_json(tmp_path / "bad.json")
    with pytest.raises(MachineSpecError, match="cannot read"):
        TuringMachine.from_json(tmp_path / "absent.json")


def test_input_symbols_must_be_in_the_alphabet():
    tm = machine()
    assert tm.parse_tape("0101") == ["0", "1", "0", "1"] and tm.parse_tape("0 1") == ["0", "1"]
    with pytest.raises(MachineInputError, match="'2' at cell 1"):
        tm.parse_tape("02")
    with pytest.raises(MachineInputError, match="empty"):
        tm.parse_tape("")


# ----------------------------------------------------------------------- simulation


def test_simulator_hand_run_and_boundary_rule():
    run = simulate(machine(), list("001"), max_steps=10)
    # a: 0->1 R, 0->1 R, reads 1 -> b, L; b reads 1 -> H writes 0, L
    assert run.configs == (Config(("0", "0", "1"), 0, "a"), Config(("1", "0", "1"), 1, "a"),
                           Config(("1", "1", "1"), 2, "a"), Config(("1", "1", "1"), 1, "b"),
                           Config(("1", "0", "1"), 0, "H"))
    # moving off the left end keeps the head at cell 0; the write and state change happen
    left = TuringMachine(states=("a", "H"), start="a", halt=("H",), alphabet=("0", "1"), blank="0",
                         transitions=[["a", "0", "a", "1", "L"], ["a", "1", "H", "0", "L"]])
    assert [(c.tape, c.head, c.state) for c in simulate(left, ["0", "0"], 5).configs] == [
        (("0", "0"), 0, "a"), (("1", "0"), 0, "a"), (("0", "0"), 0, "H")]


def test_missing_transition_for_a_reached_pair():
    tm = machine(transitions=[["a", "0", "a", "1", "R"]])    # (a, 1) undefined
    with pytest.raises(MachineSpecError, match=r"state 'a' reading '1' \(reached at step 1, cell 1\)"):
        simulate(tm, ["0", "1"], 10)


def test_halting_exactly_at_the_step_budget():
    run = simulate(machine(), list("001"), max_steps=4)        # halts at step 4
    assert run.steps == 4 and run.final.state == "H"
    trace = build_trace(run, Vocab.for_machine(run.machine))
    assert trace[-1] == Vocab.for_machine(run.machine).EOS and trace.count(trace[-1]) == 1
    with pytest.raises(StepBudgetExceeded, match="within 3 steps"):
        simulate(machine(), list("001"), max_steps=3)


def test_step_budget_message_hints_at_the_blank_only_when_it_applies():
    stop_on_blank = machine(blank="_", alphabet=["0", "1", "_"],
                            transitions=[["a", "0", "a", "0", "R"], ["a", "1", "a", "1", "R"],
                                         ["a", "_", "H", "_", "R"]])
    with pytest.raises(StepBudgetExceeded, match=r"no blank cell .* e\.g\. '011_'; otherwise"):
        simulate(stop_on_blank, list("011"), 20)
    assert simulate(stop_on_blank, list("011_"), 20).final.state == "H"
    multi = TuringMachine(states=("a", "H"), start="a", halt=("H",), alphabet=("x1", "b0"),
                          blank="b0", transitions=[["a", "x1", "a", "x1", "R"], ["a", "b0", "H", "b0", "R"]])
    with pytest.raises(StepBudgetExceeded, match="e.g. 'x1 x1 b0'"):
        simulate(multi, ["x1", "x1"], 5)
    # no hint for a machine that never halts on the blank, nor for an input holding a blank
    loop = machine(transitions=[["a", "0", "a", "0", "R"], ["a", "1", "a", "1", "L"]])
    from_the_right = TuringMachine.from_dict({**stop_on_blank.to_dict(), "head": -1})
    for tm, tape in ((loop, "01"), (from_the_right, "_11")):
        with pytest.raises(StepBudgetExceeded, match="within 8 steps") as exc:
            simulate(tm, list(tape), 8)
        assert "blank" not in str(exc.value) and str(exc.value).endswith("raise --max-steps")


def test_trace_format_and_vocab():
    tm = machine()
    v = Vocab.for_machine(tm)
    run = simulate(tm, list("01"), 10)
    trace = build_trace(run, v)
    assert [v.render(t) for t in trace[:7]] == ["BOS", "[0|a]", "1", "SEP", "1", "[1|a]", "SEP"]
    assert trace[-1] == v.EOS and len(trace) == 1 + 3 * len(run.configs)
    assert split_configs(trace, v)[0] == trace[1:3]
    # integer coding: head <s,q> -> |S| + q|S| + s
    assert v.cell(1, 2) == 2 + 2 * 2 + 1 and v.decode(v.cell(1, 2)) == (1, 2, 0)
    assert (v.BOS, v.SEP, v.EOS, v.size) == (8, 9, 10, 11)


def test_premise_checker():
    assert repeated_ngram([[1, 2, 3, 1, 2]], 2) == (0, 0, 3)
    assert repeated_ngram([[1, 2, 3, 1, 2]], 3) is None
    assert min_ngram([[1, 2, 3, 1, 2], [5, 5, 6]]) == 3
    assert min_ngram([[1, 1, 1, 1]]) == 4 and min_ngram([[1, 2]]) == 1


@given(length=st.integers(1, 60), letters=st.integers(2, 4))
def test_address_tags_have_unique_windows(length, letters):
    tags = address_tags(length, letters)
    order = 1
    while letters ** order + order - 1 < length:
        order += 1
    windows = [tuple(tags[i:i + order]) for i in range(length - order + 1)]
    assert len(tags) == length and len(set(windows)) == len(windows)
    assert set(tags) <= set(range(letters))


# ------------------------------------------------------------------ library machines


def tape_answer(run):
    return "".join(run.final.tape).lstrip("0") or "0"


@given(a=st.integers(0, 10**30), b=st.integers(0, 10**30))
def test_addition_machine_adds(a, b):
    tm, tape = addition_machine(), addition_tape(str(a), str(b))
    run = simulate(tm, tape, 100)
    assert tape_answer(run) == str(a + b)
    assert run.steps == len(tape)        # one step per cell, the last one halts


@given(a=st.integers(0, 10**30), d=st.integers(0, 9))
def test_multiplication_machine_multiplies(a, d):
    run = simulate(multiplication_machine(d), ["#"] + list(str(a)), 100)
    assert tape_answer(run) == str(a * d)


@given(x=st.integers(0, 2**40))
def test_increment_machine(x):
    run = simulate(increment_machine(), ["0"] + list(format(x, "b")), 100)
    assert int("".join(run.final.tape), 2) == x + 1


def test_tasks_parse_and_reject_inputs():
    tm, tape = TASKS["addition"].build(" 12 + 345 ")
    assert tape == ["#", "03", "14", "25"] and TASKS["addition"].expected("12+345") == "357"
    for name, text in [("addition", "12-3"), ("addition", "1a+2"), ("multiplication", "12*34"),
                       ("increment", "102")]:
        with pytest.raises(MachineInputError, match=name):
            TASKS[name].build(text)


def test_random_machines_are_deterministic_and_rejection_sampled():
    assert random_machine(3, 4, 0.2, seed=5) == random_machine(3, 4, 0.2, seed=5)
    assert random_machine(3, 4, 0.2, seed=5) != random_machine(3, 4, 0.2, seed=6)
    s = sample_machine(n_states=3, n_symbols=4, seed=11, ngram=3, min_steps=3, max_steps=50)
    assert s.run.steps >= 3 and s.run.final.state == "H"
    v = Vocab.for_machine(s.machine)
    assert min_ngram(split_configs(build_trace(s.run, v), v)) <= 3
    with pytest.raises(MachineSpecError, match="no random machine"):
        sample_machine(n_states=2, n_symbols=2, halt_prob=0.0, max_tries=5)
