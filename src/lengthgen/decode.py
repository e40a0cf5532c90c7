"""Task-agnostic decoding: greedy generation with a KV cache, and teacher-forced argmax.

These loops would serve any weights (AdderBoard rule: "the autoregressive generation loop lives
outside the model"). The position IDs of generated tokens are *input data* supplied by the caller
(under position coupling they are known in advance from the prompt, Cho et al. 2024 §3), never
computed here.
"""
from __future__ import annotations

import sys
from typing import Sequence

import torch

from .model import KVCache, Transformer


def _as_tensor(x: Sequence[int] | torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    if x is None:
        return None
    return torch.as_tensor(x, dtype=torch.long, device=device).reshape(1, -1)


@torch.inference_mode()
def greedy_generate(
    model: Transformer,
    prompt: Sequence[int] | torch.Tensor,
    prompt_pos_ids: Sequence[int] | torch.Tensor | None = None,
    new_pos_ids: Sequence[int] | torch.Tensor | None = None,
    max_new_tokens: int | None = None,
    stop_token: int | None = None,
    progress: bool = False,
) -> list[int]:
    """Greedy decoding: argmax of the last position's logits, appended, repeated.

    ``new_pos_ids[i]`` is the position ID given to the i-th generated token when it is fed back
    (default: consecutive IDs after the prompt). Stops after ``stop_token`` (included in the output)
    or after ``max_new_tokens`` (default ``len(new_pos_ids)``).
    """
    device = model.device
    prompt_t = _as_tensor(prompt, device)
    prompt_pos = _as_tensor(prompt_pos_ids, device)
    new_pos = _as_tensor(new_pos_ids, device)
    if max_new_tokens is None:
        if new_pos is None:
            raise ValueError("give max_new_tokens or new_pos_ids")
        max_new_tokens = new_pos.shape[1] + 1
    if new_pos is None:
        start = prompt_t.shape[1]
        new_pos = torch.arange(start, start + max_new_tokens, device=device).reshape(1, -1)
    cache = KVCache()
    logits = model(prompt_t, prompt_pos, cache=cache, logits_from=prompt_t.shape[1] - 1)
    out: list[int] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=max_new_tokens, desc="greedy decoding", unit="tok", file=sys.stderr, leave=False)
    try:
        for step in range(max_new_tokens):
            token = int(logits[0, -1].argmax())
            out.append(token)
            if bar is not None:
                bar.update(1)
            if token == stop_token or step + 1 == max_new_tokens:
                break
            if step >= new_pos.shape[1]:
                raise ValueError(f"no position ID given for generated token {step + 1}")
            logits = model(
                torch.tensor([[token]], device=device), new_pos[:, step : step + 1], cache=cache
            )
    finally:
        if bar is not None:
            bar.close()
    return out


@torch.inference_mode()
def teacher_forced_argmax(
    model: Transformer,
    tokens: Sequence[int] | torch.Tensor,
    pos_ids: Sequence[int] | torch.Tensor | None,
    first: int,
) -> torch.Tensor:
    """Argmax predictions of positions ``first .. T-2`` (each predicts the next token) in one
    forward pass. If every prediction equals ``tokens[first+1:]``, greedy decoding from the prompt
    ``tokens[:first+1]`` reproduces that continuation exactly (induction over steps)."""
    device = model.device
    toks = _as_tensor(tokens, device)
    pos = _as_tensor(pos_ids, device)
    logits = model(toks[:, :-1], None if pos is None else pos[:, :-1], logits_from=first)
    return logits[0].argmax(dim=-1)
