"""``python -m constructions.multiplication.certify {bound,margins}`` — proofs, not samples, for the N×2
multiplication transformer (docs/multiplication.md, "Certificate").

* ``bound``: n_max(d) = 2^⌊(d−25)/4⌋ − 6, derived from the construction's layout.
* ``margins``: an all-inputs certificate at operand length N in exact real arithmetic (float rounding is
  not covered), and the smallest M for which it holds.

Bad input (unknown subcommand, d < 33, digits ≤ 0, digits beyond n_max(d), any ``--dtype``) prints
one line on stderr and exits 2.
"""
from __future__ import annotations

import argparse
import sys
import time

from constructions.cli_support import add_bound_command, run_bound_command
from lengthgen.cli import ArgumentParser, fail, run_cli

from ..layout import d_model_for
from .bound import bound_lines, derive_bound, n_max, table_lines

sys.set_int_max_str_digits(0)
PROG = "python -m constructions.multiplication.certify"
D_MIN = 33
MAX_CERTIFY_DIGITS = 1_000_000
REAL_ONLY = ("this certificate covers exact real arithmetic only; float rounding is not covered, so no float "
             "dtype can be certified (see docs/multiplication.md, \"Certificate\")")


def _bad(message: str) -> int:
    return fail(PROG, message)


TOO_SMALL = "25 token dimensions + 4·2 position dimensions"


def _check_d(d: int) -> str | None:
    return None if d >= D_MIN else f"--d-model must be at least {D_MIN} ({TOO_SMALL}), got {d}"


def _check_digits(n: int, d: int) -> str | None:
    if n <= 0:
        return f"--digits must be a positive integer, got {n}"
    if n > n_max(d):
        return (f"--digits {n} is beyond n_max({d}) = 2^{derive_bound(d).P} − 6 = {n_max(d)}; use --d-model "
                f"{d_model_for(n)} or more")
    if n > MAX_CERTIFY_DIGITS:
        return f"--digits {n} is beyond what this tool certifies on one machine ({MAX_CERTIFY_DIGITS})"
    return None


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("``", ""))
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser, metavar="{bound,margins}")
    add_bound_command(sub, formula="2^⌊(d−25)/4⌋ − 6", reads="token dimensions, the four position blocks, hypercube "
                      "codes, the IDs the heads query", d_min=D_MIN, d_default=93,
                      d_default_note=", which holds 10^5 digits", max_d=256)
    m = sub.add_parser("margins", help="all-inputs certificate at operand length N, exact real arithmetic",
                       description="Certify, for every N-digit a, every b ≤ 99 and every answer position, that the "
                       "softmax leaks of both attention layers stay inside the decision margins of the MLPs and the "
                       "readout, reading every number from the model's weights (built as python -m "
                       "constructions.multiplication builds it, float32). Exact real arithmetic on those stored "
                       "numbers: float rounding of a forward pass is NOT covered. Reports each bound next to its margin and the smallest M that still "
                       "certifies. Exit 0 on PASS, 1 on FAIL.")
    m.add_argument("--digits", type=int, required=True, help="length N of a (1 ≤ N ≤ n_max(d))")
    m.add_argument("--d-model", type=int, help="embedding dimension (default: smallest that fits N)")
    m.add_argument("--M", type=float, help="attention sharpness (default: build_model's ½·ln((2N + 8)/10^-9))")
    m.add_argument("--no-search", action="store_true", help="skip the smallest-M search")
    m.add_argument("--rel-tol", type=float, default=5e-3,
                   help="relative width of the final [fails, passes] bracket on M (default 5e-3)")
    m.add_argument("--dtype", help="refused: " + REAL_ONLY.replace("%", "%%"))
    return p


def _run_margins(args: argparse.Namespace) -> int:
    from ..model import build_model
    from .margins import certify
    from .report import margins_lines
    from .search import smallest_sharpness

    if args.dtype is not None:
        return _bad(f"--dtype {args.dtype}: {REAL_ONLY}")
    d = args.d_model if args.d_model is not None else d_model_for(max(args.digits, 1))
    if err := _check_d(d) or _check_digits(args.digits, d):
        return _bad(err)
    if args.M is not None and not args.M > 0:
        return _bad(f"--M must be positive, got {args.M}")
    if not 0 < args.rel_tol < 1:
        return _bad(f"--rel-tol must lie in (0, 1), got {args.rel_tol}")
    t0 = time.perf_counter()
    model, meta = build_model(n_digits=args.digits, d_model=d, M=args.M)
    meta["dtype"] = model.cfg.dtype
    cache: dict = {}
    cert = certify(model, args.digits, cache=cache)
    search = None if args.no_search else smallest_sharpness(model, args.digits, meta["M"], args.rel_tol, cache=cache)
    for line in margins_lines(cert, meta, search, time.perf_counter() - t0):
        print(line)
    return 0 if cert.passed else 1


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bound":
        return run_bound_command(args, d_min=D_MIN, too_small=TOO_SMALL, bound_lines=bound_lines,
                                 table_lines=table_lines)
    return _run_margins(args)
