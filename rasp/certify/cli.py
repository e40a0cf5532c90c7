"""CLI: certify a compiled RASP program from its weights.

``python -m rasp.certify --program lib:NAME --max-seq-len N [--json]`` compiles one of the
programs below (causal) and prints its certificate; ``--machine NAME --ngram K --max-seq-len N``
does the same for the Turing-program simulator (program P) of a library machine; ``--dtype
float32`` compiles float32 weights and proves their float32 forward pass (rounding included).
Exit status: 0 PASS, 1 FAIL, 2 bad input or a program outside the certificate's scope (one line on
stderr).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Callable

from lengthgen.cli import ArgumentParser, UsageError, positive_integer, run_cli
from rasp import lib
from rasp.core import Map, tokens
from rasp.errors import RASPError

PROG = "python -m rasp.certify"
LETTERS = ["a", "b", "x", "(", ")"]
NUMBERS = [1, 2, 3, 4, 5]


def _programs() -> dict[str, tuple[Callable[[], Any], list]]:
    """``lib:NAME`` -> (program builder, vocabulary)."""
    is_x = lambda: Map(lambda t: 1 if t == "x" else 0, tokens)  # noqa: E731
    return {
        "make_length": (lib.make_length, LETTERS),
        "make_reverse": (lambda: lib.make_reverse(tokens), LETTERS),
        "make_hist": (lib.make_hist, LETTERS),
        "make_sort_unique": (lambda: lib.make_sort_unique(tokens, tokens), NUMBERS),
        "make_frac_prevs": (lambda: lib.make_frac_prevs(is_x()), LETTERS),
        "make_count": (lambda: lib.make_count(tokens, "a"), LETTERS),
        "shift_right": (lambda: lib.shift_right(tokens, 1, "_"), LETTERS),
        "lasts": (lambda: lib.lasts(tokens, tokens), LETTERS),
        "firsts": (lambda: lib.firsts(tokens, tokens), LETTERS),
        "cumsum": (lambda: lib.cumsum(Map(lambda t: t == "x", tokens)), LETTERS),
    }


def _plateau(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 0.5:
        raise argparse.ArgumentTypeError(f"expected a number with 0 <= P < 0.5, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Prove from the weights that a compiled RASP program "
                       "computes the program on every input up to --max-seq-len tokens.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--program", metavar="lib:NAME", help=f"one of: {', '.join(sorted(_programs()))}")
    what.add_argument("--machine", metavar="NAME", help="a library Turing machine (program P)")
    p.add_argument("--ngram", type=positive_integer, metavar="K", help="n-gram order of program P (with --machine)")
    p.add_argument("--bits", action="store_true",
                   help="compile every equality whose sides can carry bit codes with them (binary_from=0): "
                        "their terms carry no error that grows with the codes; program P needs it past 2-grams")
    p.add_argument("--plateau", type=_plateau, default=0.0, metavar="P",
                   help="compile every MLP table flat on P (0 <= P < 0.5) of each gap on either side of its points, "
                        "so an input off its code by less than that gives the exact output (default: 0, linear "
                        "interpolation, the fewest units)")
    p.add_argument("--max-seq-len", type=positive_integer, required=True, metavar="N", help="longest input covered")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="the weights' type: float64 (the statement is about exact real arithmetic) or float32 "
                        "(about the float32 forward pass under the rounding model of docs/certificate.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def build(args: argparse.Namespace):
    """The compiled transformer that the arguments name."""
    from rasp.weights import compile_to_transformer

    import torch

    options: dict[str, Any] = {"dtype": getattr(torch, args.dtype)}
    if args.bits:
        options["binary_from"] = 0.0
    if args.plateau:
        options["plateau"] = args.plateau
    if args.program is not None:
        if args.ngram is not None:
            raise UsageError("--ngram goes with --machine")
        name = args.program[4:] if args.program.startswith("lib:") else None
        if name not in _programs():
            raise UsageError(f"--program {args.program!r}: expected lib:NAME with NAME one of "
                             f"{', '.join(sorted(_programs()))}")
        make, vocab = _programs()[name]
        return compile_to_transformer(make(), vocab, args.max_seq_len, **options)
    from rasp.turing.library import TASKS
    from rasp.turing.transformer import transformer_program

    if args.machine not in TASKS:
        raise UsageError(f"--machine {args.machine!r}: expected one of {', '.join(sorted(TASKS))}")
    if args.ngram is None:
        raise UsageError("--machine needs --ngram K")
    task = TASKS[args.machine]
    machine, _ = task.build(task.example)
    return transformer_program(machine, args.ngram).to_transformer(args.max_seq_len, **options).compiled


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _main(argv: list[str] | None) -> int:
    from rasp.certify.run import CertifyError, certify

    args = _parser().parse_args(argv)
    try:
        cert = certify(build(args))
    except (CertifyError, RASPError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    if args.json:
        out = cert.to_json()
        out.pop("eps")
        print(json.dumps(_clean(out)))
    else:
        print(cert.text())
    return 0 if cert.passed else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 PASS, 1 FAIL, 2 bad input (one line on stderr)."""
    return run_cli(PROG, lambda: _main(argv))


if __name__ == "__main__":
    sys.exit(main())
