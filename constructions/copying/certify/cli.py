"""``python -m constructions.copying.certify {bound,margins}``: proofs, not samples, for the
copy/reverse construction (docs/copying.md, "Certificate").

* ``bound``: n_max(d) = 2^⌊(d−23)/2⌋ − 2, derived from the construction's layout
  (:mod:`constructions.copying.certify.bound`).
* ``margins``: an all-inputs certificate at input length N, in real arithmetic or with the float
  term of float64/float32, and the smallest M for which it holds
  (:mod:`constructions.copying.certify.margins`).

Bad input (unknown subcommand or task, d < 27, N ≤ 0, N beyond n_max(d), M ≤ 0) prints one line on
stderr and exits 2. ``margins`` exits 0 on PASS and 1 on FAIL (with the reason).
"""
from __future__ import annotations

import argparse
import time

from constructions.cli_support import add_bound_command, run_bound_command
from lengthgen.cli import ArgumentParser, UsageError, run_cli

from .bound import bound_lines, n_max, table_lines
from .margins import DTYPES, Certificate

PROG = "python -m constructions.copying.certify"
D_MIN = 27
MAX_CERTIFY_DIGITS = 2_000_000
EPILOG = f"""examples:
  {PROG} bound --d-model 512
  {PROG} bound --table --max-d 64
  {PROG} margins --task reverse --digits 100000
  {PROG} margins --task copy --digits 1000 --dtype real --no-search
exit status: 0 PASS (margins) or printed (bound), 1 FAIL, 2 bad input"""


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("``", ""), epilog=EPILOG)
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser, metavar="{bound,margins}")
    add_bound_command(sub, formula="2^⌊(d−23)/2⌋ − 2", reads="token dimensions, the POS and POS_NEXT blocks, the "
                      "hypercube code of the position table, and the IDs the tokens hold and the queries target",
                      d_min=D_MIN, d_default=512, d_default_note="")
    m = sub.add_parser("margins", help="all-inputs certificate at input length N (+ float term, smallest M)",
                       description="Certify, for every input of N digits and every answer position, that the softmax "
                       "leak (and the rounding of the chosen dtype) stay inside the readout's decision margins; report each "
                       "bound and margin and the smallest M that still certifies. Exit 0 only on PASS.")
    m.add_argument("--task", required=True, choices=["copy", "reverse"])
    m.add_argument("--digits", type=int, required=True, help="input length N (1 ≤ N ≤ n_max(d))")
    m.add_argument("--d-model", type=int, help="embedding dimension (default: the smallest that fits N)")
    m.add_argument("--M", type=float, help="attention sharpness (default: build_model's ½·ln(1000·(2N+3)))")
    m.add_argument("--dtype", default="float32", choices=list(DTYPES),
                   help="'real': exact real arithmetic (float64 weights, no float term); float64/float32: the model in that "
                   "format, with the rounding term of docs/certificate.md's model (F1)-(F3) (default float32)")
    m.add_argument("--no-search", action="store_true", help="skip the smallest-M search")
    return p


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x != 0 else "0"


def margins_lines(cert: Certificate, meta: dict, search, elapsed: float) -> list[str]:
    """Every bound and margin of ``cert`` (and the smallest-M search), one fact per line."""
    n, dt = cert.n, cert.dtype
    arithmetic = "real arithmetic (float64 weights)" if dt == "real" else dt
    out = [f"{cert.task} construction: N = {n} digits, d_model = {cert.d_model} (P = {cert.P}), M = {meta['M']:.6g}, "
           f"{arithmetic}, position IDs from s = 1"]
    if not cert.classes:
        return out + [f"FAIL ({cert.reason}): {cert.message}"]
    positions, configs = sum(c.positions for c in cert.classes), sum(c.configs for c in cert.classes)
    out += [f"covers every input of length N (10^{n} inputs) at all {positions} answer positions: {len(cert.classes)} "
            f"classes, {configs} digit assignments",
            "attention (scores read from W_E, W_pos, W_Q, W_K, biases; keys at other IDs bounded by ∏_e (1 + G_e) − 1 "
            "over the values each coordinate of W_pos·W_K takes on the IDs):"]
    for h, info in enumerate(cert.heads):
        out.append(f"  head {h + 1}: |S| ∈ {{{', '.join(map(str, info['sizes']))}}}; score gap to other keys ≥ "
                   f"{info['gap']:.4g}; leak λ ≤ {_fmt(info['leak'])}; spread in S η ≤ {_fmt(info['eta'])}; "
                   f"TV to uniform on S ≤ {_fmt(info['tv'])}")
    out.append("  every bound is the upper end of an interval enclosure (outward-rounded float64, mpmath for exp/log)")
    if cert.float_terms is not None and dt != "real":
        out.append(f"{dt} term:")
        out += [f"  {line}" for line in cert.float_terms.describe() if not line.startswith("FFN")]
        out.append(f"  readout: |Δlogit gap| ≤ {_fmt(cert.float_terms.logit_error)}")
    out.append("readout inputs, |Δ| ≤ leak + spread + float (worst class), through W_V, W_O:")
    for name, parts in cert.deltas.items():
        out.append(f"  {name:<11} ≤ {_fmt(sum(parts.values())):<9} ("
                   + ", ".join(f"{k} {_fmt(v)}" for k, v in parts.items()) + ")")
    out.append("readout margins (hard-max limit right for every digit assignment):")
    for c in cert.classes:
        out.append(f"  class of {c.description}  [{c.positions} positions, {c.configs} assignments]")
        out.append(f"      binding: {c.where}; needs {_fmt(sum(c.parts.values()))} -> slack ×{c.slack:.3g}")
    if search is not None:
        out.append(search.summary(n, dt))
    verdict = "PASS" if cert.passed else f"FAIL ({cert.reason})"
    claim = f"the {cert.task} of every {n}-digit input is predicted correctly at every answer position"
    out.append(f"{verdict} ({'real arithmetic' if dt == 'real' else dt}): {claim if cert.passed else cert.message}"
               f"   [{elapsed:.1f} s]")
    return out


def _run_margins(args: argparse.Namespace) -> int:
    from ..model import build_model, d_model_for
    from .margins import certify
    from .search import smallest_sharpness

    if args.digits <= 0:
        raise UsageError(f"--digits must be a positive integer, got {args.digits}")
    if args.digits > MAX_CERTIFY_DIGITS:
        raise UsageError(f"--digits {args.digits} is beyond what this tool certifies on one machine ({MAX_CERTIFY_DIGITS})")
    d = args.d_model if args.d_model is not None else d_model_for(args.digits)
    if d < D_MIN:
        raise UsageError(f"--d-model must be at least {D_MIN} (23 token dimensions + 2·2 position dimensions), got {d}")
    if args.digits > n_max(d):
        raise UsageError(f"--digits {args.digits} is beyond n_max({d}) = {n_max(d)}; use --d-model {d_model_for(args.digits)} "
                         "or more")
    if args.M is not None and not args.M > 0:
        raise UsageError(f"--M must be positive, got {args.M}")
    t0 = time.perf_counter()
    model_dtype = "float64" if args.dtype == "real" else args.dtype
    model, meta = build_model(args.task, n_digits=args.digits, d_model=d, dtype=model_dtype, M=args.M)
    cache: dict = {}
    cert = certify(model, args.task, args.digits, args.dtype, cache=cache)
    search = None if args.no_search else smallest_sharpness(model, args.task, args.digits, meta["M"], args.dtype,
                                                            cache=cache)
    print("\n".join(margins_lines(cert, meta, search, time.perf_counter() - t0)))
    return 0 if cert.passed else 1


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bound":
        return run_bound_command(args, d_min=D_MIN, too_small="23 token dimensions + 2·2 position dimensions",
                                 bound_lines=bound_lines, table_lines=table_lines)
    return _run_margins(args)
