"""Tasks as data: vocabularies, prompts, answers and position IDs, with exact oracles.

Every task object has ``name``, ``vocab`` (token strings; a token's id is its index), ``encode``,
``decode``, and ``next_token(prompt_text)``, the exact correct next token computed from integer
arithmetic or string operations, never from a model.
"""
from __future__ import annotations

from .addition import ADDITION, AdditionTask, Vocabulary

TASKS = {"addition": ADDITION}


def get_task(name: str):
    """The task registered under ``name`` (``ValueError`` naming the choices otherwise)."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(sorted(TASKS))}") from None


__all__ = ["ADDITION", "AdditionTask", "TASKS", "Vocabulary", "get_task"]
