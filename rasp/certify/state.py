"""The abstract state of a certificate: value sets, enumerations and residual enclosures.

The certificate (:mod:`rasp.certify`) interprets a compiled transformer over the value sets of its
program (docs/turing-programs.md, "Certifying a compiled program"). Its invariant, after every
sub-layer, at every non-BOS position of every input of at most ``max_seq_len`` tokens:

* ``one`` holds exactly 1 and ``tokens:BOS`` exactly 0;
* every s-op computed so far holds ``layout.write(node, v) + e`` with ``|e_d| <= eps[d]`` for the
  value ``v`` that the RASP program gives it at that position (a selector width also holds
  ``1/(w+1) + e`` in its scratch dimension, from its head on);
* every other dimension holds exactly 0.

Values come from *sources*: the token (``tok``: its token-wise s-ops are table look-ups), the
position (``pos``: the position-wise s-ops, ``length`` included in causal programs) and every s-op
computed in a layer (``mlp``, ``attn``, ``width`` nodes), which ranges over its value set. An
s-op without dimensions (a numerical affine map, a folded map, a tuple) is computed from its
children by its own RASP function. Enumerating the product of the sources' ranges encloses every
state that an input can produce (a superset: the values at one position are not independent).
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Iterable, Sequence

import numpy as np

from lengthgen.proof import interval as I
from rasp.core import Map, SequenceMap, SOp
from rasp.weights.assemble import CompiledTransformer

PAIR_BUDGET = 200_000_000  # (query state, key-group state) pairs one head scores (in chunks)
STATE_BUDGET = 5_000_000   # states held at once: one head's value, query or key-group states
COMBO_BUDGET = 1_000_000   # input states of one MLP table or of the readout


class CertifyError(ValueError):
    """The certificate does not apply to this model or program (one line saying why)."""


class Fail(Exception):
    """A check failed: ``kind`` is structure, margin, lookup, readout, budget or float (float32
    magnitudes that could overflow)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def key_of(value: Any) -> tuple:
    """A dict key that keeps ``1``, ``True`` and ``1.0`` apart (a custom predicate may not)."""
    return (type(value).__name__, value)


class State:
    """The compiled transformer, its weights as float64 numpy arrays, and the invariant above."""

    def __init__(self, ct: CompiledTransformer) -> None:
        self.ct, self.prog, self.layout = ct, ct.program, ct.layout
        self.n, self.d = ct.program.n, len(ct.layout)
        self.p = {k: v.detach().to("cpu").numpy().astype(np.float64) for k, v in ct.model.state_dict().items()}
        self.owner: list[Any] = [None] * self.d
        for node in self.prog.nodes:
            for dim in self.layout.dims.get(id(node), []):
                self.owner[dim] = node
        self.status: dict[int, str] = {id(n): "full" for n in self.prog.nodes if n.kind in ("token", "position")}
        self.eps = np.zeros(self.d)
        # the unit roundoff of the statement: 0 for float64 weights (exact real arithmetic),
        # 2^-24 for float32 ones (their forward pass under the rounding model, rasp.certify.floats)
        self.unit = 2.0 ** -24 if ct.model.cfg.dtype == "float32" else 0.0
        self._base: dict[int, tuple[frozenset, bool, tuple]] = {}

    # ------------------------------------------------------------------ values
    def node(self, sop: SOp) -> Any:
        return self.prog.by_uid[sop.uid]

    @staticmethod
    def source(node: Any) -> str:
        if node.kind == "token":
            return "tok"
        if node.kind == "position":
            return "pos"
        return "var" if node.kind in ("mlp", "attn", "width") else "derived"

    def base(self, sop: SOp) -> tuple[frozenset, bool, tuple]:
        """(token-wise nodes, reads the position, computed nodes) that determine ``sop``'s value."""
        node = self.node(sop)
        if id(node) in self._base:
            return self._base[id(node)]
        src = self.source(node)
        if src == "tok":
            out = (frozenset([node]), False, ())
        elif src == "pos":
            out = (frozenset(), True, ())
        elif src == "var":
            out = (frozenset(), False, (node,))
        else:
            if not isinstance(node.sop, (Map, SequenceMap)):
                raise CertifyError(f"{node.label!r}: no rule for an s-op of kind {node.kind}")
            parts = [self.base(c) for c in node.sop.children]
            out = (frozenset().union(*(p[0] for p in parts)), any(p[1] for p in parts),
                   tuple(dict.fromkeys(x for p in parts for x in p[2])))
        self._base[id(node)] = out
        return out

    def value(self, sop: SOp, asg: dict) -> Any:
        """The RASP value of ``sop`` at a position whose sources are ``asg``."""
        node = self.node(sop)
        src = self.source(node)
        if src == "tok":
            return node.table[asg["tok"]]
        if src == "pos":
            return node.table[asg["pos"]]
        if src == "var":
            return asg[id(node)]
        return self.apply(node.sop, asg)

    def apply(self, sop: SOp, asg: dict) -> Any:
        """A Map's or SequenceMap's own function on its children's values."""
        args = [self.value(c, asg) for c in sop.children]
        return sop.f(*args)

    # ------------------------------------------------------------------ enumeration
    def sources(self, sops: Iterable[SOp]) -> tuple[list, list[list]]:
        """Source names and, per source, its range: token ids (one per distinct tuple of the
        token-wise s-ops read), positions ``0..n-1``, or a computed node's value set."""
        toks: set = set()
        pos = False
        nodes: dict[int, Any] = {}
        for sop in sops:
            t, p, v = self.base(sop)
            toks |= t
            pos |= p
            for x in v:
                nodes[id(x)] = x
        names: list = []
        ranges: list[list] = []
        if toks:
            order = sorted(toks, key=lambda x: x.label)
            reps: dict[tuple, int] = {}
            for t in range(len(self.prog.vocab)):
                reps.setdefault(tuple(key_of(x.table[t]) for x in order), t)
            names.append("tok")
            ranges.append(sorted(reps.values()))
        if pos:
            names.append("pos")
            ranges.append(list(range(self.n)))
        for x in nodes.values():
            if x.values is None:
                raise CertifyError(f"{x.label!r}: its value set is unknown ({x.unknown}); not certified")
            names.append(id(x))
            ranges.append(list(x.values))
        return names, ranges

    @staticmethod
    def count(ranges: Sequence[Sequence]) -> int:
        return math.prod(len(r) for r in ranges)

    @staticmethod
    def combos(names: list, ranges: list[list]) -> list[dict]:
        return [dict(zip(names, c)) for c in itertools.product(*ranges)]

    # ------------------------------------------------------------------ residual boxes
    def encoding(self, node: Any, v: Any) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Dimensions and the exact enclosure of what ``node`` holds for the value ``v``."""
        feat = self.layout.write(node, v) if self.status.get(id(node)) == "full" else {}
        dims = list(feat)
        lo = [float(c) for c in feat.values()]
        hi = list(lo)
        if node.kind == "width" and id(node) in self.status:
            s = I.Iv.exact(1.0) / float(v + 1)
            dims.append(self.layout.scratch(node))
            lo.append(float(s.lo))
            hi.append(float(s.hi))
        return dims, np.array(lo), np.array(hi)

    def value_dims(self, node: Any) -> list[int]:
        """The dimensions holding ``layout.write(node, v)`` (a selector width's scratch excluded)."""
        return [x for x in self.layout.dims[id(node)] if node.kind != "width" or x != self.layout.scratch(node)]

    def box(self, combos: list[dict], dims: Iterable[int]) -> I.Iv:
        """``[len(combos), d]`` enclosures of the residual at positions in those states, exact on
        the dimensions ``dims`` that the weights read (0 elsewhere; those rows of the weights are 0)."""
        lo = np.zeros((len(combos), self.d))
        lo[:, self.layout.one] = 1.0
        hi = lo.copy()
        readers = {id(self.owner[x]): self.owner[x] for x in dims if self.owner[x] is not None}
        for node in readers.values():
            if id(node) not in self.status:
                continue                                   # not computed yet: its dimensions hold 0
            if self.status[id(node)] == "full":            # its dimensions that encode 0 (a one-hot
                own = self.value_dims(node)                # s-op's other values) hold 0 +- eps too
                lo[:, own], hi[:, own] = -self.eps[own], self.eps[own]
            cache: dict = {}
            for i, asg in enumerate(combos):
                v = self.value(node.sop, asg) if self.source(node) != "var" else asg[id(node)]
                k = key_of(v)
                if k not in cache:
                    dd, a, b = self.encoding(node, v)
                    e = self.eps[dd]
                    cache[k] = (dd, I.down(a - e), I.up(b + e))
                dd, a, b = cache[k]
                lo[i, dd], hi[i, dd] = a, b
        return I.Iv(lo, hi)

    def target(self, node: Any, v: Any, dims: list[int]) -> np.ndarray:
        """``layout.write(node, v)`` on ``dims``; a value outside the node's value set fails."""
        if v not in node.values:
            raise Fail("lookup", f"{node.label!r}: the value {v!r} is not in its value set")
        out = np.zeros(len(dims))
        feat = self.layout.write(node, v)
        for i, dim in enumerate(dims):
            out[i] = feat.get(dim, 0.0)
        return out

    def owners(self, dims: Iterable[int]) -> list[Any]:
        seen: dict[int, Any] = {}
        for x in dims:
            o = self.owner[x]
            if o is not None:
                seen.setdefault(id(o), o)
        return list(seen.values())
