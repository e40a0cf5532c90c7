"""Shared command-line plumbing: bad input is one line on stderr and exit status 2.

Every CLI of the project (``constructions.addition``, ``constructions.addition.certify``,
``constructions.nope``, ``lengthgen.train``, ``lengthgen.evaluate``, ``lengthgen.plot``) builds its
parser from :class:`ArgumentParser` and raises :class:`UsageError` for bad input; :func:`run_cli`
turns that into ``PROG: error: <message>`` and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import Callable

EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


_ASCII_INT = re.compile(r"[+-]?[0-9]+")
_ASCII_REAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def integer(text: str) -> int:
    """An option's whole number, in ASCII digits only (``int()`` would also take ``١٢``, which no
    operand parser here accepts)."""
    if not _ASCII_INT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected a whole number in digits 0-9, got {text!r}")
    return int(text)


def non_negative_integer(text: str) -> int:
    """A whole number ≥ 0 (random seeds: numpy refuses negative ones)."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def positive_integer(text: str) -> int:
    """A whole number ≥ 1 (lengths, counts, n-gram orders)."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def real(text: str) -> float:
    """A finite decimal number (``inf`` and ``nan`` are refused: no option here means them)."""
    if not _ASCII_REAL.fullmatch(text.strip()) or not math.isfinite(float(text)):
        raise argparse.ArgumentTypeError(f"expected a finite number such as 0.5 or 1e-3, got {text!r}")
    return float(text)


def device_problem(device: object) -> str | None:
    """What is wrong with ``device`` (a name or a ``torch.device``), or None: only ``cpu``, ``cuda`` and
    ``cuda:N`` are known, and CUDA only where torch can use it. The one device check of every command
    (:func:`torch_device`) and of the constructions' ``build_model``."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        return f"unknown device {device!r}: choose cpu or cuda (cuda:N for one GPU)"
    if dev.type == "cuda" and not torch.cuda.is_available():
        return f"device {str(device)!r}: CUDA is not available on this machine (use cpu)"
    return None


def torch_device(text: str) -> str:
    """An option's device (argparse type): see :func:`device_problem`."""
    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; every option's help line ends with its default, unless the help
    text already names one or there is none to name (a flag, or no default)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = action.default
        if text is None or "default" in text or default in (None, False, argparse.SUPPRESS) \
                or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (one line) instead of printing usage and exiting.

    Options declared with ``type=int`` or ``type=float`` are parsed by :func:`integer` and
    :func:`real`: ASCII digits only, finite values only."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("type", int, integer)  # the registry is shared with argument groups
        self.register("type", float, real)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def fail(prog: str, message: str) -> int:
    """Print ``PROG: error: message`` as one line on stderr; return exit status 2."""
    print(f"{prog}: error: {message}".replace("\n", " "), file=sys.stderr)
    return EXIT_BAD_INPUT


def run_cli(prog: str, body: Callable[[], int]) -> int:
    """Run a CLI body; a :class:`UsageError` becomes one ``PROG: error:`` line and exit status 2.
    A closed standard output (``... | head -1``) ends the command quietly, as it does for Unix tools."""
    try:
        code = body()
        sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
        return code
    except UsageError as exc:
        return fail(prog, str(exc))
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # Python flushes stdout at exit: point it at /dev/null
        os.dup2(devnull, sys.stdout.fileno())
        return 0
