"""Sampled accuracy against an adversarial search, on two committed 1-layer addition models.

    python examples/sampled_vs_adversarial.py [--digits 100] [--samples 200] [--starts 4] [--threads 1]

Both models were trained on 1-10-digit additions with six problems per packed row; one uses the
paper's coupled IDs, the other puts the `$` tokens at the top carry's ID (``coupled-sink``). On
random additions both look exact. The whole-answer search of ``lengthgen.certify --no-proof``
(a greedy descent of the smallest teacher-forced answer margin, one digit at a time) tells them
apart: it drives the first into wrong answers and finds no input that brings the second near one.
Each wrong pair is checked by greedy decoding against Python's a + b. About 2 minutes per model at
100 digits with 4 starts on one CPU thread; ``--digits 30`` is faster.
"""
from __future__ import annotations

from pathlib import Path

import torch

from lengthgen.certify import addition_layout
from lengthgen.cli import ArgumentParser, UsageError, run_cli
from lengthgen.evaluate import add_once, evaluate, load_for_eval
from lengthgen.proof.attack import attack_answer

PROG = "python examples/sampled_vs_adversarial.py"
ROOT = Path(__file__).resolve().parents[1]
MODELS = {"paper's coupled IDs": "checkpoints/addition_coupled_1l2h_pack6_100",
          "coupled-sink IDs": "checkpoints/addition_coupled_sink_1l2h_pack6_100"}


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--digits", type=int, default=100, help="operand length, 1-100 (default 100)")
    p.add_argument("--samples", type=int, default=200, help="random additions sampled per model")
    p.add_argument("--starts", type=int, default=4, help="descents of the adversarial search per model")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = p.parse_args(argv)
    if not 1 <= args.digits <= 100 or min(args.samples, args.starts, args.threads) < 1:
        raise UsageError("--digits must be 1-100 and --samples, --starts and --threads at least 1")
    torch.set_num_threads(args.threads)
    for label, path in MODELS.items():
        model, desc = load_for_eval(str(ROOT / path), args.digits)
        sampled = evaluate(model, desc["positions"], [args.digits], args.samples)[0]["exact_match"]
        found = attack_answer(model, addition_layout(args.digits, 2, desc["positions"]), desc["positions"],
                              args.starts)
        print(f"{label} ({path}): {sampled:.1%} of {args.samples} sampled {args.digits}-digit additions exact; "
              f"adversarial search: smallest answer margin {found.min_margin:.3g} "
              f"(answer position {found.worst_position}), {len(found.wrong_pairs)} of {args.starts} descents wrong")
        for a, b in found.wrong_pairs[:2]:
            out = add_once(model, desc["positions"], a, b)
            if out["right"]:  # teacher-forced and greedy decided answers agree, so this would be a bug
                print(f"  {a} + {b}: right by greedy decoding, though the search ended it wrong")
                continue
            first = out["wrong_positions"][0]
            print(f"  {a} + {b} = {out['sum']}: greedy decoding writes {first['written']!r} for "
                  f"{first['expected']!r} at answer position {first['answer_position']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
