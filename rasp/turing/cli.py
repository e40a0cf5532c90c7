"""CLI: run a Turing machine's reference simulator and its compiled RASP program side by side.

``python -m rasp.turing --machine NAME|PATH.json|random:SEED --input "..."`` (trace
format, program P, monitor and address track: our reconstruction of Hou et al., arXiv
2407.03310; tape conventions: docs/rasp.md). Exit status: 0 when the RASP trace equals the simulator's token for
token (and a library task's answer equals Python's), 1 when it does not, 2 on bad
input (one line on stderr, no traceback).
"""
from __future__ import annotations

import argparse
import json
import time
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from lengthgen.cli import ArgumentParser, UsageError, positive_integer, run_cli
from lengthgen.resources import require_memory
from rasp.analyse import analyse
from rasp.turing.program import compile_turing_machine
from rasp.errors import AmbiguousLookupError, RASPError
from rasp.turing.library import SPEC_DIR, TASKS, Task, random_machine, sample_machine
from rasp.turing.machines import (TuringMachine, Vocab, address_tags, build_trace, min_ngram, simulate,
                           split_configs)

EPILOG = """\
machines:
  addition          multi-digit addition, input "1234+987" (operands interleaved, carry in the state)
  multiplication    N x 1 multiplication, input "1234*7" (one machine per multiplier digit)
  increment         binary +1, input "1011"
  parity            rasp/turing/specs/parity.json, input "1011_" (writes E/O on the trailing blank)
  random:SEED[:STATES:SYMBOLS]
                    the first random machine from SEED on that halts on the input after
                    at least min(cells, 10) steps (rejection sampling; default 4 states,
                    6 symbols "0".."5", halting probability 0.1 per transition)
  PATH.json         {"states", "start", "halt", "alphabet", "blank", "head", "transitions"}
                    with transitions [[state, read, next_state, write, "L"|"R"], ...];
                    input: one character per cell, or symbols separated by spaces

tape:
  bounded: the tape is exactly the input's cells, nothing is added on either side;
  a move off either end leaves the head in place (the write and the state change
  still happen). A machine that halts on reading the blank therefore needs a blank
  cell in its input (parity: "1011_", not "1011"); without one it usually loops at
  the end of the tape until --max-steps runs out. The head starts on the spec's
  "head" cell (negative counts from the right). See docs/rasp.md, "Turing machines".

sizes (refused up front, one line naming the limit):
  --ngram N         1 <= N <= cells + 1 (a longer n-gram adds no information)
  --address-track B 2 <= B <= max(2, cells) (more letters than cells are never used)
  random:...        STATES x SYMBOLS <= 10^6 transitions (every try draws the whole table)
  memory            the simulator and the interpreter's T x T selections (about 10 bytes
                    per pair of trace tokens) must fit the free memory
                    (LENGTHGEN_IGNORE_MEMORY=1 tries anyway)

exit status: 0 traces match, 1 they differ (or the lookup became ambiguous),
             2 bad input (one "python -m rasp.turing: error: ..." line on stderr,
             nothing on stdout)
examples:
  python -m rasp.turing --machine addition --input 99+1 --show-trace
  python -m rasp.turing --machine random:7 --input 0123450 --mode teacher --json
  python -m rasp.turing --machine addition --input 31415+27182 --backend transformer --json
"""


PROG = "python -m rasp.turing"
#: random machines: the most transitions (STATES x SYMBOLS) one try may draw; about 10 us and
#: 700 bytes each (measured: random:1:300:300 draws in ~1 s and ~65 MB)
MAX_RANDOM_TRANSITIONS = 10**6
#: the interpreter's memory per pair of trace tokens (measured: 14,885 tokens peak near 2.1 GB)
BYTES_PER_TOKEN_PAIR = 10


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=PROG, epilog=EPILOG,
        description="Simulate a Turing machine in plain Python and with its compiled RASP\n"
                    "Turing-Program simulator (program P), and compare the traces\n"
                    "BOS c_0 SEP c_1 ... c_T EOS token for token. Prints the steps, the trace\n"
                    "length, the program's size and depth, whether the traces match, and the\n"
                    "final tape.")
    p.add_argument("--machine", required=True, metavar="NAME|PATH.json",
                   help="library machine, random:SEED[:STATES:SYMBOLS], or a JSON spec file")
    p.add_argument("--input", required=True, metavar="TEXT", help="the input (initial tape)")
    p.add_argument("--ngram", type=positive_integer, metavar="N",
                   help="n-gram order of the lookup, 1 <= N <= cells + 1 (default: the smallest n for "
                        "which no configuration of the simulated trace repeats an n-gram)")
    p.add_argument("--max-steps", type=positive_integer, default=10_000, metavar="S",
                   help="step budget of the simulator (>= 1); not halting within it is an error "
                        "(default 10000; see 'tape' below)")
    p.add_argument("--mode", choices=("teacher", "greedy"), default="greedy",
                   help="teacher: causal evaluation on the reference trace; greedy: autoregressive "
                        "decoding from BOS c_0 SEP (default)")
    p.add_argument("--backend", choices=("interpreter", "transformer"), default="interpreter",
                   help="interpreter: evaluate program P in the RASP interpreter (default); "
                        "transformer: compile P to the weights of a lengthgen.Transformer and run "
                        "it with lengthgen.decode (greedy: KV cache; teacher: one forward pass)")
    p.add_argument("--address-track", type=int, metavar="B", default=0,
                   help="tag cells with a read-only de Bruijn address over 2 <= B <= cells letters so "
                        "the premise holds for any machine (changes the vocabulary; 0: no address track)")
    p.add_argument("--show-trace", action="store_true", help="print the RASP trace, one configuration per line")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p


@dataclass
class _Resolved:
    machine: TuringMachine
    tape: list[str]
    task: Task | None


def resolve(spec: str, text: str, max_steps: int) -> _Resolved:
    """Machine and tape from ``--machine`` and ``--input``."""
    if spec in TASKS:
        tm, tape = TASKS[spec].build(text)
        return _Resolved(tm, tape, TASKS[spec])
    if spec.startswith("random:"):
        parts = spec.split(":")[1:]
        try:
            seed, states, symbols = (list(map(int, parts)) + [4, 6])[:3]
        except ValueError:
            raise RASPError(f"--machine {spec!r}: expected random:SEED[:STATES:SYMBOLS] with integers") from None
        if len(parts) not in (1, 3):
            raise RASPError(f"--machine {spec!r}: expected random:SEED or random:SEED:STATES:SYMBOLS")
        if states * symbols > MAX_RANDOM_TRANSITIONS:
            raise RASPError(f"--machine {spec!r}: STATES x SYMBOLS must be at most {MAX_RANDOM_TRANSITIONS:,} "
                            f"transitions, got {states * symbols:,} (every try draws the whole table, "
                            f"about {states * symbols * 1e-5 / 3600:.3g} hours each)")
        tape = random_machine(states, symbols, 0.1, seed).parse_tape(text)  # alphabet only
        # prefer runs of at least min(L, 10) steps; a short step budget keeps rejection cheap
        sample = sample_machine(n_states=states, n_symbols=symbols, tape=tape, seed=seed,
                                min_steps=min(len(tape), 10, max_steps),
                                max_steps=min(max_steps, 20 * len(tape) + 20), max_tries=2000)
        return _Resolved(sample.machine, tape, None)
    path = Path(spec)
    if path.suffix != ".json" and (SPEC_DIR / f"{spec}.json").is_file():
        path = SPEC_DIR / f"{spec}.json"
    elif path.suffix != ".json":
        raise RASPError(f"unknown machine {spec!r}: not one of {', '.join(sorted(TASKS))}, "
                        "parity, random:SEED or a .json file")
    tm = TuringMachine.from_json(path)
    return _Resolved(tm, tm.parse_tape(text), None)


def _check_sizes(args: argparse.Namespace, cells: int) -> None:
    """Refuse sizes that only cost time or memory, before the simulator runs: an n-gram longer than a
    configuration and its separator (its extra columns of ``rasp.lib.masked_ngram`` are masked, or the
    edge before BOS, so they add no information),
    more address letters than cells (order-1 tags use one letter per cell, ``address_tags``), and a
    step budget whose configurations (``cells`` symbols each) cannot be held."""
    if args.ngram is not None and args.ngram > cells + 1:
        raise UsageError(f"--ngram must be between 1 and {cells + 1} (a configuration of {cells} cells and its "
                         f"separator; a longer n-gram adds no information), got {args.ngram}")
    if args.address_track and not 2 <= args.address_track <= max(2, cells):
        raise UsageError(f"--address-track must be between 2 and {max(2, cells)} letters (one per cell of the "
                         f"{cells}-cell tape at most; more are never used), got {args.address_track}")
    require_memory(args.max_steps * (8 * cells + 120),
                   f"--max-steps {args.max_steps} on {cells} cells (one configuration kept per step)")


def _first_mismatch(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """Simulate, compile, run; return the report and the rendered trace lines."""
    res = resolve(args.machine, args.input, args.max_steps)
    tm, L = res.machine, len(res.tape)
    _check_sizes(args, L)
    sim = simulate(tm, res.tape, args.max_steps)
    tags = None
    if args.address_track:
        tags = address_tags(L, args.address_track)
    vocab = Vocab.for_machine(tm, max(1, args.address_track))
    ref = build_trace(sim, vocab, tags)
    premise_n = min_ngram(split_configs(ref, vocab))
    n = args.ngram if args.ngram is not None else premise_n
    if args.backend == "interpreter":
        require_memory(BYTES_PER_TOKEN_PAIR * len(ref) ** 2,
                       f"interpreting a trace of {len(ref):,} tokens ({sim.steps} steps on {L} cells)")
    monitor, extra = None, {}
    start = time.perf_counter()
    if args.backend == "transformer":
        tp = _run_transformer_backend(tm, n, vocab, ref, args.mode, extra)
    else:
        tp = compile_turing_machine(tm, n, vocab=vocab)
    try:
        if args.mode == "teacher":
            got = ref[:L + 2] + tp.teacher_forced(ref)
        else:
            bar = tqdm(total=len(ref) - L - 2, unit="tok", file=sys.stderr, leave=False,
                       disable=args.json or not sys.stderr.isatty() or args.backend == "transformer",
                       desc="greedy")
            with bar:
                got = (tp.greedy(ref[:L + 2], len(ref)) if args.backend == "transformer"
                       else tp.greedy(ref[:L + 2], len(ref), progress=bar))
    except AmbiguousLookupError as exc:
        monitor, got = str(exc), ref[:exc.position + 1]
    seconds = time.perf_counter() - start
    mismatch = _first_mismatch(ref, got) if monitor is None else len(got)
    final = list(sim.final.tape)
    stats = analyse(tp.output)
    report: dict[str, Any] = {
        "machine": tm.name, "match": mismatch is None, "steps": sim.steps, "trace_tokens": len(ref),
        "program_ops": stats.size, "attention_layers": stats.attention_layers,
        "heads_per_layer": list(stats.heads_per_layer), "ngram": n, "premise_ngram": premise_n,
        "mode": args.mode, "final_tape": final, "first_mismatch": mismatch, "monitor": monitor,
        "tape_cells": L, "halt_state": sim.final.state, "backend": args.backend,
        "n_tokens": len(ref), "seconds": round(seconds, 3), **extra,
    }
    if res.task is not None:
        report["answer"] = res.task.decode(final)
        report["expected"] = res.task.expected(args.input)
    lines = []
    if args.show_trace:
        got_cfgs, ref_cfgs = split_configs(got, vocab), split_configs(ref, vocab)
        for t, cfg in enumerate(got_cfgs):
            mark = " " if t < len(ref_cfgs) and cfg == ref_cfgs[t] else "!"
            lines.append(f"{mark} c_{t:<4} " + " ".join(vocab.render(x) for x in cfg))
    return report, lines


def _run_transformer_backend(tm: TuringMachine, n: int, vocab: Vocab, ref: list[int], mode: str,
                             extra: dict[str, Any]) -> Any:
    """Compile program P to transformer weights for this trace's length; size into ``extra``."""
    from rasp.turing.transformer import transformer_program

    from rasp.weights.graph import CompileError, CompileLimitError

    tp = transformer_program(tm, n, vocab=vocab)
    try:
        compiled = tp.to_transformer(len(ref))
    except CompileLimitError as exc:
        raise RASPError(f"--backend transformer: for this input program P (ngram={n}, "
                        f"{len(ref)} trace tokens) needs {exc.what}, over the compiler's limit "
                        f"{exc.limit_name} = {exc.limit}; use --backend interpreter, or a machine with fewer "
                        "states and symbols or a shorter input") from None
    except CompileError as exc:
        raise RASPError(f"--backend transformer: program P for this input does not compile to "
                        f"weights ({exc}); use --backend interpreter") from None
    stats = compiled.compiled.stats
    extra.update(layers=stats["layers"], heads=stats["heads"], d_model=stats["d_model"],
                 d_mlp=stats["d_mlp"], n_params=stats["params"],
                 compile_seconds=stats["compile_seconds"])
    return _Backend(tp, compiled)


@dataclass
class _Backend:
    """The compiled transformer behind the interpreter's ``teacher_forced``/``greedy`` calls."""

    program: Any
    compiled: Any

    @property
    def output(self) -> Any:
        return self.program.output

    def teacher_forced(self, trace: Sequence[int]) -> list[int]:
        return self.compiled.teacher_forced(trace)

    def greedy(self, prompt: Sequence[int], max_tokens: int) -> list[int]:
        return self.compiled.greedy(prompt, max_tokens)


def _text(report: dict[str, Any]) -> str:
    heads = "/".join(map(str, report["heads_per_layer"]))
    match = "yes" if report["match"] else f"NO (first mismatch at trace token {report['first_mismatch']})"
    rows = [
        ("machine", f"{report['machine']}, tape of {report['tape_cells']} cells"),
        ("steps", f"{report['steps']} (halted in state {report['halt_state']!r})"),
        ("trace tokens", f"{report['trace_tokens']} (period {report['tape_cells'] + 1})"),
        ("program", f"ngram={report['ngram']} (premise needs {report['premise_ngram']}), "
                    f"{report['program_ops']} ops, {report['attention_layers']} attention layers, "
                    f"heads per layer {heads}"),
        ("mode", f"{report['mode']} ({report['backend']}, {report['seconds']} s)"),
        ("match", match),
        ("final tape", " ".join(report["final_tape"])),
    ]
    if "d_model" in report:
        rows.append(("transformer", f"{report['layers']} layers, {report['heads']} heads, d_model "
                                    f"{report['d_model']}, d_mlp {report['d_mlp']}, "
                                    f"{report['n_params']} parameters"))
    if "answer" in report:
        ok = "correct" if report["answer"] == report["expected"] else "WRONG"
        rows.append(("answer", f"{report['answer']} (Python: {report['expected']}, {ok})"))
    return "\n".join(f"{k + ':':<14}{v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 match, 1 mismatch, 2 bad input: one line on stderr)."""
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    try:
        report, lines = run(args)
    except RASPError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        if args.show_trace:
            report["trace"] = lines
        print(json.dumps(report))
    else:
        if lines:
            print("\n".join(lines))
        print(_text(report))
    if report["monitor"]:
        print(f"monitor: {report['monitor']}", file=sys.stderr)
    ok = report["match"] and report.get("answer") == report.get("expected")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
