"""Figures of the trained-model certificate (docs/certificate.md, "Trained models").

    nice -n 10 python bench/bench_certify_trained.py                 # committed checkpoints, N = 5, 10, 15
    nice -n 10 python bench/bench_certify_trained.py --digits 2 3 --exhaustive
    nice -n 10 python bench/bench_certify_trained.py --checkpoints addition_coupled_1l2h_packed_200 --digits 3 --widen-to 3 --exhaustive
    nice -n 10 python bench/bench_certify_trained.py --digits 1 2 --exhaustive --dtype float32   # the float32 statement

Per checkpoint and length: the proven lower bound, lengthgen.evaluate's sampled exact match (1000
samples), configurations proven / not proven, seconds. With ``--exhaustive`` (N ≤ 3: 810 000 pairs
at N = 3) also the exact match over every operand pair by float64 forward passes, and a check that
the bound does not exceed it (with ``--dtype float32``, float32 forward passes: the statement's
subject).
"""
from __future__ import annotations

import argparse
import itertools
import time

import torch

from lengthgen.certify import DTYPES, certify, find_counterexamples, forward_dtype, summarize
from lengthgen.evaluate import evaluate
from lengthgen.proof.counterexamples import wrong_positions
from lengthgen.runs import load_checkpoint
from lengthgen.task_batches import EVAL_STARTS

CHECKPOINTS = ["addition_coupled_1l2h_packed", "addition_coupled_1l2h_packed_scaled",
               "addition_coupled_1l2h_unscaled", "addition_coupled_1l2h"]


def exhaustive_accuracy(model: torch.nn.Module, n: int, start: int, dtype: torch.dtype = torch.float64) -> float:
    lo = 10 ** (n - 1) if n > 1 else 0
    pairs = [(str(a), str(b)) for a, b in itertools.product(range(lo, 10**n), repeat=2)]
    right = 0
    for i in range(0, len(pairs), 4096):
        right += sum(not wrong for wrong in wrong_positions(model, pairs[i:i + 4096], start, batch=4096, dtype=dtype))
    return right / len(pairs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoints", nargs="*", default=CHECKPOINTS)
    p.add_argument("--digits", nargs="*", type=int, default=[5, 10, 15])
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--exhaustive", action="store_true")
    p.add_argument("--widen-to", type=int, default=None, help="as lengthgen.certify --widen-to")
    p.add_argument("--tail", default="both", choices=["interval", "both", "affine"],
                   help="both: the affine tail on what plain intervals leave unproven (the default of lengthgen.certify)")
    p.add_argument("--dtype", default="real", choices=DTYPES, help="as lengthgen.certify --dtype")
    args = p.parse_args()
    torch.set_num_threads(1)
    start = EVAL_STARTS["addition"]
    print("| checkpoint | N | proven lower bound | sampled exact match | configurations proven / not proven | "
          "largest attention share outside the window | seconds |" + (" exhaustive |" if args.exhaustive else ""))
    for name in args.checkpoints:
        for n in args.digits:
            model, _, _ = load_checkpoint(name if name == "construction" else f"checkpoints/{name}", n)
            t0 = time.perf_counter()
            results = certify(model, n, start, tail=args.tail, widen_to=args.widen_to, dtype=args.dtype)
            out = summarize(n, results, find_counterexamples(model, n, start, results, 5, dtype=args.dtype))
            seconds = time.perf_counter() - t0
            sampled = evaluate(model, "coupled", [n], args.samples)[0]["exact_match"]
            share = max(r.max_free_share for r in results)
            row = (f"| {name} | {n} | {out['accuracy_lower_bound']:.4f} ({out['verdict']}) | {sampled:.3f} | "
                   f"{out['configurations_proven']} / {out['configurations_failed']} | {share:.3g} | {seconds:.0f} |")
            if args.exhaustive:
                exact = exhaustive_accuracy(model, n, start, forward_dtype(args.dtype))
                assert out["accuracy_lower_bound"] <= exact, (name, n, out["accuracy_lower_bound"], exact)
                row += f" {exact:.4f} |"
            print(row, flush=True)
            for c in out["counterexamples"]:
                print(f"  counterexample {c}")


if __name__ == "__main__":
    main()
