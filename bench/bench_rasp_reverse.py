"""Growth of tracr's ``make_reverse`` compiled to weights (rasp.weights; docs/turing-programs.md,
"Linear maps").

``length - indices - 1`` is affine, so the compiler builds it without a (length x indices)
lookup table: one identity-table MLP per affine op, with one hidden unit per value
(rasp.weights.affine). This script prints, as a Markdown table, for each max_seq_len N: the
parameters, d_model, d_mlp, hidden units, compile seconds, and whether the transformer
reverses a few random inputs (lengths 1, N and two others) exactly, checked against Python's
``xs[::-1]``, plus the seconds of one forward pass at length N.

    python bench/bench_rasp_reverse.py [--sizes 50 100 200 500 1000 10000]
        [--threads 1] [--device cpu|cuda] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import random
import time

import torch

from rasp import lib
from rasp.core import tokens
from rasp.weights import compile_to_transformer

VOCAB = ["a", "b", "c"]


def measure(n: int, device: str, seed: int = 0) -> dict:
    """Compile make_reverse for max_seq_len ``n`` and run it on four inputs."""
    ct = compile_to_transformer(lib.make_reverse(tokens), VOCAB, n, causal=False)
    stats = ct.stats
    ct.model.to(device)
    rng = random.Random(seed)
    exact, seconds = True, 0.0
    for k in (1, n, rng.randint(1, n), rng.randint(1, n)):
        xs = [rng.choice(VOCAB) for _ in range(k)]
        start = time.perf_counter()
        got = ct.run(xs)
        if k == n:
            seconds = time.perf_counter() - start
        exact &= got == xs[::-1]
    return {"max_seq_len": n, "params": stats["params"], "d_model": stats["d_model"],
            "d_mlp": stats["d_mlp"], "mlp_units": stats["mlp_units"], "layers": stats["layers"],
            "compile_seconds": stats["compile_seconds"], "forward_seconds_at_n": round(seconds, 3),
            "exact": exact}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 500, 1000, 10000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    print("| max_seq_len | params | params / N | d_model | d_mlp | hidden units | layers "
          "| compile s | forward s (length N) | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        r = measure(n, args.device)
        rows.append(r)
        print(f"| {n} | {r['params']} | {r['params'] / n:.1f} | {r['d_model']} | {r['d_mlp']} "
              f"| {r['mlp_units']} | {r['layers']} | {r['compile_seconds']} "
              f"| {r['forward_seconds_at_n']} | {'yes' if r['exact'] else 'NO'} |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": args.device, "threads": args.threads, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
