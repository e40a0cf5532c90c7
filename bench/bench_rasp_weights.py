"""Benchmark of the RASP -> transformer-weights compiler (rasp.weights; docs/turing-programs.md).

Prints, as Markdown tables:

1. compiled sizes (layers, heads, d_model, d_mlp, parameters) of the tracr-library programs and
   of program P (the Turing-Program simulator) for library machines;
2. the addition machine on 20-digit operands and a >= 10^4-token trace (addition of two
   98-digit numbers) through the compiled transformer with lengthgen.decode.greedy_generate
   (KV cache), checked token for token against rasp.turing.machines.simulate; seconds and tokens/s
   with the sparse kernels greedy uses on the CPU, with dense products (same run), and the RASP
   interpreter's incremental evaluator;
3. float32: for growing traces, whether the float32 compilation of P is still exact
   (teacher-forced) and, at the first failure, which s-op decodes wrong first.

    python bench/bench_rasp_weights.py [--quick] [--threads 1] [--json PATH]
    python bench/bench_rasp_weights.py --ngram-growth --threads 1   # n-gram orders up to 16
    python bench/bench_rasp_weights.py --sizes-only                 # compiled sizes, in seconds
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

import torch

from rasp import lib
from rasp.turing.program import compile_turing_machine
from rasp.core import Map, tokens
from rasp.turing.cli import resolve
from rasp.turing.library import TASKS
from rasp.turing.machines import Vocab, build_trace, min_ngram, simulate, split_configs
from rasp.weights import compile_to_transformer
from rasp.turing.transformer import transformer_program


def library_programs():
    """(name, program, causal) for tracr's library programs and the rasp.lib helpers."""
    is_x = Map(lambda t: 1 if t == "x" else 0, tokens)
    return [
        ("make_length", lib.make_length(), False),
        ("make_reverse", lib.make_reverse(tokens), False),
        ("make_hist", lib.make_hist(), False),
        ("make_sort_unique", lib.make_sort_unique(tokens, tokens), False),
        ("make_frac_prevs", lib.make_frac_prevs(is_x), False),
        ("make_pair_balance", lib.make_pair_balance(tokens, "(", ")"), False),
        ("shift_right (causal)", lib.shift_right(tokens, 1, "_"), True),
        ("lasts (causal)", lib.lasts(tokens, tokens), True),
        ("cumsum (causal)", lib.cumsum(Map(lambda t: t == "x", tokens)), True),
    ]


def machine_trace(task: str, text: str):
    tm, tape = TASKS[task].build(text)
    vocab = Vocab.for_machine(tm)
    ref = build_trace(simulate(tm, tape, 100_000), vocab)
    return tm, tape, vocab, ref, min_ngram(split_configs(ref, vocab))


def size_table(max_seq_len: int) -> list[dict]:
    rows = []
    vocab = ["a", "b", "x", "(", ")"]
    for name, program, causal in library_programs():
        ct = compile_to_transformer(program, vocab, max_seq_len, causal=causal)
        rows.append({"program": name, "max_seq_len": max_seq_len, **ct.stats})
    for task, text in (("addition", "31415926535897932384+27182818284590452353"),
                       ("increment", "1011011101111"), ("multiplication", "123456789*7")):
        tm, tape, vocab_tm, ref, n = machine_trace(task, text)
        ct = transformer_program(tm, n).to_transformer(len(ref)).compiled
        rows.append({"program": f"P: {task} (n={n}, |V|={vocab_tm.size})", "max_seq_len": len(ref), **ct.stats})
    return rows


def run_trace(task: str, text: str) -> dict:
    """Compile P for the trace's length and decode it greedily; compare with the simulator."""
    tm, tape, vocab, ref, n = machine_trace(task, text)
    return {"task": task, "digits": max(len(x) for x in text.split("+")), **run_machine(tm, tape, ref, n)}


def ngram_growth(spec: str, tape_text: str, orders: list[int]) -> list[dict]:
    """One random machine's trace through P compiled at growing n-gram orders (the premise's
    order first): each extra order adds one query cell and one key cell of 2·|V| table entries."""
    sample = resolve(spec, tape_text, 100_000)
    tm, tape = sample.machine, sample.machine.parse_tape(tape_text)
    ref = build_trace(simulate(tm, tape, 100_000), Vocab.for_machine(tm))
    premise = min_ngram(split_configs(ref, Vocab.for_machine(tm)))
    return [{"machine": spec, "premise_ngram": premise, **run_machine(tm, tape, ref, n, interpreter=False)}
            for n in sorted({premise, *(n for n in orders if n > premise)})]


def run_machine(tm, tape, ref: list[int], n: int, interpreter: bool = True) -> dict:
    L = len(tape)
    compiled = transformer_program(tm, n).to_transformer(len(ref))
    t1 = time.perf_counter()
    teacher = compiled.teacher_forced(ref, monitor=False)
    t_teacher = time.perf_counter() - t1
    t1, c1 = time.perf_counter(), time.process_time()
    got = compiled.greedy(ref[:L + 2], len(ref), monitor=False)
    t2, c2 = time.perf_counter(), time.process_time()
    generated = len(ref) - L - 2
    t_dense = time.perf_counter()   # the same decoding with dense products, for the ratio
    dense_exact = compiled.greedy(ref[:L + 2], len(ref), monitor=False, sparse=False) == ref
    dense_tok_per_s = round(generated / (time.perf_counter() - t_dense), 1)
    row = {"ngram": n, "trace_tokens": len(ref), "exact": got == ref and dense_exact,
           "teacher_forced_exact": teacher == ref[L + 2:], "teacher_forced_s": round(t_teacher, 2),
           "compile_s": round(compiled.compiled.seconds, 2), "greedy_s": round(t2 - t1, 2),
           "greedy_cpu_s": round(c2 - c1, 2), "transformer_tok_per_s": round(generated / (t2 - t1), 1),
           "dense_tok_per_s": dense_tok_per_s, **compiled.compiled.stats}
    if interpreter:
        interp = compile_turing_machine(tm, n)
        t3 = time.perf_counter()
        got_interp = interp.greedy(ref[:L + 2], len(ref), monitor=False)
        row.update(interpreter_exact=got_interp == ref, interpreter_tok_per_s=round(generated / (time.perf_counter() - t3), 1))
    return row


def float32_limit(lengths: list[int]) -> list[dict]:
    """Teacher-forced exactness of the float32 compilation of P on addition traces."""
    rows = []
    rng = random.Random(0)
    for digits in lengths:
        a = "".join(rng.choice("0123456789") for _ in range(digits))
        b = "".join(rng.choice("0123456789") for _ in range(digits))
        tm, tape, vocab, ref, n = machine_trace("addition", f"{a}+{b}")
        L = len(tape)
        prog = transformer_program(tm, n)
        row = {"digits": digits, "trace_tokens": len(ref), "ngram": n}
        for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            compiled = prog.to_transformer(len(ref), dtype=dtype)
            pred = compiled.teacher_forced(ref, monitor=False)
            bad = [i for i, (x, y) in enumerate(zip(pred, ref[L + 2:])) if x != y]
            row[f"{name}_exact"] = not bad
            if bad and name == "float32":
                row["float32_first_wrong_position"] = L + 1 + bad[0]
                row["float32_first_wrong_sop"] = first_wrong_sop(compiled, prog, ref, L + 1 + bad[0])
        rows.append(row)
    return rows


def float32_programs(lengths: list[int]) -> list[dict]:
    """float32 exactness of position-heavy library programs at max_seq_len = n, on n tokens."""
    rows = []
    rng = random.Random(2)
    programs = [("shift_right", lib.shift_right(tokens, 1, 0), True),
                ("lasts", lib.lasts(tokens, tokens), True),
                ("index_select(tokens, lasts - 1)",
                 lib.index_select(tokens, Map(lambda j: max(j - 1, 0), lib.lasts(tokens, tokens))), True),
                ("make_reverse", lib.make_reverse(tokens), False)]
    for n in lengths:
        xs = [rng.choice([0, 1, 2, 3]) for _ in range(n)]
        row = {"max_seq_len": n}
        for name, program, causal in programs:
            want = [str(v) for v in evaluate_program(program, xs, causal)]
            ct = compile_to_transformer(program, [0, 1, 2, 3], n, causal=causal, dtype=torch.float32)
            got = [str(v) for v in ct.run(xs)]
            row[name] = "exact" if got == want else f"wrong at {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"
        rows.append(row)
    return rows


def evaluate_program(program, xs, causal):
    from rasp.evaluate import evaluate

    return evaluate(program, xs, causal=causal).column(program)


def first_wrong_sop(compiled, prog, trace, position: int) -> str:
    """The first s-op (in layer order) whose decoded value at ``position`` differs from the
    interpreter's, reading the float32 model's residual stream."""
    from rasp.evaluate import evaluate

    ct = compiled.compiled
    ev = evaluate(prog.output, trace[:position + 1], causal=True)
    x = ct.model.embed_input(torch.tensor([ct.encode(trace[:position + 1])]), None)
    resid = [x]
    with torch.no_grad():
        for block in ct.model.blocks:
            x = block(x)
            resid.append(x)
    for node in sorted(ct.program.nodes, key=lambda nd: nd.slot):
        if node.encoding in ("tuple", "folded"):
            continue
        vec = resid[node.slot // 2 + 1][0, position + 1].detach()
        want = ev.column(node.sop)[position]
        got = ct.layout.read(node, vec)
        if node.numerical and abs(got - want) < 1e-3 or got == want:
            continue
        return f"{node.label} (wanted {want!r}, read {got!r})"
    return "none (only the final logits)"


def markdown(rows: list[dict], keys: list[str]) -> str:
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="skip the >= 10^4-token trace")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--float32-only", action="store_true", help="only the float32 table of library programs")
    p.add_argument("--long-only", action="store_true", help="only the >= 10^4-token trace")
    p.add_argument("--sizes-only", action="store_true", help="only the table of compiled sizes (no decoding)")
    p.add_argument("--ngram-growth", action="store_true",
                   help="only an 8-state, 8-symbol random machine's trace at n-gram orders up to 16")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    sys.set_int_max_str_digits(0)
    results = {}
    if args.ngram_growth:
        rows = ngram_growth("random:3:8:8", "1 2 3 4 5 6 7 0 1 2 3 4 5 6 7", [4, 8, 12, 16])
        print(markdown(rows, ["machine", "trace_tokens", "premise_ngram", "ngram", "exact", "teacher_forced_exact",
                              "compile_s", "greedy_s", "transformer_tok_per_s", "dense_tok_per_s", "heads", "d_model",
                              "d_mlp", "mlp_units", "params"]))
        return 0
    if args.long_only:
        rng = random.Random(1)
        digits = ["".join(rng.choice("0123456789") for _ in range(d)) for d in (20, 20, 98, 98)]  # as the full run
        print(json.dumps(run_trace("addition", f"{digits[2]}+{digits[3]}")))
        return 0
    if args.float32_only:
        results["float32_programs"] = float32_programs([16, 64, 256, 1024, 4096])
        print(markdown(results["float32_programs"], list(results["float32_programs"][0])))
        return 0
    results["sizes"] = size_table(64)
    print(markdown(results["sizes"], ["program", "max_seq_len", "layers", "heads", "d_model", "d_head", "d_mlp",
                                      "params"]))
    if args.sizes_only:
        return 0
    rng = random.Random(1)
    cases = [20] if args.quick else [20, 98]
    results["traces"] = []
    for digits in cases:
        a = "".join(rng.choice("0123456789") for _ in range(digits))
        b = "".join(rng.choice("0123456789") for _ in range(digits))
        results["traces"].append(run_trace("addition", f"{a}+{b}"))
        print(json.dumps(results["traces"][-1]), flush=True)
    print(markdown(results["traces"], ["task", "digits", "ngram", "trace_tokens", "exact", "compile_s",
                                       "teacher_forced_s", "greedy_s", "greedy_cpu_s", "transformer_tok_per_s",
                                       "dense_tok_per_s", "interpreter_tok_per_s", "d_model", "d_mlp", "params"]))
    results["float32"] = float32_limit([1, 2, 3, 5, 10, 20] if args.quick else [1, 2, 3, 5, 10, 20, 40, 70])
    print(markdown(results["float32"], ["digits", "trace_tokens", "ngram", "float64_exact", "float32_exact",
                                        "float32_first_wrong_position", "float32_first_wrong_sop"]))
    results["float32_programs"] = float32_programs([16, 64, 256, 1024] if args.quick else [16, 64, 256, 1024, 4096])
    print(markdown(results["float32_programs"], list(results["float32_programs"][0])))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
