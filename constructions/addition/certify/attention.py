"""The attention half of the Theorem 5.1 certificate, in interval arithmetic.

For one head and every answer position (``=``, c_0 … c_n) of an n-digit input this module encloses
the two numbers the certificate needs (docs/certificate.md, "The argument"):

* the **leak** λ: the softmax mass outside the attended set S = {``$``} ∪ {visible keys at ID q*},
  relative to the mass on S, for *every* input of the format;
* the **spread** η: how far apart the scores inside S can be.

A query (token x, ID p) and a key (token y, ID q) score ``α·κ`` with ``α = scale·(x W_Q + W_pos[p]
W_Q + b_Q)`` and ``κ = y W_K + b_K + W_pos[q] W_K``, i.e. ``τ(y) + π(q)`` with the token part
``τ(y) = α·(y W_K + b_K)`` and the position part ``π(q) = α·(W_pos[q] W_K)``. The steps, one function
each:

1. :func:`position_key_alphabet` — column e of ``W_pos W_K`` takes few values ``K_e`` on the IDs the
   format uses; each ID is a tuple of entries, distinct IDs must be distinct tuples;
2. :func:`query_vectors` — α for every answer position and query token;
3. :func:`position_scores` — per coordinate the entry v*_e with the largest α_e·v; the ID q* holding
   the tuple (v*_e) is the one the head attends to; every other ID scores
   ``π(q) − π(q*) = Σ_e α_e (k_qe − v*_e)``, so ``Σ_{q≠q*} e^{π(q)−π(q*)} ≤ ∏_e (1 + G_e) − 1`` with
   ``G_e = Σ_{v ≠ v*_e} e^{α_e (v − v*_e)}`` (for the hypercube code: Σ_h C(P,h)·e^{−2M·h});
4. :func:`attended_set` — the visible keys at q*;
5. :func:`leak_and_spread` — the token parts of the scores in S and outside it;
6. :func:`value_range` — the range of the head's output per residual coordinate (the leak and the
   spread move the output by at most TV·range).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import interval as I
from .interval import Iv
from .layout import Layout, StructureError, Weights

MAX_CODE_VALUES = 16


@dataclass
class KeyAlphabet:
    """Step 1: the values of each coordinate of the position keys over the IDs the format uses."""

    ids: np.ndarray  # the non-zero IDs of the format
    values: list[Iv]  # per coordinate e: enclosures of the distinct values K_e
    radix: list[int]
    sorted_codes: np.ndarray  # mixed-radix entry tuple of each ID, sorted
    order: np.ndarray  # ids[order] are the IDs in sorted_codes order


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a 2-D float array and each row's index (1-D sorts for 0 or 1 columns)."""
    if a.shape[1] == 0:
        return np.zeros((1, 0)), np.zeros(len(a), dtype=np.int64)
    if a.shape[1] == 1:
        uniq, inv = np.unique(a[:, 0], return_inverse=True)
        return uniq[:, None], inv.reshape(-1)
    uniq, inv = np.unique(a, axis=0, return_inverse=True)
    return uniq, inv.reshape(-1)


def position_key_alphabet(W: Weights, h: int, code_ids: np.ndarray) -> KeyAlphabet:
    """IDs with the same pattern of W_pos on the rows column e of W_K reads share one entry of
    K_e (same inputs, same exact value); raises StructureError if two IDs share every entry."""
    rows = W.W_pos[code_ids]
    values, radix = [], []
    key_code = np.zeros(len(code_ids), dtype=np.int64)
    for e in range(W.W_K.shape[2]):
        support = np.nonzero(W.W_K[h][:, e])[0]
        patterns, entry = _unique_rows(rows[:, support])
        if len(patterns) > MAX_CODE_VALUES:
            raise StructureError(f"head {h + 1}: a key coordinate takes more than {MAX_CODE_VALUES} values over the IDs")
        values.append(I.matmul(patterns, W.W_K[h][support, e][:, None])[:, 0])
        radix.append(len(patterns))
        key_code = key_code * len(patterns) + entry.reshape(-1)
    if sum(math.log2(r) for r in radix) > 62:
        raise StructureError(f"head {h + 1}: position key vectors span more than 2^62 combinations")
    order = np.argsort(key_code, kind="stable")
    sorted_codes = key_code[order]
    same = np.nonzero(sorted_codes[1:] == sorted_codes[:-1])[0]
    if len(same):
        i = int(same[0])
        raise StructureError(f"head {h + 1}: position IDs {code_ids[order[i]]} and {code_ids[order[i + 1]]} have the "
                             "same key vector (W_pos·W_K is not injective on the IDs the format uses)")
    return KeyAlphabet(code_ids, values, radix, sorted_codes, order)


def query_vectors(W: Weights, h: int, query_ids: np.ndarray, token: int) -> Iv:
    """Step 2: α = scale·(W_E[token] W_Q + b_Q + W_pos[p] W_Q) for each query ID p, [Q, d_head]."""
    token_part = I.affine(W.W_E[token], W.W_Q[h], W.b_Q[h])
    position_part = I.matmul(W.W_pos[query_ids], W.W_Q[h])
    return (position_part + token_part[None]) * W.scale


@dataclass
class PositionScores:
    """Step 3, per query: the position score of the chosen tuple and the bound on all other IDs."""

    best: Iv  # Σ_e α_e·v*_e (= π(q*) when q* exists)
    log_others: np.ndarray  # upper bound of log Σ_{q ≠ q*} e^{π(q) − best}
    tie: np.ndarray  # some coordinate has no strict winner: no q*
    top_code: np.ndarray  # mixed-radix code of the tuple (v*_e)
    min_gap: np.ndarray  # lower bound of the score gap to the second-best entry (report)


def _coordinate(alpha_e: Iv, values: Iv) -> tuple:
    """For distinct α_e values: v*, log(1 + G_e), α_e·v*, the gap to the runner-up, tie, max(0, ·)."""
    prods = alpha_e[:, None] * values[None, :]
    centre, _ = prods.center_radius()
    vstar = centre.argmax(1)
    rows = np.arange(len(vstar))
    diff = alpha_e[:, None] * (values[None, :] - values[vstar][:, None])  # α_e (v − v*)
    other = np.ones(diff.shape, dtype=bool)
    other[rows, vstar] = False
    masked = Iv(np.where(other, diff.lo, -np.inf), np.where(other, diff.hi, -np.inf))
    log1p_g = I.log1p(I.exp(masked).sum(1))
    above = np.where(other, diff.hi, -np.inf).max(1)  # largest α_e (v − v*) over v ≠ v*
    return vstar, log1p_g, alpha_e * values[vstar], -above, above >= 0, np.maximum(above, 0.0)


def position_scores(alpha: Iv, keys: KeyAlphabet) -> PositionScores:
    Q = alpha.shape[0]
    best = Iv.exact(np.zeros(Q))
    log_prod = Iv.exact(np.zeros(Q))
    min_gap, tie = np.full(Q, np.inf), np.zeros(Q, dtype=bool)
    above_sum, top_code = np.zeros(Q), np.zeros(Q, dtype=np.int64)
    for e, values in enumerate(keys.values):
        uniq, inv = alpha[:, e].unique()
        vstar, log1p_g, top, gap, tie_e, above = _coordinate(uniq, values)
        best = best + top[inv]
        log_prod = log_prod + log1p_g[inv]
        min_gap = np.minimum(min_gap, gap[inv])
        tie |= tie_e[inv]
        above_sum = I.up(above_sum + above[inv])
        top_code = top_code * keys.radix[e] + vstar[inv]
    n_code = I.log(Iv.exact(np.array([float(len(keys.ids))]))).hi[0]
    # no tie: the chosen tuple is the strict winner, every other ID loses at least min_gap
    strict = I.log(I.expm1(log_prod)).hi
    strict_cap = I.up(n_code - min_gap)
    # tie: the sum includes the chosen tuple itself; every ID scores at most best + Σ_e max(0, ·)
    tie_bound = log_prod.hi
    tie_cap = I.up(n_code + above_sum)
    log_others = np.where(tie, np.minimum(tie_bound, tie_cap), np.minimum(strict, strict_cap))
    return PositionScores(best, log_others, tie, top_code, min_gap)


def attended_set(L: Layout, keys: KeyAlphabet, scores: PositionScores, query_pos: np.ndarray,
                 pos_table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step 4: q* per query (−1 if none) and the visible positions holding it ([Q, m], −1 padded)."""
    n = len(keys.ids)
    where = np.minimum(np.searchsorted(keys.sorted_codes, scores.top_code), n - 1)
    found = (keys.sorted_codes[where] == scores.top_code) & ~scores.tie
    qstar = np.where(found, keys.ids[keys.order[where]], -1)
    cand = pos_table[np.maximum(qstar, 0)]
    visible = (qstar[:, None] >= 0) & (cand >= 0) & (cand <= query_pos[:, None])
    return qstar, np.where(visible, cand, -1)


def leak_and_spread(W: Weights, h: int, L: Layout, alpha: Iv, scores: PositionScores, members: np.ndarray,
                    m_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 5: upper bounds of log λ and of η per query, and the score gap (report).

    Scores relative to π(q*) (or to ``best`` without q*): ``$`` scores s_bos − best, a member with
    token y scores τ(y), a key outside S at most τ_code + π(q) − π(q*). Hence
    ``λ ≤ m·e^{τ_code − min_S}·Σ_{q≠q*} e^{π(q)−π(q*)} / |S|`` and ``η = max_S − min_S``."""
    key_tok = I.affine(W.W_E, W.W_K[h], W.b_K[h])
    tau = I.matmul(alpha, Iv(key_tok.lo.T, key_tok.hi.T))  # [Q, vocab]
    bos_pos = I.matmul(W.W_pos[0], W.W_K[h])
    rel_bos = tau[:, L.bos_token] + (alpha * bos_pos[None]).sum(1) - scores.best
    lo, hi = rel_bos.lo.copy(), rel_bos.hi.copy()
    for role, toks in L.role_tokens.items():
        hit = ((members >= 0) & (L.role[np.maximum(members, 0)] == role)).any(1)
        lo = np.where(hit, np.minimum(lo, tau.lo[:, toks].min(1)), lo)
        hi = np.where(hit, np.maximum(hi, tau.hi[:, toks].max(1)), hi)
    size = 1 + (members >= 0).sum(1)
    t_code = tau.hi[:, L.code_tokens].max(1)
    log_m = I.log(Iv.exact(np.array([float(m_max)]))).hi[0]
    log_size = I.log(Iv.exact(size.astype(np.float64))).lo
    log_leak = I.up_add(scores.log_others, log_m, t_code, -lo, -log_size)
    eta = I.up(hi - lo)
    gap = lo - (t_code - scores.min_gap)
    return log_leak, eta, gap


def value_range(W: Weights, ids: np.ndarray, h: int) -> np.ndarray:
    """Step 6: upper bound of max − min of the head's output ``(y W_V + b_V + W_pos[q] W_V) W_O``
    per residual coordinate, over all tokens y and the IDs ``ids``."""
    token_out = I.matmul(I.affine(W.W_E, W.W_V[h], W.b_V[h]), W.W_O[h])
    pos_out = I.matmul(I.matmul(W.W_pos[ids], W.W_V[h]), W.W_O[h])
    top = I.up_add(token_out.hi.max(0), pos_out.hi.max(0))
    bottom = I.down(token_out.lo.min(0) + pos_out.lo.min(0))
    return I.up(top - bottom)


@dataclass
class HeadBounds:
    """Per answer position: S and the enclosed bounds for one head (upper ends)."""

    members: np.ndarray  # [Q, m] positions of S besides '$' (−1 padded)
    size: np.ndarray  # |S|
    eta: np.ndarray  # score spread inside S
    log_leak: np.ndarray  # log of the bound on the mass outside S relative to S
    gap: np.ndarray  # lower bound of min_S − best score outside S (report)
    range_out: np.ndarray  # [d] range of the head's output per residual coordinate


def head_bounds(W: Weights, L: Layout, h: int, pos_table: np.ndarray, m_max: int, cache: dict | None = None,
                extra_ids: np.ndarray | None = None) -> HeadBounds:
    """Steps 1–6 for every answer position; the query token is ``L.first_query_token`` (``=``) at
    the first answer position and any digit after it (one pass per distinct query row of W_E W_Q). ``cache`` keeps the value
    ranges, which do not depend on W_Q, W_K (the smallest-M search). ``extra_ids``: IDs that no key
    holds but a query may single out (their codes join the key alphabet, so the winning tuple can
    be one of them; the bound on the other IDs then sums over a superset, which stays sound);
    ``pos_table`` needs a row (−1 filled) for each of them."""
    q_pos = L.queries
    used = np.unique(L.ids)
    code_ids = used[used > 0] if extra_ids is None else np.union1d(used[used > 0], extra_ids)
    keys = position_key_alphabet(W, h, code_ids)
    query_rows = W.W_E @ W.W_Q[h]  # only to skip digits with identical query rows (exact comparison below)
    all_digits = L.digit_tokens
    digits = [t for i, t in enumerate(all_digits)
              if not any(np.array_equal(query_rows[t], query_rows[s]) for s in all_digits[:i])]
    variants = [(np.array([0]), L.first_query_token)] + [(np.arange(1, len(q_pos)), t) for t in digits]
    Q = len(q_pos)
    eta, log_leak, gap = np.full(Q, -np.inf), np.full(Q, -np.inf), np.full(Q, np.inf)
    members = np.full((Q, m_max), -1, dtype=np.int64)
    qstar_seen = np.full(Q, -2, dtype=np.int64)
    for rows, token in variants:
        alpha = query_vectors(W, h, L.ids[q_pos[rows]], token)
        scores = position_scores(alpha, keys)
        qstar, mem = attended_set(L, keys, scores, q_pos[rows], pos_table)
        if np.any((qstar_seen[rows] != -2) & (qstar_seen[rows] != qstar)):
            raise StructureError(f"head {h + 1}: the attended ID depends on the query's digit")
        qstar_seen[rows] = qstar
        members[rows] = np.sort(mem, axis=1)[:, ::-1]
        ll, et, gp = leak_and_spread(W, h, L, alpha, scores, mem, m_max)
        log_leak[rows] = np.maximum(log_leak[rows], ll)
        eta[rows] = np.maximum(eta[rows], et)
        gap[rows] = np.minimum(gap[rows], gp)
    cache = {} if cache is None else cache
    key = ("value_range", h, W.digest("W_E", "W_pos", "W_V", "b_V", "W_O"), used.tobytes())
    if key not in cache:
        cache[key] = value_range(W, used, h)
    return HeadBounds(members, (members >= 0).sum(1) + 1, eta, log_leak, gap, cache[key])
