"""What the constructions' command lines share (``python -m constructions.addition``,
``python -m constructions.multiplication``, ``python -m constructions.copying``): the operand and run
options, reading operands from the command line or ``@file``, the device choice, the progress bar of a long teacher-forced pass, peak
memory, and the abbreviation of long answers on the screen."""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping

import numpy as np

from lengthgen.cli import UsageError, non_negative_integer
from lengthgen.resources import require_memory
from lengthgen.runs import write_atomic

SHOWN_DIGITS = 1000  # a longer answer is abbreviated on the screen (--output and --json hold it in full)


def add_common_options(p: argparse.ArgumentParser, *, digits_help: str, b_help: str, d_min: int, dtype_help: str,
                       answer: str, dtype_choices: list[str] | None = None) -> None:
    """The operand group (--digits/--seed or --a/--b) and the run options of :func:`add_run_options`;
    ``answer`` names what the model computes ("sum", "product")."""
    src = p.add_argument_group("operands (either --digits, or --a and --b)")
    src.add_argument("--digits", type=int, help=digits_help)
    src.add_argument("--seed", type=non_negative_integer, default=0, help="random seed for --digits (default 0)")
    src.add_argument("--a", help="first operand: decimal digits, or @PATH to a file of digits")
    src.add_argument("--b", help=b_help)
    add_run_options(p, d_min=d_min, dtype_help=dtype_help, answer=answer, dtype_choices=dtype_choices)


def add_run_options(p: argparse.ArgumentParser, *, d_min: int, dtype_help: str, answer: str,
                    dtype_choices: list[str] | None = None) -> None:
    """--d-model, --device, --dtype, --mode, --output, --json, --no-progress (every construction's
    command line); ``answer`` names what the model computes ("sum", "product", "output")."""
    p.add_argument("--d-model", type=int, help=f"embedding dimension d >= {d_min} (default: the smallest that fits)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default auto: cuda when available")
    p.add_argument("--dtype", default="float32", choices=dtype_choices, help=dtype_help)
    p.add_argument("--mode", default="teacher", choices=["teacher", "greedy"],
                   help="teacher: one forward pass checking every answer token (default); greedy: decode with a KV cache")
    p.add_argument("--output", type=Path, help=f"write the model's {answer} (all its decimal digits) to this file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")


def apply_threads(threads: int | None) -> None:
    """``--threads``: set torch's CPU threads (at least 1)."""
    import torch

    if threads is not None:
        if threads < 1:
            raise UsageError(f"--threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)


#: memory per operand digit of a long run, measured: 10^5-digit addition peaks near 0.6 GB, reverse near 0.45 GB
BYTES_PER_DIGIT = 6000


def operands_from(args: argparse.Namespace,
                  random_b: Callable[[np.random.Generator, int], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The operands as digit arrays: random (``--digits N --seed S``; a has N digits, b comes from
    ``random_b(rng, N)``) or given (``--a``/``--b``, each decimal digits or ``@file``)."""
    if args.digits is not None:
        if args.a is not None or args.b is not None:
            raise UsageError("give either --digits or --a/--b, not both")
        if args.digits < 1:
            raise UsageError(f"--digits must be at least 1, got {args.digits}")
        require_memory(BYTES_PER_DIGIT * args.digits, f"a {args.digits}-digit run")
        rng = np.random.default_rng(args.seed)
        return random_operand(rng, args.digits), random_b(rng, args.digits)
    if args.a is None or args.b is None:
        raise UsageError("give --digits N, or both --a and --b")
    return read_operand(args.a, "a"), read_operand(args.b, "b")


def read_operand(value: str, name: str) -> np.ndarray:
    """The digits of ``--NAME``: decimal digits, or ``@PATH`` to a file of digits (line breaks allowed)."""
    from lengthgen.tasks.addition import digits_of

    if value.startswith("@"):
        path = Path(value[1:])
        try:
            value = path.read_text(encoding="ascii", errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read --{name} file {path}: {exc.strerror or exc}") from None
        value = "".join(value.split())  # allow line breaks in digit files
    try:
        return digits_of(value, f"--{name}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def random_operand(rng: np.random.Generator, n: int) -> np.ndarray:
    digits = rng.integers(0, 10, size=n, dtype=np.uint8)
    digits[0] = rng.integers(1, 10) if n > 1 else digits[0]
    return digits


TF32_OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def resolve_device(name: str, dtype: str | None = None) -> str:
    """``auto`` → cuda where available, else cpu. On CUDA in float32, TF32 matrix products are switched
    off: the constructions are exact (and certified) in IEEE float32, and measured with TF32 on an
    H100 the addition model at d = 41 is already wrong at 2 digits (bench/results/gpu/)."""
    import torch

    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available on this machine (use --device cpu or auto)")
    device = ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name
    if device == "cuda" and dtype == "float32":
        problem = tf32_problem(os.environ)
        if problem:
            raise UsageError(problem)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return device


def tf32_problem(environ: Mapping[str, str]) -> str | None:
    """Why float32 on CUDA would not be IEEE float32 here (the environment forces TF32), or None."""
    value = environ.get(TF32_OVERRIDE, "")
    if value not in ("", "0"):
        return (f"{TF32_OVERRIDE}={value} makes CUDA's float32 matrix products TF32 (10-bit mantissa), and the "
                "model is exact only in IEEE float32: unset it, or use --dtype float64")
    return None


@contextmanager
def attention_progress_bar(enabled: bool) -> Iterator[None]:
    """A progress bar over the answer rows of the teacher-forced pass (long inputs only)."""
    if not enabled:
        yield
        return
    from tqdm import tqdm

    from lengthgen.attention import report_progress

    bar = tqdm(desc="teacher-forced pass", unit="query", file=sys.stderr, leave=False)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        with report_progress(update):
            yield
    finally:
        bar.close()


def rss_peak_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def abbreviated(text: str, limit: int = SHOWN_DIGITS) -> str:
    """``text`` if it fits ``limit`` characters, else its first and last digits around a count."""
    if len(text) <= limit:
        return text
    return f"{text[:40]}...{text[-40:]} ({len(text)} digits; --output FILE writes all of them)"


UNDECIDED_CHAR = "?"  # an answer position whose top logit does not beat the others by the decision margin


def report_result(args: argparse.Namespace, result: dict, *, answer_key: str, summary: str,
                  positions_hint: str, wrong_detail: str = "") -> int:
    """Write ``result[answer_key]`` to ``--output`` (atomically, and only when it is right), print ``--json`` or the text report, and return the
    exit status (0 exact, 1 wrong). The text report is one verdict line (``summary`` followed by the run
    figures every construction reports), the answer (the per-position predictions when teacher
    forcing found a wrong one) and, when wrong, how answer positions are counted (``positions_hint``)."""
    if args.output is not None and result["correct"]:  # a wrong answer never replaces what the file holds
        try:
            write_atomic(args.output, result[answer_key] + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write --output {args.output}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(result))
        return 0 if result["correct"] else 1
    verdict = "EXACT" if result["correct"] else f"WRONG at answer position {result['first_wrong_position']}"
    threads = f", {result['threads']} thread(s)" if "threads" in result else ""
    print(
        f"{verdict}{wrong_detail}: {summary}, {result['device']}/{result['dtype']}{threads}, mode={result['mode']}, "
        f"{result['seconds']:.2f} s, peak memory {result['peak_memory_bytes'] / 2**20:.0f} MiB, "
        f"M={result['M']:.3f} (softmax leak <= {result['leak_bound']:.1e})"
    )
    label = answer_key if result["correct"] or args.mode == "greedy" else "per-position predictions (true prefix)"
    print(f"{label}: {abbreviated(result[answer_key])}")
    if not result["correct"]:
        print(f"answer positions count from {positions_hint}; the last one is the final '$'; "
              f"'{UNDECIDED_CHAR}' marks an undecided prediction")
        if args.output is not None:
            print(f"--output {args.output} was not written: the answer is wrong")
    return 0 if result["correct"] else 1


def add_bound_command(sub: argparse._SubParsersAction, *, formula: str, reads: str, d_min: int, d_default: int,
                      d_default_note: str, max_d: int = 1024) -> None:
    """The ``bound`` subcommand every construction's ``certify`` has: n_max(d) for one width, or a table."""
    b = sub.add_parser("bound", help="the length bound n_max(d), derived from the layout",
                       description=f"Print n_max(d) = {formula} exactly and rounded, derived from the construction's "
                       f"layout ({reads}).")
    b.add_argument("--d-model", type=int, default=d_default, help=f"embedding dimension d (default {d_default}{d_default_note})")
    b.add_argument("--table", action="store_true", help=f"print the bound for every d from {d_min} to --max-d")
    b.add_argument("--max-d", type=int, default=max_d, help=f"last d of --table (default {max_d})")


def run_bound_command(args: argparse.Namespace, *, d_min: int, too_small: str, bound_lines: Callable[[int], list[str]],
                      table_lines: Callable[[int, int], list[str]]) -> int:
    """Print what ``bound`` asked for; a width below ``d_min`` is bad input (``too_small`` says why)."""
    d, flag = (args.max_d, "--max-d") if args.table else (args.d_model, "--d-model")
    if d < d_min:
        raise UsageError(f"{flag} must be at least {d_min} ({too_small}), got {d}")
    print("\n".join(table_lines(d_min, args.max_d) if args.table else bound_lines(args.d_model)))
    return 0
