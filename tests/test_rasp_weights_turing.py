"""The Turing-Program simulator as weights: compiled program P against the reference simulator
(rasp.turing.machines.simulate, plain Python sharing no code with the compiler), teacher-forced and
greedy (lengthgen.decode.greedy_generate with a KV cache), and the CLI's transformer backend."""
from __future__ import annotations

import json

import pytest

from rasp.errors import AmbiguousLookupError
from rasp.turing.library import TASKS, sample_machine
from rasp.turing.machines import Vocab, build_trace, min_ngram, simulate, split_configs
from rasp.turing.cli import main
from rasp.turing.transformer import transformer_program

INPUTS = {"addition": "905+97", "multiplication": "4096*7", "increment": "10111", "parity": "1011_"}


def _reference(tm, tape):
    vocab = Vocab.for_machine(tm)
    ref = build_trace(simulate(tm, tape, 2000), vocab)
    return vocab, ref, min_ngram(split_configs(ref, vocab))


def _check_both_modes(tm, tape):
    vocab, ref, n = _reference(tm, tape)
    compiled = transformer_program(tm, n).to_transformer(len(ref))
    L = len(tape)
    assert compiled.teacher_forced(ref) == ref[L + 2:]
    assert compiled.greedy(ref[:L + 2], len(ref)) == ref


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_library_machines(name):
    if name == "parity":
        from rasp.turing.machines import TuringMachine
        from rasp.turing.library import SPEC_DIR

        tm = TuringMachine.from_json(SPEC_DIR / "parity.json")
        tape = tm.parse_tape(INPUTS[name])
    else:
        tm, tape = TASKS[name].build(INPUTS[name])
    _check_both_modes(tm, tape)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_premise_satisfying_random_machines(seed):
    import random

    rng = random.Random(seed)
    tape = [str(rng.randrange(5)) for _ in range(6)]
    sample = sample_machine(n_states=3, n_symbols=5, tape=tape, seed=seed, min_steps=6,
                            max_steps=60, max_tries=2000)
    _check_both_modes(sample.machine, tape)


def test_monitor_reports_an_ambiguous_lookup_from_the_residual_stream():
    tm, tape = TASKS["addition"].build("1111+1111")
    vocab, ref, n = _reference(tm, tape)
    assert n > 1
    compiled = transformer_program(tm, 1).to_transformer(len(ref))
    with pytest.raises(AmbiguousLookupError, match="ambiguous|missed"):
        compiled.teacher_forced(ref)


def test_cli_transformer_backend_json(capsys):
    assert main(["--machine", "addition", "--input", "58+67", "--backend", "transformer", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["match"] and report["answer"] == "125" and report["backend"] == "transformer"
    for key in ("layers", "heads", "d_model", "n_params", "n_tokens", "seconds"):
        assert report[key] > 0
    assert report["n_tokens"] == report["trace_tokens"]


def test_cli_transformer_backend_fails_with_too_small_ngram(capsys):
    status = main(["--machine", "addition", "--input", "1111+1111", "--backend", "transformer",
                   "--ngram", "1", "--mode", "teacher"])
    assert status == 1
    assert "monitor:" in capsys.readouterr().err


def test_to_transformer_from_the_interpreters_program():
    import rasp
    from rasp.turing.program import compile_turing_machine

    tm, tape = TASKS["increment"].build("1011")
    vocab, ref, n = _reference(tm, tape)
    compiled = compile_turing_machine(tm, n).to_transformer(len(ref))
    assert compiled.greedy(ref[:len(tape) + 2], len(ref)) == ref
    assert rasp.compile_to_transformer is rasp.weights.compile_to_transformer


def test_figure_cli_refuses_bad_input_in_one_line(tmp_path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "rasp.turing.plot", "--input", "9x9", "--out", str(tmp_path / "x.png")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "addition input must look like" in done.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("machine, ngram", [("increment", 2), ("addition", 3), ("random:2", 2), ("random:2", 6)])
def test_compiled_program_equals_the_interpreters_program_p_on_any_tokens(machine, ngram):
    """Weights == interpreter as functions, not only on traces: on random token sequences (SEP,
    BOS and EOS anywhere, every other sequence dense with SEP and BOS, so that an n-gram window
    holds several) the compiled transformer's output equals the interpreter's program P
    (rasp.turing.program, which has the lookup guard and masks the n-grams with its own chain of
    flags) at every position."""
    import random

    from rasp.turing.program import compile_turing_machine
    from rasp.evaluate import evaluate
    from rasp.turing.cli import resolve

    tm = resolve(machine, "0 1 1 0 1" if machine.startswith("random") else "1011" if machine == "increment"
                 else "12+34", 10_000).machine
    vocab = Vocab.for_machine(tm)
    interp = compile_turing_machine(tm, ngram, vocab=vocab)
    compiled = transformer_program(tm, ngram, vocab=vocab).to_transformer(40).compiled
    rng = random.Random(ngram)
    cells = list(range(vocab.BOS))
    for i in range(20):
        weight = 3 if i % 2 else len(cells) // 2
        xs = [vocab.BOS] + [rng.choice([vocab.SEP] * weight + cells + [vocab.BOS] * (weight // 3 + 1) + [vocab.EOS])
                            for _ in range(rng.randrange(1, 40))]
        assert compiled.run(xs) == list(evaluate(interp.output, xs, causal=True).column(interp.output))


def test_the_n_gram_costs_linearly_many_hidden_units_and_16_compiles():
    """An 8-state, 8-symbol machine: each extra n-gram cell costs the same number of hidden units
    (its table reads the cell's token and whether a separator lies inside its window, 2 x |tokens|
    entries, not |tokens| x 2^d), so the units grow by equal steps from n = 4 to 8 to 16; at n = 16,
    the largest order the 15-cell tape allows, P compiles and reproduces the simulator's trace."""
    from rasp.turing.cli import resolve

    tape = "1 2 3 4 5 6 7 0 1 2 3 4 5 6 7"
    tm = resolve("random:1:8:8", tape, 10_000).machine
    units = {n: transformer_program(tm, n).to_transformer(64).compiled.stats["mlp_units"] for n in (4, 8, 16)}
    step = (units[8] - units[4]) / 4
    assert step > 0 and units[16] - units[8] == 8 * step, units
    tape_cells = tm.parse_tape(tape)
    vocab, ref, _ = _reference(tm, tape_cells)
    compiled = transformer_program(tm, 16).to_transformer(len(ref))
    L = len(tape_cells)
    assert compiled.teacher_forced(ref) == ref[L + 2:]
    assert compiled.greedy(ref[:L + 2], len(ref)) == ref
