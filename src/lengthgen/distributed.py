"""Data-parallel training under ``torchrun`` (DistributedDataParallel), exactly equivalent to one process.

    torchrun --nproc-per-node 4 -m lengthgen.train --task addition ... --batch-size 1000 --out runs/NAME

``torchrun`` starts one process per rank and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the
rendezvous variables; :func:`from_environment` reads them (a plain ``python -m lengthgen.train`` is a
world of one, and nothing here changes it). Backend: NCCL on CUDA (each rank on ``cuda:LOCAL_RANK``),
gloo on the CPU.

How the world stays equal to one process (docs/training.md, "Several processes"):

- Every rank draws the *whole* batch of ``--batch-size`` rows from the same generator state (the run's
  data seed), and keeps its own contiguous share of ``batch_size / world_size`` rows
  (:meth:`World.shard`). So the data, and the generator state stored in a checkpoint, are those of
  the one-process run, and a run can be resumed with another number of processes.
- The loss of one process is the mean cross-entropy over all masked tokens of the batch,
  Σ_tokens ce / count. A rank computes the sum over its own rows and divides by the *global* count
  (one all-reduce of four numbers, which also gives the logged loss, token accuracy and exact
  match), times ``world_size``: DDP averages the ranks' gradients, so the average is the gradient of
  Σ ce / count, the one-process gradient, up to the order of floating-point sums.
- Gradient clipping then sees the same averaged gradient on every rank, and AdamW makes the same step.
- Rank 0 alone writes checkpoints, validates and prints; the others wait at a barrier. A stop
  request (Ctrl-C / SIGTERM) on any rank stops every rank after the same step (:meth:`World.any`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class World:
    """The ranks of this training run; ``size == 1`` for an ordinary single process."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def device(self, device: str) -> str:
        """The device of this rank: ``cuda`` becomes ``cuda:LOCAL_RANK`` in a world of several ranks."""
        if self.distributed and str(device) == "cuda":
            return f"cuda:{self.local_rank}"
        return str(device)

    def start(self, device: str) -> None:
        """Join the process group (NCCL on CUDA, gloo on the CPU); nothing for one process."""
        if not self.distributed or torch.distributed.is_initialized():
            return
        if str(device).startswith("cuda"):
            torch.cuda.set_device(torch.device(self.device(device)))
        backend = "nccl" if str(device).startswith("cuda") else "gloo"
        torch.distributed.init_process_group(backend, rank=self.rank, world_size=self.size)

    def stop(self) -> None:
        if self.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def check_batch(self, batch_size: int) -> None:
        if batch_size % self.size:
            raise ValueError(f"--batch-size {batch_size} is not divisible by the {self.size} processes "
                             f"of this torchrun; use a multiple of {self.size}")

    def shard(self, rows: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """This rank's contiguous share of the batch rows (all of them for one process)."""
        if not self.distributed:
            return rows
        share = rows.shape[0] // self.size
        return rows[self.rank * share:(self.rank + 1) * share]

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module to call for training steps: DDP around ``model`` in a world of several ranks."""
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.device(next(model.parameters()).device)] if next(model.parameters()).is_cuda else None
        return DistributedDataParallel(model, device_ids=ids)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over the ranks (the tensor itself for one process)."""
        if self.distributed:
            values = values.clone()
            torch.distributed.all_reduce(values)
        return values

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank."""
        if not self.distributed:
            return flag
        return bool(self.sum(torch.tensor([float(flag)], device=self._reduce_device())).item() > 0)

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    def _reduce_device(self) -> torch.device:
        backend = torch.distributed.get_backend()
        return torch.device(f"cuda:{self.local_rank}") if backend == "nccl" else torch.device("cpu")


def from_environment() -> World:
    """The world ``torchrun`` describes in ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (one process without them)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    return World(rank=int(os.environ["RANK"]), size=size, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
