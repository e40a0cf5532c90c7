"""Smallest attention sharpness M for which the multiplication certificate holds (docs/multiplication.md,
"Certificate").

Only W_Q and W_K depend on M (docs/multiplication.md, "Heads"), so the model for another M is the
given one with those rebuilt by :func:`constructions.multiplication.heads.weight_entries` — the numbers
``build_model(..., M=M')`` would hold. The search is the addition certificate's; monotonicity in M only
steers it: the returned M is one whose certificate *passed*, the failing M one whose certificate
failed.
"""
from __future__ import annotations

import copy

import torch

from lengthgen.proof.sharpness import SharpnessSearch, bracket_smallest
from lengthgen.model import Transformer

from ..heads import weight_entries
from ..model import TASK
from .margins import certify


def with_sharpness(model: Transformer, M: float) -> Transformer:
    """A copy of the construction ``model`` whose W_Q, W_K are those of sharpness ``M``."""
    new = copy.deepcopy(model)
    entries = weight_entries(model.cfg.d_model, M, TASK.vocab)
    dtype = model.cfg.torch_dtype
    with torch.no_grad():
        for name, builder in entries.items():
            parts = name.split(".")
            if len(parts) == 5 and parts[2] == "attn" and parts[3] in ("W_Q", "W_K"):
                getattr(new.blocks[int(parts[1])].attn, parts[3])[int(parts[4])].copy_(builder.tensor(dtype))
    return new


def smallest_sharpness(model: Transformer, n: int, M_start: float, rel_tol: float = 5e-3, cache: dict | None = None,
                       max_steps: int = 30) -> SharpnessSearch:
    """The smallest certified M for ``n``-digit inputs, bracketed as [M_fail, M] with M certified: the
    addition certificate's search (:func:`constructions.addition.certify.search.bracket_smallest`)
    over this module's certificate. ``M_start`` is the model's M."""
    cache = {} if cache is None else cache
    return bracket_smallest(lambda M: certify(with_sharpness(model, M), n, cache=cache), M_start,
                            rel_tol=rel_tol, max_steps=max_steps)
