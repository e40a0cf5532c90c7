"""Static analysis of a program: size in ops, depth in attention layers, heads per layer.

Size is the number of RASP operations (the measure in the size bound of the RASP
Turing-program construction of Hou et al., arXiv 2407.03310); depth is counted like
tracr's layer allocation and RASPy's ``Seq.layer``.

Layering rule: an attention op (Aggregate, SelectorWidth) sits one layer above
the deepest attention op among its inputs (values, keys, queries); Maps,
SequenceMaps and Full are MLP work inside the layer of their deepest input.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rasp.core import (Aggregate, IndicesType, LengthType, RASPExpr, SelectorWidth, SOp,
                       TokensType, walk)

PRIMITIVES = (TokensType, IndicesType, LengthType)


@dataclass(frozen=True)
class ProgramStats:
    """Size and shape of a RASP program."""

    size: int                       # number of operations (every non-primitive node)
    ops: dict[str, int]             # operations by kind
    attention_layers: int           # depth in attention layers
    heads_per_layer: tuple[int, ...]
    mlp_per_layer: tuple[int, ...]  # Map/SequenceMap/Full ops after each attention layer (0 = before)

    def summary(self) -> str:
        heads = ", ".join(str(h) for h in self.heads_per_layer)
        return (f"{self.size} ops, {self.attention_layers} attention layers "
                f"(heads per layer: {heads})")


def attention_depths(program: SOp) -> dict[int, int]:
    """Attention layer of every node, keyed by uid (0 = before any attention)."""
    depth: dict[int, int] = {}
    for expr in walk(program):
        below = max((depth[c.uid] for c in expr.children), default=0)
        depth[expr.uid] = below + 1 if isinstance(expr, (Aggregate, SelectorWidth)) else below
    return depth


def analyse(program: SOp) -> ProgramStats:
    """Size (ops), attention depth and heads per layer of ``program``."""
    depth = attention_depths(program)
    nodes: list[RASPExpr] = [e for e in walk(program) if not isinstance(e, PRIMITIVES)]
    n_layers = max(depth.values(), default=0)
    heads = [0] * n_layers
    mlps = [0] * (n_layers + 1)
    for expr in nodes:
        if isinstance(expr, (Aggregate, SelectorWidth)):
            heads[depth[expr.uid] - 1] += 1
        elif isinstance(expr, SOp):
            mlps[depth[expr.uid]] += 1
    kinds = Counter(type(e).__name__ for e in nodes)
    return ProgramStats(size=len(nodes), ops=dict(sorted(kinds.items())), attention_layers=n_layers,
                        heads_per_layer=tuple(heads), mlp_per_layer=tuple(mlps))


def size(program: SOp) -> int:
    """Number of operations (s-ops and selectors other than tokens/indices/length)."""
    return analyse(program).size


def depth(program: SOp) -> int:
    """Number of attention layers."""
    return analyse(program).attention_layers


def heads(program: SOp) -> tuple[int, ...]:
    """Attention heads (Aggregate/SelectorWidth ops) in each layer."""
    return analyse(program).heads_per_layer
