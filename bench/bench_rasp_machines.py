"""Random Turing machines through program P compiled to weights: a sweep over states, symbols and
the n-gram order (docs/turing-programs.md, "Measured").

For each (states, symbols), a random machine (``rasp.turing.library.sample_machine``) on a random
tape, run until it halts; program P is compiled at the n-gram order its trace's premise needs
(no n-gram repeats: ``min_ngram``), or at a larger order given with ``--ngrams``. Each row is one
fresh process, so that its peak memory is its own, and prints: trace tokens, n-gram, compile
seconds, peak resident memory, parameters, and greedy decoding's tokens per second on one thread
over the first ``--tokens`` tokens, checked token for token against the machine simulator: with
the sparse kernels that ``greedy`` uses on the CPU (``tokens_per_s``) and, in the same process
right after, with dense products (``tokens_per_s_dense``).

    python bench/bench_rasp_machines.py [--states 2 4 8] [--symbols 2 4 8] [--ngrams 8 16]
        [--tokens 1000] [--onehot-max 32 0] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from rasp.weights.graph import ONEHOT_MAX


def one(states: int, symbols: int, ngram: int | None, tokens: int, seed: int, min_steps: int,
        onehot_max: int) -> dict:
    """One row, in this process."""
    import torch

    from rasp.turing.library import sample_machine
    from rasp.turing.machines import Vocab, build_trace, min_ngram, split_configs
    from rasp.turing.transformer import transformer_program

    torch.set_num_threads(1)
    from rasp.errors import MachineSpecError

    while True:     # small machines halt soon (2 states, 2 symbols: at most 6 steps), so ask for fewer
        try:
            sample = sample_machine(n_states=states, n_symbols=symbols, tape_len=(12, 15), min_steps=min_steps,
                                    max_steps=1000, seed=seed, max_tries=20_000)
            break
        except MachineSpecError:
            if min_steps == 1:
                raise
            min_steps = max(1, min_steps // 2)
    vocab = Vocab.for_machine(sample.machine)
    ref = build_trace(sample.run, vocab)
    premise = min_ngram(split_configs(ref, vocab))
    n = max(premise, ngram or 0)
    start = time.perf_counter()
    compiled = transformer_program(sample.machine, n).to_transformer(len(ref), onehot_max=onehot_max)
    compile_s = time.perf_counter() - start
    L = len(sample.tape)
    budget = min(len(ref), L + 2 + tokens)
    speed, exact = {}, True
    for sparse in (True, False):        # side by side in one process: CSR kernels, then dense ones
        start = time.perf_counter()
        got = compiled.greedy(ref[:L + 2], budget, monitor=False, sparse=sparse)
        seconds = time.perf_counter() - start
        generated = len(got) - L - 2
        speed[sparse] = round(generated / seconds, 1)
        exact = exact and got == ref[:len(got)]
    return {"states": states, "symbols": symbols, "machine_seed": sample.seed, "trace_tokens": len(ref),
            "premise_ngram": premise, "ngram": n, "onehot_max": onehot_max, "compile_s": round(compile_s, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "params": compiled.compiled.stats["params"], "d_model": compiled.compiled.stats["d_model"],
            "greedy_tokens": generated, "tokens_per_s": speed[True], "tokens_per_s_dense": speed[False],
            "exact": exact}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--states", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--symbols", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--ngrams", type=int, nargs="*", default=[], help="also compile at these orders")
    p.add_argument("--tokens", type=int, default=1000)
    p.add_argument("--onehot-max", type=int, nargs="+", default=[ONEHOT_MAX],
                   help="categorical s-ops with more values hold integer codes (0: all of them; default "
                        f"{ONEHOT_MAX}, tracr's one-hot layout up to there); several values: one row each, side by side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-steps", type=int, default=60, help="machines that halt after fewer steps are drawn again "
                   "(60 steps on a 12-15-cell tape: about 10^3 trace tokens), halved while none is found")
    p.add_argument("--json", default=None)
    p.add_argument("--one", nargs=3, type=int, metavar=("STATES", "SYMBOLS", "NGRAM"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if min(args.states + args.symbols + [args.tokens, args.min_steps]) < 1 or any(n < 1 for n in args.ngrams):
        p.error("states, symbols, n-gram orders and --tokens must be positive")
    if min(args.onehot_max) < 0:
        p.error("--onehot-max must be >= 0")
    if args.one:
        states, symbols, ngram = args.one
        print(json.dumps(one(states, symbols, ngram or None, args.tokens, args.seed, args.min_steps,
                             args.onehot_max[0])))
        return 0
    keys = ["states", "symbols", "trace_tokens", "premise_ngram", "ngram", "onehot_max", "compile_s", "peak_rss_mb",
            "params", "d_model", "greedy_tokens", "tokens_per_s", "tokens_per_s_dense", "exact"]
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    rows = []
    for states in args.states:
        for symbols in args.symbols:
            for ngram in [0, *args.ngrams]:
                for onehot_max in args.onehot_max:
                    out = subprocess.run([sys.executable, __file__, "--one", str(states), str(symbols), str(ngram),
                                          "--tokens", str(args.tokens), "--seed", str(args.seed),
                                          "--min-steps", str(args.min_steps), "--onehot-max", str(onehot_max)],
                                         capture_output=True, text=True)
                    if out.returncode != 0:
                        print(f"| {states} | {symbols} | failed: {out.stderr.strip().splitlines()[-1][:120]} |")
                        continue
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    if ngram and ngram <= row["premise_ngram"]:
                        continue                            # the premise's order is already a row
                    rows.append(row)
                    print("| " + " | ".join(str(row[k]) for k in keys) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"tokens": args.tokens, "seed": args.seed, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
