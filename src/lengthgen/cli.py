"""Shared command-line plumbing: bad input is one line on stderr and exit status 2.

Every CLI of the project (``constructions.addition``, ``constructions.addition.certify``,
``constructions.nope``, ``lengthgen.train``, ``lengthgen.evaluate``, ``lengthgen.plot``) builds its
parser from :class:`ArgumentParser` and raises :class:`UsageError` for bad input; :func:`run_cli`
turns that into ``PROG: error: <message>`` and exit status 2, never a traceback.
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


def fail(prog: str, message: str) -> int:
    """Print ``PROG: error: message`` as one line on stderr; return exit status 2."""
    print(f"{prog}: error: {message}".replace("\n", " "), file=sys.stderr)
    return EXIT_BAD_INPUT


def run_cli(prog: str, body: Callable[[], int]) -> int:
    """Run a CLI body; a :class:`UsageError` becomes one ``PROG: error:`` line and exit status 2."""
    try:
        return body()
    except UsageError as exc:
        return fail(prog, str(exc))
