"""mpmath interval re-derivation of the binding attention bounds (issue 3, item 2).

:func:`constructions.addition.certify.margins.certify` scans all N + 2 answer positions with vectorized
float64 arithmetic. For the worst position of every class and head, this module recomputes the
leak and spread bounds from the weights in ``mpmath.iv`` interval arithmetic (200-bit endpoints,
outward rounding): the query vector α, the exact value sets ``K_e`` of the position keys (one
interval sum per distinct pattern of W_pos on the rows W_K reads), the product bound
``∏_e F_e − 1`` (= Σ_h C(P,h)·e^{−h·gap} for the hypercube, the IDs at Hamming distance h), the
token scores and the scores of S. The certificate uses the larger of the two results, so its
final numbers are interval-checked, not float64 estimates.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import mpmath
import numpy as np
from mpmath import iv

from lengthgen.tasks import ADDITION

from .ffn import ROLE_A, ROLE_B, ROLE_C, ROLE_EQ, ROLE_PLUS

PREC = 200
DIGITS = [ADDITION.vocabulary[str(k)] for k in range(10)]


def _dot(x: np.ndarray, W: np.ndarray, b: np.ndarray | None = None) -> list:
    """x @ W (+ b) as a list of intervals (exact inputs: float64 numbers are exact in mpmath)."""
    out = []
    for e in range(W.shape[1]):
        acc = iv.mpf(0) if b is None else iv.mpf(float(b[e]))
        for r in np.nonzero((W[:, e] != 0) & (x != 0))[0]:
            acc += iv.mpf(float(x[r])) * iv.mpf(float(W[r, e]))
        out.append(acc)
    return out


def _key_values(W_pos_code: np.ndarray, W_K: np.ndarray) -> list[list]:
    """Exact (interval) values of column e of W_pos·W_K over the IDs, one per distinct W_pos pattern."""
    values = []
    for e in range(W_K.shape[1]):
        supp = np.nonzero(W_K[:, e])[0]
        patterns = np.unique(W_pos_code[:, supp], axis=0) if len(supp) else np.zeros((1, 0))
        vals = []
        for pat in patterns:
            acc = iv.mpf(0)
            for r, x in zip(supp, pat):
                if x != 0:
                    acc += iv.mpf(float(x)) * iv.mpf(float(W_K[r, e]))
            vals.append(acc)
        values.append(vals)
    return values


@contextmanager
def _iv_precision(bits: int):
    """mpmath.iv keeps its own precision (53 bits by default); raise it for the block."""
    old = iv.prec
    iv.prec = bits
    try:
        yield
    finally:
        iv.prec = old


def _upper(x) -> mpmath.mpf:
    """Upper end point of an interval as a plain mpf."""
    return mpmath.mpf(x.b.a)


def _max_iv(items: list) -> object:
    out = items[0]
    for it in items[1:]:
        out = iv.mpf([max(out.a, it.a), max(out.b, it.b)])
    return out


def _min_iv(items: list) -> object:
    out = items[0]
    for it in items[1:]:
        out = iv.mpf([min(out.a, it.a), min(out.b, it.b)])
    return out


def head_bounds_iv(W, h: int, query_pos: int, query_id: int, member_keys: list[tuple[list[int], int]],
                   code_ids: np.ndarray, m_max: int, pert: float, cache: dict | None = None) -> dict:
    """Interval bounds (upper ends, as floats rounded up) for one query and head; query tokens with
    identical query rows are evaluated once.

    ``member_keys``: S besides ``$`` as (allowed tokens, ID); ``pert``: per-score perturbation
    (float term + arithmetic slack) added as in the float64 pass."""
    with mpmath.workprec(PREC), _iv_precision(PREC):
        tokens = [ADDITION.EQUALS] if query_pos < 0 else DIGITS
        q_rows = W.W_E[tokens] @ W.W_Q[h]
        tokens = [t for i, t in enumerate(tokens) if not any(np.array_equal(q_rows[i], q_rows[j]) for j in range(i))]
        cache = {} if cache is None else cache
        key = ("kvals", h, W.digest("W_pos", "W_K"), code_ids.tobytes())
        if key not in cache:
            cache[key] = _key_values(W.W_pos[code_ids], W.W_K[h])
        kvals = cache[key]
        kE = [_dot(W.W_E[y], W.W_K[h], W.b_K[h]) for y in range(W.W_E.shape[0])]
        kP0 = _dot(W.W_pos[0], W.W_K[h])
        worst = {"log_leak": -mpmath.inf, "eta": mpmath.mpf(0), "rpos": mpmath.mpf(0)}
        for x in tokens:
            qx = _dot(W.W_E[x], W.W_Q[h], W.b_Q[h])
            qp = _dot(W.W_pos[query_id], W.W_Q[h])
            alpha = [iv.mpf(W.scale) * (a + b) for a, b in zip(qx, qp)]
            best, prod_f, prod_g, tie = iv.mpf(0), iv.mpf(1), iv.mpf(1), False
            second = mpmath.inf  # smallest gap between a coordinate's best and second-best value
            for a_e, vals in zip(alpha, kvals):
                prods = [a_e * v for v in vals]
                top = _max_iv(prods)
                above = [p for p in prods if p.b >= top.a]  # candidates for the maximum
                tie |= len(above) > 1
                rest = [p for p in prods if p is not above[0]]
                if rest:
                    second = min(second, mpmath.mpf((top - _max_iv(rest)).a.a))
                best += top
                f = sum((iv.exp(p - top) for p in prods), iv.mpf(0))
                prod_f *= f
                prod_g *= 1 + sum((iv.exp(p - top) for p in prods if p is not above[0]), iv.mpf(0))
            n_code = iv.mpf(len(code_ids))
            cap = n_code * iv.exp(-iv.mpf(second)) if mpmath.isfinite(second) else iv.mpf(0)
            rpos = _min_iv([prod_f, n_code]) if tie else _min_iv([prod_g - 1, cap])
            tau = [sum((a * k for a, k in zip(alpha, kE[y])), iv.mpf(0)) for y in range(len(kE))]
            s_bos = tau[ADDITION.BOS] + sum((a * k for a, k in zip(alpha, kP0)), iv.mpf(0))
            scores = [s_bos] + [best + _min_iv([tau[y] for y in toks]) for toks, _ in member_keys] \
                + [best + _max_iv([tau[y] for y in toks]) for toks, _ in member_keys]
            s_lo, s_hi = _min_iv(scores), _max_iv(scores)
            t_code = _max_iv([tau[y] for y in DIGITS + [ADDITION.PLUS, ADDITION.EQUALS]])
            size = 1 + len(member_keys)
            if rpos.b > 0:
                log_leak = iv.log(iv.mpf(m_max)) + iv.log(_max_iv([rpos, iv.mpf(mpmath.mpf(2) ** -1000)])) \
                    + (t_code + best - s_lo) - iv.log(size)
                worst["log_leak"] = max(worst["log_leak"], _upper(log_leak + 2 * pert))
            worst["eta"] = max(worst["eta"], _upper(s_hi - s_lo + 2 * pert))
            worst["rpos"] = max(worst["rpos"], _upper(rpos))
        return {k: float(v + abs(v) * mpmath.mpf("1e-14")) if mpmath.isfinite(v) else float(v)
                for k, v in worst.items()}


def interval_check(W, L, heads: list, parts: list[dict], cls: np.ndarray,
                    k: np.ndarray, m_max: int, pert: float, cache: dict) -> list[dict]:
    """Re-derive, in mpmath intervals, the bounds of each head's worst query in every class and
    check that the float64 scan did not under-estimate them (it must dominate them)."""
    role_tokens = {ROLE_A: DIGITS, ROLE_B: DIGITS, ROLE_C: DIGITS, ROLE_PLUS: [ADDITION.PLUS], ROLE_EQ: [ADDITION.EQUALS]}
    used = np.unique(L.ids)
    code = used[used > 0]
    out = []
    for h, (hb, part) in enumerate(zip(heads, parts)):
        tv = part["leak"] + part["spread"] + part["float"]
        summary = {"log_leak": -math.inf, "eta": 0.0, "rpos": 0.0, "checked": 0}
        for c in range(int(cls.max()) + 1):
            members = np.nonzero(cls == c)[0]
            i = int(members[np.argmax(tv[members])])
            keys = [(role_tokens[int(L.role[p])], int(L.ids[p])) for p in hb.members[i] if p >= 0]
            got = head_bounds_iv(W, h, int(k[i]), int(L.ids[L.queries[i]]), keys, code, m_max, pert, cache)
            f64_leak, f64_eta = hb.log_leak[i] + 2 * pert, hb.eta[i] + 2 * pert
            tol = 1e-9 * (1 + abs(f64_leak))
            if got["log_leak"] > f64_leak + tol or got["eta"] > f64_eta + 1e-9 * (1 + f64_eta):
                raise AssertionError(f"head {h + 1}, query {i}: interval bounds {got} exceed the float64 scan "
                                     f"(log leak {f64_leak}, eta {f64_eta})")
            summary["log_leak"] = max(summary["log_leak"], got["log_leak"])
            summary["eta"] = max(summary["eta"], got["eta"])
            summary["rpos"] = max(summary["rpos"], got["rpos"])
            summary["checked"] += 1
        out.append(summary)
    return out
