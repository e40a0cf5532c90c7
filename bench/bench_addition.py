"""Benchmarks for Theorem 5.1's construction on long operands (prints figures; no assertions).

    python bench/bench_addition.py                 # 100000 digits: teacher + greedy, attention ratios
    python bench/bench_addition.py --digits 10000 --skip-greedy
    python bench/bench_addition.py --attention-only

Figures printed: wall time and peak memory of the CLI in teacher and greedy mode (each in a fresh
process, so peak memory is that run's), and the throughput of the long attention path relative to
torch's own ``scaled_dot_product_attention`` on the same shapes and dtype, measured side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from lengthgen.attention import chunked_attention, long_attention  # noqa: E402


def cli_run(digits: int, mode: str, device: str, dtype: str = "float32", timeout: float | None = None) -> dict:
    """One run of ``python -m constructions.addition`` in a fresh process (so peak memory is its own);
    its JSON, the process wall time and the command, or ``{"error": ...}``."""
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    cmd = [sys.executable, "-m", "constructions.addition", "--digits", str(digits), "--dtype", dtype, "--mode", mode,
           "--device", device, "--json", "--no-progress"]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"digits": digits, "dtype": dtype, "mode": mode, "error": f"stopped after {timeout:.0f} s"}
    result = json.loads(out.stdout) if out.stdout.strip() else {"error": out.stderr.strip()}
    result.update(process_seconds=round(time.perf_counter() - start, 2),
                  command=" ".join(["python -m constructions.addition", *cmd[3:]]))
    return result


def best_of(fn, repeats: int = 3) -> float:
    """Fastest of ``repeats`` calls, the GPU synchronized before and after each."""
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def attention_ratios(n_keys: int, device: str, dtype: torch.dtype) -> None:
    """Throughput ratio (ours / SDPA) for a full causal pass and for answer-only queries."""
    g = torch.Generator().manual_seed(0)
    shape = (1, 2, n_keys, 20)
    q, k, v = (torch.randn(shape, generator=g, dtype=dtype).to(device) for _ in range(3))
    rows = []
    sdpa_full = best_of(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0))
    rows.append(("full causal", n_keys, sdpa_full, best_of(lambda: long_attention(q, k, v, 1.0))))
    lq = n_keys // 3
    q_ans = q[:, :, -lq:].contiguous()
    mask = torch.ones(lq, n_keys, dtype=torch.bool, device=device).tril(n_keys - lq)
    sdpa_ans = best_of(lambda: F.scaled_dot_product_attention(q_ans, k, v, attn_mask=mask, scale=1.0))
    rows.append(("answer queries (Lq=N/3)", lq, sdpa_ans, best_of(lambda: long_attention(q_ans, k, v, 1.0))))
    rows.append(("  chunked fallback, same", lq, sdpa_ans, best_of(lambda: chunked_attention(q_ans, k, v, 1.0), 1)))
    print(f"\nattention throughput vs torch SDPA ({device}, {str(dtype).removeprefix('torch.')}, N={n_keys}, 2 heads, d_head=20)")
    print(f"  {'case':28s} {'queries':>8s} {'SDPA s':>9s} {'ours s':>9s} {'ratio':>7s}")
    for name, nq, t_ref, t_ours in rows:
        print(f"  {name:28s} {nq:8d} {t_ref:9.3f} {t_ours:9.3f} {t_ref / t_ours:7.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--digits", type=int, default=100_000)
    p.add_argument("--skip-greedy", action="store_true")
    p.add_argument("--attention-only", action="store_true", help="only the SDPA ratio benchmark")
    p.add_argument("--attention-keys", type=int, default=24_000, help="sequence length for the ratio benchmark")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")
    modes = [] if args.attention_only else ["teacher"] + ([] if args.skip_greedy else ["greedy"])
    for mode in modes:
        r = cli_run(args.digits, mode, args.device)
        if "error" in r:
            print(f"{mode}: ERROR {r['error']}")
            continue
        print(f"{mode:8s} {r['digits']} digits ({r['n_tokens']} tokens): {'EXACT' if r['correct'] else 'WRONG'}, "
              f"model {r['seconds']:.1f} s, process {r['process_seconds']:.1f} s, peak memory {r['peak_memory_bytes'] / 2**30:.2f} GiB")
    attention_ratios(args.attention_keys, args.device, torch.float32)


if __name__ == "__main__":
    main()
