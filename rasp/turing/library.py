"""Library machines and the random-machine generator.

In-memory addition with interleaved operands and the carry in the state; N x 1
multiplication with the multiplier baked into the machine; random machines with
premise-based rejection. These formats are ours, not the paper's strings.

A :class:`Task` turns CLI input text into ``(machine, tape)`` and decodes the
final tape; ``expected`` computes the answer with Python integers, independently.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from rasp.errors import MachineInputError, MachineSpecError, StepBudgetExceeded
from rasp.turing.machines import Run, TuringMachine, Vocab, build_trace, min_ngram, simulate, split_configs

DIGITS = tuple(str(d) for d in range(10))
SPEC_DIR = Path(__file__).with_name("specs")


def _digits_answer(tape: Sequence[str]) -> str:
    return "".join(tape).lstrip("0") or "0"


# ------------------------------------------------------------------------ addition


def addition_machine() -> TuringMachine:
    """Cells hold digit pairs "ab" (LSB pair rightmost) after a "#" cell for the final carry.

    The head walks right to left writing ``(a + b + carry) % 10``; the carry is the
    state (c0/c1); at "#" it writes the carry and halts. m + 1 steps for m digits.
    """
    pairs = [x + y for x in DIGITS for y in DIGITS]
    rows = []
    for k in (0, 1):
        for xy in pairs:
            total = int(xy[0]) + int(xy[1]) + k
            rows.append([f"c{k}", xy, f"c{total // 10}", str(total % 10), "L"])
        rows.append([f"c{k}", "#", "H", str(k), "L"])
    return TuringMachine(states=("c0", "c1", "H"), start="c0", halt=("H",),
                         alphabet=tuple(pairs) + DIGITS + ("#",), blank="#",
                         transitions=rows, head=-1, name="addition")


def addition_tape(a: str, b: str) -> list[str]:
    """Interleave two digit strings (most significant first) into the addition tape."""
    m = max(len(a), len(b))
    return ["#"] + [x + y for x, y in zip(a.zfill(m), b.zfill(m))]


def _parse_operands(text: str, op: str, task: str, example: str) -> tuple[str, str]:
    match = re.fullmatch(rf"\s*(\d+)\s*{re.escape(op)}\s*(\d+)\s*", text)
    if not match:
        raise MachineInputError(f"{task} input must look like {example!r}, got {text!r}")
    return match.group(1), match.group(2)


# ------------------------------------------------------------------ multiplication


def multiplication_machine(d: int) -> TuringMachine:
    """N x 1 multiplication by the digit ``d``: states c0..c8 hold the carry."""
    if not 0 <= d <= 9:
        raise MachineInputError(f"the multiplier must be one digit, got {d}")
    rows = []
    for k in range(9):
        for x in DIGITS:
            total = int(x) * d + k
            rows.append([f"c{k}", x, f"c{total // 10}", str(total % 10), "L"])
        rows.append([f"c{k}", "#", "H", str(k), "L"])
    return TuringMachine(states=tuple(f"c{k}" for k in range(9)) + ("H",), start="c0", halt=("H",),
                         alphabet=DIGITS + ("#",), blank="#", transitions=rows, head=-1,
                         name=f"multiplication_by_{d}")


# ------------------------------------------------------------------ binary increment


def increment_machine() -> TuringMachine:
    """Binary +1 on a tape "0" + bits (MSB first): flip trailing 1s, then the first 0."""
    rows = [["carry", "1", "carry", "0", "L"], ["carry", "0", "H", "1", "L"]]
    return TuringMachine(states=("carry", "H"), start="carry", halt=("H",), alphabet=("0", "1"),
                         blank="0", transitions=rows, head=-1, name="increment")


# ----------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Task:
    """A library machine: input text -> (machine, tape); final tape -> answer."""

    name: str
    example: str
    build: Callable[[str], tuple[TuringMachine, list[str]]]
    expected: Callable[[str], str]
    decode: Callable[[Sequence[str]], str]


def _build_addition(text: str) -> tuple[TuringMachine, list[str]]:
    return addition_machine(), addition_tape(*_parse_operands(text, "+", "addition", "1234+987"))


def _build_multiplication(text: str) -> tuple[TuringMachine, list[str]]:
    a, d = _parse_operands(text, "*", "multiplication", "1234*7")
    if len(d.lstrip("0") or "0") > 1:
        raise MachineInputError(f"multiplication is N x 1: the multiplier {d!r} must be one digit")
    return multiplication_machine(int(d)), ["#"] + list(a)


def _build_increment(text: str) -> tuple[TuringMachine, list[str]]:
    bits = text.strip()
    if not re.fullmatch(r"[01]+", bits):
        raise MachineInputError(f"increment input must be a binary number like '1011', got {text!r}")
    return increment_machine(), ["0"] + list(bits)


def _expected_sum(text: str) -> str:
    a, b = _parse_operands(text, "+", "addition", "1234+987")
    return str(int(a) + int(b))


def _expected_product(text: str) -> str:
    a, d = _parse_operands(text, "*", "multiplication", "1234*7")
    return str(int(a) * int(d))


TASKS: dict[str, Task] = {
    "addition": Task("addition", "1234+987", _build_addition, _expected_sum, _digits_answer),
    "multiplication": Task("multiplication", "1234*7", _build_multiplication, _expected_product,
                           _digits_answer),
    "increment": Task("increment", "1011", _build_increment,
                      lambda t: format(int(t.strip(), 2) + 1, "b"),
                      lambda tape: "".join(tape).lstrip("0") or "0"),
}


# --------------------------------------------------------------------- random machines


def random_machine(n_states: int = 4, n_symbols: int = 6, halt_prob: float = 0.1,
                   seed: int = 0) -> TuringMachine:
    """A uniformly random total machine: each entry moves to a halting state with
    probability ``halt_prob``, else to a uniform working state; uniform write and move."""
    if n_states < 1 or n_symbols < 1 or not 0.0 <= halt_prob <= 1.0:
        raise MachineSpecError(f"random machine needs states >= 1, symbols >= 1 and 0 <= halt <= 1, "
                               f"got {n_states}, {n_symbols}, {halt_prob}")
    rng = random.Random(seed)
    states = tuple(f"q{i}" for i in range(n_states))
    alphabet = tuple(str(i) if n_symbols <= 10 else f"s{i}" for i in range(n_symbols))
    rows = [[q, s, "H" if rng.random() < halt_prob else rng.choice(states), rng.choice(alphabet),
             rng.choice("LR")] for q in states for s in alphabet]
    return TuringMachine(states=states + ("H",), start="q0", halt=("H",), alphabet=alphabet,
                         blank=alphabet[0], transitions=rows, name=f"random_{seed}")


@dataclass(frozen=True)
class Sample:
    """A random machine accepted by :func:`sample_machine`, with its input and run."""

    machine: TuringMachine
    tape: list[str]
    run: Run
    seed: int
    tries: int


def sample_machine(*, n_states: int = 4, n_symbols: int = 6, halt_prob: float = 0.1,
                   tape: Sequence[str] | None = None, tape_len: tuple[int, int] = (4, 16),
                   max_steps: int = 200, min_steps: int = 1, ngram: int | None = None,
                   seed: int = 0, max_tries: int = 1000) -> Sample:
    """Rejection sampling: machine seeds drawn from a stream seeded by ``seed``
    until a machine halts within ``max_steps`` after at least ``min_steps`` steps and (when
    ``ngram`` is given) its trace has no repeated ``ngram``-gram. ``tape=None`` draws a random
    input per try. Different ``seed`` values give independent streams."""
    stream = random.Random(seed)
    for tries in range(1, max_tries + 1):
        s = stream.getrandbits(32)
        tm = random_machine(n_states, n_symbols, halt_prob, s)
        rng = random.Random(~s)
        cells = list(tape) if tape is not None else [
            rng.choice(tm.alphabet) for _ in range(rng.randint(*tape_len))]
        try:
            run = simulate(tm, cells, max_steps)
        except (StepBudgetExceeded, MachineSpecError):
            continue
        if run.steps < min_steps:
            continue
        if ngram is not None:
            vocab = Vocab.for_machine(tm)
            if min_ngram(split_configs(build_trace(run, vocab), vocab)) > ngram:
                continue
        return Sample(tm, cells, run, s, tries)
    raise MachineSpecError(f"no random machine accepted in {max_tries} tries from seed {seed} "
                           f"(states={n_states}, symbols={n_symbols}, halt={halt_prob}, "
                           f"max_steps={max_steps}, ngram={ngram})")
