"""Train small transformers on addition with coupled / APE / NoPE / Hard-ALiBi positions.

    python -m lengthgen.train --task addition --positions coupled --layers 1 --heads 2 \\
        --d-model 128 --train-digits 1-5 --steps 4000 --out runs/coupled_1l2h

Recipe: the reduced CPU settings of authors-training-setup.md §3.3 — AdamW, betas (0.9, 0.95),
weight decay 0, linear warm-up then cosine decay to 0.1×lr, gradient clipping 1.0, fresh batches
sampled on the fly (:mod:`lengthgen.data`), learned position table of 18 rows for coupled IDs
(``max_pos`` 17: evaluation up to 15 digits, as in the paper's attention-figure run). The model is
the generic :class:`lengthgen.model.Transformer` (pre-LN, GELU, scaled attention, std-0.02 init —
the "safer choice" of §3.3 rather than T5's quirks). Loss: cross-entropy on the answer digits and
the final EOS (§1.2).

Checkpoints (:mod:`lengthgen.runs`) are written atomically every ``--checkpoint-every`` steps, at
the end, and when the run is interrupted (Ctrl-C / SIGTERM). ``--resume`` continues from the latest
checkpoint with the stored configuration and reproduces an uninterrupted run bit for bit (same
device and thread count). An existing run directory is never touched without ``--resume`` or
``--force``.
"""
from __future__ import annotations

import math
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .data import (
    DataError, SCHEMES, check_pack_fits, packed_training_batch, parse_digit_range, table_size, training_batch,
)
from .init import init_weights_, sinusoidal_table
from .model import Annotations, Transformer, TransformerConfig
from .cli import run_cli
from .runs import (
    NOTE_PREFIX, OneLineParser, RunError, fail, latest_checkpoint, load_optimizer, read_json,
    save_checkpoint, write_json,
)
from .tasks import get_task
from .weights import WeightFileError, load_model, save_model

PROG = "python -m lengthgen.train"
INTERRUPTED = 130


POS_INITS = ("normal", "sinusoidal")


@dataclass
class TrainConfig:
    """Everything that determines a run (stored as ``run.json``)."""

    task: str = "addition"
    positions: str = "coupled"
    layers: int = 1
    heads: int = 2
    d_model: int = 128
    d_head: int | None = None  # default d_model // heads
    d_mlp: int | None = None  # default 4 * d_model
    act_fn: str = "gelu"
    normalization: str | None = "LN"
    window: int = 4  # Hard-ALiBi window of the first half of the heads
    train_digits: str = "1-5"
    max_digits: int = 15  # longest evaluable operand length (sets the position table)
    steps: int = 4000
    batch_size: int = 256
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: float = 0.02  # fraction of steps
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    data_seed: int = 0
    checkpoint_every: int = 500
    log_every: int = 50
    pos_lr_scale: float = 1.0  # learning-rate multiplier of W_pos
    embed_std: float = 0.02  # init std of W_E and W_pos (the authors' T5 uses N(0, 1) for both)
    pos_init: str = "normal"  # W_pos init: "normal" N(0, embed_std), or "sinusoidal" (same RMS), still learned
    attn_scale: float | None = None  # None: sqrt(d_head); 1.0: unscaled scores (as in the authors' T5)
    val_digits: str | None = None  # e.g. "6-15": exact match on these lengths logged every val_every steps
    val_every: int = 250
    val_samples: int = 200
    keep_best: bool = False  # keep the weights with the lowest validation loss at the longest val length
    pack: float = 0.0  # fraction of coupled training rows holding two additions (data.packed_training_batch)

    def validate(self) -> None:
        get_task(self.task)
        if self.positions not in SCHEMES:
            raise DataError(f"unknown position scheme {self.positions!r}; choose one of {', '.join(SCHEMES)}")
        lo, hi = parse_digit_range(self.train_digits)
        if self.positions in ("coupled", "ape") and hi > self.max_digits:
            raise DataError(f"--train-digits {self.train_digits} exceeds --max-digits {self.max_digits}")
        for name in ("layers", "heads", "d_model", "steps", "batch_size", "checkpoint_every", "log_every", "max_digits"):
            if getattr(self, name) < 1:
                raise DataError(f"--{name.replace('_', '-')} must be at least 1")
        if self.lr <= 0 or not 0 <= self.min_lr_ratio <= 1 or not 0 <= self.warmup < 1:
            raise DataError("need lr > 0, 0 <= min-lr-ratio <= 1 and 0 <= warmup < 1")
        if self.keep_best and not self.val_digits:
            raise DataError("--keep-best needs --val-digits")
        if self.val_digits is not None:
            vlo, vhi = parse_digit_range(self.val_digits)
            if self.positions in ("coupled", "ape") and vhi > self.max_digits:
                raise DataError(f"--val-digits {self.val_digits} exceeds --max-digits {self.max_digits}")
        if self.pos_init not in POS_INITS:
            raise DataError(f"unknown --pos-init {self.pos_init!r}; choose one of {', '.join(POS_INITS)}")
        if not 0 <= self.pack <= 1:
            raise DataError("--pack is a fraction of the training rows: 0 <= pack <= 1")
        if self.pack and self.positions != "coupled":
            raise DataError("--pack needs --positions coupled (two problems get disjoint coupled ID ranges)")
        if self.pack:
            check_pack_fits(hi, table_size(self.positions, self.max_digits))
        if self.positions == "hard-alibi" and self.window < 1:
            raise DataError("--window must be at least 1")

    def model_config(self) -> TransformerConfig:
        task = get_task(self.task)
        windows = None
        if self.positions == "hard-alibi":
            windows = [self.window if h < max(1, self.heads // 2) else None for h in range(self.heads)]
        return TransformerConfig(
            d_vocab=len(task.vocab), d_model=self.d_model, n_layers=self.layers, n_heads=self.heads,
            d_head=self.d_head or self.d_model // self.heads, d_mlp=self.d_mlp or 4 * self.d_model,
            n_ctx=table_size(self.positions, self.max_digits),
            positional="learned" if self.positions in ("coupled", "ape") else "none",
            act_fn=self.act_fn, normalization=self.normalization, attn_windows=windows, attn_scale=self.attn_scale,
        )


def build_model(cfg: TrainConfig) -> Transformer:
    """An untrained model for ``cfg`` (weights from :func:`init_weights_`), with ``lengthgen.*``
    notes recording the task and position scheme so the weight file is self-describing."""
    notes = {f"{NOTE_PREFIX}task": cfg.task, f"{NOTE_PREFIX}positions": cfg.positions,
             f"{NOTE_PREFIX}train_digits": cfg.train_digits}
    title = f"{cfg.task}, {cfg.positions} positions, {cfg.layers} layer(s) x {cfg.heads} heads, d={cfg.d_model}"
    model = Transformer(cfg.model_config(), Annotations(vocab=list(get_task(cfg.task).vocab), notes=notes, title=title))
    init_weights_(model, cfg.seed, embed_std=cfg.embed_std)
    if cfg.pos_init == "sinusoidal" and cfg.positions in ("coupled", "ape"):
        with torch.no_grad():
            table = sinusoidal_table(model.cfg.n_ctx, model.cfg.d_model)
            model.pos_embed.W_pos.copy_(table * cfg.embed_std * math.sqrt(2))  # RMS = embed_std
    return model


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr`` then cosine decay to ``min_lr_ratio·lr`` (authors' custom_cosine)."""
    warm = max(1, round(cfg.warmup * cfg.steps))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, cfg.steps - warm)
    floor = cfg.min_lr_ratio
    return cfg.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def make_optimizer(model: Transformer, cfg: TrainConfig) -> torch.optim.Optimizer:
    pos = [p for n, p in model.named_parameters() if n == "pos_embed.W_pos"]
    rest = [p for n, p in model.named_parameters() if n != "pos_embed.W_pos"]
    groups = [{"params": rest, "lr_scale": 1.0}] + ([{"params": pos, "lr_scale": cfg.pos_lr_scale}] if pos else [])
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay, eps=1e-8)


def masked_loss(model: Transformer, tokens: torch.Tensor, pos: torch.Tensor | None, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cross-entropy over the masked next-token predictions; also (token accuracy, exact match)."""
    logits = model(tokens[:, :-1], None if pos is None else pos[:, :-1])
    targets = tokens[:, 1:]
    loss = F.cross_entropy(logits[mask], targets[mask])
    with torch.no_grad():
        right = (logits.argmax(-1) == targets) | ~mask
        tok_acc = ((logits.argmax(-1) == targets) & mask).sum() / mask.sum()
        em = right.all(dim=1).float().mean()
    return loss, tok_acc, em


VAL_SEED = 12345  # validation additions; the test sets of lengthgen.evaluate use seed 999


def validate(model: Transformer, cfg: TrainConfig) -> tuple[dict[str, float], float]:
    """Exact match per length on ``cfg.val_digits`` and the answer loss at the longest of them
    (the authors' ``val_long`` criterion, authors-training-setup.md §3.1)."""
    from .evaluate import evaluate

    lo, hi = parse_digit_range(cfg.val_digits or "1")
    rows = evaluate(model, cfg.positions, list(range(lo, hi + 1)), cfg.val_samples, seed=VAL_SEED)
    return {str(r["n"]): round(r["exact_match"], 4) for r in rows}, rows[-1]["loss"]


class _StopFlag:
    """Turns SIGINT/SIGTERM into a flag checked between steps (so a checkpoint can be written)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_StopFlag":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # second Ctrl-C: give up immediately
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def train(cfg: TrainConfig, out: Path, *, resume: bool = False, stop_after: int | None = None,
          device: str = "cpu", progress: bool = True) -> int:
    """Run (or resume) training into ``out``. Returns 0 when done, 130 when interrupted or
    stopped by ``stop_after`` (steps in this invocation) with a checkpoint saved."""
    out = Path(out)
    if resume:
        ck = latest_checkpoint(out)
        if ck is None:
            raise RunError(f"{out}: nothing to resume (no checkpoint)")
        cfg = TrainConfig(**read_json(out / "run.json")["config"])
        try:
            model = load_model(ck / "model.safetensors", device=device)
        except WeightFileError as exc:
            raise RunError(str(exc)) from None
        opt = make_optimizer(model, cfg)
        load_optimizer(opt, ck / "optimizer.safetensors")
        state = read_json(ck / "state.json")
    else:
        write_json(out / "run.json", {"config": asdict(cfg), "argv": sys.argv, "torch": torch.__version__})
        model = build_model(cfg).to(device)
        opt = make_optimizer(model, cfg)
        rng = np.random.default_rng(cfg.data_seed)
        state = {"step": 0, "rng": rng.bit_generator.state, "log": [], "ema": {}, "train_seconds": 0.0}
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    lo, hi = parse_digit_range(cfg.train_digits)
    n_ctx = model.cfg.n_ctx
    model.train()
    start_step, t0, seconds0 = state["step"], time.perf_counter(), state["train_seconds"]

    def snapshot(step: int) -> None:
        state.update(step=step, rng=rng.bit_generator.state, train_seconds=seconds0 + time.perf_counter() - t0)
        save_checkpoint(out, model, opt, state)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, initial=start_step, desc=out.name, file=sys.stderr, dynamic_ncols=True,
                   mininterval=0.2 if sys.stderr.isatty() else 10.0)
    step, code = start_step, 0
    ema: dict[str, float] = state.setdefault("ema", {})  # smoothed loss/accuracy, resumed with the run
    try:
        with _StopFlag() as stop:
            while step < cfg.steps:
                batch = (packed_training_batch(rng, cfg.batch_size, lo, hi, n_ctx, cfg.pack) if cfg.pack
                         else training_batch(rng, cfg.batch_size, lo, hi, cfg.positions, n_ctx))
                tokens, pos, mask = batch.to_torch(device)
                lr = lr_at(step, cfg)
                for group in opt.param_groups:
                    group["lr"] = lr * group["lr_scale"]
                loss, tok_acc, em = masked_loss(model, tokens, pos, mask)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                step += 1
                vals = {"loss": loss.item(), "acc": tok_acc.item(), "em": em.item()}
                ema.update({k: v if k not in ema else 0.9 * ema[k] + 0.1 * v for k, v in vals.items()})
                if step % cfg.log_every == 0 or step == cfg.steps:
                    state["log"].append({"step": step, "lr": lr, **{k: round(v, 5) for k, v in ema.items()},
                                         "seconds": round(seconds0 + time.perf_counter() - t0, 2)})
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{ema['loss']:.4f}", acc=f"{ema['acc']:.3f}", em=f"{ema['em']:.3f}", refresh=False)
                if stop.signum is not None or (stop_after is not None and step - start_step >= stop_after):
                    code = INTERRUPTED
                    break
                if cfg.val_digits and (step % cfg.val_every == 0 or step == cfg.steps):
                    val, val_loss = validate(model, cfg)
                    state["log"].append({"step": step, "val_em": val, "val_loss": val_loss})
                    msg = f"step {step}: exact match " + " ".join(f"{k}:{v:.2f}" for k, v in val.items())
                    if cfg.keep_best and val_loss < state.get("best", {}).get("val_loss", math.inf):
                        state["best"] = {"step": step, "val_loss": val_loss, "val_em": val}
                        save_model(model, out / "best" / "model.safetensors")
                        write_json(out / "best" / "best.json", {**state["best"], "config": asdict(cfg)})
                        msg += f"  (new best: val loss {val_loss:.4f})"
                    bar.write(msg, file=sys.stderr) if bar is not None else print(msg, file=sys.stderr)
                    model.train()
                if step % cfg.checkpoint_every == 0 and step < cfg.steps:
                    snapshot(step)
            snapshot(step)
    finally:
        if bar is not None:
            bar.close()
    if code == INTERRUPTED:
        why = "interrupted" if stop_after is None or step - start_step < stop_after else "stopped (--stop-after)"
        print(f"{why} at step {step}/{cfg.steps}; checkpoint saved in {out}; continue with --resume --out {out}",
              file=sys.stderr)
        return code
    model.eval()
    save_model(model, out / "model.safetensors")
    summary = {"steps": step, "train_seconds": round(state["train_seconds"], 1), "final": state["log"][-1] if state["log"] else None,
               "config": asdict(cfg), "params": sum(p.numel() for p in model.parameters()),
               "threads": torch.get_num_threads(), "device": device, "best": state.get("best")}
    write_json(out / "summary.json", summary)
    print(f"done: {step} steps in {summary['train_seconds']:.0f} s; weights in {out / 'model.safetensors'}", file=sys.stderr)
    return 0


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0] + " (issue 6; authors-training-setup.md §3.3).")
    d = TrainConfig()
    p.add_argument("--task", default=d.task, help="task (only 'addition')")
    p.add_argument("--positions", default=d.positions, help=f"position scheme: {' | '.join(SCHEMES)}")
    p.add_argument("--layers", type=int, default=d.layers)
    p.add_argument("--heads", type=int, default=d.heads)
    p.add_argument("--d-model", type=int, default=d.d_model)
    p.add_argument("--d-head", type=int, default=None, help="default d-model / heads")
    p.add_argument("--d-mlp", type=int, default=None, help="default 4 x d-model")
    p.add_argument("--act-fn", choices=("gelu", "relu"), default=d.act_fn)
    p.add_argument("--window", type=int, default=d.window, help="Hard-ALiBi window m of the first half of the heads")
    p.add_argument("--train-digits", default=d.train_digits, help="operand lengths to train on, e.g. 1-5")
    p.add_argument("--max-digits", type=int, default=d.max_digits,
                   help="longest operands the position table must hold at evaluation (coupled: IDs up to 2+n)")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio)
    p.add_argument("--warmup", type=float, default=d.warmup, help="warm-up fraction of the steps")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--grad-clip", type=float, default=d.grad_clip)
    p.add_argument("--seed", type=int, default=d.seed, help="model initialisation seed")
    p.add_argument("--data-seed", type=int, default=d.data_seed, help="data sampling seed")
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    p.add_argument("--log-every", type=int, default=d.log_every)
    p.add_argument("--pos-lr-scale", type=float, default=d.pos_lr_scale, help="learning-rate multiplier of W_pos")
    p.add_argument("--embed-std", type=float, default=d.embed_std, help="init std of token/position embeddings")
    p.add_argument("--pos-init", default=d.pos_init, help="W_pos initialization: normal (default) or sinusoidal "
                   "(Vaswani et al., same RMS; the table is still learned)")
    p.add_argument("--attn-scale", type=float, default=None, help="divide q.k by this (default sqrt(d-head))")
    p.add_argument("--val-digits", default=None, help="log exact match on these lengths during training, e.g. 6-15")
    p.add_argument("--val-every", type=int, default=d.val_every)
    p.add_argument("--val-samples", type=int, default=d.val_samples)
    p.add_argument("--keep-best", action="store_true",
                   help="also keep the weights with the lowest validation loss at the longest --val-digits length "
                        "in OUT/best/ (the authors' model selection)")
    p.add_argument("--pack", type=float, default=d.pack,
                   help="fraction (0-1) of coupled training rows that hold two additions with disjoint ID ranges, "
                        "so far-apart IDs meet in training (not in the paper; see lengthgen.data.packed_training_batch)")
    p.add_argument("--out", required=True, help="run directory (e.g. runs/NAME)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out with its stored config")
    p.add_argument("--force", action="store_true", help="delete an existing run in --out and start afresh")
    p.add_argument("--stop-after", type=int, default=None, help="stop (with a checkpoint) after this many steps")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)})
    out = Path(args.out)
    try:
        if args.resume and args.force:
            raise RunError("--resume and --force exclude each other")
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise RunError("--device cuda, but CUDA is not available")
        if args.threads < 1 or (args.stop_after is not None and args.stop_after < 1):
            raise RunError("--threads and --stop-after must be at least 1")
        cfg.validate()
        if not args.resume:
            if out.exists() and (not out.is_dir() or any(out.iterdir())):
                if not args.force:
                    raise RunError(f"{out} already exists; use --resume to continue it or --force to replace it")
                if not out.is_dir() or not ((out / "run.json").is_file() or (out / "latest.json").is_file()):
                    raise RunError(f"{out} exists and is not a lengthgen run directory; refusing to delete it even with --force")
                shutil.rmtree(out)
        torch.set_num_threads(args.threads)
        return train(cfg, out, resume=args.resume, stop_after=args.stop_after, device=args.device,
                     progress=not args.no_progress)
    except (DataError, RunError, ValueError) as exc:
        return fail(PROG, str(exc))


if __name__ == "__main__":
    raise SystemExit(main())
