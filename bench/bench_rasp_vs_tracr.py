"""This project's RASP -> weights compiler beside tracr's, on every program of tracr's lib.py
(docs/turing-programs.md, "Measured").

    python bench/bench_rasp_vs_tracr.py [--lengths 5 10 20 50 100 500] [--tracr bench/results/tracr_sizes.json]

Per program and max_seq_len (non-causal, tracr's semantics; the same vocabularies and program
arguments as bench/tracr_sizes.py): layers, heads, d_model, parameters, compile seconds, and how many
random inputs (lengths 1, max_seq_len and two between) the compiled transformer answers exactly as
the RASP interpreter does, beside the numbers that bench/tracr_sizes.py recorded for tracr (it runs
in tracr's own environment; its docstring says how).
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from rasp import lib
from rasp.core import tokens
from rasp.evaluate import evaluate
from rasp.weights import CompileError, compile_to_transformer

LETTERS = ["a", "b", "c", "d"]
NUMBERS = [1, 2, 3, 4, 5]
PARENS = ["a", "b", "(", ")"]
RESULTS = Path(__file__).resolve().parent / "results" / "tracr_sizes.json"


def programs(n: int) -> list[tuple[str, object, list]]:
    """(name, program, vocab): bench/tracr_sizes.py's list, built with rasp.lib."""
    return [
        ("make_length", lib.make_length(), LETTERS),
        ("make_reverse", lib.make_reverse(tokens), LETTERS),
        ("make_hist", lib.make_hist(), LETTERS),
        ("make_sort_unique", lib.make_sort_unique(tokens, tokens), NUMBERS),
        ("make_sort", lib.make_sort(tokens, tokens, max_seq_len=n, min_key=1), NUMBERS),
        ("make_sort_freq", lib.make_sort_freq(n), LETTERS),
        ("make_frac_prevs", lib.make_frac_prevs(tokens == "("), PARENS),
        ("make_pair_balance", lib.make_pair_balance(tokens, "(", ")"), PARENS),
        ("make_shuffle_dyck2", lib.make_shuffle_dyck2(), ["(", ")", "{", "}", "a"]),
        ("make_count_less_freq", lib.make_count_less_freq(2), LETTERS),
        ("make_count", lib.make_count(tokens, "a"), LETTERS),
        ("shift_by_2", lib.shift_by(2, tokens), LETTERS),
        ("detect_pattern_ab", lib.detect_pattern(tokens, "ab"), LETTERS),
    ]


def ours(name: str, program, vocab: list, n: int, rng: random.Random) -> dict:
    row = {"program": name, "max_seq_len": n}
    try:
        start = time.perf_counter()
        ct = compile_to_transformer(program, vocab, n, causal=False)
        row["compile_seconds"] = round(time.perf_counter() - start, 3)
    except CompileError as exc:
        return row | {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
    except MemoryError as exc:                      # lengthgen's ResourceError names the size
        return row | {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
    row.update({k: ct.stats[k] for k in ("layers", "heads", "d_model", "d_mlp", "params")})
    right, lengths = 0, sorted({1, n, max(1, n // 2), max(1, n // 3)})
    try:
        for length in lengths:
            xs = [rng.choice(vocab) for _ in range(length)]
            want = list(evaluate(program, xs, causal=False).column(program))
            got = ct.run(xs)
            right += all(g == w or (isinstance(w, float) and abs(g - w) <= 1e-9) for g, w in zip(got, want))
    except MemoryError as exc:
        return row | {"inputs_right": f"not run ({type(exc).__name__}: {str(exc)[:90]})"}
    return row | {"inputs_right": f"{right}/{len(lengths)}"}


def cell(row: dict | None) -> str:
    if row is None:
        return "not run | | | | |"
    if "params" not in row:
        return f"{row['error'][:60]} | | | | |"
    checked = row.get("inputs_right") or row["error"].split(" (")[0]   # compiled, check not finished
    return (f"{row['layers']} / {row['heads']} | {row['d_model']} | {row['params']:,} | "
            f"{row['compile_seconds']:.2f} s | {checked} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", nargs="*", type=int, default=[5, 10, 20, 50, 100, 500])
    p.add_argument("--tracr", type=Path, default=RESULTS, help="bench/tracr_sizes.py's JSON")
    p.add_argument("--json", type=Path, help="also write our rows here")
    args = p.parse_args()
    torch.set_num_threads(1)
    theirs = {}
    if args.tracr.exists():
        theirs = {(r["program"], r["max_seq_len"]): r for r in json.loads(args.tracr.read_text())["rows"]}
    rng = random.Random(0)
    rows = []
    print("| program | N | ours: layers / heads | d_model | params | compile | inputs right | "
          "tracr: layers / heads | d_model | params | compile | inputs right |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.lengths:
        for name, program, vocab in programs(n):
            rows.append(ours(name, program, vocab, n, rng))
            print(f"| {name} | {n} | {cell(rows[-1])} {cell(theirs.get((name, n)))}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
