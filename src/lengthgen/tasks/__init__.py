"""Tasks as data: vocabularies, prompts, answers and position IDs, with exact oracles.

Every task object has ``name``, ``vocab`` (token strings; a token's id is its index), ``encode``,
``decode``, and ``next_token(prompt_text)``, the exact correct next token computed from integer
arithmetic or string operations, never from a model.

Registered tasks: ``addition``, ``multiplication_nx1`` and ``multiplication_nx2``, ``copy`` and ``reverse``
(formats: docs/training.md, "Data formats").
"""
from __future__ import annotations

from .addition import ADDITION, AdditionTask, Vocabulary
from .copying import COPY, REVERSE, CopyTask
from .multiplication import MULTIPLICATION_NX1, MULTIPLICATION_NX2, MultiplicationTask

TASKS = {
    "addition": ADDITION,
    "multiplication_nx1": MULTIPLICATION_NX1,
    "multiplication_nx2": MULTIPLICATION_NX2,
    "copy": COPY,
    "reverse": REVERSE,
}


def get_task(name: str):
    """The task registered under ``name`` (``ValueError`` naming the choices otherwise)."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(sorted(TASKS))}") from None


__all__ = [
    "ADDITION", "AdditionTask", "COPY", "CopyTask", "MULTIPLICATION_NX1", "MULTIPLICATION_NX2",
    "MultiplicationTask", "REVERSE", "TASKS", "Vocabulary", "get_task",
]
