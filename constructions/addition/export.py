"""Theorem 5.1's transformer as an ordinary lengthgen checkpoint.

    python -m constructions.addition export DIR [--digits N | --d-model D] [--force]

writes ``DIR/model.safetensors``, ``DIR/run.json`` and ``DIR/summary.json``, the format of a
training run (:func:`lengthgen.runs.write_checkpoint`), so ``lengthgen.evaluate``,
``lengthgen.plot`` and ``constructions.nope --model`` read it like any trained model. The weights
carry the notes ``task=addition``, ``positions=coupled`` and ``kind=construction``.

:func:`registered` is the entry point ``construction`` of the group ``lengthgen.checkpoints``
(pyproject.toml), which lets ``python -m lengthgen.evaluate --checkpoint construction`` build the
model on demand with a position table long enough for the requested lengths.
"""
from __future__ import annotations

from pathlib import Path

from lengthgen.cli import ArgumentParser, UsageError, run_cli
from lengthgen.model import Transformer
from lengthgen.runs import RunError, checkpoint_notes, with_notes, write_checkpoint

from .model import CapacityError, build_model

PROG = "python -m constructions.addition export"
NAME = "Theorem 5.1 construction"


def construction_model(n_digits: int | None = None, d_model: int | None = None, device: str = "cpu"
                       ) -> tuple[Transformer, dict]:
    """``build_model(n_digits, d_model)`` with the notes of a lengthgen checkpoint added."""
    model, meta = build_model(n_digits=n_digits, d_model=d_model, device=device)
    notes = checkpoint_notes(task="addition", positions="coupled", name=NAME, kind="construction")
    return with_notes(model, notes), meta


def registered(max_digits: int, device: str = "cpu") -> Transformer:
    """Entry point ``construction``: the smallest model whose table holds ``max_digits`` digits."""
    return construction_model(n_digits=max_digits, device=device)[0]


def export(directory: str | Path, n_digits: int | None = None, d_model: int | None = None,
           force: bool = False) -> Path:
    """Write the construction to ``directory`` as a checkpoint (see the module docstring)."""
    if n_digits is None and d_model is None:
        n_digits = 20
    model, meta = construction_model(n_digits=n_digits, d_model=d_model)
    run = {"source": "constructions.addition.export", "theorem": "Theorem 5.1 (Cho et al. 2024, Position Coupling)",
           "config": {"n_digits": n_digits, "d_model": meta["d_model"], "P": meta["P"], "M": meta["M"],
                      "max_digits": meta["max_digits"], "theorem_max_digits": meta["theorem_max_digits"]}}
    return write_checkpoint(directory, model, run, {"leak_bound": meta["leak_bound"], "steps": 0}, force=force)


def parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Write Theorem 5.1's transformer as a lengthgen checkpoint directory "
                       "(model.safetensors, run.json, summary.json), readable by lengthgen.evaluate and lengthgen.plot.")
    p.add_argument("directory", help="checkpoint directory to create")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--digits", type=int, help="longest operands the position table holds (default 20; "
                      "d_model is the smallest that fits)")
    size.add_argument("--d-model", type=int, help="embedding dimension d >= 21 (its table holds min(2^P - 2, 10^4) digits)")
    p.add_argument("--force", action="store_true", help="replace an existing checkpoint directory")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.digits is not None and args.digits < 1:
        raise UsageError(f"--digits must be at least 1, got {args.digits}")
    try:
        out = export(args.directory, args.digits, args.d_model, args.force)
    except (CapacityError, RunError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {out}: model.safetensors, run.json, summary.json")
    return 0
