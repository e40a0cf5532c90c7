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
    """An ordered list of uniquely labelled dimensions, built from ``(name, size)`` blocks."""

    def __init__(self, blocks: Sequence[tuple[str, int | None]]):
        self.labels: list[str] = []
        self._blocks: dict[str, list[int]] = {}
        for name, size in blocks:
            start = len(self.labels)
            new = [name] if size is None else [f"{name}[{i}]" for i in range(size)]
            self.labels.extend(new)
            self._blocks[name] = list(range(start, start + len(new)))
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("basis labels must be unique")
        self._index = {label: i for i, label in enumerate(self.labels)}

    def __len__(self) -> int:
        return len(self.labels)

    def index(self, label: str) -> int:
        try:
            return self._index[label]
        except KeyError:
            raise KeyError(f"no dimension named {label!r}; known: {', '.join(self._blocks)}") from None

    def block(self, name: str) -> list[int]:
        """Indices of a block (a scalar dimension is a block of one)."""
        return self._blocks[name]

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
