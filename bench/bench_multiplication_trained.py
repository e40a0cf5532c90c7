"""Exact match of the committed 2-layer N×2 model, split by the size of the multiplier b (prints a
table; no assertions; a few seconds on one CPU thread).

    python bench/bench_multiplication_trained.py [--checkpoint checkpoints/multiplication_nx2_coupled_2l4h]

In training half of the multipliers have one digit (b < 10, written ``0b``); ``lengthgen.evaluate``
tests only two-digit ones (10..99). This prints both, 1000 products per cell, teacher-forced with
the decided argmax (docs/training.md, "Evaluation"), at coupled start s = 1; each answer is laid out
by ``lengthgen.tasks`` from Python's ``a * b``.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from lengthgen.decode import decided_argmax  # noqa: E402
from lengthgen.runs import load_trained  # noqa: E402
from lengthgen.tasks import MULTIPLICATION_NX2  # noqa: E402

LENGTHS = (1, 2, 3, 4, 5, 6, 8, 10)
MULTIPLIERS = {"b in 0..9": (0, 10), "b in 10..99": (10, 100)}


@torch.inference_mode()
def exact_match(model, n: int, b_range: tuple[int, int], samples: int, rng: random.Random) -> float:
    low = 10 ** (n - 1) if n > 1 else 0
    insts = [MULTIPLICATION_NX2.instance(str(rng.randrange(low, 10**n)), str(rng.randrange(*b_range)).zfill(2))
             for _ in range(samples)]
    tokens = torch.tensor(np.stack([i.tokens for i in insts]))
    pos = torch.tensor(np.stack([i.pos_ids for i in insts]))
    first = insts[0].prompt_len - 1
    pred = decided_argmax(model(tokens[:, :-1], pos[:, :-1], logits_from=first))
    return float((pred == tokens[:, first + 1:]).all(dim=1).double().mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(REPO / "checkpoints/multiplication_nx2_coupled_2l4h"))
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, notes, _ = load_trained(args.checkpoint)
    rng = random.Random(args.seed)
    print(f"{args.checkpoint} (trained on {notes.get('train_digits')} digits): exact match (%) by digits of a")
    print(f"{'':>12} " + " ".join(f"{n:>6}" for n in LENGTHS))
    for label, b_range in MULTIPLIERS.items():
        row = [100 * exact_match(model, n, b_range, args.samples, rng) for n in LENGTHS]
        print(f"{label:>12} " + " ".join(f"{x:6.1f}" for x in row))


if __name__ == "__main__":
    main()
