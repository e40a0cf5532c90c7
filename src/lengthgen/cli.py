"""Shared command-line plumbing: bad input is one line on stderr and exit status 2.

Every CLI of the project (``constructions.addition``, ``constructions.nope``, ``lengthgen.train``,
...) builds its parser from :class:`ArgumentParser` and raises :class:`UsageError` for bad input;
:func:`run_cli` turns that into ``error: <message>`` and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (one line) instead of printing usage and exiting."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def run_cli(body: Callable[[], int]) -> int:
    """Run a CLI body; a :class:`UsageError` becomes one ``error:`` line and exit status 2."""
    try:
        return body()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
