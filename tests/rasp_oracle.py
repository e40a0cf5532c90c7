"""Independent nested-loop oracle for the mini-RASP interpreter's tests.

It implements the documented semantics (docs/rasp.md) directly, with explicit n x n
selection matrices and Python comparisons, sharing no code with :mod:`rasp.kernels`.
"""
from __future__ import annotations

from rasp.errors import AmbiguousAggregateError, RASPTypeError


def ref_eval(expr, toks, causal):
    """Independent oracle: Weiss/tracr semantics with explicit n x n loops."""
    n, memo = len(toks), {}

    def sop(e):
        if e.uid in memo:
            return memo[e.uid]
        name = type(e).__name__
        if name == "TokensType":
            v = list(toks)
        elif name == "IndicesType":
            v = list(range(n))
        elif name == "LengthType":
            v = [p + 1 if causal else n for p in range(n)]
        elif name == "Full":
            v = [e.fill] * n
        elif name == "Map":
            v = [e.f(x) for x in sop(e.inner)]
        elif name == "SequenceMap":
            v = [e.f(x, y) for x, y in zip(sop(e.fst), sop(e.snd))]
        elif name == "LinearSequenceMap":
            v = [e.fst_fac * x + e.snd_fac * y for x, y in zip(sop(e.fst), sop(e.snd))]
        elif name == "ConstantSOp":
            v = list(e.value)[:n]
        else:
            mat = sel(e.selector)
            vals = sop(e.sop) if name == "Aggregate" else None
            v = []
            for q in range(n):
                chosen = [k for k in range(n) if mat[q][k] and (k <= q or not causal)]
                if name == "SelectorWidth":
                    v.append(len(chosen))
                    continue
                picked = [vals[k] for k in chosen]
                if not picked:
                    v.append(e.default)
                elif e.reduce in ("max", "min"):
                    v.append((max if e.reduce == "max" else min)(picked))
                elif e.encoding.value == "numerical":
                    if not all(isinstance(x, (int, float)) for x in picked):
                        raise RASPTypeError("non-numeric")
                    v.append(sum(picked) / len(picked))
                elif len(set(picked)) > 1:
                    raise AmbiguousAggregateError("several")
                else:
                    v.append(picked[0])
        memo[e.uid] = v
        return v

    def sel(s):
        name = type(s).__name__
        if name == "Select":
            ks, qs = sop(s.keys), sop(s.queries)
            return [[bool(s.predicate(ks[k], qs[q])) for k in range(n)] for q in range(n)]
        if name == "ConstantSelector":
            if isinstance(s.value, bool):
                return [[s.value] * n for _ in range(n)]
            return [list(row[:n]) for row in s.value[:n]]
        if name == "SelectorNot":
            return [[not x for x in row] for row in sel(s.inner)]
        a, b = sel(s.fst), sel(s.snd)
        op = (lambda x, y: x and y) if name == "SelectorAnd" else (lambda x, y: x or y)
        return [[op(x, y) for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]

    return sop(expr)
