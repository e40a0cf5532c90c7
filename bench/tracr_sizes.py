"""tracr's compiler on the programs of its own lib.py, for the side-by-side table of
bench/bench_rasp_vs_tracr.py (docs/turing-programs.md, "Measured").

This script runs in tracr's environment, not this project's (tracr needs JAX and dm-haiku):

    python -m venv /tmp/tracr-venv && /tmp/tracr-venv/bin/pip install jax jaxlib dm-haiku chex einops networkx numpy
    git clone https://github.com/google-deepmind/tracr /tmp/tracr-src      # (the source; tracr is not on PyPI)
    PYTHONPATH=/tmp/tracr-src /tmp/tracr-venv/bin/python bench/tracr_sizes.py --out bench/results/tracr_sizes.json

Per program and max_seq_len: layers, heads, d_model (the residual width), the MLP hidden width,
the parameters (every array of the assembled model), the compile seconds, and how many of a few
random inputs (lengths 1, max_seq_len and two between) the compiled model answers as tracr's own
RASP evaluator does (numerical outputs within 1e-6), or the error, or "timeout" after --timeout
seconds.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time

import numpy as np
from tracr.compiler import compiling, lib
from tracr.rasp import rasp

LETTERS = ["a", "b", "c", "d"]
NUMBERS = [1, 2, 3, 4, 5]
PARENS = ["a", "b", "(", ")"]


def programs(n: int) -> list[tuple[str, object, list]]:
    """(name, program, vocab), the names and arguments of bench/bench_rasp_vs_tracr.py's list."""
    return [
        ("make_length", rasp.categorical(lib.make_length()), LETTERS),
        ("make_reverse", lib.make_reverse(rasp.tokens), LETTERS),
        ("make_hist", lib.make_hist(), LETTERS),
        ("make_sort_unique", lib.make_sort_unique(rasp.tokens, rasp.tokens), NUMBERS),
        ("make_sort", lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=n, min_key=1), NUMBERS),
        ("make_sort_freq", lib.make_sort_freq(n), LETTERS),
        ("make_frac_prevs", lib.make_frac_prevs(rasp.tokens == "("), PARENS),
        ("make_pair_balance", lib.make_pair_balance(rasp.tokens, "(", ")"), PARENS),
        ("make_shuffle_dyck2", lib.make_shuffle_dyck2(), ["(", ")", "{", "}", "a"]),
        ("make_count_less_freq", lib.make_count_less_freq(2), LETTERS),
        ("make_count", lib.make_count(rasp.tokens, "a"), LETTERS),
        ("shift_by_2", lib.shift_by(2, rasp.tokens), LETTERS),
        ("detect_pattern_ab", lib.detect_pattern(rasp.tokens, "ab"), LETTERS),
    ]


class Timeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise Timeout


def _same(got, want) -> bool:
    if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(got, (int, float)):
        return abs(float(got) - float(want)) <= 1e-6
    return got == want


def measure(name: str, program, vocab: list, n: int, timeout: int, rng: random.Random) -> dict:
    """One row. The sizes are recorded as soon as the model is compiled, so a check that runs out
    of time keeps them (``error``: "check timeout ..."); a compile that does not finish has none."""
    row = {"program": name, "max_seq_len": n}
    signal.alarm(timeout)
    try:
        start = time.perf_counter()
        model = compiling.compile_rasp_to_model(program, set(vocab), n, compiler_bos="BOS")
        row["compile_seconds"] = round(time.perf_counter() - start, 3)
        cfg = model.model_config
        row.update(layers=cfg.num_layers, heads=cfg.num_heads * cfg.num_layers, d_model=len(model.residual_labels),
                   d_mlp=cfg.mlp_hidden_size,
                   params=int(sum(np.asarray(a).size for mod in model.params.values() for a in mod.values())))
        right = 0
        lengths = sorted({1, n, max(1, n // 2), max(1, n // 3)})
        for length in lengths:
            xs = [rng.choice(vocab) for _ in range(length)]
            want = rasp.evaluate(program, xs)
            got = model.apply(["BOS"] + xs).decoded[1:]
            right += all(_same(g, w) for g, w in zip(got, want)) and len(got) == len(want)
        row["inputs_right"] = f"{right}/{len(lengths)}"
    except Timeout:
        row["error"] = (f"check timeout after {timeout} s (compiled in {row['compile_seconds']} s)"
                        if "params" in row else f"timeout after {timeout} s")
    except MemoryError:
        row["error"] = "MemoryError (over --max-memory-gb)"
    except Exception as exc:  # noqa: BLE001 - recorded, the table goes on
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.alarm(0)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", nargs="*", type=int, default=[5, 10, 20, 50, 100, 500])
    p.add_argument("--programs", nargs="*", metavar="NAME", help="only these programs (default: all)")
    p.add_argument("--timeout", type=int, default=120, help="seconds per compile and check")
    p.add_argument("--max-memory-gb", type=float, default=None,
                   help="address-space limit of this process (a compile over it is recorded as a MemoryError)")
    p.add_argument("--merge", action="store_true",
                   help="keep the rows of --out that this run does not measure again (same program and length)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    unknown = sorted(set(args.programs or []) - {name for name, _, _ in programs(5)})
    if unknown:
        p.error(f"no such program: {', '.join(unknown)} (the names are tracr's lib.py functions, as in the table)")
    if args.max_memory_gb is not None:
        import resource

        limit = int(args.max_memory_gb * 2 ** 30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(0)
    old: dict = {}
    if args.merge:
        try:
            with open(args.out) as fh:
                old = json.load(fh)
        except FileNotFoundError:
            pass
    header = {k: v for k, v in old.items() if k != "rows"} or {
        "compiler": "tracr (google-deepmind/tracr, main)", "python": sys.version.split()[0],
        "command": "PYTHONPATH=<tracr source> python bench/tracr_sizes.py --out bench/results/tracr_sizes.json"}
    order = {name: i for i, (name, _, _) in enumerate(programs(5))}
    rows: list[dict] = []
    for n in args.lengths:
        for name, program, vocab in programs(n):
            if args.programs and name not in args.programs:
                continue
            rows.append(measure(name, program, vocab, n, args.timeout, rng))
            print(json.dumps(rows[-1]), flush=True)
            # written after every row, so that a run stopped part-way keeps what it measured
            done = {(r["program"], r["max_seq_len"]) for r in rows}
            kept = [r for r in old.get("rows", []) if (r["program"], r["max_seq_len"]) not in done]
            merged = sorted(kept + rows, key=lambda r: (r["max_seq_len"], order.get(r["program"], len(order))))
            with open(args.out, "w") as fh:
                json.dump({**header, "rows": merged}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
