"""How much a trained model's length generalization depends on its attention temperature
(docs/training.md, "Log-length scaled attention"): the queries of every head multiplied by a factor
after training, then ``lengthgen.evaluate``'s exact match.

    nice -n 10 python bench/bench_query_scale.py --checkpoint addition_coupled_1l2h_packed_entropy_001_late \\
        --factors 0.9 1 1.05 1.1 1.5 2 3 --digits 30 100 --samples 200

W_Q and b_Q of every layer are multiplied by the factor, so every attention score q·k is (the
keys, values and everything else stay as trained). Factor 1 is the checkpoint itself. A factor
above 1 sharpens every head, as ``--attn-log-length``'s ln t does at long inputs; a model whose
heads must average a few keys (a_j and b_j of one significance) loses exactly that average.
Prints one markdown row per factor: exact match (%) per length, and the token accuracy at the
longest.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lengthgen.data import DataError
from lengthgen.evaluate import evaluate
from lengthgen.runs import RunError, load_checkpoint

CHECKPOINTS = Path(__file__).resolve().parent.parent / "checkpoints"


def scale_queries(model: torch.nn.Module, factor: float) -> None:
    """Multiply every W_Q and b_Q of ``model`` in place by ``factor``."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("attn.W_Q", "attn.b_Q")):
                p.mul_(factor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="addition_coupled_1l2h_packed_entropy_001_late",
                        help="a name under checkpoints/, or a run or checkpoint directory")
    parser.add_argument("--factors", type=float, nargs="+", default=[0.9, 1.0, 1.05, 1.1, 1.5, 2.0, 3.0])
    parser.add_argument("--digits", type=int, nargs="+", default=[30, 100])
    parser.add_argument("--samples", type=int, default=200, help="additions per length (default: 200)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if any(f <= 0 for f in args.factors):
        parser.error("every factor must be positive")
    torch.set_num_threads(args.threads)
    source = CHECKPOINTS / args.checkpoint if (CHECKPOINTS / args.checkpoint).is_dir() else args.checkpoint
    header = True
    for factor in args.factors:
        try:  # a fresh copy per factor: the scaling is in place
            model, notes, _ = load_checkpoint(str(source), max(args.digits))
            scale_queries(model, factor)
            rows = evaluate(model, notes["positions"], args.digits, args.samples, task=notes.get("task", "addition"))
        except (RunError, DataError) as e:
            raise SystemExit(f"bench_query_scale.py: {e}") from None
        if header:
            print("| query factor | " + " | ".join(f"exact at {n}" for n in args.digits)
                  + f" | token acc. at {args.digits[-1]} |")
            print("|---" * (len(args.digits) + 2) + "|")
            header = False
        print(f"| {factor:g} | " + " | ".join(f"{100 * r['exact_match']:.1f}" for r in rows)
              + f" | {100 * rows[-1]['token_accuracy']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
