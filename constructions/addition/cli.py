"""Command line for Theorem 5.1's construction: ``python -m constructions.addition``.

Builds the model, adds two numbers *with the transformer*, prints the model's sum and checks it
against exact integer arithmetic. Exit status: 0 exactly right, 1 wrong (the first wrong answer
position is printed), 2 bad input.

Modes: ``teacher`` runs one forward pass over prompt + true answer and checks the prediction at
every answer position; by induction over decoding steps this is equivalent to greedy exact match
(if every prediction is right given a right prefix, greedy decoding never leaves the right
prefix). ``greedy`` really decodes token by token with a key/value cache. Both count a prediction
only when its logit beats every other by the margin of :func:`lengthgen.decode.decided_argmax`.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from lengthgen.cli import ArgumentParser, UsageError, run_cli

from ..cli_support import (UNDECIDED_CHAR, add_common_options, attention_progress_bar, operands_from,
                           random_operand, report_result, resolve_device, rss_peak_bytes)

EPILOG = """examples:
  python -m constructions.addition --digits 100000
  python -m constructions.addition --a 653 --b 49 --mode greedy
  python -m constructions.addition --a @a.txt --b @b.txt --output sum.txt --json
  python -m constructions.addition export DIR --digits 20   # the model as a checkpoint (see export --help)
exit status: 0 the model's sum is exactly right, 1 it is wrong, 2 bad input
a prediction counts only if its logit beats every other logit by a margin (ties are wrong)"""
DTYPES = ("float32", "float64", "float16", "bfloat16")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m constructions.addition",
        description="Theorem 5.1 (Cho et al. 2024, Position Coupling): build the 1-layer 2-head addition "
        "transformer, add two numbers with it, and check the sum against exact integer arithmetic.",
        epilog=EPILOG,
    )
    add_common_options(
        p, digits_help="add two random numbers with this many digits (leading digit non-zero)",
        b_help="second operand: decimal digits, or @PATH to a file of digits", d_min=21,
        dtype_help=f"{', '.join(DTYPES)} (default float32)", answer="sum",
    )
    return p


def run(args: argparse.Namespace) -> dict:
    import torch

    from lengthgen.decode import UNDECIDED

    from .model import answer_predictions, build_model, first_wrong_position

    if args.dtype not in DTYPES:
        raise UsageError(f"unknown --dtype {args.dtype!r}; choose one of {', '.join(DTYPES)}")
    a, b = operands_from(args, random_b=random_operand)
    device = resolve_device(args.device, args.dtype)
    n = max(len(a), len(b))
    model, meta = build_model(n_digits=n, d_model=args.d_model, dtype=args.dtype, device=device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    show_progress = not args.no_progress and not args.json and sys.stderr.isatty()
    with attention_progress_bar(show_progress and args.mode == "teacher"):
        pred, expected = answer_predictions(model, a, b, args.mode, progress=show_progress)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else rss_peak_bytes()
    first_wrong = first_wrong_position(pred, expected)
    undecided = first_wrong is not None and first_wrong < len(pred) and int(pred[first_wrong]) == UNDECIDED
    return {
        "digits": n, "correct": first_wrong is None, "sum": model_sum_digits(pred), "n_tokens": 3 * n + 5,
        "d_model": meta["d_model"], "heads": model.cfg.n_heads, "device": device, "dtype": args.dtype,
        "mode": args.mode, "seconds": round(seconds, 3), "peak_memory_bytes": int(peak),
        "first_wrong_position": first_wrong, "undecided": undecided, "M": meta["M"], "leak_bound": meta["leak_bound"],
    }


def model_sum_digits(pred: np.ndarray) -> str:
    """The model's answer tokens c_0..c_n (reversed sum, then ``$``) as the sum it states, most
    significant digit first, without leading zeros. An undecided prediction shows as ``?``; any
    other non-digit token as its text (only a wrong model produces either)."""
    from lengthgen.decode import UNDECIDED
    from lengthgen.tasks import ADDITION

    tokens = [int(t) for t in pred]
    if tokens and tokens[-1] == ADDITION.EOS:
        tokens = tokens[:-1]
    chars = [UNDECIDED_CHAR if t == UNDECIDED else ADDITION.vocab[t] for t in tokens[::-1]]
    return "".join(chars).lstrip("0") or "0"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["export"]:  # python -m constructions.addition export DIR: see constructions.addition.export
        from .export import main as export_main

        return export_main(argv[1:])
    return run_cli("python -m constructions.addition", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    undecided = " (undecided: no logit beats the others by the decision margin)" if result["undecided"] else ""
    return report_result(
        args, result, answer_key="sum", wrong_detail=undecided, positions_hint="c_0 (the ones digit)",
        summary=f"{result['digits']}-digit addition, {result['n_tokens']} tokens, d_model={result['d_model']}, "
        f"{result['heads']} heads",
    )
