"""Independent nested-loop oracle for the mini-RASP interpreter's tests.

It implements the documented semantics (docs/rasp.md) directly, with explicit n x n
selection matrices and Python comparisons, sharing no code with :mod:`rasp.kernels`.
"""
from __future__ import annotations

from hypothesis import strategies as st

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


# --- Random programs for the property tests (shared by the interpreter and fast-path tests) ---

def selector_trees(atom: st.SearchStrategy, kinds: list[str]) -> st.SearchStrategy:
    """A strategy of selectors: ``atom`` leaves combined by ``&``, ``|`` and ``~`` (drawn from
    ``kinds``) up to depth 2."""
    from hypothesis import strategies as st

    @st.composite
    def trees(draw, depth: int = 2):
        if depth == 0 or draw(st.booleans()):
            return draw(atom)
        kind = draw(st.sampled_from(kinds))
        if kind == "not":
            return ~draw(trees(depth - 1))
        a, b = draw(trees(depth - 1)), draw(trees(depth - 1))
        return a & b if kind == "and" else a | b

    return trees()


def random_programs(selectors: st.SearchStrategy) -> st.SearchStrategy:
    """A strategy of one-op programs over ``selectors``: SelectorWidth, or a max/min/mean aggregate
    (categorical or numerical) of tokens, indices or a Map of tokens."""
    from rasp import Aggregate, Map, SelectorWidth, indices, numerical, tokens

    @st.composite
    def programs(draw):
        sel = draw(selectors)
        kind = draw(st.sampled_from(["width", "max", "min", "cmean", "nmean"]))
        if kind == "width":
            return SelectorWidth(sel)
        vals = draw(st.sampled_from([tokens, indices, Map(lambda t: t % 2, tokens)]))
        if kind == "nmean":
            return numerical(Aggregate(sel, numerical(vals), default=0))
        return Aggregate(sel, vals, default=-1, reduce="mean" if kind == "cmean" else kind)

    return programs()


def outcome(fn):
    """The column ``fn()`` returns (floats rounded to 9 places), or the name of the RASP error it raises."""
    try:
        return ("ok", [round(x, 9) if isinstance(x, float) else x for x in fn()])
    except (RASPTypeError, AmbiguousAggregateError) as exc:
        return ("error", type(exc).__name__)
