"""Exact match and token accuracy per operand length, teacher-forced (as in the paper).

    python -m lengthgen.evaluate --checkpoint runs/NAME --digits 1-15 --samples 1000 [--json]
    python -m lengthgen.evaluate --checkpoint construction --digits 1-20
    python -m lengthgen.evaluate --checkpoint runs/NAME --a 54004 --b 56406   # one addition, greedy

With ``--a``/``--b`` (addition checkpoints) it decodes one addition greedily and compares the sum
with Python's ``a + b`` (exit 0 right, 1 wrong): how a counterexample printed by
``python -m lengthgen.certify`` is reproduced.

Definitions (docs/training.md, "Evaluation"): one forward pass over the whole sequence; the
predictions at the token before the answer and at every answer token are compared with the next
token. A prediction counts as right only under the project's one rule for "exact",
:func:`lengthgen.decode.decided_argmax`: the correct logit must beat every other logit by more
than :data:`lengthgen.decode.DECISION_MARGIN` (a tie or near-tie is wrong). *Exact match*: every
answer token (zero-padded digits included) and the final EOS are right; with decided predictions
this equals greedy decoding's exact match (induction over the decoding steps). *Token accuracy*:
right answer/EOS tokens over all of them. The test set at length n has n-digit (first) operands,
drawn from a generator seeded by ``(seed, n)``, so every model sees the same examples; coupled IDs
start at the task's evaluation start (s = 2 for addition, the construction's start).

Any checkpoint works: a run directory, a checkpoint directory, a weight file, or a name registered
in the entry-point group ``lengthgen.checkpoints`` (``construction``: Theorem 5.1's model, built
with a position table that holds the requested lengths; see :func:`lengthgen.runs.load_checkpoint`).
The task and position scheme are read from the checkpoint. Long inputs go through the model's
O(N·d) attention path, and rows are batched so one batch stays within ``--max-memory``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import task_batches
from .cli import non_negative_integer, run_cli, torch_device
from .data import DataError, layout, parse_digit_list
from .decode import UNDECIDED, decided_argmax, greedy_generate_batch
from .model import DENSE_ENTRIES_LIMIT, Transformer
from .runs import OneLineParser, RunError, fail, load_checkpoint, write_json
from .tasks import ADDITION

PROG = "python -m lengthgen.evaluate"
DEFAULT_SEED = 999  # the authors' evaluation seed
DEFAULT_MAX_MEMORY_MIB = 1024


def load_for_eval(checkpoint: str, max_digits: int, device: str = "cpu") -> tuple[Transformer, dict[str, Any]]:
    """The model behind ``checkpoint`` (a path or a registered name) and a description
    ``{"name", "task", "positions", "train_digits", "kind", "path"}``."""
    model, notes, source = load_checkpoint(checkpoint, max_digits, device=device)
    return model, {"name": notes.get("name", str(checkpoint)), "task": notes.get("task", "addition"),
                   "positions": notes["positions"], "train_digits": notes.get("train_digits"),
                   "kind": notes.get("kind", "trained"), "path": str(source)}


def bytes_per_row(model: Transformer, seq_len: int) -> int:
    """A generous estimate of the memory one row of ``seq_len`` tokens takes in a forward pass:
    the residual stream, queries/keys/values, the MLP activations, and the T×T scores and pattern
    when the model takes its dense attention path (short inputs only)."""
    c = model.cfg
    item = torch.empty(0, dtype=c.torch_dtype).element_size()
    per_token = item * (6 * c.d_model + 5 * c.n_heads * c.d_head + 2 * c.d_mlp + 2 * c.d_vocab_out) * c.n_layers
    dense = 3 * item * c.n_heads * seq_len * seq_len if seq_len * seq_len <= DENSE_ENTRIES_LIMIT else 0
    return seq_len * (per_token + 128) + dense * c.n_layers  # 128: token/position arrays and layout temporaries


def rows_per_batch(model: Transformer, seq_len: int, batch_size: int, max_memory: int) -> int:
    """At most ``batch_size`` rows, fewer when their estimated memory would pass ``max_memory`` bytes."""
    return max(1, min(batch_size, max_memory // max(1, bytes_per_row(model, seq_len))))


@torch.inference_mode()
def score_batch(model: Transformer, tokens: torch.Tensor, pos: torch.Tensor | None, first: int
                ) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-row exact match and number of right answer tokens for rows whose answer predictions
    start at index ``first`` (the token before the first answer token) and run to the end, and the
    summed cross-entropy of the answer tokens. "Right" is :func:`decided_argmax` equal to the target."""
    logits = model(tokens[:, :-1], None if pos is None else pos[:, :-1], logits_from=first)
    targets = tokens[:, first + 1 :]
    right = decided_argmax(logits) == targets
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).double(), targets.flatten(), reduction="sum")
    return right.all(dim=1).cpu().numpy(), right.sum(dim=1).cpu().numpy(), float(loss)


def evaluate(model: Transformer, positions: str, digits: list[int], samples: int, *, task: str = "addition",
             seed: int = DEFAULT_SEED, batch_size: int = 500, max_memory: int = DEFAULT_MAX_MEMORY_MIB << 20,
             progress: bool = False, what: str = "this model") -> list[dict[str, Any]]:
    """``[{"n", "exact_match", "token_accuracy", "loss", "samples", "batch_size"}]`` for every
    length in ``digits`` (``loss``: mean cross-entropy per answer token)."""
    device = model.device
    table = model.cfg.n_ctx if model.cfg.positional == "learned" else 1
    for n in digits:
        task_batches.check_digits(task, positions, table, n, what)
    model.eval()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(digits) * samples, desc="evaluating", unit="sample", file=sys.stderr, dynamic_ncols=True)
    rows = []
    try:
        for n in digits:
            rng = np.random.default_rng([seed, n])
            rows_at_once = rows_per_batch(model, task_batches.sequence_length(task, n), batch_size, max_memory)
            em_total, tok_total, answer_tokens, loss_total, done = 0, 0, 0, 0.0, 0
            while done < samples:
                size = min(rows_at_once, samples - done)
                batch = task_batches.eval_batch(task, rng, size, n, positions)
                first = int(np.argmax(batch.loss_mask[0]))  # every row of one length shares the layout
                tokens, pos, _ = batch.to_torch(device)
                em, tok, loss = score_batch(model, tokens, pos, first)
                em_total, tok_total, done = em_total + int(em.sum()), tok_total + int(tok.sum()), done + size
                answer_tokens += size * (tokens.shape[1] - 1 - first)
                loss_total += loss
                if bar is not None:
                    bar.update(size)
                    bar.set_postfix(n=n, em=f"{em_total / done:.3f}", refresh=False)
            rows.append({"n": n, "exact_match": em_total / samples, "token_accuracy": tok_total / answer_tokens,
                         "loss": round(loss_total / answer_tokens, 6), "samples": samples, "batch_size": rows_at_once})
    finally:
        if bar is not None:
            bar.close()
    return rows


@torch.inference_mode()
def mean_attention(model: Transformer, positions: str, n: int, samples: int, *, task: str = "addition",
                   seed: int = DEFAULT_SEED, batch_size: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Attention probabilities ``[layers, heads, T, T]`` averaged over ``samples`` test examples
    of length n (teacher-forced, full sequence incl. the final EOS, as in the authors' attention
    maps), and the tokens of the first sample."""
    task_batches.check_digits(task, positions, model.cfg.n_ctx if model.cfg.positional == "learned" else 1, n)
    rng = np.random.default_rng([seed, n])
    total, done, first = None, 0, None
    while done < samples:
        size = min(batch_size, samples - done)
        batch = task_batches.eval_batch(task, rng, size, n, positions)
        tokens, pos, _ = batch.to_torch(model.device)
        _, cache = model(tokens, pos, return_cache=True)
        att = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"].double().sum(0) for l in range(model.cfg.n_layers)])
        total = att if total is None else total + att
        first = batch.tokens[0] if first is None else first
        done += size
    return (total / samples).cpu().numpy(), first


@torch.inference_mode()
def add_once(model: Transformer, scheme: str, a: str, b: str) -> dict[str, Any]:
    """Greedy decoding of the single addition ``a + b`` (decimal strings; the shorter operand
    zero-padded to the longer one's length n, as in training) with the IDs of ``scheme``, against
    Python's ``int(a) + int(b)``: the sum, the tokens written (the n + 1 sum digits reversed, then
    ``$``; an undecided step is written ``?`` and ends the answer) and every answer position where
    they differ."""
    n = max(len(a), len(b))
    digits = [np.array([int(x) for x in s[::-1].ljust(n, "0")], dtype=np.int64)[None] for s in (a, b)]
    batch = layout(*digits, np.array([n]), scheme)  # n digits as given, leading zeros included
    tokens, pos, _ = batch.to_torch(model.device)
    eq = int(np.argmax(batch.loss_mask[0]))  # the '=' token, whose prediction is the first answer token
    row = greedy_generate_batch(model, tokens[:, :eq + 1], None if pos is None else pos[:, :eq + 1],
                                None if pos is None else pos[:, eq + 1:-1], max_new_tokens=n + 2,
                                stop_token=ADDITION.EOS)[0]
    written = "".join("?" if t == UNDECIDED else ADDITION.decode([t]) for t in row)
    total = int(a) + int(b)
    want = str(total).zfill(n + 1)[::-1] + "$"
    wrong = [{"answer_position": i, "expected": want[i], "written": written[i:i + 1]}
             for i in range(len(want)) if written[i:i + 1] != want[i]]
    return {"a": a, "b": b, "sum": str(total), "written": written, "right": not wrong, "wrong_positions": wrong}


def format_addition(out: dict[str, Any]) -> str:
    lines = [f"{out['a']} + {out['b']} = {out['sum']} (Python)",
             f"the model writes {out['written']} (greedy; the sum's digits lowest first, then $): "
             + ("right" if out["right"] else "wrong")]
    lines += [f"  answer position {w['answer_position']}: expected {w['expected']}, wrote {w['written'] or 'nothing'}"
              for w in out["wrong_positions"]]
    return "\n".join(lines)


def format_table(desc: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    trained = f", trained on {desc['train_digits']} digits" if desc.get("train_digits") else ""
    lines = [f"{desc['name']} ({desc.get('task', 'addition')}, {desc['positions']} positions{trained}); "
             "teacher-forced, decided argmax",
             f"{'digits':>6}  {'exact match':>11}  {'token acc':>9}  {'samples':>7}"]
    for r in rows:
        lines.append(f"{r['n']:>6}  {100 * r['exact_match']:>10.2f}%  {100 * r['token_accuracy']:>8.2f}%  {r['samples']:>7}")
    return "\n".join(lines)


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Exact match / token accuracy per operand length (teacher-forced, "
                      "a prediction counts only if it wins by a margin; docs/training.md) of any lengthgen checkpoint.")
    p.add_argument("--checkpoint", required=True,
                   help="run directory, checkpoint directory or weight file; or a registered name such as "
                        "'construction' (Theorem 5.1's model)")
    p.add_argument("--digits", default="1-15", help="operand lengths: a range, a single length or a comma list "
                   "with optional steps, e.g. 1-15, 6 or 1-10,20-100:10")
    p.add_argument("--samples", type=int, default=1000, help="test examples per length")
    p.add_argument("--a", help="with --b: decode this one addition greedily instead and check it against Python's "
                   "a + b (addition checkpoints; exit 1 when wrong)")
    p.add_argument("--b", help="the second operand of --a")
    p.add_argument("--seed", type=non_negative_integer, default=DEFAULT_SEED, help="test-set seed (same additions for every model)")
    p.add_argument("--batch-size", type=int, default=500, help="most rows per forward pass (the test set is "
                   "drawn in batches of this size, or fewer where --max-memory requires)")
    p.add_argument("--max-memory", type=int, default=DEFAULT_MAX_MEMORY_MIB,
                   help="MiB one batch may take (estimated); long operands are evaluated a few rows at a time")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--device", type=torch_device, default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cpu or cuda (default: cuda where available)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (none is drawn when stderr is not a terminal)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        lengths = parse_digit_list(args.digits)
        if min(args.samples, args.batch_size, args.threads, args.max_memory) < 1:
            raise DataError("--samples, --batch-size, --max-memory and --threads must be at least 1")
        if args.out and Path(args.out).is_dir():
            raise RunError(f"--out {args.out} is a folder; give the JSON file to write, e.g. {Path(args.out) / 'eval.json'}")
        if args.out and Path(args.out).exists() and not args.force:
            raise RunError(f"{args.out} already exists; use --force to overwrite it")
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise RunError("--device cuda, but CUDA is not available")
        torch.set_num_threads(args.threads)
        if args.a is not None or args.b is not None:
            return one_addition(args)
        model, desc = load_for_eval(args.checkpoint, lengths[-1], device=args.device)
        rows = evaluate(model, desc["positions"], lengths, args.samples, task=desc["task"],
                        seed=args.seed, batch_size=args.batch_size, max_memory=args.max_memory << 20,
                        progress=not args.no_progress and sys.stderr.isatty(), what=str(args.checkpoint))
        result = {**desc, "seed": args.seed, "results": rows}
        if args.out:
            write_json(Path(args.out), result)
    except (DataError, RunError, ValueError) as exc:
        return fail(PROG, str(exc))
    except OSError as exc:
        return fail(PROG, f"cannot write --out {args.out}: {exc.strerror or exc}")
    print(json.dumps(result, indent=1) if args.json else format_table(desc, rows))
    return 0


def one_addition(args) -> int:
    """``--a``/``--b``: one addition, greedy (exit 0 right, 1 wrong)."""
    if args.a is None or args.b is None:
        raise DataError("--a and --b go together: give both operands")
    for name, value in (("--a", args.a), ("--b", args.b)):
        if not value.isascii() or not value.isdigit():
            raise DataError(f"{name} {value!r}: expected decimal digits 0-9")
    model, desc = load_for_eval(args.checkpoint, max(len(args.a), len(args.b)), device=args.device)
    if desc["task"] != "addition":
        raise DataError(f"--a/--b decode one addition; {args.checkpoint} is a {desc['task']} checkpoint")
    table = model.cfg.n_ctx if model.cfg.positional == "learned" else 1
    task_batches.check_digits("addition", desc["positions"], table, max(len(args.a), len(args.b)), str(args.checkpoint))
    out = {**desc, **add_once(model, desc["positions"], args.a, args.b)}
    print(json.dumps(out, indent=1) if args.json else format_addition(out))
    return 0 if out["right"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
