"""Smallest attention sharpness M at which the copy/reverse certificate holds (docs/copying.md).

Only W_Q and W_K depend on M (√M·POS_NEXT ⊕ √(MP)·ONE and √M·POS ⊕ √(MP)·IS_BOS), so the model
for another M is the given one with those two matrices rebuilt by
:func:`constructions.copying.model.weight_entries`, the numbers ``build_model(..., M=M')`` holds
(``tests/test_copying_certify.py`` checks this). The bracketing is the addition certificate's
(:func:`constructions.addition.certify.search.bracket_smallest`): the returned M was certified,
the failing one failed; monotonicity in M only steers the search.
"""
from __future__ import annotations

import copy

import torch

from lengthgen.proof.sharpness import SharpnessSearch, bracket_smallest
from lengthgen.model import Transformer
from lengthgen.tasks.copying import CopyTask

from ..model import _task, weight_entries
from .margins import certify


def with_sharpness(model: Transformer, task: str | CopyTask, M: float) -> Transformer:
    """A copy of the construction ``model`` whose W_Q, W_K are those of sharpness ``M``."""
    new = copy.deepcopy(model)
    entries = weight_entries(_task(task), model.cfg.d_model, M)
    with torch.no_grad():
        for name in ("W_Q", "W_K"):
            getattr(new.blocks[0].attn, name)[0].copy_(entries[f"blocks.0.attn.{name}"].tensor(model.cfg.torch_dtype))
    return new


def smallest_sharpness(model: Transformer, task: str | CopyTask, n: int, M_start: float, dtype: str | None = None,
                       rel_tol: float = 5e-3, cache: dict | None = None) -> SharpnessSearch:
    """Bracket the smallest certified M for ``n``-digit inputs: [M_fail, M] with M certified."""
    cache = {} if cache is None else cache
    return bracket_smallest(lambda M: certify(with_sharpness(model, task, M), task, n, dtype, cache=cache), M_start,
                            rel_tol=rel_tol)
