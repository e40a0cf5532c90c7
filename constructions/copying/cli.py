"""Command line for the copy/reverse construction: ``python -m constructions.copying``.

Builds the 1-layer model (docs/copying.md), copies or reverses a digit string with it, and checks
the output against plain Python string operations (``x`` or ``x[::-1]``, then ``$``). Exit status:
0 exactly right, 1 wrong (the first wrong answer position is printed), 2 bad input (one line on
stderr).

Modes: ``teacher`` runs one forward pass over prompt + true answer and checks the decided argmax
(:func:`lengthgen.decode.decided_argmax`) at every answer position; by induction over decoding
steps this is equivalent to greedy exact match. ``greedy`` decodes token by token with a key/value
cache.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from lengthgen.cli import ArgumentParser, UsageError, non_negative_integer, run_cli
from lengthgen.resources import require_memory

from ..cli_support import (BYTES_PER_DIGIT, UNDECIDED_CHAR, add_run_options, add_threads_option, apply_threads,
                           attention_progress_bar, read_operand, report_result, resolve_device, rss_peak_bytes)

PROG = "python -m constructions.copying"
PATTERNS = ("random", "runs")
EPILOG = f"""examples:
  {PROG} --task reverse --digits 100000 --pattern runs --threads 1
  {PROG} --task copy --x 31415926 --mode greedy
  {PROG} --task copy --x @x.txt --output y.txt --json
exit status: 0 the model's output is exactly the copy/reversal, 1 it is wrong, 2 bad input
a prediction counts only if its logit beats every other logit by a margin (ties are wrong)"""


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="Copy or reverse a digit string with coupled positions (after Cho et al. 2024, Position "
        "Coupling): build the 1-layer, 1-head transformer without MLP, run it on the input, and check its output "
        "against plain string operations (docs/copying.md).",
        epilog=EPILOG,
    )
    p.add_argument("--task", required=True, choices=["copy", "reverse"], help="copy: y = x; reverse: y = x reversed")
    src = p.add_argument_group("input (either --digits, or --x)")
    src.add_argument("--digits", type=int, help="a random input of this many digits")
    src.add_argument("--seed", type=non_negative_integer, default=0, help="random seed for --digits (default 0)")
    src.add_argument("--pattern", default=None, choices=PATTERNS,
                     help="--digits input: independent random digits, or runs of one repeated digit with lengths "
                     "from 1 to N/4 (log-uniform), the inputs a position-free model cannot tell apart (default random)")
    src.add_argument("--x", help="the input: decimal digits, or @PATH to a file of digits")
    add_run_options(p, d_min=27, dtype_help="default float32", answer="output", dtype_choices=["float32", "float64"])
    add_threads_option(p)
    return p


def random_input(rng: np.random.Generator, n: int, pattern: str) -> np.ndarray:
    """``n`` random digits, or (``runs``) runs of one digit whose lengths are log-uniform in
    [1, max(1, n/4)], each run's digit differing from the previous run's."""
    if pattern == "random":
        return rng.integers(0, 10, size=n, dtype=np.uint8)
    longest = max(1.0, n / 4)
    lengths, total = [], 0
    while total < n:
        lengths.append(min(n - total, int(math.exp(rng.uniform(0, math.log(longest))))))
        total += lengths[-1]
    digits = rng.integers(0, 10, size=len(lengths))
    for i in range(1, len(digits)):  # adjacent runs differ, so the lengths are the runs' true lengths
        if digits[i] == digits[i - 1]:
            digits[i] = (digits[i] + 1 + rng.integers(0, 9)) % 10
    return np.repeat(digits, lengths).astype(np.uint8)



def input_digits(args: argparse.Namespace) -> np.ndarray:
    if args.digits is not None:
        if args.x is not None:
            raise UsageError("give either --digits or --x, not both")
        if args.digits < 1:
            raise UsageError(f"--digits must be at least 1, got {args.digits}")
        require_memory(BYTES_PER_DIGIT * args.digits, f"a {args.digits}-digit run")
        return random_input(np.random.default_rng(args.seed), args.digits, args.pattern or "random")
    if args.x is None:
        raise UsageError("give --digits N or --x DIGITS")
    if args.pattern is not None:
        raise UsageError("--pattern shapes a random --digits input; it has no effect on --x")
    return read_operand(args.x, "x")


def expected_output(task: str, x: str) -> str:
    """The oracle: plain string operations, not the task's layout."""
    return (x[::-1] if task == "reverse" else x) + "$"


def output_text(pred: np.ndarray) -> str:
    """The model's answer tokens as text: digits, ``$``, ``=``; an undecided prediction as ``?``."""
    from lengthgen.decode import UNDECIDED
    from lengthgen.tasks import COPY

    return "".join(UNDECIDED_CHAR if int(t) == UNDECIDED else COPY.vocab[int(t)] for t in pred)


def run(args: argparse.Namespace) -> dict:
    import torch

    from .model import answer_predictions, build_model

    apply_threads(args.threads)
    x = input_digits(args)
    x_text = "".join(map(str, x.tolist()))
    device = resolve_device(args.device, args.dtype)
    model, meta = build_model(args.task, n_digits=len(x), d_model=args.d_model, dtype=args.dtype, device=device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    show_progress = not args.no_progress and not args.json and sys.stderr.isatty()
    with attention_progress_bar(show_progress and args.mode == "teacher"):
        pred = answer_predictions(model, args.task, x, args.mode, progress=show_progress)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else rss_peak_bytes()
    got, want = output_text(pred), expected_output(args.task, x_text)
    first_wrong = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), None)
    if first_wrong is None and len(got) != len(want):
        first_wrong = min(len(got), len(want))
    return {
        "task": args.task, "digits": len(x), "pattern": (args.pattern or "random") if args.digits is not None else None,
        "correct": first_wrong is None, "first_wrong_position": first_wrong,
        "expected_token": want[first_wrong] if first_wrong is not None and first_wrong < len(want) else None,
        "predicted_token": got[first_wrong] if first_wrong is not None and first_wrong < len(got) else None,
        "output": got[:-1] if first_wrong is None else got, "output_tokens": got, "n_tokens": 2 * len(x) + 3, "d_model": meta["d_model"], "layers": model.cfg.n_layers,
        "heads": model.cfg.n_heads, "device": device, "dtype": args.dtype, "mode": args.mode,
        "threads": torch.get_num_threads(), "seconds": round(seconds, 3), "peak_memory_bytes": int(peak),
        "M": meta["M"], "leak_bound": meta["leak_bound"],
    }


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    expected = "" if result["correct"] else (
        f" (expected {result['expected_token']!r}, predicted {result['predicted_token']!r})")
    pattern = f" ({result['pattern']})" if result["pattern"] else ""
    return report_result(
        args, result, answer_key="output", wrong_detail=expected, positions_hint="0 (y_1)",
        summary=f"{result['task']} of {result['digits']} digits{pattern}, {result['n_tokens']} tokens, "
        f"d_model={result['d_model']}, {result['layers']} layer, {result['heads']} head",
    )
