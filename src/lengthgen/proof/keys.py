"""Position keys and position scores of one attention head, in interval arithmetic.

The part of an attention bound that every coupled-position certificate shares (Theorem 5.1's
addition, copy and reverse, N×2 multiplication; docs/certificate.md, "The argument"). A query
(token x, ID p) scores a key (token y, ID q) as ``α·κ`` with ``α = scale·(x W_Q + W_pos[p] W_Q + b_Q)``
and ``κ = y W_K + b_K + W_pos[q] W_K``; the position part ``π(q) = α·(W_pos[q] W_K)`` is bounded here:

1. :func:`position_key_alphabet`: column e of ``W_pos W_K`` takes few values ``K_e`` on the IDs the
   format uses; each ID is a tuple of entries, and distinct IDs must be distinct tuples;
2. :func:`query_vectors`: α for given query IDs and one query token;
3. :func:`position_scores`: per coordinate the entry v*_e with the largest α_e·v; the ID q* holding
   the tuple (v*_e) is the one the head attends to, and every other ID scores
   ``π(q) − π(q*) = Σ_e α_e (k_qe − v*_e)``, so ``Σ_{q≠q*} e^{π(q)−π(q*)} ≤ ∏_e (1 + G_e) − 1`` with
   ``G_e = Σ_{v ≠ v*_e} e^{α_e (v − v*_e)}`` (for the hypercube code: Σ_h C(P,h)·e^{−2M·h}).

The weights are read from a :class:`lengthgen.proof.weights.Weights`-like object (``W_E``, ``W_pos``,
``W_Q``, ``b_Q``, ``W_K`` indexed by head, ``scale``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import interval as I
from .interval import Iv
from .weights import StructureError

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


def position_key_alphabet(W, h: int, code_ids: np.ndarray) -> KeyAlphabet:
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


def query_vectors(W, h: int, query_ids: np.ndarray, token: int) -> Iv:
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
