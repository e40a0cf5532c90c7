"""Turing machines: spec (dataclass + JSON), reference simulator, Turing-Program traces.

Tape conventions: docs/rasp.md, "Turing machines" (bounded tape, boundary rule,
halting). The trace format, the n-gram premise and the optional read-only address
track follow our reconstruction of Hou et al., arXiv 2407.03310.

The simulator is plain Python on symbol strings and is the oracle of every test;
it shares no code with the compiled RASP program (:mod:`rasp.turing.program`).

JSON format (example: rasp/turing/specs/parity.json)::

    {"states": [...], "start": "q0", "halt": ["qh"], "alphabet": [...], "blank": "_",
     "head": 0, "transitions": [[state, read, next_state, write, "L"|"R"], ...]}

``head`` is the initial head cell; a negative value counts from the right (-1 = last cell).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Sequence

from rasp.errors import MachineInputError, MachineSpecError, StepBudgetExceeded

MOVES = {"L": -1, "R": 1}
_FIELDS = ("states", "start", "halt", "alphabet", "blank", "head", "transitions")


@dataclass(frozen=True)
class TuringMachine:
    """A single-tape machine ``T = (Q, Sigma, delta, q0, H)``, validated on creation."""

    states: tuple[str, ...]
    start: str
    halt: tuple[str, ...]
    alphabet: tuple[str, ...]
    blank: str
    transitions: tuple[tuple[str, str, str, str, str], ...]
    head: int = 0
    name: str = field(default="machine", compare=False)

    def __post_init__(self) -> None:
        for attr in ("states", "halt", "alphabet", "transitions"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        object.__setattr__(self, "transitions", tuple(tuple(t) for t in self.transitions))
        self._validate()

    def _validate(self) -> None:
        where = f"machine {self.name!r}"
        for attr in ("states", "alphabet"):
            items = getattr(self, attr)
            if not items:
                raise MachineSpecError(f"{where}: {attr} is empty")
            bad = [x for x in items if not isinstance(x, str) or not x]
            if bad:
                raise MachineSpecError(f"{where}: {attr} must be non-empty strings, got {bad[0]!r}")
            dup = sorted({x for x in items if items.count(x) > 1})
            if dup:
                raise MachineSpecError(f"{where}: duplicate entry {dup[0]!r} in {attr}")
        states = set(self.states)
        if self.start not in states:
            raise MachineSpecError(f"{where}: start state {self.start!r} is not in states")
        if not self.halt:
            raise MachineSpecError(f"{where}: halt lists no state, so the machine can never halt")
        for q in self.halt:
            if q not in states:
                raise MachineSpecError(f"{where}: halting state {q!r} is not in states")
        if self.start in self.halt:
            raise MachineSpecError(f"{where}: start state {self.start!r} is a halting state "
                                   "(the trace would have no step to predict)")
        if self.blank not in self.alphabet:
            raise MachineSpecError(f"{where}: blank symbol {self.blank!r} is not in the alphabet")
        if not isinstance(self.head, int) or isinstance(self.head, bool):
            raise MachineSpecError(f"{where}: head must be an integer, got {self.head!r}")
        symbols, halting, seen = set(self.alphabet), set(self.halt), {}
        for k, row in enumerate(self.transitions):
            if len(row) != 5:
                raise MachineSpecError(f"{where}: transition #{k} {list(row)!r} must have 5 entries "
                                       "[state, read, next_state, write, move]")
            q, s, q2, w, move = row
            for label, value, allowed in (("state", q, states), ("next state", q2, states)):
                if value not in allowed:
                    raise MachineSpecError(f"{where}: transition #{k} {list(row)!r}: unknown {label} {value!r}")
            for label, value in (("read symbol", s), ("written symbol", w)):
                if value not in symbols:
                    raise MachineSpecError(f"{where}: transition #{k} {list(row)!r}: unknown {label} {value!r}")
            if move not in MOVES:
                raise MachineSpecError(f"{where}: transition #{k} {list(row)!r}: move must be 'L' or 'R', "
                                       f"got {move!r}")
            if q in halting:
                raise MachineSpecError(f"{where}: transition #{k} {list(row)!r} leaves halting state {q!r}")
            if (q, s) in seen:
                raise MachineSpecError(f"{where}: transitions #{seen[(q, s)]} and #{k} both define "
                                       f"({q!r}, {s!r})")
            seen[(q, s)] = k

    @cached_property
    def delta(self) -> dict[tuple[str, str], tuple[str, str, int]]:
        """``(state, read) -> (next_state, write, move)`` with move in {-1, +1}."""
        return {(q, s): (q2, w, MOVES[m]) for q, s, q2, w, m in self.transitions}

    # ------------------------------------------------------------------ JSON
    @classmethod
    def from_dict(cls, spec: Any, name: str = "machine") -> "TuringMachine":
        """Build from the issue's JSON object; unknown or missing fields are errors."""
        if not isinstance(spec, dict):
            raise MachineSpecError(f"machine {name!r}: the spec must be a JSON object, got {type(spec).__name__}")
        unknown = sorted(set(spec) - set(_FIELDS) - {"name"})
        if unknown:
            raise MachineSpecError(f"machine {name!r}: unknown field {unknown[0]!r} (allowed: {', '.join(_FIELDS)})")
        missing = [f for f in _FIELDS if f not in spec and f != "head"]
        if missing:
            raise MachineSpecError(f"machine {name!r}: missing field {missing[0]!r}")
        for key in ("states", "halt", "alphabet", "transitions"):
            if not isinstance(spec[key], list):
                raise MachineSpecError(f"machine {name!r}: field {key!r} must be a list")
        for k, row in enumerate(spec["transitions"]):
            if not isinstance(row, list):
                raise MachineSpecError(f"machine {name!r}: transition #{k} must be a list, got {row!r}")
        return cls(states=spec["states"], start=spec["start"], halt=spec["halt"],
                   alphabet=spec["alphabet"], blank=spec["blank"], head=spec.get("head", 0),
                   transitions=spec["transitions"], name=str(spec.get("name", name)))

    @classmethod
    def from_json(cls, path: str | Path) -> "TuringMachine":
        """Load a JSON spec file."""
        path = Path(path)
        try:
            spec = json.loads(path.read_text())
        except OSError as exc:
            raise MachineSpecError(f"cannot read machine file {str(path)!r}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise MachineSpecError(f"machine file {str(path)!r} is not valid JSON: {exc}") from None
        return cls.from_dict(spec, name=path.stem)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this machine."""
        return {"name": self.name, "states": list(self.states), "start": self.start,
                "halt": list(self.halt), "alphabet": list(self.alphabet), "blank": self.blank,
                "head": self.head, "transitions": [list(t) for t in self.transitions]}

    # ---------------------------------------------------------------- inputs
    def parse_tape(self, text: str) -> list[str]:
        """Input text -> tape: whitespace-separated symbols, or one character per cell."""
        cells = text.split() if any(c.isspace() for c in text) else list(text)
        self.check_tape(cells)
        return cells

    def check_tape(self, cells: Sequence[str]) -> None:
        """Raise :class:`MachineInputError` for an empty tape or a symbol outside the alphabet."""
        if not cells:
            raise MachineInputError(f"machine {self.name!r}: the input tape is empty")
        symbols = set(self.alphabet)
        for i, c in enumerate(cells):
            if c not in symbols:
                raise MachineInputError(f"machine {self.name!r}: input symbol {c!r} at cell {i} is not "
                                        f"in the alphabet")
        if not -len(cells) <= self.head < len(cells):
            raise MachineInputError(f"machine {self.name!r}: head {self.head} is outside a tape of "
                                    f"{len(cells)} cells")


@dataclass(frozen=True)
class Config:
    """One configuration: the tape, the head cell and the state."""

    tape: tuple[str, ...]
    head: int
    state: str


@dataclass(frozen=True)
class Run:
    """A halted run of the reference simulator: configurations c_0 ... c_T."""

    machine: TuringMachine
    configs: tuple[Config, ...]

    @property
    def steps(self) -> int:
        return len(self.configs) - 1

    @property
    def final(self) -> Config:
        return self.configs[-1]


def simulate(tm: TuringMachine, tape: Sequence[str], max_steps: int) -> Run:
    """Run ``tm`` on a bounded tape: a move off either end leaves the head in place.

    The tape is exactly the input's cells (docs/rasp.md, "Turing machines"): no blank
    cells are added, so a machine that stops on reading the blank needs one in its input.

    Stops at the first configuration whose state is halting; that configuration may
    be c_{max_steps} itself (the step-budget edge case). Raises
    :class:`StepBudgetExceeded` otherwise, :class:`MachineSpecError` when a reached
    (state, symbol) pair has no transition.
    """
    tm.check_tape(tape)
    cells, state = list(tape), tm.start
    head = tm.head % len(cells)
    halting, delta = set(tm.halt), tm.delta
    configs = [Config(tuple(cells), head, state)]
    for step in range(max_steps):
        if state in halting:
            break
        rule = delta.get((state, cells[head]))
        if rule is None:
            raise MachineSpecError(f"machine {tm.name!r}: no transition for state {state!r} reading "
                                   f"{cells[head]!r} (reached at step {step}, cell {head})")
        state, cells[head], move = rule
        if 0 <= head + move < len(cells):
            head += move
        configs.append(Config(tuple(cells), head, state))
    if state not in halting:
        raise StepBudgetExceeded(_budget_message(tm, tape, max_steps, state))
    return Run(tm, tuple(configs))


def _budget_message(tm: TuringMachine, tape: Sequence[str], max_steps: int, state: str) -> str:
    """The one-line StepBudgetExceeded message, with the bounded-tape hint when it applies:
    a machine that halts on reading the blank, run on an input without a blank cell,
    never sees one (no cell exists beyond the input) and usually loops at the end."""
    msg = f"machine {tm.name!r} did not halt within {max_steps} steps (state {state!r} after step {max_steps})"
    halts_on_blank = any(s == tm.blank and q2 in tm.halt for _, s, q2, _, _ in tm.transitions)
    if halts_on_blank and tm.blank not in tape:
        padded = list(tape) + [tm.blank]
        shown = ("" if len(padded) > 40 else
                 ", e.g. " + repr(("" if all(len(c) == 1 for c in padded) else " ").join(padded)))
        msg += (f"; it halts on reading the blank {tm.blank!r}, but the input has no blank cell and "
                "the tape is bounded (no cell exists beyond the input; a move off either end leaves "
                f"the head in place): end the input with a blank{shown}")
    return msg + "; otherwise raise --max-steps"


# ------------------------------------------------------------------------ tokens


@dataclass(frozen=True)
class Vocab:
    """Integer coding: plain ``s`` -> s, head ``<s,q>`` -> |S| + q|S| + s, specials last.

    With an address track of ``tag_letters`` > 1 letters, cell ids are offset
    by ``tag * |S|(|Q|+1)``.
    """

    alphabet: tuple[str, ...]
    states: tuple[str, ...]
    tag_letters: int = 1

    @classmethod
    def for_machine(cls, tm: TuringMachine, tag_letters: int = 1) -> "Vocab":
        return cls(tm.alphabet, tm.states, tag_letters)

    @property
    def block(self) -> int:
        return len(self.alphabet) * (len(self.states) + 1)

    @property
    def BOS(self) -> int:  # noqa: N802 - conventional token names
        return self.tag_letters * self.block

    @property
    def SEP(self) -> int:  # noqa: N802
        return self.BOS + 1

    @property
    def EOS(self) -> int:  # noqa: N802
        return self.BOS + 2

    @property
    def size(self) -> int:
        return self.BOS + 3

    def cell(self, symbol: int, state: int | None = None, tag: int = 0) -> int:
        """Id of a plain cell (``state=None``) or a head cell, by symbol/state index."""
        base = tag * self.block
        return base + symbol if state is None else base + len(self.alphabet) * (state + 1) + symbol

    def decode(self, token: int) -> tuple[int, int | None, int]:
        """``(symbol index, state index or None, tag)`` of a cell token."""
        if not 0 <= token < self.BOS:
            raise ValueError(f"token {token!r} is not a cell token")
        tag, rest = divmod(token, self.block)
        q, s = divmod(rest, len(self.alphabet))
        return s, (q - 1 if q else None), tag

    def render(self, token: Any) -> str:
        """Readable form: ``s`` for a plain cell, ``[s|q]`` for the head cell."""
        specials = {self.BOS: "BOS", self.SEP: "SEP", self.EOS: "EOS"}
        if token in specials:
            return specials[token]
        try:
            s, q, tag = self.decode(token)
        except (ValueError, TypeError):
            return f"<{token!r}>"
        text = self.alphabet[s] if q is None else f"[{self.alphabet[s]}|{self.states[q]}]"
        return f"{text}/{tag}" if self.tag_letters > 1 else text


def config_tokens(cfg: Config, tm: TuringMachine, vocab: Vocab, tags: Sequence[int] | None = None) -> list[int]:
    """The L tokens of one configuration (exactly one head token)."""
    sym = {s: i for i, s in enumerate(tm.alphabet)}
    q = tm.states.index(cfg.state)
    tags = tags if tags is not None else [0] * len(cfg.tape)
    return [vocab.cell(sym[c], q if i == cfg.head else None, tags[i]) for i, c in enumerate(cfg.tape)]


def build_trace(run: Run, vocab: Vocab, tags: Sequence[int] | None = None) -> list[int]:
    """The Turing Program ``BOS c_0 SEP c_1 SEP ... c_T EOS``."""
    out = [vocab.BOS]
    for t, cfg in enumerate(run.configs):
        if t:
            out.append(vocab.SEP)
        out.extend(config_tokens(cfg, run.machine, vocab, tags))
    out.append(vocab.EOS)
    return out


def split_configs(trace: Sequence[int], vocab: Vocab) -> list[list[int]]:
    """The configurations of a trace (the tokens between BOS/SEP and SEP/EOS)."""
    configs, cur = [], []
    for tok in trace[1:]:
        if tok in (vocab.SEP, vocab.EOS):
            configs.append(cur)
            cur = []
        else:
            cur.append(tok)
    if cur:
        configs.append(cur)
    return configs


# ------------------------------------------------------------------ the premise


def repeated_ngram(configs: Iterable[Sequence[Any]], n: int) -> tuple[int, int, int] | None:
    """First ``(config index, earlier offset, later offset)`` of a repeated n-gram, or None."""
    for t, cfg in enumerate(configs):
        seen: dict[tuple, int] = {}
        for i in range(len(cfg) - n + 1):
            gram = tuple(cfg[i:i + n])
            if gram in seen:
                return t, seen[gram], i
            seen[gram] = i
    return None


def min_ngram(configs: Sequence[Sequence[Any]]) -> int:
    """Smallest n >= 1 such that no configuration has a repeated n-gram (the construction's premise)."""
    lo, hi = 1, max((len(c) for c in configs), default=1)
    while lo < hi:
        mid = (lo + hi) // 2
        if repeated_ngram(configs, mid) is None:
            hi = mid
        else:
            lo = mid + 1
    return lo


def address_tags(length: int, letters: int, order: int | None = None) -> list[int]:
    """Read-only address track (our reconstruction; optional): a de Bruijn word whose ``order``-grams are all
    distinct, so every configuration satisfies the premise for n = ``order``.

    ``order=None`` picks the smallest order with ``letters**order + order - 1 >= length``.
    """
    if letters < 2:
        raise ValueError("an address track needs at least 2 letters")
    if order is None:
        order = 1
        while letters ** order + order - 1 < length:
            order += 1
    if letters ** order + order - 1 < length:
        raise ValueError(f"{letters} letters of order {order} tag at most "
                         f"{letters ** order + order - 1} cells, not {length}")
    a, seq = [0] * (letters * order), []

    def db(t: int, p: int) -> None:  # Fredricksen-Kessler-Maiorana: concatenated Lyndon words
        if t > order:
            if order % p == 0:
                seq.extend(a[1:p + 1])
        else:
            a[t] = a[t - p]
            db(t + 1, p)
            for j in range(a[t - p] + 1, letters):
                a[t] = j
                db(t + 1, t)

    db(1, 1)
    return (seq + seq[:order - 1])[:length]
