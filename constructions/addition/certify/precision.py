"""Where floating point breaks Theorem 5.1's construction (docs/certificate.md, "The precision map").

For each format (bfloat16, float16, float32, float64) and width d, the model ``build_model(N, d,
dtype)`` is run teacher-forced (equivalent to greedy decoding, :mod:`lengthgen.decode`) on four
adversarial inputs per length N — a carry chain 99…9 + 0…01, all 9s 99…9 + 99…9, all zeros, and
alternating 9090… + 9090… (PRE_SUM jumping between 18 and 0 next to each other) — over a grid of
lengths: every N ≤ 16, then N growing by 2^{1/4} up to min(n_max(d), cap). "Largest exact N" is the
last grid length before the first failure (every grid length up to it is exact on all four
inputs); exactness is *not* monotone in N (M = ½·ln(1000·(3N+5)) changes with N and so does the
rounding of √M), so the top of the grid is also probed and reported.

The reason of the first failure is found by re-running that input with one stage in the format
and the others in float64 (same M): ``score rounding`` (embeddings, W_Q, W_K, scores, softmax),
``value rounding`` (W_V, the weighted sum, W_O, the residual add) or ``FFN margin`` (W_in, ReLU,
W_out, W_U). The stages that break it alone are reported; "combined" if none does alone. For
score rounding it also says whether rounding W_Q, W_K alone (√M and √(MP) round apart, so the
``$`` sink no longer ties with the digit keys) suffices ("Q/K weights") or not ("arithmetic").

Each entry also records the largest grid length the margins certificate proves in that format
(``certified N``): the certificate is sound, so certified ≤ measured must hold.

Results are cached in ``precision_map.json`` beside this module (installed with the package) so the
table and ``figures/precision.png``
regenerate without recomputation (``--recompute`` measures again; minutes on 2 CPU cores).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from lengthgen.decode import decided_argmax
from lengthgen.tasks import ADDITION

from ..model import START_ID, build_model, max_digits_for
from .emulate import emulated_exact

CACHE = Path(__file__).resolve().with_name("precision_map.json")
DTYPES = ("bfloat16", "float16", "float32", "float64")
D_MODELS = (23, 27, 31, 35, 41, 45, 101, 201, 512)
CAP = 4096
STAGES = (("scores", "score rounding"), ("values", "value rounding"), ("ffn", "FFN margin"))
INPUT_NAMES = ("carry chain 99..9+0..01", "all 9s 99..9+99..9", "all zeros", "alternating 9090..+9090..")


def adversarial_pairs(n: int) -> list[tuple[str, str]]:
    alt = ("90" * n)[:n]
    return [("9" * n, "0" * (n - 1) + "1"), ("9" * n, "9" * n), ("0" * n, "0" * n), (alt, alt)]


def length_grid(top: int) -> list[int]:
    grid = set(range(1, min(top, 16) + 1))
    k = 1
    while (v := int(round(16 * 2 ** (k / 4)))) < top:
        grid.add(v)
        k += 1
    grid.add(top)
    return sorted(grid)


def _batch(n: int) -> tuple[torch.Tensor, torch.Tensor, int, np.ndarray]:
    insts = [ADDITION.instance(a, b, start=START_ID) for a, b in adversarial_pairs(n)]
    toks = torch.tensor(np.stack([i.tokens for i in insts]))
    pos = torch.tensor(np.stack([i.pos_ids for i in insts]))
    return toks, pos, insts[0].prompt_len, toks[:, insts[0].prompt_len:].numpy()


@torch.inference_mode()
def exact_on_adversarial(n: int, d_model: int, dtype: str, device: str = "cpu") -> list[bool]:
    """Per adversarial input: does the model predict every answer token (and the final EOS), each
    by a margin (:func:`lengthgen.decode.decided_argmax`)? ``device``: where the forward pass runs
    (the boundary belongs to the pair format × kernel; bench/bench_gpu.py measures it on CUDA)."""
    model, _ = build_model(n_digits=n, d_model=d_model, dtype=dtype, device=device)
    toks, pos, p, answer = _batch(n)
    logits = model(toks[:, :-1].to(device), pos[:, :-1].to(device), logits_from=p - 1)
    return _decided_rows(logits, answer)


def _decided_rows(logits: torch.Tensor, answer: np.ndarray) -> list[bool]:
    """Per row: every answer token is the decided argmax (beats the runner-up by more than
    lengthgen.decode.DECISION_MARGIN; a tie-breaking argmax does not count)."""
    return [bool(row) for row in (decided_argmax(logits).cpu().numpy() == answer).all(1)]


@torch.inference_mode()
def staged_exact(n: int, d_model: int, dtype: str, low: str) -> list[bool]:
    """Teacher-forced exactness with stage ``low`` (scores / values / ffn) in ``dtype`` and the rest
    in float64 (dense attention over the answer queries, in blocks). ``low = "qk_weights"`` rounds
    only W_Q and W_K to ``dtype`` and computes everything in float64."""
    models = {dt: build_model(n_digits=n, d_model=d_model, dtype=dt)[0] for dt in {dtype, "float64"}}
    pick = lambda stage: models[dtype if stage == low else "float64"]
    toks, pos, p, answer = _batch(n)
    toks, pos = toks[:, :-1], pos[:, :-1]
    ms = pick("scores")
    x = ms.embed.W_E[toks] + ms.pos_embed.W_pos[pos]
    a = ms.blocks[0].attn
    W_Q, W_K = a.W_Q, a.W_K
    if low == "qk_weights":  # only the rounding of W_Q, W_K to the format; float64 arithmetic
        W_Q, W_K = (w.to(torch.float64) for w in (models[dtype].blocks[0].attn.W_Q, models[dtype].blocks[0].attn.W_K))
    q = torch.einsum("bpd,hde->bhpe", x[:, p - 1:], W_Q) + a.b_Q[None, :, None]
    k = torch.einsum("bpd,hde->bhpe", x, W_K) + a.b_K[None, :, None]
    mv = pick("values")
    xv = mv.embed.W_E[toks] + mv.pos_embed.W_pos[pos]
    av = mv.blocks[0].attn
    v = torch.einsum("bpd,hde->bhpe", xv, av.W_V) + av.b_V[None, :, None]
    z = torch.empty(*q.shape[:-1], v.shape[-1], dtype=v.dtype)
    for r0 in range(0, q.shape[2], 512):
        r1 = min(q.shape[2], r0 + 512)
        s = torch.matmul(q[:, :, r0:r1], k.transpose(-1, -2)) * ms.cfg.score_scale
        qpos = torch.arange(p - 1 + r0, p - 1 + r1)[:, None]
        s = s.masked_fill(torch.arange(k.shape[2])[None, :] > qpos, float("-inf"))
        z[:, :, r0:r1] = torch.matmul(torch.softmax(s, dim=-1).to(v.dtype), v)
    resid = xv[:, p - 1:] + torch.einsum("bhpe,hed->bpd", z, av.W_O) + av.b_O
    mf = pick("ffn")
    resid = resid.to(mf.cfg.torch_dtype)
    mlp = mf.blocks[0].mlp
    out = resid + torch.relu(resid @ mlp.W_in + mlp.b_in) @ mlp.W_out + mlp.b_out
    logits = out @ mf.unembed.W_U + mf.unembed.b_U
    return _decided_rows(logits, answer)


def diagnose(n: int, d_model: int, dtype: str, failing: list[bool]) -> str:
    """Which stage in ``dtype`` breaks the first failing input on its own; for score rounding,
    whether rounding W_Q and W_K alone (float64 arithmetic) already does."""
    bad = [i for i, ok in enumerate(failing) if not ok]
    breaks = lambda stage: not all(staged_exact(n, d_model, dtype, stage)[i] for i in bad)
    culprits = [label for stage, label in STAGES if breaks(stage)]
    if "score rounding" in culprits:  # is rounding W_Q, W_K (√M vs √(MP)) enough on its own?
        culprits[culprits.index("score rounding")] += " (Q/K weights)" if breaks("qk_weights") else " (arithmetic)"
    return " + ".join(culprits) if culprits else "combined"


def measure(dtype: str, d_model: int, cap: int = CAP, log=print) -> dict:
    """The entry of the precision map for one (dtype, d)."""
    bound = max_digits_for(d_model)
    top = min(bound, cap)
    grid = length_grid(top)
    entry = {"dtype": dtype, "d_model": d_model, "n_max": bound, "top": top, "capped": bound > cap,
             "largest_exact": 0, "first_failure": None, "failing_inputs": [], "reason": None, "exact_at_top": None}
    for n in grid:
        ok = exact_on_adversarial(n, d_model, dtype)
        if all(ok):
            entry["largest_exact"] = n
            continue
        entry["first_failure"] = n
        entry["failing_inputs"] = [INPUT_NAMES[i] for i, good in enumerate(ok) if not good]
        entry["reason"] = diagnose(n, d_model, dtype, ok)
        entry["exact_at_top"] = all(exact_on_adversarial(top, d_model, dtype)) if n != top else False
        break
    else:
        entry["exact_at_top"] = True
    entry["largest_certified"] = largest_certified(grid, d_model, dtype)
    cert_n = entry["largest_certified"]
    entry["emulated_exact_at_certified"] = all(emulated_exact(cert_n, d_model, dtype, adversarial_pairs(cert_n))) \
        if cert_n else None
    log(f"  {dtype:<9} d={d_model:<4} largest exact N = {entry['largest_exact']}, certified {entry['largest_certified']}"
        + (f", first failure N = {entry['first_failure']} ({entry['reason']})" if entry["first_failure"] else ""))
    return entry


def largest_certified(grid: list[int], d_model: int, dtype: str) -> int:
    """Last grid length before the first one whose margins certificate (with the float term of
    ``dtype``) fails: a *proof* of exactness for every input at those lengths."""
    from .margins import certify

    best, cache = 0, {}  # FFN tables recur across lengths (keyed by their inputs)
    for n in grid:
        model, _ = build_model(n_digits=n, d_model=d_model, dtype=dtype)
        if not certify(model, n, dtype, cache=cache).passed:
            break
        best = n
    return best


def environment() -> dict:
    """Where the measured side was measured: the exact/inexact boundary is a property of the pair
    (format, kernel), so the torch version, the kernel capability and the processor go with it."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu": cpu,
            "device": "cpu", "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "threads": torch.get_num_threads()}


def environment_label(env: dict | None) -> str:
    if not env:
        return "measured on: not recorded"
    where = env.get("gpu") if env.get("device") == "cuda" else f"{env.get('cpu')}, ATen CPU capability {env.get('cpu_capability')}"
    return f"measured with torch {env.get('torch')} on {where}"


def recompute(dtypes=DTYPES, d_models=D_MODELS, cap: int = CAP, log=print) -> dict:
    t0 = time.perf_counter()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    results = [measure(dt, d, cap, log) for dt in dtypes for d in d_models]
    return {"version": 2, "cap": cap, "inputs": list(INPUT_NAMES), "start_id": START_ID, "measured_on": environment(),
            "exact_rule": "every answer token is the argmax by more than lengthgen.decode.DECISION_MARGIN",
            "grid": "every N <= 16, then N = round(16*2^(k/4)), plus min(n_max(d), cap)",
            "model": "build_model(n_digits=N, d_model=d, dtype=dtype), default M = 0.5*ln(1000*(3N+5))",
            "seconds": round(time.perf_counter() - t0, 1), "results": results}


def merge(old: dict, new: dict) -> dict:
    """Cached entries updated by freshly measured ones (same dtype and d are replaced); the cap,
    the version and the place of measurement must agree."""
    if old.get("cap") != new["cap"] or old.get("version") != new["version"] or old.get("measured_on") != new["measured_on"]:
        return new  # entries measured under other caps, rules or kernels are not comparable
    entries = {(e["dtype"], e["d_model"]): e for e in old["results"]}
    entries.update({(e["dtype"], e["d_model"]): e for e in new["results"]})
    order = {dt: i for i, dt in enumerate(DTYPES)}
    merged = dict(new, seconds=round(old.get("seconds", 0) + new["seconds"], 1))
    merged["results"] = sorted(entries.values(), key=lambda e: (order.get(e["dtype"], 9), e["d_model"]))
    return merged


def table_lines(data: dict) -> list[str]:
    head = (f"{'dtype':<9} {'d':>4} {'n_max(d)':>9} {'certified N':>12} {'largest exact N':>16} {'first failure':>14}"
            "  reason")
    lines = [head, "-" * len(head)]
    for e in data["results"]:
        exact = f"{e['largest_exact']}" + (" (cap)" if e["first_failure"] is None and e["capped"] else "")
        fail = str(e["first_failure"]) if e["first_failure"] else "-"
        reason = e["reason"] or ("exact up to the cap" if e["capped"] else "exact up to n_max(d)")
        if e["first_failure"] and e["exact_at_top"]:
            reason += f"; exact again at N = {e['top']}"
        cert = str(e.get("largest_certified", "?"))
        bound = str(e["n_max"]) if e["n_max"] < 10**9 else f"{float(e['n_max']):.2e}"
        lines.append(f"{e['dtype']:<9} {e['d_model']:>4} {bound:>9} {cert:>12} {exact:>16} {fail:>14}  {reason}")
    lines.append("certified N: margins certificate PASS (float term of the format) at every grid length up to N; "
                 "largest exact N: measured on the adversarial inputs, every answer token decided by a margin")
    lines.append(environment_label(data.get("measured_on")))
    lines.append(f"adversarial inputs: {', '.join(data['inputs'])}; lengths capped at {data['cap']} digits; "
                 f"grid: {data['grid']}")
    return lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recompute", action="store_true",
                   help="measure the requested formats × widths again and merge them into the cached JSON")
    p.add_argument("--fresh", action="store_true", help="with --recompute: replace the cache instead of merging")
    p.add_argument("--json", type=Path, default=CACHE,
                   help="cache file (default: the map measured for this release, installed with the package)")
    p.add_argument("--figure", type=Path, default=None,
                   help="also draw the map to this .png (a .pdf is written next to it), e.g. figures/precision.png")
    p.add_argument("--force", action="store_true", help="with --figure: replace existing figure files")
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES), help="formats to measure")
    p.add_argument("--d-models", type=int, nargs="+", default=list(D_MODELS), help="widths d to measure (each ≥ 21)")
    p.add_argument("--cap", type=int, default=CAP, help=f"largest operand length probed (default {CAP})")


def run_precision(args: argparse.Namespace) -> int:
    from lengthgen.cli import UsageError

    bad = [d for d in args.d_models if d < 21]
    if bad or args.cap <= 0:
        msg = f"--d-models must all be at least 21, got {bad[0]}" if bad else f"--cap must be positive, got {args.cap}"
        raise UsageError(msg)
    if args.fresh and not args.recompute:
        raise UsageError("--fresh replaces the cache with new measurements: it needs --recompute")
    if args.figure is not None:
        from lengthgen.plot import check_free

        check_free([args.figure, args.figure.with_suffix(".pdf")], args.force)
    if not args.recompute and not args.json.is_file():
        what = "is a folder, not a cache file" if args.json.is_dir() else "no such cache file"
        raise UsageError(f"--json {args.json}: {what}; add --recompute to measure it (minutes)")
    if args.recompute:
        print(f"measuring {len(args.dtypes)} formats × {len(args.d_models)} widths (cap {args.cap} digits) ...")
        data = recompute(args.dtypes, args.d_models, args.cap)
        if args.json.exists() and not args.fresh:
            data = merge(read_cache(args.json), data)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    else:
        data = read_cache(args.json)
    print("\n".join(table_lines(data)))
    if args.figure is not None:
        from .precision_figure import draw

        draw(data, args.figure)
        print(f"figure: {args.figure} (+ .pdf)")
    return 0


RESULT_KEYS = ("dtype", "d_model", "n_max", "largest_exact", "first_failure", "capped", "reason", "exact_at_top")


def read_cache(path: Path) -> dict:
    """A precision map written by ``--recompute``; anything else is one line of bad input."""
    from lengthgen.cli import UsageError

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--json {path}: not a readable JSON file ({exc.__class__.__name__}: {exc}); "
                         "add --recompute to measure the map again") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not all(isinstance(e, dict) and all(k in e for k in RESULT_KEYS)
                                                for e in results):
        raise UsageError(f"--json {path}: not a precision map (it needs a 'results' list of entries with "
                         f"{', '.join(RESULT_KEYS)}); add --recompute to measure one")
    return data
