"""The residual stream of a compiled program: named dimensions and linear read-outs.

tracr's residual layout (Lindner et al. 2023, Sec. 3.2), with one addition for large value
sets (docs/turing-programs.md, "Residual layout"):

* ``one`` is 1 at every position and ``tokens:BOS`` marks the compiler's BOS position;
* a one-hot s-op ``x`` owns one dimension ``x:v`` per value ``v`` (tracr's categorical);
* an ordinal s-op owns two dimensions, ``x`` holding the value's integer code ``c`` and
  ``x^2`` holding ``c**2``; equality then is the quadratic form ``-(c_k - c_q)**2``, which
  needs O(1) dimensions however many values there are (positions, large vocabularies);
* an ordinal s-op that an equality compares at large codes (:func:`rasp.weights.heads.binary_nodes`)
  owns ``B`` more, ``x:bit0`` .. ``x:bit{B-1}``, holding ``+1``/``-1`` for the bits of
  ``c mod 2**B`` (two's complement, ``B`` one more than the bit length of the largest such code);
  equality is then ``sum_j s_k,j * s_q,j``, whose terms are 1 whatever ``c`` is;
* a numerical s-op owns one dimension ``x`` (tracr's numerical), except an affine one
  (:mod:`rasp.weights.affine`), which owns none: it is read as ``a*x + b*y + c`` of its inputs;
* ``x:1/(w+1)`` is the scratch dimension of a selector width (tracr's BOS trick).

A *feature* is a linear functional on the residual, a ``{dimension index: coefficient}`` dict.
"""
from __future__ import annotations

from typing import Any, Collection

from lengthgen.basis import NamedBasis
from rasp.weights.graph import CompileError, Node, Program
from rasp.weights.values import integral

Feature = dict[int, float]

ONE, BOS = "one", "tokens:BOS"


def add(*features: Feature, scale: float = 1.0) -> Feature:
    """Sum of features, times ``scale``."""
    out: Feature = {}
    for f in features:
        for d, c in f.items():
            out[d] = out.get(d, 0.0) + scale * c
    return out


class Layout:
    """Residual dimensions of a program and the features that read its s-ops."""

    def __init__(self, program: Program, binary: Collection[int] = ()) -> None:
        self.program = program
        labels: list[str] = [ONE, BOS]
        self.dims: dict[int, list[int]] = {}
        self.value_dims: dict[int, dict[Any, int]] = {}
        self.bit_dims: dict[int, list[int]] = {}
        codes = [program.code(v) for n in program.nodes if id(n) in binary for v in n.values]
        self.n_bits = max(abs(c) for c in codes).bit_length() + 1 if codes else 0
        for node in program.nodes:
            if node.encoding == "tuple" or node.kind in ("linear", "folded"):
                continue
            start = len(labels)
            if node.encoding == "onehot":
                names = [f"{node.label}:{v}" for v in node.values]
                if len(set(names)) < len(names):
                    names = [f"{node.label}:{v!r}" for v in node.values]
                labels += names
                self.value_dims[id(node)] = {v: start + i for i, v in enumerate(node.values)}
            elif node.encoding == "ordinal":
                labels += [node.label, f"{node.label}^2"]
                if id(node) in binary:
                    self.bit_dims[id(node)] = list(range(len(labels), len(labels) + self.n_bits))
                    labels += [f"{node.label}:bit{j}" for j in range(self.n_bits)]
            else:
                labels.append(node.label)
            if node.kind == "width":
                labels.append(f"{node.label}:1/(w+1)")
            self.dims[id(node)] = list(range(start, len(labels)))
        if len(set(labels)) != len(labels):
            dup = next(x for x in labels if labels.count(x) > 1)
            raise CompileError(f"two residual dimensions would both be named {dup!r}; rename an s-op")
        self.basis = NamedBasis([(label, None) for label in labels])
        self.one, self.bos = 0, 1

    @property
    def labels(self) -> list[str]:
        return self.basis.labels

    def __len__(self) -> int:
        return len(self.basis)

    # ------------------------------------------------------------------ read-outs
    def constant(self, c: float = 1.0) -> Feature:
        return {self.one: c}

    def code(self, node: Node) -> Feature:
        """The value's integer code ``c`` (one-hot: sum over values; ordinal: its dimension)."""
        if node.encoding == "onehot":
            return {d: float(self.program.code(v)) for v, d in self.value_dims[id(node)].items()}
        if node.encoding == "ordinal":
            return {self.dims[id(node)][0]: 1.0}
        raise CompileError(f"{node.label!r} is {node.encoding}; it has no integer code")

    def square(self, node: Node) -> Feature:
        """``c**2`` of the value's code."""
        if node.encoding == "onehot":
            return {d: float(self.program.code(v)) ** 2 for v, d in self.value_dims[id(node)].items()}
        if node.encoding == "ordinal":
            return {self.dims[id(node)][1]: 1.0}
        raise CompileError(f"{node.label!r} is {node.encoding}; it has no integer code")

    def binary(self, node: Node) -> list[int]:
        """The bit dimensions of ``node`` (empty if it has none)."""
        return self.bit_dims.get(id(node), [])

    def signs(self, value: Any) -> list[float]:
        """``+1``/``-1`` for the bits of ``value``'s code ``mod 2**n_bits``, lowest bit first."""
        r = self.program.code(value) % (1 << self.n_bits)
        return [1.0 if r >> j & 1 else -1.0 for j in range(self.n_bits)]

    def number(self, node: Node) -> Feature:
        """The value as a number (numerical s-ops, and categorical s-ops with numeric values)."""
        if node.kind == "linear":
            form = node.affine
            parts = [self.number(d) for d in node.deps]
            out = add(*(add(f, scale=float(a)) for f, a in zip(parts, form.coeffs)))
            return add(out, {self.one: float(form.const)}) if form.const else out
        if node.encoding == "numerical":
            return {self.dims[id(node)][0]: 1.0}
        if any(not isinstance(v, (int, float)) for v in node.values):
            raise CompileError(f"{node.label!r} has non-numeric values; it cannot be read as a number")
        if node.encoding == "onehot":
            return {d: float(v) for v, d in self.value_dims[id(node)].items()}
        if any(integral(v) is None for v in node.values):
            raise CompileError(f"{node.label!r} holds non-integer values in an ordinal code")
        return {self.dims[id(node)][0]: 1.0}      # ordinal: integer values are their own codes

    def indicator(self, node: Node, value: Any) -> Feature:
        return {self.value_dims[id(node)][value]: 1.0}

    def scratch(self, node: Node) -> int:
        return self.dims[id(node)][-1]

    def write(self, node: Node, value: Any) -> Feature:
        """The residual vector that encodes ``value`` in ``node``'s dimensions."""
        if node.encoding == "onehot":
            return {self.value_dims[id(node)][value]: 1.0}
        if node.encoding == "ordinal":
            c = float(self.program.code(value))
            d = self.dims[id(node)]
            return {d[0]: c, d[1]: c * c, **dict(zip(self.binary(node), self.signs(value)))}
        return {self.dims[id(node)][0]: float(value)}

    def read(self, node: Node, vector: Any) -> Any:
        """Decode ``node``'s value from one residual vector (nearest value; numbers as floats)."""
        if node.encoding == "numerical":
            return float(sum(c * float(vector[d]) for d, c in self.number(node).items()))
        if node.encoding == "onehot":
            dims = self.value_dims[id(node)]
            return max(dims, key=lambda v: float(vector[dims[v]].detach()))
        c = float(vector[self.dims[id(node)][0]])
        return min(node.values, key=lambda v: abs(self.program.code(v) - c))
