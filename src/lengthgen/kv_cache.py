"""Keys and values of earlier positions for greedy decoding (:class:`KVCache`)."""
from __future__ import annotations

import torch

__all__ = ["KVCache", "StaticKVCache"]


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


class StaticKVCache:
    """Keys and values in buffers of a fixed ``capacity``, for decoding steps whose tensor shapes
    never change (so a step can be recorded once as a CUDA graph and replayed).

    It starts as a copy of a filled :class:`KVCache` (the prompt's keys and values). Each step
    appends one position per layer at index :attr:`filled`, which lives on the device (an int64
    scalar), so neither writing nor advancing it needs the host to read a value. Attention then
    runs over all ``capacity`` keys with :meth:`visible` masking the ones not written yet.

    The buffers are zero beyond the filled part: a masked key gets weight exactly 0, and 0 times a
    zero value is 0, whereas 0 times uninitialised memory could be NaN."""

    def __init__(self, cache: KVCache, capacity: int) -> None:
        if not cache._k:
            raise ValueError("a static cache starts from a filled KVCache (run the prompt through the model first)")
        length = cache.length
        if capacity < length:
            raise ValueError(f"capacity {capacity} is below the {length} positions already cached")
        self.capacity = capacity
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        for dynamic, static in ((cache._k, self._k), (cache._v, self._v)):
            for buf in dynamic:
                full = buf.new_zeros(*buf.shape[:2], capacity, buf.shape[3])
                full[:, :, :length] = buf[:, :, :length]
                static.append(full)
        device = self._k[0].device
        self.filled = torch.tensor(length, dtype=torch.long, device=device)
        self._key_index = torch.arange(capacity, device=device)

    @property
    def length(self) -> int:
        raise ValueError("a static cache keeps its length on the device; give the position IDs explicitly")

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one position's ``k``/``v`` ``[B, H, 1, E]`` at index :attr:`filled`; return the
        whole buffers (mask them with :meth:`visible`)."""
        if k.shape[2] != 1:
            raise ValueError(f"a static cache takes one position per step, not {k.shape[2]}")
        at = self.filled.view(1)
        self._k[layer].index_copy_(2, at, k)
        self._v[layer].index_copy_(2, at, v)
        return self._k[layer], self._v[layer]

    def visible(self, window: int | None) -> torch.Tensor:
        """Boolean ``[1, capacity]``: the keys the query at position :attr:`filled` may see: those
        already written and itself (``j <= filled``), and under a Hard-ALiBi ``window`` only
        ``j > filled - window`` (the rule of :func:`lengthgen.attention.visibility_mask`)."""
        allowed = self._key_index <= self.filled
        if window is not None:
            allowed &= self._key_index > self.filled - window
        return allowed.unsqueeze(0)

    def advance(self) -> None:
        """The step's position is written in every layer: the next step writes after it."""
        self.filled += 1
