"""Exact match and token accuracy per operand length, teacher-forced argmax (as in the paper).

    python -m lengthgen.evaluate --checkpoint runs/NAME --digits 1-15 --samples 1000 [--json]
    python -m lengthgen.evaluate --checkpoint construction --digits 1-20

Definitions (authors-training-setup.md §5): one forward pass over the whole sequence; the
predictions at ``=`` and at every answer token are compared with the next token. *Exact match*:
every answer digit (zero-padded overflow digit included) and the final EOS are right — under
greedy decoding this equals autoregressive exact match (induction over steps). *Token accuracy*:
right answer/EOS tokens over all of them. Test set at length n (§5): two n-digit operands (leading
digit non-zero for n ≥ 2), seeded by ``(seed, n)`` so every model sees the same additions;
coupled IDs start at s = 2, the construction's start (theorem-5-1-addition.md §1.2).

``--checkpoint construction`` evaluates the Theorem 5.1 construction
(``constructions.addition.build_model``) through the same code; it should score 100%.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .data import DataError, check_digits, eval_batch, parse_digit_range
from .model import Transformer
from .cli import run_cli
from .runs import OneLineParser, RunError, fail, load_trained, write_json

PROG = "python -m lengthgen.evaluate"
CONSTRUCTION = "construction"
DEFAULT_SEED = 999  # the authors' evaluation seed (evaluate_model.py: set_seed(999))


def load_for_eval(checkpoint: str, max_digits: int, device: str = "cpu") -> tuple[Transformer, dict[str, Any]]:
    """The model behind ``checkpoint`` (a run/checkpoint path or ``construction``) and a description
    ``{"name", "positions", "train_digits", "path"}``."""
    if checkpoint == CONSTRUCTION:
        from constructions.addition import build_model

        model, meta = build_model(n_digits=max_digits, device=device)
        return model, {"name": "Theorem 5.1 construction", "positions": "coupled", "train_digits": None,
                       "path": CONSTRUCTION, "d_model": meta["d_model"]}
    model, notes, wp = load_trained(checkpoint, device=device)
    if notes.get("task", "addition") != "addition":
        raise RunError(f"{wp}: trained on task {notes.get('task')!r}; only addition can be evaluated")
    return model, {"name": str(checkpoint), "positions": notes["positions"],
                   "train_digits": notes.get("train_digits"), "path": str(wp)}


@torch.inference_mode()
def score_batch(model: Transformer, tokens: torch.Tensor, pos: torch.Tensor | None, n: int
                ) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-row exact match and number of right answer tokens for rows of one operand length ``n``,
    and the summed cross-entropy of the answer tokens."""
    first = 2 * n + 2  # index of '=': its prediction is the first answer digit
    logits = model(tokens[:, :-1], None if pos is None else pos[:, :-1], logits_from=first)
    targets = tokens[:, first + 1 :]
    right = logits.argmax(-1) == targets
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).double(), targets.flatten(), reduction="sum")
    return right.all(dim=1).cpu().numpy(), right.sum(dim=1).cpu().numpy(), float(loss)


def evaluate(model: Transformer, positions: str, digits: list[int], samples: int, *, seed: int = DEFAULT_SEED,
             batch_size: int = 500, progress: bool = False, what: str = "this model") -> list[dict[str, Any]]:
    """``[{"n", "exact_match", "token_accuracy", "loss", "samples"}]`` for every length in ``digits``
    (``loss``: mean cross-entropy per answer token)."""
    device = model.device
    table = model.cfg.n_ctx if model.cfg.positional == "learned" else 1
    for n in digits:
        check_digits(positions, table, n, what)
    model.eval()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(digits) * samples, desc="evaluating", unit="sample", file=sys.stderr, dynamic_ncols=True)
    rows = []
    try:
        for n in digits:
            rng = np.random.default_rng([seed, n])
            em_total, tok_total, loss_total, done = 0, 0, 0.0, 0
            while done < samples:
                size = min(batch_size, samples - done)
                tokens, pos, _ = eval_batch(rng, size, n, positions).to_torch(device)
                em, tok, loss = score_batch(model, tokens, pos, n)
                em_total, tok_total, done = em_total + int(em.sum()), tok_total + int(tok.sum()), done + size
                loss_total += loss
                if bar is not None:
                    bar.update(size)
                    bar.set_postfix(n=n, em=f"{em_total / done:.3f}", refresh=False)
            rows.append({"n": n, "exact_match": em_total / samples, "token_accuracy": tok_total / (samples * (n + 2)),
                         "loss": round(loss_total / (samples * (n + 2)), 6), "samples": samples})
    finally:
        if bar is not None:
            bar.close()
    return rows


@torch.inference_mode()
def mean_attention(model: Transformer, positions: str, n: int, samples: int, *, seed: int = DEFAULT_SEED,
                   batch_size: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Attention probabilities ``[layers, heads, T, T]`` averaged over ``samples`` n-digit
    additions (teacher-forced, full sequence incl. the final EOS; authors' attention_matrix.py,
    design note §4.1), and the tokens of the first sample."""
    check_digits(positions, model.cfg.n_ctx if model.cfg.positional == "learned" else 1, n)
    rng = np.random.default_rng([seed, n])
    total, done, first = None, 0, None
    while done < samples:
        size = min(batch_size, samples - done)
        batch = eval_batch(rng, size, n, positions)
        tokens, pos, _ = batch.to_torch(model.device)
        _, cache = model(tokens, pos, return_cache=True)
        att = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"].double().sum(0) for l in range(model.cfg.n_layers)])
        total = att if total is None else total + att
        first = batch.tokens[0] if first is None else first
        done += size
    return (total / samples).cpu().numpy(), first


def format_table(desc: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    trained = f", trained on {desc['train_digits']} digits" if desc.get("train_digits") else ""
    lines = [f"{desc['name']} ({desc['positions']} positions{trained}); teacher-forced argmax",
             f"{'digits':>6}  {'exact match':>11}  {'token acc':>9}  {'samples':>7}"]
    for r in rows:
        lines.append(f"{r['n']:>6}  {100 * r['exact_match']:>10.2f}%  {100 * r['token_accuracy']:>8.2f}%  {r['samples']:>7}")
    return "\n".join(lines)


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Exact match / token accuracy per operand length (teacher-forced "
                      "argmax, authors-training-setup.md §5) of a trained checkpoint or the Theorem 5.1 construction.")
    p.add_argument("--checkpoint", required=True,
                   help="run directory, checkpoint directory or .safetensors file; or 'construction'")
    p.add_argument("--digits", default="1-15", help="operand lengths, e.g. 1-15 or 6")
    p.add_argument("--samples", type=int, default=1000, help="additions per length")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="test-set seed (same additions for every model)")
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        lo, hi = parse_digit_range(args.digits)
        if args.samples < 1 or args.batch_size < 1 or args.threads < 1:
            raise DataError("--samples, --batch-size and --threads must be at least 1")
        if args.out and Path(args.out).exists() and not args.force:
            raise RunError(f"{args.out} already exists; use --force to overwrite it")
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise RunError("--device cuda, but CUDA is not available")
        torch.set_num_threads(args.threads)
        model, desc = load_for_eval(args.checkpoint, hi, device=args.device)
        rows = evaluate(model, desc["positions"], list(range(lo, hi + 1)), args.samples, seed=args.seed,
                        batch_size=args.batch_size, progress=not args.no_progress, what=str(args.checkpoint))
    except (DataError, RunError, ValueError) as exc:
        return fail(PROG, str(exc))
    result = {**desc, "seed": args.seed, "results": rows}
    if args.out:
        write_json(Path(args.out), result)
    print(json.dumps(result, indent=1) if args.json else format_table(desc, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
