"""Run under torchrun by tests/test_train_distributed.py: the gradient DDP gives each rank equals the
one-process gradient of the whole batch (computed on every rank from a copy of the same model), with
the attention-entropy penalty on (``ENTROPY_WEIGHT``), so that its share per rank is checked too.

Prints one line ``max relative difference X`` on rank 0 and exits 1 when X > 1e-5.
"""
from __future__ import annotations

import copy
import gc
import sys

import numpy as np
import torch

from lengthgen import task_batches
from lengthgen.distributed import from_environment
from lengthgen.train import TrainConfig, build_model, masked_loss

ENTROPY_WEIGHT = 0.1


def ddp_gradient(model: torch.nn.Module, world, tokens, pos, mask) -> None:
    """Backpropagate this rank's share through DDP around ``model``; the wrapper (and DDP's reducer,
    which holds the process group) is gone when this returns, as in lengthgen.train, so that nothing
    of DDP outlives the group: a reducer destroyed at interpreter exit, after the group, aborted a
    rank under load ("terminate called without an active exception")."""
    net = world.wrap(model)
    shard = [world.shard(t) for t in (tokens, pos, mask)]
    loss, *_ = masked_loss(net, *shard, world, ENTROPY_WEIGHT)
    loss.backward()


def main() -> int:
    torch.set_num_threads(1)
    world = from_environment()
    world.start("cpu")
    cfg = TrainConfig(d_model=32, d_mlp=64, batch_size=24, train_digits="1-4", max_digits=12, pack=0.5)
    model = build_model(cfg)
    reference = copy.deepcopy(model)
    batch = task_batches.training_batch(cfg.task, np.random.default_rng(7), cfg.batch_size, 1, 4, cfg.positions,
                                        model.cfg.n_ctx, cfg.pack)
    tokens, pos, mask = batch.to_torch()
    # rows of different lengths, so that the ranks' masked-token counts differ
    assert len(set(mask[: cfg.batch_size // 2].sum(1).tolist())) > 1

    loss, *_ = masked_loss(reference, tokens, pos, mask, entropy_weight=ENTROPY_WEIGHT)
    loss.backward()
    ddp_gradient(model, world, tokens, pos, mask)
    gc.collect()
    worst = 0.0
    # a gradient that is zero in exact arithmetic (b_K: a key bias shifts every score of a query
    # alike) is float noise on both sides, so each parameter's scale is at least 1e-4 of the largest
    largest = max(q.grad.abs().max().item() for q in reference.parameters())
    for p, q in zip(model.parameters(), reference.parameters()):
        scale = max(q.grad.abs().max().item(), 1e-4 * largest)
        worst = max(worst, (p.grad - q.grad).abs().max().item() / scale)
    world.barrier()  # every rank is done before any tears the group down
    world.stop()
    if world.is_main:
        print(f"max relative difference {worst:.3g}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
