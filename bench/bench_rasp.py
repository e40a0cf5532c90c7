"""Benchmark: greedy (autoregressive) decoding of program P on ~10^5-token Turing Programs.

Scale target: a 10^5-token trace in greedy mode in under a minute on a 2-core CPU
machine (incremental decoding costs O(T * ops); docs/rasp.md). Prints tokens/s for greedy and teacher-forced runs and checks the
traces against the reference simulator.

    .venv/bin/python bench/bench_rasp.py [--tokens 100000] [--seed 0] [--fastpath-only]

It also times the fast attention paths on selectors with fractional query bounds
(``indices < length / 2`` and friends) at the same length, and checks them against
the dense path on a 2000-token prefix.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rasp import (Aggregate, Comparison, IncrementalEvaluator, Select, SelectorWidth,  # noqa: E402
                  evaluate, indices, length, numerical, tokens)
from rasp.turing.program import compile_turing_machine  # noqa: E402
from rasp.turing.library import TASKS  # noqa: E402
from rasp.turing.machines import Vocab, address_tags, build_trace, min_ngram, simulate, split_configs  # noqa: E402


def workloads(tokens: int, rng: random.Random) -> list[tuple[str, str, str, int]]:
    """(label, task, input, address-track letters) whose traces have about ``tokens`` tokens."""
    m = max(1, int(math.sqrt(tokens)) - 2)   # addition: (m + 1 + 1) configs of (m + 2) tokens
    a = "".join(rng.choice("0123456789") for _ in range(m))
    b = "".join(rng.choice("0123456789") for _ in range(m))
    ones = "1" * max(1, int(math.sqrt(tokens)) - 2)   # increment of 11...1: every cell flips
    return [(f"addition {m}+{m} digits", "addition", f"{a}+{b}", 1),
            (f"increment of {len(ones)} ones, address track", "increment", ones, 2)]


def bench(label: str, task: str, text: str, letters: int) -> None:
    tm, tape = TASKS[task].build(text)
    t0 = time.perf_counter()
    run = simulate(tm, tape, 10**7)
    tags = address_tags(len(tape), letters) if letters > 1 else None
    vocab = Vocab.for_machine(tm, letters)
    trace = build_trace(run, vocab, tags)
    n = min_ngram(split_configs(trace, vocab))
    t1 = time.perf_counter()
    tp = compile_turing_machine(tm, n, vocab=vocab)
    t2 = time.perf_counter()
    got = tp.greedy(trace[:len(tape) + 2], len(trace))
    t3 = time.perf_counter()
    pred = tp.teacher_forced(trace)
    t4 = time.perf_counter()
    ok = got == trace and pred == trace[len(tape) + 2:]
    generated = len(trace) - len(tape) - 2
    print(f"{label}: {len(trace):,} tokens, ngram={n}, {tp.stats.size} ops, match={ok}")
    print(f"  simulate+trace {t1 - t0:6.2f} s | compile {t2 - t1:5.2f} s")
    print(f"  greedy  {t3 - t2:6.2f} s  {generated / (t3 - t2):10,.0f} tokens/s")
    print(f"  teacher {t4 - t3:6.2f} s  {generated / (t4 - t3):10,.0f} tokens/s")
    if not ok:
        raise SystemExit("trace mismatch")


def fastpath_programs() -> dict[str, object]:
    """Attention ops whose selectors bound key indices by non-integer queries."""
    half = numerical(length / 2)
    same = Select(tokens, tokens, Comparison.EQ)
    return {
        "hash, EQ & indices < length/2 (SelectorWidth)":
            SelectorWidth(same & Select(indices, half, Comparison.LT)),
        "hash, indices <= indices*0.5+0.25 (numerical mean)":
            numerical(Aggregate(Select(indices, indices * 0.5 + 0.25, Comparison.LEQ),
                                numerical(tokens), default=0)),
        "direct, key q-1 & indices < length/2 (shift)":
            Aggregate(Select(indices + 1, indices, Comparison.EQ) & Select(indices, half, Comparison.LT),
                      tokens, default=-1),
    }


def bench_fastpaths(tokens_n: int, rng: random.Random) -> None:
    toks = [rng.randrange(10) for _ in range(tokens_n)]
    for label, prog in fastpath_programs().items():
        short = toks[:2000]
        for causal in (False, True):
            if evaluate(prog, short, causal=causal).column(prog) != \
                    evaluate(prog, short, causal=causal, fast=False).column(prog):
                raise SystemExit(f"fast != dense: {label}, causal={causal}")
        t0 = time.perf_counter()
        evaluate(prog, toks, causal=False)
        t1 = time.perf_counter()
        evaluate(prog, toks, causal=True)
        t2 = time.perf_counter()
        IncrementalEvaluator(prog).extend(toks)
        t3 = time.perf_counter()
        print(f"{label}: {tokens_n:,} tokens, fast == dense on 2,000")
        print(f"  non-causal {t1 - t0:5.2f} s | causal {t2 - t1:5.2f} s | incremental {t3 - t2:5.2f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000, help="approximate trace length")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fastpath-only", action="store_true", help="skip the Turing-program runs")
    args = ap.parse_args(argv)
    if not args.fastpath_only:
        for work in workloads(args.tokens, random.Random(args.seed)):
            bench(*work)
    bench_fastpaths(args.tokens, random.Random(args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
