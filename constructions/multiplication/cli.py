"""Command line for the N×2 multiplication construction: ``python -m constructions.multiplication``.

Builds the model, multiplies with the transformer, and checks the product against Python integer
arithmetic. Exit status: 0 exactly right, 1 wrong (the first wrong answer position is printed),
2 bad input (one line on stderr).

Modes: ``teacher`` runs one forward pass over prompt + true answer and checks the decided argmax
(lengthgen.decode.decided_argmax) at every answer position; by induction over decoding steps this
is equivalent to greedy exact match. ``greedy`` decodes token by token with a key/value cache.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from constructions.cli_support import (UNDECIDED_CHAR, add_common_options, add_threads_option, apply_threads,
                                       attention_progress_bar, operands_from, report_result, resolve_device,
                                       rss_peak_bytes)
from lengthgen.cli import ArgumentParser, UsageError, run_cli

from .layout import d_model_for

PROG = "python -m constructions.multiplication"
EPILOG = f"""examples:
  {PROG} --digits 100000
  {PROG} --a 653 --b 49 --mode greedy
  {PROG} --a @a.txt --b 97 --output product.txt --json
  {PROG} export DIR --digits 20   # the model as a checkpoint (see export --help)
exit status: 0 the model's product is exactly right, 1 it is wrong, 2 bad input"""


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="N×2 multiplication with coupled positions (after Cho et al. 2024, Position Coupling): build "
        "the 3-layer transformer, multiply an N-digit number by a number below 100 with it, and check the "
        "product against exact integer arithmetic (docs/multiplication.md).",
        epilog=EPILOG,
    )
    add_common_options(
        p, digits_help="multiply a random N-digit number by a random b in 10..99",
        b_help="second operand, 0..99: decimal digits, or @PATH to a file of digits", d_min=d_model_for(1),
        dtype_help="default float32", dtype_choices=["float32", "float64"], answer="product",
    )
    add_threads_option(p)
    return p


def random_multiplier(rng: np.random.Generator, n_digits: int) -> np.ndarray:
    """A random b in 10..99 as its two digits (``--digits`` draws a with N digits and this b)."""
    return np.array(divmod(int(rng.integers(10, 100)), 10), dtype=np.uint8)


def operands(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    a, b = operands_from(args, random_b=random_multiplier)
    b = b[np.argmax(b != 0):] if b.any() else b[-1:]  # leading zeros of b do not count
    if len(b) > 2:
        raise UsageError(f"--b must be at most 99 (N×2 multiplication), got {len(b)} digits")
    return a, b


def run(args: argparse.Namespace) -> dict:
    import torch

    from lengthgen.decode import greedy_generate

    from .model import TASK, build_model, instance, teacher_predictions

    apply_threads(args.threads)
    a, b = operands(args)
    device = resolve_device(args.device, args.dtype)
    model, meta = build_model(n_digits=len(a), d_model=args.d_model, dtype=args.dtype, device=device)
    inst = instance(a, b)
    expected = inst.answer_tokens
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    show_progress = not args.no_progress and not args.json and sys.stderr.isatty()
    if args.mode == "teacher":
        with attention_progress_bar(show_progress):
            pred = teacher_predictions(model, [inst])[0]
    else:
        pred = np.array(greedy_generate(
            model, inst.tokens[: inst.prompt_len], inst.pos_ids[: inst.prompt_len],
            new_pos_ids=inst.pos_ids[inst.prompt_len:], stop_token=TASK.EOS, progress=show_progress,
        ))
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else rss_peak_bytes()
    length = min(len(pred), len(expected))
    mismatch = np.nonzero(pred[:length] != expected[:length])[0]
    first_wrong = int(mismatch[0]) if len(mismatch) else (None if len(pred) == len(expected) else length)
    return {
        "digits": int(len(a)), "b": int("".join(map(str, b))), "correct": first_wrong is None,
        "n_tokens": int(len(inst.tokens)), "d_model": meta["d_model"], "layers": model.cfg.n_layers,
        "device": device, "dtype": args.dtype, "mode": args.mode, "threads": torch.get_num_threads(),
        "seconds": round(seconds, 3), "peak_memory_bytes": int(peak), "first_wrong_position": first_wrong,
        "M": meta["M"], "leak_bound": meta["leak_bound"], "_pred": pred,
    }


def product_digits(pred: np.ndarray) -> str:
    """The answer tokens c_0..c_{N+1} (reversed product) as a decimal string, most significant first;
    an undecided or non-digit prediction is written as '?'."""
    text = "".join(str(int(t)) if 0 <= t <= 9 else UNDECIDED_CHAR for t in pred[:-1][::-1]).lstrip("0")
    return text or "0"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["export"]:  # python -m constructions.multiplication export DIR: see .export
        from .export import main as export_main

        return export_main(argv[1:])
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    result["product"] = product_digits(result.pop("_pred"))
    return report_result(
        args, result, answer_key="product", positions_hint="c_0 (the ones digit)",
        summary=f"{result['digits']}-digit × {result['b']}, {result['n_tokens']} tokens, d_model={result['d_model']}, "
        f"{result['layers']} layers",
    )
