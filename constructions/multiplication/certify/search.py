"""Smallest attention sharpness M for which the multiplication certificate holds (docs/multiplication.md,
"Certificate").

Only W_Q and W_K depend on M (docs/multiplication.md, "Heads"), so the model for another M is the
given one with those rebuilt by :func:`constructions.multiplication.heads.weight_entries` — the numbers
``build_model(..., M=M')`` would hold. The search halves a bracket [fails, passes]; monotonicity in M
only steers it: the returned M is one whose certificate *passed*, the failing M one whose certificate
failed.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from lengthgen.model import Transformer

from ..heads import weight_entries
from ..model import TASK
from .margins import Certificate, certify


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


@dataclass
class SharpnessSearch:
    """The certificate passes at ``M`` and fails at ``M_fail`` (``M − M_fail ≤ rel_tol·M``), or ``M`` is
    None when none of the probes passed."""

    M: float | None
    M_fail: float | None
    fail_reason: str
    steps: int
    rel_tol: float


def smallest_sharpness(model: Transformer, n: int, M_start: float, rel_tol: float = 5e-3, cache: dict | None = None,
                       max_steps: int = 30) -> SharpnessSearch:
    """Bisection on M between a failing and a passing certificate, starting from the model's M."""
    cache = {} if cache is None else cache
    steps = 0

    def run(M: float) -> Certificate:
        nonlocal steps
        steps += 1
        return certify(with_sharpness(model, M), n, cache=cache)

    hi, c = float(M_start), run(float(M_start))
    while not c.passed:
        if steps >= 4:
            return SharpnessSearch(None, hi, c.reason, steps, rel_tol)
        hi *= 2
        c = run(hi)
    lo, reason = None, ""
    probe = hi / 2
    while lo is None and steps < max_steps:
        c = run(probe)
        if c.passed:
            hi, probe = probe, probe / 2
        else:
            lo, reason = probe, c.reason
    while lo is not None and hi - lo > rel_tol * hi and steps < max_steps:
        mid = 0.5 * (lo + hi)
        c = run(mid)
        if c.passed:
            hi = mid
        else:
            lo, reason = mid, c.reason
    return SharpnessSearch(hi, lo, reason, steps, rel_tol)
