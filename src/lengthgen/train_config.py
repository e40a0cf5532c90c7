"""The settings of a training run (stored as ``run.json``), the model they build, the learning-rate
schedule and the optimizer (docs/training.md, "Recipes")."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import task_batches
from .data import DataError, SCHEMES, check_pack_fits, is_coupled, parse_digit_range, uses_positions
from .init import init_weights_, sinusoidal_table
from .model import Annotations, Transformer, TransformerConfig
from .resources import require_memory
from .runs import checkpoint_notes
from .tasks import get_task

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
    attn_log_length: bool = False  # scores times ln(number of keys the query sees)
    val_digits: str | None = None  # e.g. "6-15": exact match on these lengths logged every val_every steps
    val_every: int = 250
    val_samples: int = 200
    keep_best: bool = False  # keep the weights with the lowest validation loss at the longest val length
    pack: float = 0.0  # fraction of coupled training rows holding two additions (data.packed_training_batch)
    pack_problems: int = 2  # most additions in one packed row (3 or more: lengthgen.packing.packed_rows)
    attn_entropy: float = 0.0  # weight of the answer queries' mean attention entropy in the loss
    attn_entropy_start: float = 0.5  # fraction of the steps before the entropy weight starts to rise

    def validate(self) -> None:
        get_task(self.task)
        if self.positions not in SCHEMES:
            raise DataError(f"unknown position scheme {self.positions!r}; choose one of {', '.join(SCHEMES)}")
        lo, hi = parse_digit_range(self.train_digits)
        task_batches.check_task_scheme(self.task, self.positions)
        if uses_positions(self.positions) and hi > self.max_digits:
            raise DataError(f"--train-digits {self.train_digits} exceeds --max-digits {self.max_digits}")
        if self.pack and self.task not in ("addition", *task_batches.PACKABLE):
            raise DataError(f"--pack is defined for addition, copy and reverse; --task {self.task} cannot be packed")
        if self.pack_problems > 2 and self.task != "addition":
            raise DataError(f"--pack-problems above 2 is defined for addition only; --task {self.task} packs two")
        for name in ("layers", "heads", "d_model", "steps", "batch_size", "checkpoint_every", "log_every", "max_digits"):
            if getattr(self, name) < 1:
                raise DataError(f"--{name.replace('_', '-')} must be at least 1")
        if not (math.isfinite(self.lr) and self.lr > 0) or not 0 <= self.min_lr_ratio <= 1 or not 0 <= self.warmup < 1:
            raise DataError("need a finite lr > 0, 0 <= min-lr-ratio <= 1 and 0 <= warmup < 1")
        if not (math.isfinite(self.grad_clip) and self.grad_clip > 0):
            raise DataError(f"--grad-clip is the largest gradient norm kept: a number > 0, got {self.grad_clip}")
        if self.weight_decay < 0 or not math.isfinite(self.weight_decay):
            raise DataError(f"--weight-decay must be a finite number >= 0, got {self.weight_decay}")
        if self.keep_best and not self.val_digits:
            raise DataError("--keep-best needs --val-digits")
        if self.val_digits is not None:
            vlo, vhi = parse_digit_range(self.val_digits)
            if uses_positions(self.positions) and vhi > self.max_digits:
                raise DataError(f"--val-digits {self.val_digits} exceeds --max-digits {self.max_digits}")
        if not (math.isfinite(self.attn_entropy) and self.attn_entropy >= 0):
            raise DataError(f"--attn-entropy is a weight: a finite number >= 0, got {self.attn_entropy}")
        if not 0 <= self.attn_entropy_start < 1:
            raise DataError(f"--attn-entropy-start is a fraction of the steps: 0 <= F < 1, got {self.attn_entropy_start}")
        if self.pos_init not in POS_INITS:
            raise DataError(f"unknown --pos-init {self.pos_init!r}; choose one of {', '.join(POS_INITS)}")
        if not 0 <= self.pack <= 1:
            raise DataError("--pack is a fraction of the training rows: 0 <= pack <= 1")
        if self.pack and not is_coupled(self.positions):
            raise DataError("--pack needs --positions coupled or coupled-sink (the problems get disjoint coupled ID ranges)")
        if self.pack_problems < 2:
            raise DataError(f"--pack-problems is the most additions in one packed row: at least 2, got {self.pack_problems}")
        if self.pack_problems > 2 and not self.pack:
            raise DataError("--pack-problems needs --pack F > 0 (the fraction of rows that are packed)")
        if self.pack and self.task == "addition":
            check_pack_fits(hi, task_batches.table_size(self.task, self.positions, self.max_digits), self.pack_problems)
        elif self.pack:
            task_batches.check_sequence_pack_fits(hi, task_batches.table_size(self.task, self.positions, self.max_digits))
        if self.attn_log_length and self.positions == "hard-alibi":
            raise DataError("--attn-log-length counts every earlier key; it does not combine with --positions hard-alibi")
        if self.positions == "hard-alibi" and self.window < 1:
            raise DataError("--window must be at least 1")

    def check_memory(self) -> None:
        """Refuse (:class:`~lengthgen.resources.ResourceError`) a run whose model, gradients and AdamW
        state (4 copies of the parameters) and one batch's activations exceed the free memory."""
        mc = self.model_config()
        _, hi = parse_digit_range(self.train_digits)
        seq = task_batches.sequence_length(self.task, hi)
        need = 4 * mc.parameter_count() * mc.itemsize + 3 * mc.activation_bytes(self.batch_size, seq) * self.layers
        require_memory(need, f"training a {self.layers}-layer model of d_model {self.d_model} "
                             f"({mc.parameter_count():.3g} parameters, batch {self.batch_size})")

    def model_config(self) -> TransformerConfig:
        task = get_task(self.task)
        windows = None
        if self.positions == "hard-alibi":
            windows = [self.window if h < max(1, self.heads // 2) else None for h in range(self.heads)]
        return TransformerConfig(
            d_vocab=len(task.vocab), d_model=self.d_model, n_layers=self.layers, n_heads=self.heads,
            d_head=self.d_head or self.d_model // self.heads, d_mlp=self.d_mlp or 4 * self.d_model,
            n_ctx=task_batches.table_size(self.task, self.positions, self.max_digits),
            positional="learned" if uses_positions(self.positions) else "none",
            act_fn=self.act_fn, normalization=self.normalization, attn_windows=windows, attn_scale=self.attn_scale,
            attn_log_length=self.attn_log_length,
        )


def build_model(cfg: TrainConfig) -> Transformer:
    """An untrained model for ``cfg`` (weights from :func:`init_weights_`), with ``lengthgen.*``
    notes recording the task and position scheme so the weight file is self-describing."""
    notes = checkpoint_notes(task=cfg.task, positions=cfg.positions, train_digits=cfg.train_digits)
    title = f"{cfg.task}, {cfg.positions} positions, {cfg.layers} layer(s) x {cfg.heads} heads, d={cfg.d_model}"
    model = Transformer(cfg.model_config(), Annotations(vocab=list(get_task(cfg.task).vocab), notes=notes, title=title))
    init_weights_(model, cfg.seed, embed_std=cfg.embed_std)
    if cfg.pos_init == "sinusoidal" and uses_positions(cfg.positions):
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


def entropy_weight_at(step: int, cfg: TrainConfig) -> float:
    """The attention-entropy weight at ``step``: 0 until ``attn_entropy_start``·steps (the heads first
    learn what to read; a penalty from step 0 makes them commit to arbitrary keys and stalls
    training), then rising linearly to ``attn_entropy`` halfway between that step and the last, and
    constant after."""
    begin = cfg.attn_entropy_start * cfg.steps
    full = (begin + cfg.steps) / 2
    return cfg.attn_entropy * min(1.0, max(0.0, (step - begin) / max(full - begin, 1.0)))


def make_optimizer(model: Transformer, cfg: TrainConfig) -> torch.optim.Optimizer:
    pos = [p for n, p in model.named_parameters() if n == "pos_embed.W_pos"]
    rest = [p for n, p in model.named_parameters() if n != "pos_embed.W_pos"]
    groups = [{"params": rest, "lr_scale": 1.0}] + ([{"params": pos, "lr_scale": cfg.pos_lr_scale}] if pos else [])
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay, eps=1e-8)
