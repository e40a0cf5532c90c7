"""A construction as an ordinary lengthgen checkpoint directory: what
``python -m constructions.addition export`` and ``python -m constructions.multiplication export``
share.

Each construction package describes itself once in an :class:`ExportSpec` (its ``build_model``,
task, display name and the paper result it implements); :func:`construction_model`, :func:`export`
and :func:`main` do the rest. The directory is written by :func:`lengthgen.runs.write_checkpoint`
(``model.safetensors``, ``run.json``, ``summary.json``, the format of a training run), so
``lengthgen.evaluate`` and ``lengthgen.plot`` read it like any trained model. The weights carry the
notes ``task``, ``positions=coupled`` and ``kind=construction``, and, for a model of more than one
layer, ``head_roles``: what each (layer, head) reads, for the titles of ``lengthgen.plot attention``
(docs/training.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lengthgen.cli import ArgumentParser, UsageError, run_cli
from lengthgen.model import Transformer
from lengthgen.runs import RunError, checkpoint_notes, head_roles_note, with_notes, write_checkpoint

from .sizing import CapacityError


@dataclass(frozen=True)
class ExportSpec:
    """How one construction package exports its model.

    ``build_model(n_digits=, d_model=, device=)`` returns ``(model, meta)`` with ``meta["d_model"]``,
    ``meta["P"]``, ``meta["M"]``, ``meta["max_digits"]`` and ``meta["leak_bound"]``; ``extra_config``
    names further ``meta`` keys recorded in ``run.json``; ``head_roles`` maps (layer, head) to what
    the head reads (left empty for a 1-layer model, whose ``head_names`` already say it)."""

    prog: str
    task: str
    name: str
    source: str
    theorem: str
    build_model: Callable[..., tuple[Transformer, dict[str, Any]]]
    d_model_help: str
    default_digits: int = 20
    extra_config: tuple[str, ...] = ()
    head_roles: dict[tuple[int, int], str] | None = None


def construction_model(spec: ExportSpec, n_digits: int | None = None, d_model: int | None = None,
                       device: str = "cpu") -> tuple[Transformer, dict[str, Any]]:
    """``spec.build_model(n_digits, d_model)`` with the notes of a lengthgen checkpoint added."""
    model, meta = spec.build_model(n_digits=n_digits, d_model=d_model, device=device)
    notes = checkpoint_notes(task=spec.task, positions="coupled", name=spec.name, kind="construction")
    if spec.head_roles:
        notes.update(head_roles_note(spec.head_roles))
    return with_notes(model, notes), meta


def export(spec: ExportSpec, directory: str | Path, n_digits: int | None = None, d_model: int | None = None,
           force: bool = False) -> Path:
    """Write the construction of ``spec`` to ``directory`` as a checkpoint (module docstring)."""
    if n_digits is None and d_model is None:
        n_digits = spec.default_digits
    model, meta = construction_model(spec, n_digits=n_digits, d_model=d_model)
    config = {"n_digits": n_digits, **{k: meta[k] for k in ("d_model", "P", "M", "max_digits", *spec.extra_config)}}
    run = {"source": spec.source, "theorem": spec.theorem, "config": config}
    return write_checkpoint(directory, model, run, {"leak_bound": meta["leak_bound"], "steps": 0}, force=force)


def parser(spec: ExportSpec) -> ArgumentParser:
    p = ArgumentParser(prog=spec.prog, description=f"Write the {spec.name} as a lengthgen checkpoint directory "
                       "(model.safetensors, run.json, summary.json), readable by lengthgen.evaluate and lengthgen.plot.")
    p.add_argument("directory", help="checkpoint directory to create")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--digits", type=int, help=f"longest operands the position table holds (default "
                      f"{spec.default_digits}; d_model is the smallest that fits)")
    size.add_argument("--d-model", type=int, help=spec.d_model_help)
    p.add_argument("--force", action="store_true", help="replace an existing checkpoint directory")
    return p


def main(spec: ExportSpec, argv: list[str] | None = None) -> int:
    """``python -m constructions.<package> export DIR [--digits N | --d-model D] [--force]``."""
    return run_cli(spec.prog, lambda: _main(spec, argv))


def _main(spec: ExportSpec, argv: list[str] | None) -> int:
    args = parser(spec).parse_args(argv)
    if args.digits is not None and args.digits < 1:
        raise UsageError(f"--digits must be at least 1, got {args.digits}")
    try:
        out = export(spec, args.directory, args.digits, args.d_model, args.force)
    except (CapacityError, RunError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {out}: model.safetensors, run.json, summary.json")
    return 0
