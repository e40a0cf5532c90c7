"""Train small transformers on any task of lengthgen.tasks with coupled / APE / NoPE / Hard-ALiBi positions.

    python -m lengthgen.train --task addition --positions coupled --layers 1 --heads 2 \\
        --d-model 128 --train-digits 1-5 --steps 4000 --out runs/coupled_1l2h

Recipe (docs/training.md): a CPU-sized version of the paper's — AdamW, betas (0.9, 0.95), weight
decay 0, linear warm-up then cosine decay to 0.1×lr, gradient clipping 1.0, fresh batches sampled
on the fly (:mod:`lengthgen.task_batches`), a learned position table just long enough to evaluate
``--max-digits`` digits. The model is the generic :class:`lengthgen.model.Transformer` (pre-LN,
GELU, std-0.02 init). Loss: cross-entropy on the answer tokens and the final EOS.

Checkpoints (:mod:`lengthgen.runs`) are written atomically every ``--checkpoint-every`` steps, at
the end, when ``--stop-after`` steps are done, and when the run is interrupted (Ctrl-C / SIGTERM).
``run.json`` stores every setting that affects the numbers, the thread count and device included,
so ``--resume`` reproduces an uninterrupted run bit for bit; a flag that contradicts the stored
run is refused. An existing run directory is never touched without ``--resume`` or ``--force``.
Under ``torchrun`` every process trains on its share of each batch (:mod:`lengthgen.distributed`).
"""
from __future__ import annotations

import argparse
import math
import shutil
import signal
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import task_batches
from .data import DataError, SCHEMES, parse_digit_range
from .distributed import World, from_environment
from .model import Transformer
from .cli import non_negative_integer, run_cli, torch_device
from .runs import OneLineParser, RunError, command_line, fail, latest_checkpoint, load_optimizer, read_json, save_checkpoint, write_json
from .loss import masked_loss  # noqa: F401  (public API)
from .train_config import POS_INITS, TrainConfig, build_model, entropy_weight_at, lr_at, make_optimizer  # noqa: F401  (public API)
from .weights import WeightFileError, load_model, save_model

PROG = "python -m lengthgen.train"
INTERRUPTED = 130


VAL_SEED = 12345  # validation additions; the test sets of lengthgen.evaluate use seed 999


def validate(model: Transformer, cfg: TrainConfig) -> tuple[dict[str, float], float]:
    """Exact match per length on ``cfg.val_digits`` and the answer loss at the longest of them
    (the authors' model-selection criterion, docs/training.md)."""
    from .evaluate import evaluate

    lo, hi = parse_digit_range(cfg.val_digits or "1")
    rows = evaluate(model, cfg.positions, list(range(lo, hi + 1)), cfg.val_samples, seed=VAL_SEED, task=cfg.task)
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


def stored_run(out: Path) -> dict[str, Any]:
    """``run.json`` of the run in ``out``: ``config`` (a :class:`TrainConfig`) and ``runtime``
    (``threads``, ``device``; absent in runs made before they were stored)."""
    run = read_json(out / "run.json")
    names = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(run.get("config", {})) - names)
    if unknown:
        raise RunError(f"{out / 'run.json'}: settings this version cannot reproduce: {', '.join(unknown)}")
    return run


def train(cfg: TrainConfig, out: Path, *, resume: bool = False, stop_after: int | None = None,
          device: str = "cpu", progress: bool = True, world: World = World()) -> int:
    """Run (or resume) training into ``out``. Returns 0 when done or stopped by ``stop_after``
    (steps in this invocation; a checkpoint is saved), 130 when interrupted by a signal.

    A new run records ``cfg``, ``device`` and the current ``torch.get_num_threads()`` in
    ``run.json``; on ``resume`` the stored configuration is used (``cfg`` is ignored) and the
    caller is expected to have restored the stored thread count (the CLI does). ``world``: the ranks
    of a ``torchrun`` (:mod:`lengthgen.distributed`); rank 0 writes, every rank trains its share."""
    out = Path(out)
    here = world.device(device)  # this rank's device: cuda:LOCAL_RANK under torchrun
    if resume:
        ck = latest_checkpoint(out)
        if ck is None:
            raise RunError(f"{out}: nothing to resume (no checkpoint)")
        cfg = TrainConfig(**stored_run(out)["config"])
        try:
            model = load_model(ck / "model.safetensors", device=here)
        except WeightFileError as exc:
            raise RunError(str(exc)) from None
        opt = make_optimizer(model, cfg)
        load_optimizer(opt, ck / "optimizer.safetensors")
        state = read_json(ck / "state.json")
    else:
        runtime = {"threads": torch.get_num_threads(), "device": str(device), "processes": world.size}
        if world.is_main:
            write_json(out / "run.json", {"config": asdict(cfg), "runtime": runtime, "argv": command_line(),
                                          "torch": torch.__version__})
        model = build_model(cfg).to(here)
        opt = make_optimizer(model, cfg)
        rng = np.random.default_rng(cfg.data_seed)
        state = {"step": 0, "rng": rng.bit_generator.state, "log": [], "ema": {}, "train_seconds": 0.0}
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    lo, hi = parse_digit_range(cfg.train_digits)
    n_ctx = model.cfg.n_ctx
    model.train()
    net = world.wrap(model)
    start_step, t0, seconds0 = state["step"], time.perf_counter(), state["train_seconds"]

    def snapshot(step: int) -> None:
        state.update(step=step, rng=rng.bit_generator.state, train_seconds=seconds0 + time.perf_counter() - t0)
        if world.is_main:
            save_checkpoint(out, model, opt, state)
        world.barrier()

    bar = None
    if progress and world.is_main:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, initial=start_step, desc=out.name, file=sys.stderr, dynamic_ncols=True,
                   mininterval=0.2 if sys.stderr.isatty() else 10.0)
    step, code, stopped = start_step, 0, False
    ema: dict[str, float] = state.setdefault("ema", {})  # smoothed loss/accuracy, resumed with the run
    try:
        with _StopFlag() as stop:
            while step < cfg.steps:
                batch = task_batches.training_batch(cfg.task, rng, cfg.batch_size, lo, hi, cfg.positions, n_ctx, cfg.pack,
                                                    cfg.pack_problems)
                tokens, pos, mask = (None if t is None else world.shard(t) for t in batch.to_torch(here))
                lr = lr_at(step, cfg)
                for group in opt.param_groups:
                    group["lr"] = lr * group["lr_scale"]
                loss, batch_loss, tok_acc, em, ent = masked_loss(net, tokens, pos, mask, world,
                                                          entropy_weight_at(step, cfg) if cfg.attn_entropy else None)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                step += 1
                vals = {"loss": batch_loss.item(), "acc": tok_acc.item(), "em": em.item()}
                if cfg.attn_entropy:
                    vals["attn_entropy"] = ent.item()
                ema.update({k: v if k not in ema else 0.9 * ema[k] + 0.1 * v for k, v in vals.items()})
                if step % cfg.log_every == 0 or step == cfg.steps:
                    state["log"].append({"step": step, "lr": lr, **{k: round(v, 5) for k, v in ema.items()},
                                         "seconds": round(seconds0 + time.perf_counter() - t0, 2)})
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{ema['loss']:.4f}", acc=f"{ema['acc']:.3f}", em=f"{ema['em']:.3f}", refresh=False)
                if cfg.val_digits and (step % cfg.val_every == 0 or step == cfg.steps) and world.is_main:
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
                if world.any(stop.signum is not None):  # after validation, so a resumed run logs the same
                    code = INTERRUPTED
                    break
                if stop_after is not None and step - start_step >= stop_after and step < cfg.steps:
                    stopped = True
                    break
            snapshot(step)
    finally:
        if bar is not None:
            bar.close()
    if not world.is_main:
        return code
    if code == INTERRUPTED or stopped:
        why = "interrupted" if code == INTERRUPTED else f"stopped after {stop_after} steps as asked (--stop-after)"
        print(f"{why} at step {step}/{cfg.steps}; checkpoint saved in {out}; continue with --resume --out {out}",
              file=sys.stderr)
        return code
    model.eval()
    save_model(model, out / "model.safetensors")
    summary = {"steps": step, "train_seconds": round(state["train_seconds"], 1), "final": state["log"][-1] if state["log"] else None,
               "config": asdict(cfg), "params": sum(p.numel() for p in model.parameters()),
               "threads": torch.get_num_threads(), "device": device, "processes": world.size, "best": state.get("best")}
    write_json(out / "summary.json", summary)
    print(f"done: {step} steps in {summary['train_seconds']:.0f} s; weights in {out / 'model.safetensors'}", file=sys.stderr)
    return 0


RUNTIME_DEFAULTS = {"threads": 2, "device": "cuda" if torch.cuda.is_available() else "cpu"}


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0] + " See docs/training.md.")
    d = TrainConfig()
    from .tasks import TASKS

    p.add_argument("--task", default=d.task, help=f"task: {' | '.join(TASKS)} (its vocabulary and coupled IDs)")
    p.add_argument("--positions", default=d.positions, help=f"position scheme: {' | '.join(SCHEMES)} (coupled-sink: coupled, with "
                   "addition's $ at the top carry's ID instead of 0)")
    p.add_argument("--layers", type=int, default=d.layers, help="transformer blocks")
    p.add_argument("--heads", type=int, default=d.heads, help="attention heads per block")
    p.add_argument("--d-model", type=int, default=d.d_model, help="residual stream width")
    p.add_argument("--d-head", type=int, default=None, help="per-head width (default: d-model / heads)")
    p.add_argument("--d-mlp", type=int, default=None, help="MLP hidden width (default: 4 x d-model)")
    p.add_argument("--act-fn", choices=("gelu", "relu"), default=d.act_fn, help="MLP activation")
    p.add_argument("--window", type=int, default=d.window, help="Hard-ALiBi window m of the first half of the heads")
    p.add_argument("--train-digits", default=d.train_digits, help="(first) operand lengths to train on, e.g. 1-5")
    p.add_argument("--max-digits", type=int, default=d.max_digits,
                   help="longest operands the position table must hold at evaluation (addition, coupled: IDs up to 2+n)")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="training rows per step")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (linear warm-up, then cosine decay)")
    p.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio, help="final learning rate as a fraction of --lr")
    p.add_argument("--warmup", type=float, default=d.warmup, help="warm-up fraction of the steps")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW weight decay")
    p.add_argument("--grad-clip", type=float, default=d.grad_clip, help="largest gradient norm kept (> 0)")
    p.add_argument("--seed", type=non_negative_integer, default=d.seed, help="model initialisation seed")
    p.add_argument("--data-seed", type=non_negative_integer, default=d.data_seed, help="data sampling seed")
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every, help="steps between checkpoints (resumable)")
    p.add_argument("--log-every", type=int, default=d.log_every, help="steps between loss log entries")
    p.add_argument("--pos-lr-scale", type=float, default=d.pos_lr_scale, help="learning-rate multiplier of W_pos")
    p.add_argument("--embed-std", type=float, default=d.embed_std, help="init std of token/position embeddings")
    p.add_argument("--pos-init", default=d.pos_init, help="W_pos initialization: normal (default) or sinusoidal "
                   "(Vaswani et al., same RMS; the table is still learned)")
    p.add_argument("--attn-scale", type=float, default=None, help="divide q.k by this (default sqrt(d-head))")
    p.add_argument("--attn-log-length", action="store_true",
                   help="multiply every score by ln(number of keys the query sees), so a head's gap grows with "
                        "the input's length (log-length scaled attention; docs/training.md)")
    p.add_argument("--val-digits", default=None, help="log exact match on these lengths during training, e.g. 6-15")
    p.add_argument("--val-every", type=int, default=d.val_every, help="steps between --val-digits evaluations")
    p.add_argument("--val-samples", type=int, default=d.val_samples, help="examples per length at each validation")
    p.add_argument("--keep-best", action="store_true",
                   help="also keep the weights with the lowest validation loss at the longest --val-digits length "
                        "in OUT/best/ (the authors' model selection)")
    p.add_argument("--pack", type=float, default=d.pack,
                   help="addition, copy and reverse: fraction (0-1) of coupled training rows that hold two problems "
                        "with disjoint ID ranges, so far-apart IDs meet in training (not in the paper; docs/training.md)")
    p.add_argument("--pack-problems", type=int, default=d.pack_problems, metavar="K",
                   help="addition only: a packed row holds 2 to K additions (K >= 3 lets queries meet many more "
                        "far keys; docs/training.md)")
    p.add_argument("--attn-entropy", type=float, default=d.attn_entropy, metavar="BETA",
                   help="add BETA times the mean attention entropy (nats) of the answer queries to the loss: "
                        "sharper heads, which the trained-model certificate needs at long lengths (docs/training.md)")
    p.add_argument("--attn-entropy-start", type=float, default=d.attn_entropy_start, metavar="F",
                   help="the entropy weight is 0 for the first F of the steps, then rises linearly to BETA "
                        "halfway to the end")
    p.add_argument("--out", required=True, help="run directory (e.g. runs/NAME)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out with its stored settings (a flag that contradicts them is refused)")
    p.add_argument("--force", action="store_true", help="delete an existing run in --out and start afresh")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop after this many steps of this invocation, with a checkpoint (exit 0; continue with --resume)")
    p.add_argument("--device", type=torch_device, default=None, help=f"default {RUNTIME_DEFAULTS['device']}; on --resume the run's own")
    p.add_argument("--threads", type=int, default=None,
                   help=f"torch CPU threads (default {RUNTIME_DEFAULTS['threads']}; on --resume the run's own: the "
                        "thread count changes the floating-point sums, so it is stored with the run)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def given_options(argv: list[str] | None) -> set[str]:
    """The destinations of the options the user actually typed (defaults suppressed)."""
    p = parser()
    for action in p._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return set(vars(p.parse_args(argv)))


def resume_settings(out: Path, args: argparse.Namespace, given: set[str]) -> dict[str, Any]:
    """The stored runtime of the run in ``out``; :class:`RunError` naming every typed flag that
    contradicts the stored run (a resumed run must reproduce the uninterrupted one)."""
    run = stored_run(out)
    stored = TrainConfig(**run.get("config", {}))
    runtime = {**RUNTIME_DEFAULTS, **run.get("runtime", {})}
    clashes = []
    for name in sorted(given - {"out", "resume", "stop_after", "no_progress"}):
        have = runtime[name] if name in ("threads", "device") else getattr(stored, name, None)
        if getattr(args, name) != have:
            clashes.append(f"--{name.replace('_', '-')} {getattr(args, name)} (the run has {have})")
    if clashes:
        raise RunError(f"--resume continues {out} with its stored settings, and these flags contradict them: "
                       f"{'; '.join(clashes)}; drop them, or start a new run with --force")
    return runtime


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)})
    out = Path(args.out)
    try:
        if args.resume and args.force:
            raise RunError("--resume and --force exclude each other")
        if args.stop_after is not None and args.stop_after < 1:
            raise RunError("--stop-after must be at least 1")
        if args.resume:
            if latest_checkpoint(out) is None:
                raise RunError(f"{out}: nothing to resume (no checkpoint)")
            runtime = resume_settings(out, args, given_options(argv))
        else:
            runtime = {k: RUNTIME_DEFAULTS[k] if getattr(args, k) is None else getattr(args, k) for k in RUNTIME_DEFAULTS}
            cfg.validate()
            cfg.check_memory()
            if "window" in given_options(argv) and cfg.positions != "hard-alibi":
                raise RunError(f"--window sets the Hard-ALiBi window; it has no effect with --positions {cfg.positions}")
        if runtime["threads"] < 1:
            raise RunError("--threads must be at least 1")
        if str(runtime["device"]).startswith("cuda") and not torch.cuda.is_available():
            raise RunError(f"device {runtime['device']}, but CUDA is not available")
        world = from_environment()
        world.check_batch(stored_run(out)["config"]["batch_size"] if args.resume else cfg.batch_size)
        world.start(runtime["device"])
        if not args.resume and world.is_main:
            prepare_run_directory(out, args.force)
        world.barrier()
        torch.set_num_threads(runtime["threads"])
        try:
            return train(cfg, out, resume=args.resume, stop_after=args.stop_after, device=runtime["device"],
                         progress=not args.no_progress, world=world)
        finally:
            world.stop()
    except (DataError, RunError, ValueError) as exc:
        return fail(PROG, str(exc))
    except OSError as exc:
        return fail(PROG, f"cannot write the run in {out}: {exc.strerror or exc}"
                          + (f" ({exc.filename})" if exc.filename else ""))


def prepare_run_directory(out: Path, force: bool) -> None:
    """Make ``out`` an empty, writable directory for a new run: refuse an existing run without
    ``force``, anything that is not a run directory always, and a place that cannot be written."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        abandoned = out.is_dir() and (out / "run.json").is_file() and latest_checkpoint(out) is None
        if not force and not abandoned:  # a run that failed before its first checkpoint holds nothing to keep
            raise RunError(f"{out} already exists; use --resume to continue it or --force to replace it")
        if not out.is_dir() or not ((out / "run.json").is_file() or (out / "latest.json").is_file()):
            raise RunError(f"{out} exists and is not a lengthgen run directory; refusing to delete it even with --force")
        shutil.rmtree(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise RunError(f"--out {out} cannot be written: {exc.strerror or exc}") from None


if __name__ == "__main__":
    raise SystemExit(main())
