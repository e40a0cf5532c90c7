"""``python -m constructions.addition.certify {bound,margins,exact,precision}`` — proofs, not samples, for
Theorem 5.1's addition transformer (docs/certificate.md, docs/theorem-5-1.md).

* ``bound``: n_max(d) = 2^⌊(d−17)/2⌋ − 2, derived from the construction's own layout.
* ``margins``: an all-inputs certificate at operand length N, with the float term of the dtype,
  and the smallest M for which it holds (:mod:`constructions.addition.certify.margins`).
* ``exact``: the construction in exact rational arithmetic with hard-max attention
  (:mod:`constructions.addition.certify.exact`).
* ``precision``: the largest exact operand length per float format and width
  (:mod:`constructions.addition.certify.precision`).

Bad input (unknown subcommand, d < 21, digits ≤ 0, digits beyond n_max(d), a missing
``precision --json`` cache without ``--recompute``) prints one line on stderr and exits 2.
"""
from __future__ import annotations

import argparse
import sys
import time

from constructions.cli_support import add_bound_command, run_bound_command
from lengthgen.cli import ArgumentParser, fail, non_negative_integer, run_cli

from .bound import bound_lines, derive_bound, n_max, table_lines

sys.set_int_max_str_digits(0)
MAX_CERTIFY_DIGITS = 2_000_000


PROG = "python -m constructions.addition.certify"


def _bad(message: str) -> int:
    return fail(PROG, message)


D_MIN = 21
TOO_SMALL = "17 token dimensions + 2·2 position dimensions"


def _check_d(d: int) -> str | None:
    return None if d >= D_MIN else f"--d-model must be at least {D_MIN} ({TOO_SMALL}), got {d}"


def _check_digits(n: int, d: int | None, flag: str = "--digits") -> str | None:
    """``flag`` names the option the user gave (``--digits N``, ``--exhaustive N``, ``--sample-digits N``)."""
    from ..model import d_model_for

    if n <= 0:
        return f"{flag} must be a positive integer, got {n}"
    if d is not None and n > n_max(d):
        return (f"{flag} {n} needs {n}-digit operands, beyond n_max({d}) = 2^{derive_bound(d).P} − 2 = {n_max(d)}; "
                f"use --d-model {d_model_for(n)} or more")
    return None


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("``", ""))
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser, metavar="{bound,margins,exact,precision}")
    add_bound_command(sub, formula="2^⌊(d−17)/2⌋ − 2 (Theorem 5.1)", reads="token dimensions, position blocks, "
                      "hypercube codes, IDs of the format", d_min=D_MIN, d_default=512,
                      d_default_note=", the paper's example")
    m = sub.add_parser("margins", help="all-inputs certificate at operand length N (+ float term, smallest M)",
                       description="Certify, for every input of N digits and every answer position, that the "
                       "softmax leak and the rounding of the chosen dtype stay inside the FFN's decision margins; "
                       "report each bound and margin and the smallest M that still certifies. Exit 0 only on PASS.")
    m.add_argument("--digits", type=int, required=True, help="operand length N (1 ≤ N ≤ n_max(d))")
    m.add_argument("--d-model", type=int, help="embedding dimension (default: smallest that fits N)")
    m.add_argument("--M", type=float, help="attention sharpness (default: build_model's ½·ln(1000·(3N+5)))")
    m.add_argument("--dtype", default="float32", choices=["float64", "float32", "bfloat16", "float16", "real"],
                   help="dtype of the model and of the float term; 'real' = float64 weights, no float term "
                   "(default float32)")
    m.add_argument("--no-search", action="store_true", help="skip the smallest-M search")
    m.add_argument("--rel-tol", type=float, default=5e-3,
                   help="relative width of the final [fails, passes] bracket on M (default 5e-3)")
    e = sub.add_parser("exact", help="exact rational forward pass with hard-max attention",
                       description="Build the weights with sympy (exact √ and rationals), run the forward pass with "
                       "hard-max attention (uniform over the maximal-score keys) in exact rational arithmetic, and "
                       "compare every answer token with Python integers: all inputs up to --exhaustive digits, a "
                       "random sample at each --sample-digits length.")
    e.add_argument("--d-model", type=int, default=23, help="embedding dimension (default 23, n_max = 6)")
    e.add_argument("--exhaustive", type=int, default=2, help="check every input of 1 … this many digits (default 2)")
    e.add_argument("--sample-digits", type=int, nargs="*", default=[3, 4], help="lengths to sample (default 3 4)")
    e.add_argument("--samples", type=int, default=200, help="random inputs per sampled length (default 200)")
    e.add_argument("--seed", type=non_negative_integer, default=0)
    r = sub.add_parser("precision", help="largest exact operand length per float format and width",
                       description="For bfloat16, float16, float32, float64 and several d, the largest operand "
                       "length at which the model stays exact on adversarial inputs (carry chains, all 9s), and the "
                       "first reason it breaks. Reads the map cached with the package (or --json FILE) unless --recompute; "
                       "a missing cache is an error, not a silent recomputation.")
    from .precision import add_arguments

    add_arguments(r)
    return p


def _run_margins(args: argparse.Namespace) -> int:
    from ..model import build_model, d_model_for
    from .margins import certify
    from .report import margins_lines
    from .search import smallest_sharpness

    d = args.d_model if args.d_model is not None else d_model_for(max(args.digits, 1))
    err = _check_d(d) or _check_digits(args.digits, d)
    if not err and args.digits > MAX_CERTIFY_DIGITS:
        err = (f"--digits {args.digits} is beyond what this tool certifies on one machine ({MAX_CERTIFY_DIGITS}: the "
               "model holds a position table of N + 3 rows)")
    if err:
        return _bad(err)
    if args.M is not None and not args.M > 0:
        return _bad(f"--M must be positive, got {args.M}")
    if not 0 < args.rel_tol < 1:
        return _bad(f"--rel-tol must lie in (0, 1), got {args.rel_tol}")
    t0 = time.perf_counter()
    model_dtype = "float64" if args.dtype == "real" else args.dtype
    model, meta = build_model(n_digits=args.digits, d_model=d, dtype=model_dtype, M=args.M)
    cache: dict = {}
    cert = certify(model, args.digits, args.dtype, cache=cache)
    search = None if args.no_search else smallest_sharpness(model, args.digits, meta["M"], args.dtype,
                                                            rel_tol=args.rel_tol, cache=cache)
    for line in margins_lines(cert, meta, search, time.perf_counter() - t0):
        print(line)
    return 0 if cert.passed else 1


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "bound":
        return run_bound_command(args, d_min=D_MIN, too_small=TOO_SMALL, bound_lines=bound_lines,
                                 table_lines=table_lines)
    if args.command == "margins":
        return _run_margins(args)
    if args.command == "exact":
        if err := _check_d(args.d_model):
            return _bad(err)
        if not 0 <= args.exhaustive <= 3 or args.samples < 0:
            return _bad(f"--exhaustive must be 0 … 3 (10^(2n) inputs each) and --samples ≥ 0, got "
                        f"{args.exhaustive} and {args.samples}")
        lengths = [(n, "--exhaustive") for n in range(1, args.exhaustive + 1)]
        lengths += [(n, "--sample-digits") for n in args.sample_digits]
        for n, flag in lengths:
            if err := _check_digits(n if flag == "--sample-digits" else args.exhaustive, args.d_model, flag):
                return _bad(err)
        from .exact import run_exact

        return run_exact(args.d_model, args.exhaustive, args.sample_digits, args.samples, args.seed)
    from .precision import run_precision

    return run_precision(args)
