"""Named residual bases and matrices built from them (tracr's ``craft`` idea, in miniature).

A construction never writes ``W[17, 3] = 0.5``. It says *which named dimension maps to which*:
``builder.add("POS_2[3]", "q[3]", sqrt(M))``. :class:`NamedBasis` turns labels into indices;
:class:`MatrixBuilder` collects entries and becomes a tensor. Labels follow tracr's
``residual_labels``: a scalar dimension is ``NAME``; dimension ``i`` of a block is ``NAME[i]``.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch


class NamedBasis:
    """An ordered list of uniquely labelled dimensions, built from ``(name, size)`` blocks.

    Labels are made only when asked for (:attr:`labels`, :meth:`index`): a basis of 10^8
    dimensions answers :meth:`block` and ``len`` at once, which the length-bound derivations use."""

    def __init__(self, blocks: Sequence[tuple[str, int | None]]):
        self._blocks: dict[str, range] = {}
        self._scalar: set[str] = set()
        start = 0
        for name, size in blocks:
            if name in self._blocks:
                raise ValueError("basis labels must be unique")
            n = 1 if size is None else int(size)
            if n < 0:
                raise ValueError(f"block {name!r} has negative size {n}")
            self._blocks[name] = range(start, start + n)
            if size is None:
                self._scalar.add(name)
            start += n
        self._size = start
        self._labels: list[str] | None = None
        self._index: dict[str, int] | None = None

    @property
    def labels(self) -> list[str]:
        """One label per dimension: ``NAME`` for a scalar, ``NAME[i]`` inside a block."""
        if self._labels is None:
            labels: list[str] = []
            for name, rng in self._blocks.items():
                labels.extend([name] if name in self._scalar else [f"{name}[{i}]" for i in range(len(rng))])
            if len(set(labels)) != len(labels):
                raise ValueError("basis labels must be unique")
            self._labels = labels
        return self._labels

    def __len__(self) -> int:
        return self._size

    def index(self, label: str) -> int:
        if self._index is None:
            self._index = {lab: i for i, lab in enumerate(self.labels)}
        try:
            return self._index[label]
        except KeyError:
            raise KeyError(f"no dimension named {label!r}; known: {', '.join(self._blocks)}") from None

    def block(self, name: str) -> list[int]:
        """Indices of a block (a scalar dimension is a block of one)."""
        return list(self._blocks[name])

    def block_size(self, name: str) -> int:
        """``len(block(name))`` without listing the indices."""
        return len(self._blocks[name])

    def block_labels(self, name: str) -> list[str]:
        return [self.labels[i] for i in self._blocks[name]]

    @property
    def block_names(self) -> list[str]:
        return list(self._blocks)


class MatrixBuilder:
    """Entries of a linear map ``rows → cols`` given by named dimensions; values may be any
    number type (float, or sympy expressions for exact-arithmetic checks)."""

    def __init__(self, rows: NamedBasis, cols: NamedBasis):
        self.rows, self.cols = rows, cols
        self.entries: dict[tuple[int, int], Any] = {}

    def add(self, row: str, col: str, value: Any) -> "MatrixBuilder":
        key = (self.rows.index(row), self.cols.index(col))
        self.entries[key] = self.entries.get(key, 0) + value
        return self

    def add_block(self, row_block: str, col_block: str, value: Any) -> "MatrixBuilder":
        """Map dimension ``i`` of ``row_block`` to dimension ``i`` of ``col_block`` (identity × value)."""
        rows, cols = self.rows.block_labels(row_block), self.cols.block_labels(col_block)
        if len(rows) != len(cols):
            raise ValueError(f"blocks {row_block} ({len(rows)}) and {col_block} ({len(cols)}) differ in size")
        for r, c in zip(rows, cols):
            self.add(r, c, value)
        return self

    def named_entries(self) -> Iterable[tuple[str, str, Any]]:
        for (r, c), value in sorted(self.entries.items()):
            yield self.rows.labels[r], self.cols.labels[c], value

    def tensor(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        out = torch.zeros(len(self.rows), len(self.cols), dtype=dtype)
        if self.entries:  # one vectorized write: per-entry assignment took ~40 s for 10^5 position IDs
            index = torch.tensor(list(self.entries), dtype=torch.long)
            values = torch.tensor([float(v) for v in self.entries.values()], dtype=torch.float64)
            out[index[:, 0], index[:, 1]] = values.to(dtype)
        return out


def vector(basis: NamedBasis, values: dict[str, Any], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A vector with the given named coordinates (others zero)."""
    out = torch.zeros(len(basis), dtype=dtype)
    for label, value in values.items():
        out[basis.index(label)] = float(value)
    return out
