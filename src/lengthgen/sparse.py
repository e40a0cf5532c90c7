"""Sparse kernels for weights that are mostly zeros, for inference (:func:`sparse_kernels`).

A compiled RASP program (``rasp.weights``) is an ordinary :class:`~lengthgen.model.Transformer`
whose matrices are almost all zeros: a lookup table's hidden unit reads and writes a few named
residual dimensions, and the uniform layer layout pads every layer to the widest one with heads
and hidden units that are zero. A dense matrix product pays for every one of those zeros. Inside
``with sparse_kernels(model):`` the products with the attention projections (``W_Q``, ``W_K``,
``W_V``, ``W_O``) and the MLP (``W_in``, ``W_out``) use compressed-sparse-row copies of each matrix
whose share of non-zeros is at most ``max_density``; matrices denser than that stay dense.

What changes is only the order of the sums: each output entry is the sum of the same non-zero
products, so results are bit-identical wherever the sums are exact (integer-valued weights and
activations below 2^53, as in the compiled programs with integer codes) and otherwise agree to
rounding. Zero terms are skipped, so an infinite or NaN activation times a zero weight, which a
dense product turns into NaN, contributes nothing here.

The copies are taken on entry and stand for the weights as they were then: a weight changed in
place inside the context raises :class:`StaleSparseWeightsError` at the next product (PyTorch's
version counter sees every in-place edit except one made through ``.data``, which it does not
count: edit weights outside the context). Where
gradients are enabled (training) the dense products are used, so autograd sees the parameters.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch import nn

__all__ = ["MAX_DENSITY", "StaleSparseWeightsError", "sparse_kernels", "sparse_matrix", "sparse_matmul"]

#: matrices with at most this share of non-zeros get a CSR copy (below it CSR products win on CPU)
MAX_DENSITY = 0.25


class StaleSparseWeightsError(RuntimeError):
    """A weight was changed after :func:`sparse_kernels` copied it."""


#: module attribute holding ``{name: (csr of the transposed 2-D matrix, parameter version)}``
_ATTR = "_sparse_csr"


def sparse_matrix(module: nn.Module, name: str) -> torch.Tensor | None:
    """The CSR copy of ``module``'s matrix ``name`` (transposed: ``[out, in]``), or ``None`` where
    the dense product is to be used (no copy, or gradients enabled)."""
    entry = getattr(module, _ATTR, {}).get(name)
    if entry is None or torch.is_grad_enabled():
        return None
    csr, version = entry
    if getattr(module, name)._version != version:
        raise StaleSparseWeightsError(
            f"{name} was changed inside sparse_kernels(); leave the context before editing weights")
    return csr


def sparse_matmul(x: torch.Tensor, csr: torch.Tensor) -> torch.Tensor:
    """``x [..., in] @ W`` where ``csr`` is ``W``'s transpose in CSR form (``[out, in]``)."""
    flat = x.reshape(-1, x.shape[-1])
    return (csr @ flat.t()).t().reshape(*x.shape[:-1], csr.shape[0])


@contextmanager
def sparse_kernels(model: nn.Module, max_density: float = MAX_DENSITY) -> Iterator[dict[str, int]]:
    """Run ``model``'s matrix products on CSR copies of its sparse matrices (module docstring).

    Modules that offer ``matrices_2d() -> {name: [in, out] matrix}`` (the model's attention and
    MLP) are converted. Yields ``{"sparse": k, "dense": m}``, how many matrices got a copy and how
    many stayed dense. Contexts nest; each restores what was there before it."""
    if not 0.0 <= max_density <= 1.0:
        raise ValueError(f"max_density must be in [0, 1], got {max_density}")
    saved: list[tuple[nn.Module, dict]] = []
    counts = {"sparse": 0, "dense": 0}
    try:
        for module in model.modules():
            matrices: Callable[[], dict[str, torch.Tensor]] | None = getattr(module, "matrices_2d", None)
            if matrices is None:
                continue
            copies = {}
            with torch.no_grad(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                for name, W in matrices().items():
                    if W.numel() and torch.count_nonzero(W).item() <= max_density * W.numel():
                        copies[name] = (W.t().contiguous().to_sparse_csr(), getattr(module, name)._version)
                        counts["sparse"] += 1
                    else:
                        counts["dense"] += 1
            saved.append((module, getattr(module, _ATTR, {})))
            setattr(module, _ATTR, copies)
        yield counts
    finally:
        for module, before in reversed(saved):
            setattr(module, _ATTR, before)
