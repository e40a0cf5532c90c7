"""Theorem 5.1's transformer as an ordinary lengthgen checkpoint.

    python -m constructions.addition export DIR [--digits N | --d-model D] [--force]

writes ``DIR/model.safetensors``, ``DIR/run.json`` and ``DIR/summary.json``, the format of a
training run (:mod:`constructions.export`, shared with the multiplication construction), so
``lengthgen.evaluate``, ``lengthgen.plot`` and ``constructions.nope --model`` read it like any
trained model. The weights carry the notes ``task=addition``, ``positions=coupled`` and
``kind=construction``.

:func:`registered` is the entry point ``construction`` of the group ``lengthgen.checkpoints``
(pyproject.toml), which lets ``python -m lengthgen.evaluate --checkpoint construction`` build the
model on demand with a position table long enough for the requested lengths.
"""
from __future__ import annotations

from pathlib import Path

from lengthgen.model import Transformer

from .. import export as shared
from .model import build_model

NAME = "Theorem 5.1 construction"
SPEC = shared.ExportSpec(
    prog="python -m constructions.addition export", task="addition", name=NAME,
    source="constructions.addition.export", theorem="Theorem 5.1 (Cho et al. 2024, Position Coupling)",
    build_model=build_model, extra_config=("theorem_max_digits",),
    d_model_help="embedding dimension d >= 21 (its table holds min(2^P - 2, 10^4) digits)",
)


def construction_model(n_digits: int | None = None, d_model: int | None = None, device: str = "cpu"
                       ) -> tuple[Transformer, dict]:
    """``build_model(n_digits, d_model)`` with the notes of a lengthgen checkpoint added."""
    return shared.construction_model(SPEC, n_digits, d_model, device)


def registered(max_digits: int, device: str = "cpu") -> Transformer:
    """Entry point ``construction``: the smallest model whose table holds ``max_digits`` digits."""
    return construction_model(n_digits=max_digits, device=device)[0]


def export(directory: str | Path, n_digits: int | None = None, d_model: int | None = None,
           force: bool = False) -> Path:
    """Write the construction to ``directory`` as a checkpoint (see the module docstring)."""
    return shared.export(SPEC, directory, n_digits, d_model, force)


def main(argv: list[str] | None = None) -> int:
    return shared.main(SPEC, argv)
