"""The N×2 multiplication construction as an ordinary lengthgen checkpoint.

    python -m constructions.multiplication export DIR [--digits N | --d-model D] [--force]

writes ``DIR/model.safetensors``, ``DIR/run.json`` and ``DIR/summary.json`` the way
``python -m constructions.addition export`` does (:mod:`constructions.export`), so
``lengthgen.evaluate`` and ``lengthgen.plot attention`` read it like a trained model. Besides the
notes ``task=multiplication_nx2``, ``positions=coupled`` and ``kind=construction``, the weights name
what each of the 8 working heads reads (:data:`.heads.HEADS`; docs/multiplication.md).
"""
from __future__ import annotations

from pathlib import Path

from lengthgen.model import Transformer

from .. import export as shared
from .heads import HEADS
from .model import TASK, build_model

NAME = "N×2 multiplication construction"
SPEC = shared.ExportSpec(
    prog="python -m constructions.multiplication export", task=TASK.name, name=NAME,
    source="constructions.multiplication.export",
    theorem="N×2 multiplication with coupled positions (after Cho et al. 2024, Position Coupling; docs/multiplication.md)",
    build_model=build_model, extra_config=("bound_digits",),
    d_model_help="embedding dimension d >= 33 (its table holds min(2^P - 6, 10^4) digits)",
    head_roles={key: reads for key, (reads, _) in HEADS.items()},
)


def construction_model(n_digits: int | None = None, d_model: int | None = None, device: str = "cpu"
                       ) -> tuple[Transformer, dict]:
    """``build_model(n_digits, d_model)`` with the notes of a lengthgen checkpoint added."""
    return shared.construction_model(SPEC, n_digits, d_model, device)


def export(directory: str | Path, n_digits: int | None = None, d_model: int | None = None,
           force: bool = False) -> Path:
    """Write the construction to ``directory`` as a checkpoint (see the module docstring)."""
    return shared.export(SPEC, directory, n_digits, d_model, force)


def main(argv: list[str] | None = None) -> int:
    return shared.main(SPEC, argv)
