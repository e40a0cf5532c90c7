"""Smallest attention sharpness M for which the Theorem 5.1 certificate holds (docs/certificate.md, "Searches").

Only the query and key maps depend on M (√M·POS and √(MP)·sink, docs/theorem-5-1.md), so the
model for another M is the given one with W_Q and W_K rebuilt by
:func:`constructions.addition.model.weight_entries` — the same numbers ``build_model(..., M=M')`` would
hold (``tests/test_certify_search.py`` checks this). The search (:func:`lengthgen.proof.sharpness.bracket_smallest`)
assumes the certificate is monotone
in M between the bracket ends (true for the leak, which falls like e^{−2M}; the float term grows
with M·P, so at very large M it is not); the returned M is one that was *certified*, not
interpolated.
"""
from __future__ import annotations

import copy

import torch

from lengthgen.model import Transformer
from lengthgen.proof.sharpness import SharpnessSearch, bracket_smallest

from ..model import START_ID, weight_entries
from .margins import certify


def with_sharpness(model: Transformer, M: float) -> Transformer:
    """A copy of the construction ``model`` whose W_Q, W_K are those of sharpness ``M``."""
    new = copy.deepcopy(model)
    W = weight_entries(model.cfg.d_model, M, START_ID + 2)
    dtype = model.cfg.torch_dtype
    with torch.no_grad():
        for h in range(model.cfg.n_heads):
            new.blocks[0].attn.W_Q[h].copy_(W[f"W_Q{h}"].tensor(dtype))
            new.blocks[0].attn.W_K[h].copy_(W[f"W_K{h}"].tensor(dtype))
    return new


def smallest_sharpness(model: Transformer, n: int, M_start: float, dtype: str | None = None,
                       rel_tol: float = 5e-3, cache: dict | None = None, max_steps: int = 24) -> SharpnessSearch:
    """Bracket the smallest certified M for ``n``-digit inputs: [M_fail, M] with M certified
    (:func:`bracket_smallest` over this module's certificate). ``M_start`` is the model's M."""
    cache = {} if cache is None else cache
    return bracket_smallest(lambda M: certify(with_sharpness(model, M), n, dtype, cache=cache), M_start,
                            rel_tol=rel_tol, max_steps=max_steps)
