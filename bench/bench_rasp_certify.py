"""How `python -m rasp.certify` grows with max_seq_len on program P (docs/turing-programs.md,
"Certifying a compiled program").

Each length runs in a fresh process (`python -m rasp.certify --machine M --ngram K [--bits]
[--plateau P] --max-seq-len N --dtype D --json`), so its peak memory is its own. Printed per
length: the verdict (and the failing check's kind and reason), seconds, peak resident memory, the
largest number of (query state, key-group state) pairs of one head, the largest head error and MLP
error it proved, and the readout margin. The rows go to ``--json`` (default
``bench/results/rasp_certify_growth.json``, merged by length into what is there).

    python bench/bench_rasp_certify.py [--machine addition] [--ngram 4] [--bits] [--plateau 0.25]
        [--sizes 256 1024 4096 10000] [--dtype float64|float32] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "bench" / "results" / "rasp_certify_growth.json"


def certify_args(args: argparse.Namespace, n: int | str) -> list[str]:
    """The certificate's command line for length ``n`` (as a user would type it)."""
    cmd = ["-m", "rasp.certify", "--machine", args.machine, "--ngram", str(args.ngram)]
    cmd += ["--bits"] if args.bits else []
    cmd += ["--plateau", str(args.plateau)] if args.plateau else []
    return cmd + ["--max-seq-len", str(n), "--dtype", args.dtype, "--json"]


def measure(args: argparse.Namespace, n: int) -> dict:
    """Run the certificate for length ``n`` in a child process that reports its own peak memory."""
    cmd = certify_args(args, n)
    probe = ("import resource, runpy, sys; sys.argv = ['rasp.certify'] + sys.argv[1:]; "
             "import atexit; atexit.register(lambda: print('MAXRSS', resource.getrusage("
             "resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); runpy.run_module('rasp.certify', run_name='__main__')")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", probe, *cmd[2:]], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    rss = next((int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("MAXRSS")), None)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"max_seq_len": n, "verdict": "ERROR", "reason": proc.stderr.strip().splitlines()[-1:],
                "seconds": wall}
    heads, mlps = out.get("heads", []), out.get("mlps", [])
    return {
        "max_seq_len": n,
        "command": "python " + " ".join(cmd),
        "settings": "python " + " ".join(certify_args(args, "N")),
        "verdict": out["verdict"], "kind": out.get("kind"), "reason": out.get("reason"),
        "seconds": round(out.get("seconds", wall), 1),
        "peak_rss_mb": None if rss is None else round(rss / 1024),
        "largest_head_pairs": max((h["pairs"] for h in heads), default=None),
        "largest_head_error": max((h["error"] for h in heads), default=None),
        "largest_mlp_error": max((m["error"] for m in mlps), default=None),
        "readout_margin": out.get("readout_margin"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--machine", default="addition", help="a library Turing machine")
    ap.add_argument("--ngram", type=int, default=4, help="n-gram order of program P")
    ap.add_argument("--bits", action=argparse.BooleanOptionalAction, default=True, help="bit-coded equalities")
    ap.add_argument("--plateau", type=float, default=0.25, help="flat MLP tables (0: none)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096], help="max_seq_len values")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON, help="rows merged into this file by length")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'N':>7} {'verdict':>8} {'seconds':>8} {'peak MB':>8} {'head pairs':>12} "
          f"{'head err':>9} {'MLP err':>9}  reason", flush=True)
    for n in args.sizes:
        row = measure(args, n)
        rows.append(row)
        fmt = lambda x, f: "-" if x is None else format(x, f)    # noqa: E731
        print(f"{n:>7} {row['verdict']:>8} {row['seconds']:>8.1f} {fmt(row.get('peak_rss_mb'), 'd'):>8} "
              f"{fmt(row.get('largest_head_pairs'), 'd'):>12} {fmt(row.get('largest_head_error'), '.2g'):>9} "
              f"{fmt(row.get('largest_mlp_error'), '.2g'):>9}  {row.get('reason') or ''}", flush=True)
    old = json.loads(args.json.read_text()) if args.json.exists() else {"rows": []}
    merged = {(r["settings"], r["max_seq_len"]): r for r in old["rows"] + [r for r in rows if "settings" in r]}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
                                     "python": platform.python_version(),
                                     "rows": sorted(merged.values(), key=lambda r: (r["settings"], r["max_seq_len"]))},
                                    indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
