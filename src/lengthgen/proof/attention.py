"""Attention bounds for one head of a 1-layer model with coupled positions, in interval arithmetic.

The attention half of the certificates for Theorem 5.1's addition and for copy/reverse. For one head and
every answer position (``=``, c_0 … c_n) of an input of a given format this module encloses the two
numbers a certificate needs (docs/certificate.md, "The argument"):

* the **leak** λ: the softmax mass outside the attended set S = {``$``} ∪ {visible keys at ID q*},
  relative to the mass on S, for *every* input of the format;
* the **spread** η: how far apart the scores inside S can be.

A query (token x, ID p) and a key (token y, ID q) score ``α·κ`` with ``α = scale·(x W_Q + W_pos[p]
W_Q + b_Q)`` and ``κ = y W_K + b_K + W_pos[q] W_K``, i.e. ``τ(y) + π(q)`` with the token part
``τ(y) = α·(y W_K + b_K)`` and the position part ``π(q) = α·(W_pos[q] W_K)``. The steps, one function
each:

1.–3. the position keys, the query vectors α and the position scores, with the bound on every ID
   but the attended one q* (:mod:`lengthgen.proof.keys`, shared by every construction's certificate);
4. :func:`attended_set` — the visible keys at q*;
5. :func:`leak_and_spread` — the token parts of the scores in S and outside it;
6. :func:`value_range` — the range of the head's output per residual coordinate (the leak and the
   spread move the output by at most TV·range).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from typing import Protocol

from . import interval as I
from .interval import Iv
from .keys import KeyAlphabet, PositionScores, position_key_alphabet, position_scores, query_vectors
from .weights import StructureError, Weights


class Layout(Protocol):
    """The input format a head is bounded on (keys only): per position its ID and role, the answer
    positions (``queries``), and the tokens: ``$`` at ID 0, the first answer position's token, the
    digits, the tokens each role may hold, and every token at a non-zero ID
    (``constructions.addition.certify.layout.Layout`` is one)."""

    ids: np.ndarray
    role: np.ndarray
    bos_token: int
    first_query_token: int
    digit_tokens: list[int]
    role_tokens: dict[int, list[int]]
    code_tokens: list[int]

    @property
    def queries(self) -> np.ndarray: ...


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
