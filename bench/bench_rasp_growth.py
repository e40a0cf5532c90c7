"""Growth of compiled RASP programs with max_seq_len (rasp.weights; docs/turing-programs.md, "Measured").

For each max_seq_len N, one program compiled to weights: parameters (and parameters / N), d_model,
d_mlp, hidden units, layers, compile seconds, the seconds of one forward pass at length N, and
whether the transformer answers four random inputs (lengths 1, N and two others) exactly, checked
against plain Python (not the RASP interpreter):

* ``reverse``: tracr's ``make_reverse`` against ``xs[::-1]`` (``length - indices - 1`` is affine, so
  no (length x indices) table);
* ``sort``: tracr's ``make_sort`` (keys made unique by position) against ``sorted(xs)``; past 512
  keys its selector width counts by bits (rasp.weights.order);
* ``hist``: tracr's ``make_hist`` against ``[xs.count(x) for x in xs]``;
* ``length``: tracr's ``make_length`` against ``len(xs)`` at every position;
* ``turing``: program P of the addition machine on a trace of about N tokens (N is the trace
  length, the operands as long as that allows), teacher-forced against the machine simulator.

    python bench/bench_rasp_growth.py --program reverse [--sizes 50 100 200 500 1000 10000]
        [--threads 1] [--device cpu|cuda] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from typing import Callable

import torch

from rasp import lib
from rasp.core import tokens
from rasp.weights import compile_to_transformer

PROGRAMS: dict[str, tuple[Callable[[int], object], list, Callable[[list], list]]] = {
    "reverse": (lambda n: lib.make_reverse(tokens), ["a", "b", "c"], lambda xs: xs[::-1]),
    "sort": (lambda n: lib.make_sort(tokens, tokens, max_seq_len=n, min_key=1), [1, 2, 3, 4, 5], sorted),
    "hist": (lambda n: lib.make_hist(), ["a", "b", "c", "d"], lambda xs: [xs.count(x) for x in xs]),
    "length": (lambda n: lib.make_length(), ["a", "b", "c"], lambda xs: [len(xs)] * len(xs)),
}


def measure(program: str, n: int, device: str, seed: int = 0) -> dict:
    """Compile ``program`` for max_seq_len ``n`` and run it on four inputs."""
    if program == "turing":
        return measure_turing(n, device)
    build, vocab, oracle = PROGRAMS[program]
    ct = compile_to_transformer(build(n), vocab, n, causal=False)
    ct.model.to(device)
    rng = random.Random(seed)
    exact, seconds = True, 0.0
    for k in (1, n, rng.randint(1, n), rng.randint(1, n)):
        xs = [rng.choice(vocab) for _ in range(k)]
        start = time.perf_counter()
        got = ct.run(xs)
        if k == n:
            seconds = time.perf_counter() - start
        exact &= got == oracle(xs)
    return _row(n, ct.stats, seconds, exact)


def measure_turing(n: int, device: str) -> dict:
    """Program P of the addition machine, compiled for a trace of about ``n`` tokens."""
    from bench_rasp_weights import machine_trace
    from rasp.turing.transformer import transformer_program

    rng = random.Random(0)
    digits = max(1, int(math.sqrt(n)) - 2)
    a, b = ("".join(rng.choice("0123456789") for _ in range(digits)) for _ in range(2))
    tm, tape, _, ref, ngram = machine_trace("addition", f"{a}+{b}")
    compiled = transformer_program(tm, ngram).to_transformer(len(ref))
    compiled.compiled.model.to(device)
    start = time.perf_counter()
    exact = compiled.teacher_forced(ref, monitor=False) == ref[len(tape) + 2:]
    return _row(len(ref), compiled.compiled.stats, time.perf_counter() - start, exact)


def _row(n: int, stats: dict, seconds: float, exact: bool) -> dict:
    return {"max_seq_len": n, "params": stats["params"], "d_model": stats["d_model"],
            "d_mlp": stats["d_mlp"], "mlp_units": stats["mlp_units"], "layers": stats["layers"],
            "compile_seconds": stats["compile_seconds"], "forward_seconds_at_n": round(seconds, 3),
            "exact": exact}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", choices=[*PROGRAMS, "turing"], default="reverse")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 500, 1000, 10000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if min(args.sizes) < 1 or args.threads < 1:
        parser.error("--sizes and --threads must be positive")
    torch.set_num_threads(args.threads)
    rows = []
    print(f"{args.program}:\n\n| max_seq_len | params | params / N | d_model | d_mlp | hidden units | layers "
          "| compile s | forward s (length N) | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        r = measure(args.program, n, args.device)
        rows.append(r)
        print(f"| {r['max_seq_len']} | {r['params']} | {r['params'] / r['max_seq_len']:.1f} | {r['d_model']} "
              f"| {r['d_mlp']} | {r['mlp_units']} | {r['layers']} | {r['compile_seconds']} "
              f"| {r['forward_seconds_at_n']} | {'yes' if r['exact'] else 'NO'} |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"program": args.program, "device": args.device, "threads": args.threads, "rows": rows},
                      fh, indent=1)


if __name__ == "__main__":
    main()
