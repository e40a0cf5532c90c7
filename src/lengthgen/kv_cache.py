"""Keys and values of earlier positions for greedy decoding (:class:`KVCache`)."""
from __future__ import annotations

import torch

__all__ = ["KVCache"]


class KVCache:
    """Keys and values of every layer for the positions seen so far (greedy decoding).

    Buffers grow by doubling, so appending one token costs O(1) amortized copies instead of
    re-concatenating the whole cache (which would make decoding N tokens cost O(N²) copies)."""

    def __init__(self) -> None:
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        self._len: list[int] = []

    @property
    def length(self) -> int:
        return self._len[0] if self._len else 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k``/``v`` ``[B, H, T, E]`` after the layer's earlier entries; return all of them."""
        if layer == len(self._k):
            cap = max(16, 2 * k.shape[2])
            self._k.append(k.new_empty(*k.shape[:2], cap, k.shape[3]))
            self._v.append(v.new_empty(*v.shape[:2], cap, v.shape[3]))
            self._len.append(0)
        old, new = self._len[layer], self._len[layer] + k.shape[2]
        if new > self._k[layer].shape[2]:
            for buf in (self._k, self._v):
                grown = buf[layer].new_empty(*buf[layer].shape[:2], 2 * new, buf[layer].shape[3])
                grown[:, :, :old] = buf[layer][:, :, :old]
                buf[layer] = grown
        self._k[layer][:, :, old:new] = k
        self._v[layer][:, :, old:new] = v
        self._len[layer] = new
        return self._k[layer][:, :, :new], self._v[layer][:, :, :new]
