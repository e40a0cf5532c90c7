"""GPU figures (prints them and writes one JSON file per part under --out; no assertions).

    python bench/bench_gpu.py env        --out bench/results/gpu
    python bench/bench_gpu.py addition   --out bench/results/gpu   # 10^5 / 10^6 digits, teacher + greedy
    python bench/bench_gpu.py attention  --out bench/results/gpu   # long path vs torch SDPA, same shapes
    python bench/bench_gpu.py decode     --out bench/results/gpu   # greedy decoding paths side by side
    python bench/bench_gpu.py turing     --out bench/results/gpu   # compiled Turing-Program simulator
    python bench/bench_gpu.py precision  --out bench/results/gpu --tf32 off
    python bench/bench_gpu.py certify    --out bench/results/gpu   # lengthgen.certify, cuda vs cpu

Every part also runs on a machine without CUDA (``--device cpu`` and small sizes), which is how the
script is checked before a GPU is at hand. Each record holds the command that made it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO), str(REPO / "bench")]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))

from bench_addition import best_of, cli_run  # noqa: E402  (bench/ is on the path above)


def write(out: Path, name: str, record: dict, quiet: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    argv = [a.replace(str(REPO) + os.sep, "") for a in sys.argv[1:]]  # no machine paths in results
    record = {"command": " ".join(["python bench/bench_gpu.py", *argv]), **record}
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    if not quiet:
        print(json.dumps(record, indent=1), flush=True)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def env(args: argparse.Namespace) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
            "cpu_count": os.cpu_count(), "gpu": None}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), multiprocessors=p.multi_processor_count)
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            info["driver"] = smi.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    return info


def cli_addition(digits: int, dtype: str, mode: str, device: str, timeout: float) -> dict:
    row = cli_run(digits, mode, device, dtype, timeout)
    row.pop("sum", None)
    print(json.dumps(row), flush=True)
    return row


def addition(args: argparse.Namespace) -> dict:
    """Teacher runs, cheapest first; greedy runs; the float64 teacher run at the longest length last."""
    plan = [(n, dt, "teacher", args.timeout) for n in args.digits for dt in args.dtypes]
    last = [plan.pop(plan.index(x))] if (x := (max(args.digits), "float64", "teacher", args.timeout)) in plan else []
    plan += [(n, "float32", "greedy", args.greedy_timeout) for n in args.greedy_digits] + last
    rows = []
    for n, dtype, mode, timeout in plan:
        rows.append(cli_addition(n, dtype, mode, args.device, timeout))
        write(args.out, "addition", {"device": args.device, "runs": rows}, quiet=True)  # so far
    return {"device": args.device, "runs": rows}


def attention(args: argparse.Namespace) -> dict:
    """The model's long path against ``F.scaled_dot_product_attention`` on the shapes of the
    construction's teacher pass: 2 heads, d_head 20, N keys, answer queries = the last N/3."""
    from torch.nn.attention.bias import causal_lower_right

    from lengthgen.attention import long_attention

    rows = []
    for n in args.tokens:
        for dtype in (torch.float32, torch.float64):
            if dtype == torch.float64 and n >= 10**6:
                continue  # the float64 teacher run of the addition part times this size
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn((1, 2, n, 20), generator=g, dtype=dtype).to(args.device) for _ in range(3))
            lq = n // 3
            q_ans = q[:, :, -lq:].contiguous()
            row = {"keys": n, "queries": lq, "dtype": str(dtype).removeprefix("torch."), "heads": 2, "d_head": 20}
            repeats = args.repeats if n < 10**6 else 1  # seconds per call at 3*10^6 keys
            row["ours_s"] = round(best_of(lambda: long_attention(q_ans, k, v, 1.0), repeats), 4)
            if dtype == torch.float32 or n * lq * 8 * 2 < 2**31:
                mask = causal_lower_right(lq, n)
                row["sdpa_s"] = round(best_of(lambda: F.scaled_dot_product_attention(q_ans, k, v, attn_mask=mask, scale=1.0),
                                              repeats), 4)
                row["sdpa_over_ours"] = round(row["sdpa_s"] / row["ours_s"], 3)
            else:
                row["sdpa_s"] = None
                row["note"] = "SDPA has no fused float64 kernel; its math path would build the Lq x Lk matrix"
            print(json.dumps(row), flush=True)
            rows.append(row)
            write(args.out, "attention", {"device": args.device, "rows": rows}, quiet=True)  # so far
            del q, k, v, q_ans
    return {"device": args.device, "rows": rows}


def turing(args: argparse.Namespace) -> dict:
    """Program P of the addition machine, compiled (float64) and decoded greedily with a KV cache on
    ``--device``; the teacher-forced pass over the whole trace and the greedy tokens against the
    reference simulator. Greedy decoding stops after ``--greedy-seconds`` (estimated from the
    previous trace's rate), and the record says how many tokens that covered."""
    from bench_rasp_weights import machine_trace
    from lengthgen.decode import greedy_generate
    from rasp.turing.transformer import transformer_program

    rows, rate = [], None
    for tokens in args.tokens:
        m = max(1, int(math.sqrt(tokens)) - 2)
        rng = random.Random(0)
        a, b = ("".join(rng.choice("0123456789") for _ in range(m)) for _ in range(2))
        tm, tape, vocab, ref, n = machine_trace("addition", f"{a}+{b}")
        L = len(tape)
        t0 = time.perf_counter()
        compiled = transformer_program(tm, n).to_transformer(len(ref))
        compile_s = time.perf_counter() - t0
        compiled.compiled.model.to(args.device)
        sync()
        t0 = time.perf_counter()
        teacher = compiled.teacher_forced(ref, monitor=False)
        sync()
        teacher_s = time.perf_counter() - t0
        todo = len(ref) - L - 2
        budget = todo if rate is None else min(todo, int(rate * args.greedy_seconds))
        ids = compiled.compiled.encode(ref[:L + 2])
        sync()
        t0 = time.perf_counter()
        new = greedy_generate(compiled.model, ids, max_new_tokens=budget, stop_token=vocab.EOS)
        sync()
        greedy_s = time.perf_counter() - t0
        rate = len(new) / greedy_s
        growing = {}
        if tokens == args.tokens[0]:  # the growing cache's rate beside it, on the first 2000 tokens
            sync()
            t0 = time.perf_counter()
            old = greedy_generate(compiled.model, ids, max_new_tokens=min(budget, 2000), stop_token=vocab.EOS,
                                  static_cache=False)
            sync()
            growing = {"growing_cache_tokens": len(old), "growing_cache_tokens_per_s": round(len(old) / (time.perf_counter() - t0), 1),
                       "growing_cache_exact": old == ref[L + 2:L + 2 + len(old)]}
        row = {"digits": m, "trace_tokens": len(ref), "ngram": n, "device": args.device, "compile_s": round(compile_s, 2),
               "teacher_forced_s": round(teacher_s, 2), "teacher_forced_exact": teacher == ref[L + 2:],
               "greedy_tokens": len(new), "greedy_of": todo, "greedy_s": round(greedy_s, 2),
               "greedy_exact": new == ref[L + 2:L + 2 + len(new)], "tokens_per_s": round(rate, 1),
               "s_per_token": round(greedy_s / max(1, len(new)), 5), **growing, **compiled.compiled.stats}
        print(json.dumps(row), flush=True)
        rows.append(row)
        write(args.out, "turing", {"rows": rows}, quiet=True)  # so far
    return {"rows": rows}


DECODE_PATHS = {"growing cache": {"static_cache": False}, "static cache": {"static_cache": True, "cuda_graph": False},
                "static cache + CUDA graph": {"static_cache": True, "cuda_graph": True}}


def decode(args: argparse.Namespace) -> dict:
    """Greedy decoding of the addition construction by each path of lengthgen.decode, side by side
    in one process (the first call of a process also pays for CUDA's lazy set-up, so a warm-up
    decode of 100 digits runs first); then the teacher pass twice in a row, which shows how much of
    a single run's seconds is that set-up. Paths slower than ``--greedy-timeout`` s per size
    (estimated from the previous size) are skipped."""
    from constructions.addition.model import START_ID, build_model
    from lengthgen.decode import greedy_generate_batch, teacher_forced_argmax
    from lengthgen.tasks import ADDITION

    def instance(n: int, dtype: str):
        model, _ = build_model(n_digits=n, dtype=dtype, device=args.device)
        rng = random.Random(n)
        inst = ADDITION.instance(rng.randrange(10 ** (n - 1), 10**n), rng.randrange(10 ** (n - 1), 10**n), start=START_ID)
        return model, inst

    def greedy(model, inst, **path) -> list[int]:
        p = inst.prompt_len
        ids = torch.as_tensor(inst.pos_ids)
        return greedy_generate_batch(model, torch.as_tensor(inst.tokens[:p])[None], ids[None, :p], ids[None, p:],
                                     stop_token=ADDITION.EOS, **path)[0]

    rows, per_step = [], {}
    model, inst = instance(100, "float32")
    for path in DECODE_PATHS.values():
        greedy(model, inst, **path)  # warm-up
    for n in args.digits:
        model, inst = instance(n, "float32")
        for name, path in DECODE_PATHS.items():
            if name in per_step and per_step[name] * (n + 2) > args.greedy_timeout:
                rows.append({"digits": n, "path": name, "skipped": f"about {per_step[name] * (n + 2):.0f} s"})
                continue
            sync()
            start = time.perf_counter()
            out = greedy(model, inst, **path)
            sync()
            seconds = time.perf_counter() - start
            per_step[name] = seconds / (n + 2)
            rows.append({"digits": n, "path": name, "exact": out == list(inst.answer_tokens), "seconds": round(seconds, 3),
                         "ms_per_step": round(1e3 * seconds / (n + 2), 4)})
            print(json.dumps(rows[-1]), flush=True)
            write(args.out, "decode", {"device": args.device, "greedy": rows}, quiet=True)  # so far
    teacher = []
    for dtype in ("float32", "float64"):
        model, inst = instance(args.teacher_digits, dtype)
        for attempt in ("first", "second"):
            sync()
            start = time.perf_counter()
            pred = teacher_forced_argmax(model, inst.tokens, inst.pos_ids, first=inst.prompt_len - 1)
            sync()
            teacher.append({"digits": args.teacher_digits, "dtype": dtype, "call": attempt,
                            "exact": pred.tolist() == list(inst.answer_tokens), "seconds": round(time.perf_counter() - start, 3)})
            print(json.dumps(teacher[-1]), flush=True)
        del model
    return {"device": args.device, "greedy": rows, "teacher_first_and_second_call": teacher}


def precision(args: argparse.Namespace) -> dict:
    """The measured side of the precision map (largest exact N on the four adversarial inputs, the
    grid of constructions.addition.certify.precision) with CUDA kernels. The certified side is a
    CPU computation that does not depend on the device and is not repeated here."""
    from constructions.addition.certify.precision import INPUT_NAMES, exact_on_adversarial, length_grid
    from constructions.addition.model import max_digits_for

    torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
    torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    rows, t0 = [], time.perf_counter()
    for dtype in args.dtypes:
        for d in args.d_models:
            top = min(max_digits_for(d), args.cap)
            entry = {"dtype": dtype, "d_model": d, "top": top, "largest_exact": 0, "first_failure": None}
            for n in length_grid(top):
                ok = exact_on_adversarial(n, d, dtype, device=args.device)
                if not all(ok):
                    entry.update(first_failure=n, failing_inputs=[INPUT_NAMES[i] for i, g in enumerate(ok) if not g])
                    break
                entry["largest_exact"] = n
            rows.append(entry)
            record = {"device": args.device, "tf32": args.tf32, "cap": args.cap, "results": rows,
                      "seconds": round(time.perf_counter() - t0, 1)}
            write(args.out, f"precision_tf32_{args.tf32}", record, quiet=True)  # so far: a stopped run keeps its entries
    return record


def certify(args: argparse.Namespace) -> dict:
    """``python -m lengthgen.certify`` on a committed checkpoint, forward passes on each device."""
    rows = []
    for n in args.digits:
        for device in args.devices:
            cmd = [sys.executable, "-m", "lengthgen.certify", "--checkpoint", args.checkpoint, "--digits", str(n),
                   "--device", device, "--samples", str(args.samples), "--json", "--no-progress"]
            start = time.perf_counter()
            run = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=REPO)
            out = json.loads(run.stdout) if run.stdout.strip() else {"error": run.stderr.strip()[-500:]}
            row = {k: out.get(k) for k in ("verdict", "accuracy_lower_bound", "configurations_proven",
                                           "configurations_failed", "sampled_accuracy", "seconds", "error")}
            row.update(device=device, digits=n, process_seconds=round(time.perf_counter() - start, 2),
                       command=" ".join(["python -m lengthgen.certify", *cmd[3:]]))
            print(json.dumps(row), flush=True)
            rows.append(row)
            write(args.out, "certify", {"checkpoint": args.checkpoint, "rows": rows}, quiet=True)  # so far
    return {"checkpoint": args.checkpoint, "rows": rows}


def main() -> None:
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=["env", "addition", "attention", "decode", "turing", "precision", "certify"])
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu")
    p.add_argument("--device", default=default_device)
    p.add_argument("--digits", type=int, nargs="+", default=None)
    p.add_argument("--dtypes", nargs="+", default=None)
    p.add_argument("--greedy-digits", type=int, nargs="*", default=[100_000])
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per teacher run (addition)")
    p.add_argument("--greedy-timeout", type=float, default=100.0)
    p.add_argument("--tokens", type=int, nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--greedy-seconds", type=float, default=45.0)
    p.add_argument("--tf32", choices=["on", "off"], default="off")
    p.add_argument("--d-models", type=int, nargs="+", default=[23, 27, 31, 35, 41, 45, 101, 201, 512])
    p.add_argument("--cap", type=int, default=4096)
    p.add_argument("--devices", nargs="+", default=["cpu", default_device])
    p.add_argument("--checkpoint", default="checkpoints/addition_coupled_1l2h_packed")
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--teacher-digits", type=int, default=100_000, help="decode: the teacher pass's operand length")
    args = p.parse_args()
    defaults = {"addition": {"digits": [100_000, 1_000_000], "dtypes": ["float32", "float64"]},
                "attention": {"tokens": [300_015, 3_000_015]},
                "decode": {"digits": [10_000, 100_000]},
                "turing": {"tokens": [10_000, 100_000]},
                "precision": {"dtypes": ["bfloat16", "float16", "float32", "float64"]},
                "certify": {"digits": [2, 3]}}
    for key, value in defaults.get(args.part, {}).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("digits", "greedy_digits", "tokens"):
        if any(n < 1 for n in getattr(args, key) or ()):
            p.error(f"--{key.replace('_', '-')} takes positive sizes, got {getattr(args, key)}")
    if args.teacher_digits < 1:
        p.error(f"--teacher-digits takes a positive size, got {args.teacher_digits}")
    if any(d.startswith("cuda") for d in [args.device, *args.devices]) and not torch.cuda.is_available():
        p.error("CUDA is not available on this machine; use --device cpu (and --devices cpu)")
    torch.set_num_threads(1)
    start = time.perf_counter()
    record = {"env": env(args)} if args.part == "env" else {**globals()[args.part](args)}
    record["wall_s"] = round(time.perf_counter() - start, 1)
    suffix = f"_tf32_{args.tf32}" if args.part == "precision" else ""
    write(args.out, args.part + suffix, record)


if __name__ == "__main__":
    main()
