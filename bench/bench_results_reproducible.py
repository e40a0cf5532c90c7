"""Which numbers of figures/results.json a rerun reproduces (prints a table; no assertions).

    python bench/bench_results_reproducible.py            # all variants below, about 5 min on 2 busy cores
    python bench/bench_results_reproducible.py --variants default threads2

Evaluates the construction and the committed checkpoints exactly as ``python -m lengthgen.plot all``
does (``lengthgen.plot_length.measure``: 1000 additions per length, lengths 1-15, seed 999), once per variant,
each in a fresh process, and counts the per-length values that differ from figures/results.json:

* ``default``  one torch thread, as figures/regenerate.sh runs it;
* ``threads2`` two torch threads;
* ``generic``  ``ATEN_CPU_CAPABILITY=default``: torch's non-vectorized kernels, standing in for another
  CPU whose SIMD kernels (AVX2 here, AVX-512 elsewhere) sum in another order;
* ``mkl-sse``  ``MKL_ENABLE_INSTRUCTIONS=SSE4_2 MKL_CBWR=COMPATIBLE``: another MKL code path for the
  float32 matrix products.

The losses are float32 forward passes summed in float64 and rounded to 6 decimals; a loss of ~13 (a model
confidently wrong beyond its trained lengths) has its 6th decimal at float32's resolution, so a kernel that
sums in another order can move it by 1e-6. Exact match and token accuracy are counts of decided predictions.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "default": ({}, 1),
    "threads2": ({}, 2),
    "generic": ({"ATEN_CPU_CAPABILITY": "default"}, 1),
    "mkl-sse": ({"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "MKL_CBWR": "COMPATIBLE"}, 1),
}
FIELDS = ("loss", "exact_match", "token_accuracy")
CHILD = """
import json, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from lengthgen.plot import DEFAULT_CHECKPOINTS, ROOT
from lengthgen.plot_length import measure
models = [(None, "construction")] + [(k, str(ROOT / p)) for k, p in DEFAULT_CHECKPOINTS.items()]
entries = measure(models, list(range(1, 16)), 1000, 999, False)
print(json.dumps({k: e["results"] for k, e in entries.items()}))
"""


def run_variant(env_extra: dict[str, str], threads: int) -> tuple[dict, float]:
    env = {**os.environ, **env_extra, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(threads)], cwd=REPO, env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout), time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = p.parse_args()
    committed = json.loads((REPO / "figures" / "results.json").read_text())["length_generalization"]["models"]
    total = sum(len(e["results"]) for e in committed.values())
    print(f"{'variant':<10} {'seconds':>8}  " + "  ".join(f"{f + ' differ':>20}" for f in FIELDS) + "   examples")
    for name in args.variants:
        env_extra, threads = VARIANTS[name]
        got, seconds = run_variant(env_extra, threads)
        diffs = {f: [] for f in FIELDS}
        for label, rows in got.items():
            for mine, ref in zip(rows, committed[label]["results"]):
                for f in FIELDS:
                    if mine[f] != ref[f]:
                        diffs[f].append(f"{label} n={mine['n']} {f} {ref[f]} -> {mine[f]}")
        counts = "  ".join(f"{f'{len(diffs[f])} of {total}':>20}" for f in FIELDS)
        examples = "; ".join(d for f in FIELDS for d in diffs[f][:2]) or "-"
        print(f"{name:<10} {seconds:>8.0f}  {counts}   {examples}", flush=True)


if __name__ == "__main__":
    main()
