"""The training loss of ``lengthgen.train``: cross-entropy on the scored answer tokens, plus the
attention-entropy penalty of ``--attn-entropy`` (docs/training.md, "Sharp attention for proofs").

For a query with masked scores s_j (``-inf`` where it may not look) the attention row is
p_j = exp(s_j − L), L = logsumexp_j s_j, and its Shannon entropy in nats is

    H = −Σ_j p_j·log p_j = L − Σ_j p_j·s_j,

summed over the visible keys only. The second form is what is computed: it never takes log 0, so
keys a query cannot see (p_j = 0 exactly) give neither a NaN value nor a NaN gradient, which
``−p·log p`` at p = 0 would (its derivative log p + 1 is −inf there).

Why a penalty on H: the trained-model certificate (docs/certificate.md, "Trained models") treats
every digit outside a query's window pessimally, and its bound on their share λ⁺ sums e^(largest
score) over all of them. A row of low entropy puts its mass on few keys, so the rest of the
scores sit far below the winners and λ⁺ stays small at lengths never trained on.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch
import torch.nn.functional as F

from .decode import decided_argmax
from .distributed import World
from .hooks import HookedModule

SCORES_HOOK = "attn.hook_attn_scores"


def row_entropy(scores: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of ``softmax(scores)`` along the last axis, ``-inf`` entries excluded:
    ``L − Σ p·s`` with L the log-sum-exp (module docstring). Shape: ``scores.shape[:-1]``."""
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    p = torch.exp(scores - lse)
    finite = torch.where(torch.isfinite(scores), scores, torch.zeros_like(scores))
    return lse.squeeze(-1) - (p * finite).sum(-1)


@contextmanager
def collect_scores(model: HookedModule) -> Iterator[list[torch.Tensor]]:
    """Within the block, every forward pass appends each layer's masked scores
    ``[batch, head, query, key]`` (with their gradient) to the yielded list."""
    kept: list[torch.Tensor] = []

    def keep(scores: torch.Tensor, hook: object) -> None:
        kept.append(scores)

    with model.hooks(fwd_hooks=[(lambda name: name.endswith(SCORES_HOOK), keep)]):
        yield kept


def entropy_sum(scores: list[torch.Tensor], query_mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(Σ of the row entropies over every layer, head and query where ``query_mask[b, q]`` is True,
    the number of rows summed). ``query_mask`` is ``[batch, query]``, aligned with the queries."""
    total = scores[0].new_zeros(())
    rows = 0
    for s in scores:
        h = row_entropy(s)  # [batch, head, query]
        m = query_mask[:, None, :].expand_as(h)
        total = total + h[m].sum()
        rows += int(m.sum())
    return total, rows


def masked_loss(model: torch.nn.Module, tokens: torch.Tensor, pos: torch.Tensor | None, mask: torch.Tensor,
                world: World = World(), entropy_weight: float | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cross-entropy over the masked next-token predictions: (the loss to differentiate, the loss of
    the whole batch, token accuracy, exact match, mean attention entropy). One process: the mean over
    the batch's masked tokens. Several (``world``, :mod:`lengthgen.distributed`): this rank's share of
    that mean, scaled so that DDP's average over the ranks is the one-process gradient; the other
    values are the whole batch's, summed over the ranks.

    ``entropy_weight`` β (a number, 0 included) measures the mean entropy (nats) of the attention
    rows of the queries that predict a scored token, over every layer and head (module docstring),
    reports it and adds β times it to the loss to differentiate; the loss of the batch stays the
    cross-entropy alone. ``None``: not measured (reported as 0)."""
    hooked = getattr(model, "module", model)  # DDP wraps the model; the hook points are on it
    with collect_scores(hooked) if entropy_weight is not None else nullcontext([]) as scores:
        logits = model(tokens[:, :-1], None if pos is None else pos[:, :-1])
    ent_sum, ent_rows = entropy_sum(scores, mask) if scores else (logits.new_zeros(()), 0)
    targets = tokens[:, 1:]
    with torch.no_grad():
        hit = decided_argmax(logits) == targets  # the project's one rule for "right" (lengthgen.decode)
        right = hit | ~mask
    if not world.distributed:
        loss = F.cross_entropy(logits[mask], targets[mask])
        tok_acc = (hit & mask).sum() / mask.sum()
        entropy = ent_sum / max(ent_rows, 1)
        return (loss + (entropy_weight or 0.0) * entropy, loss.detach(), tok_acc, right.all(dim=1).float().mean(),
                entropy.detach())
    ce_sum = F.cross_entropy(logits[mask], targets[mask], reduction="sum")
    counts = torch.stack([ce_sum.detach().double(), mask.sum().double(), (hit & mask).sum().double(),
                          right.all(dim=1).sum().double(), torch.tensor(float(len(tokens)), device=tokens.device),
                          ent_sum.detach().double(), torch.tensor(float(ent_rows), device=tokens.device)])
    total, n_masked, n_hit, n_right, rows, ent_total, ent_count = world.sum(counts).unbind()
    loss = ce_sum * world.size / n_masked.to(ce_sum.dtype)
    if entropy_weight:
        loss = loss + entropy_weight * ent_sum * world.size / ent_count.clamp(min=1).to(ent_sum.dtype)
    return (loss, (total / n_masked).float(), (n_hit / n_masked).float(), (n_right / rows).float(),
            (ent_total / ent_count.clamp(min=1)).float())
