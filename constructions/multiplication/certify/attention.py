"""One attention head of the multiplication certificate, in interval arithmetic (docs/multiplication.md,
"Certificate").

A query at position i with residual x_i and a key at position j score
``s_ij = scale·(x_i W_Q + b_Q)·(x_j W_K + b_K) = α_i·(κ_c(j) + π(id_j))``: the key's *content* part
κ_c (its token and what earlier layers wrote, one enclosure per content class c, deviations of the
earlier layers included) and its *position* part π(q) = W_pos[q] W_K. The ID relation enters only
through π, and it is handled as in the addition certificate (docs/certificate.md, "The argument",
steps 1 and 3; the functions are imported from :mod:`lengthgen.proof.attention`):
the entries of W_pos·W_K over the IDs of the format form a small alphabet per coordinate, the ID q*
holding the best entry in every coordinate is the one the query attends to, and all other IDs
together weigh at most ``∏_e (1 + G_e) − 1`` relative to it — without enumerating ID pairs. A head
whose keys do not depend on the ID at all (its W_K reads no position row that varies) is
*position-free*: every key is compared by content alone.

Per query this gives the score enclosure of every key class present (content class × "at q*"),
the attended set S (the classes within :data:`TIE_WIDTH` of the best), and upper bounds of
* the leak λ: the softmax mass outside S relative to S,
* the spread η: max − min of the scores inside S;
the attention is then within total variation ``TV ≤ λ + (e^η − 1)/4`` of uniform on S.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from lengthgen.proof import interval as I
from lengthgen.proof.keys import position_key_alphabet, position_scores
from lengthgen.proof.interval import Iv

from .weights import StructureError

#: classes whose score enclosure reaches within this of the best class's lower end form S (any
#: choice is sound: a bad S only makes the spread or the leak, hence the certificate, fail)
TIE_WIDTH = 1.0
MAX_MEMBERS = 8


@dataclass
class Keys:
    """Every key position of the sequence: its content class, its ID, and per class the content
    part of the residual (enclosure [C, d], hull over the class's tokens and earlier deviations)."""

    cls: np.ndarray
    ids: np.ndarray
    content: Iv
    pos_table: np.ndarray  # [max_id + 1, m] positions holding each ID, −1 padded
    m_max: int

    def class_positions(self) -> list[np.ndarray]:
        return [np.nonzero(self.cls == c)[0] for c in range(self.content.shape[0])]


@dataclass
class HeadResult:
    """Per query: the attended set (``in_s[i, c]``: class c belongs to S; ``count[i, c]``: how many
    of its visible keys the query compares at full weight), ``members`` (positions of S, −1 padded,
    for heads that select an ID), and the bounds aggregated over all queries (upper ends)."""

    position_free: bool
    in_s: np.ndarray
    count: np.ndarray
    members: np.ndarray | None
    size: np.ndarray
    leak: float
    spread_eta: float
    tv: float
    gap: float  # lower bound of min_S − (best score outside S), over queries (report)


def _hull_ok(a: np.ndarray) -> bool:
    return bool(np.all(a == a[:1]))


def head_attention(W_Q: np.ndarray, b_Q: np.ndarray, W_K: np.ndarray, b_K: np.ndarray, W_pos: np.ndarray,
                   scale: float, keys: Keys, q_pos: np.ndarray, q_content: Iv, q_cls: np.ndarray, name: str) -> HeadResult:
    """Bounds for one head at the queries ``q_pos``; the query residual at ``q_pos[k]`` is
    ``q_content[q_cls[k]] + W_pos[ids[q_pos[k]]]`` (content enclosure per query class)."""
    used = np.unique(keys.ids)
    support = np.nonzero(np.any(W_K != 0, axis=1))[0]
    position_free = _hull_ok(W_pos[used][:, support])
    q_ids, q_row = np.unique(keys.ids[q_pos], return_inverse=True)
    alpha = (I.affine(q_content, W_Q, b_Q)[q_cls] + I.matmul(W_pos[q_ids], W_Q)[q_row.reshape(-1)]) * scale
    kappa = I.affine(keys.content, W_K, b_K)  # [C, dh]
    C, Q = kappa.shape[0], len(q_pos)
    if position_free:
        kappa = kappa + I.matmul(W_pos[used[:1]], W_K)
        scores = I.matmul(alpha, Iv(kappa.lo.T, kappa.hi.T))  # [Q, C]
        count = np.zeros((Q, C), dtype=np.int64)
        for c, where in enumerate(keys.class_positions()):
            count[:, c] = np.searchsorted(where, q_pos, side="right")
        log_others, rest, members = np.full(Q, -np.inf), np.full(Q, -np.inf), None
        runner_up = rest
    else:
        bos = np.nonzero(keys.ids == 0)[0]
        if len(bos) != 1 or bos[0] != 0:
            raise StructureError(f"{name}: ID 0 must be held by the first token alone")
        code_ids = used[used > 0]
        try:
            alphabet = position_key_alphabet(SimpleNamespace(W_pos=W_pos, W_K=W_K[None]), 0, code_ids)
        except StructureError as err:
            raise StructureError(f"{name}: {str(err).split(': ', 1)[-1]}") from None
        ps = position_scores(alpha, alphabet)
        where = np.minimum(np.searchsorted(alphabet.sorted_codes, ps.top_code), len(code_ids) - 1)
        found = (alphabet.sorted_codes[where] == ps.top_code) & ~ps.tie
        qstar = np.where(found, code_ids[alphabet.order[where]], -1)
        content_scores = I.matmul(alpha, Iv(kappa.lo.T, kappa.hi.T))  # [Q, C]
        scores = content_scores + ps.best[:, None]
        bos_cls = keys.cls[0]
        if np.count_nonzero(keys.cls == bos_cls) != 1:  # its column gets the first token's score alone
            raise StructureError(f"{name}: the first token's content class must hold it alone")
        bos_score = I.matmul(alpha, _bos_key(W_pos, W_K, keys, kappa))[:, 0]
        scores = Iv(scores.lo.copy(), scores.hi.copy())
        scores.lo[:, bos_cls], scores.hi[:, bos_cls] = bos_score.lo, bos_score.hi
        cand = keys.pos_table[np.maximum(qstar, 0)]
        visible = (qstar[:, None] >= 0) & (cand >= 0) & (cand <= q_pos[:, None])
        members = np.where(visible, cand, -1)
        count = np.zeros((Q, C), dtype=np.int64)
        rows = np.repeat(np.arange(Q), members.shape[1])
        flat = members.reshape(-1)
        np.add.at(count, (rows[flat >= 0], keys.cls[flat[flat >= 0]]), 1)
        count[:, bos_cls] += 1
        log_others = ps.log_others
        others = np.delete(content_scores.hi, bos_cls, axis=1) if C > 1 else np.full((Q, 1), -np.inf)
        rest = I.up_add(others.max(1), ps.best.hi)  # best content + π(q*) of a key at another ID
        runner_up = I.up(rest - ps.min_gap)  # a key at another ID scores at most this
    # a NaN end point (inf − inf where a score's float64 enclosure overflowed) bounds nothing
    scores = Iv(I.lower_bound(scores.lo), I.upper_bound(scores.hi))
    present = count > 0
    lo_top = np.where(present, scores.lo, -np.inf).max(1)
    in_s = present & (scores.hi >= (lo_top - TIE_WIDTH)[:, None])
    min_s = np.where(in_s, scores.lo, np.inf).min(1)
    max_s = np.where(in_s, scores.hi, -np.inf).max(1)
    size = (count * in_s).sum(1)
    eta = float(np.where(size > 1, I.up(max_s - min_s), 0.0).max())  # one key alone has no spread
    out = present & ~in_s
    n_out = int((count * out).sum(1).max())
    top_out = I.up(np.where(out, scores.hi, -np.inf).max(1) - min_s)
    log_rest = I.upper_bound(I.up_add(rest, -min_s, log_others))  # −inf: no key at another ID
    if members is not None:
        keep = (members >= 0) & in_s[np.arange(Q)[:, None], keys.cls[np.maximum(members, 0)]]
        members = np.where(keep, members, -1)
    parts = [0.0]
    if n_out:
        parts.append(float(I.up(n_out * I.exp(Iv.exact(np.array([top_out.max()]))).hi[0])))
    if log_rest.max() > -np.inf:  # +inf (an overflowed score) bounds nothing: the leak is then inf
        parts.append(float(I.up(keys.m_max * I.exp(Iv.exact(np.array([log_rest.max()]))).hi[0])))
    leak = float(I.up_add(*parts)) if len(parts) > 1 else 0.0
    spread = float(I.up(I.expm1(Iv.exact(np.array([eta]))).hi[0] / 4))
    tv = min(1.0, float(I.up_add(leak, spread)))
    best_out = np.maximum(np.where(out, scores.hi, -np.inf).max(1), runner_up)
    gap = float(I.down(min_s - best_out).min())
    return HeadResult(position_free, in_s, count, members, size, leak, eta, tv, gap)


def _bos_key(W_pos: np.ndarray, W_K: np.ndarray, keys: Keys, kappa: Iv) -> Iv:
    """κ of the first token (ID 0): its content class plus W_pos[0] W_K, as [dh, 1]."""
    k = kappa[keys.cls[0]] + I.matmul(W_pos[0], W_K)
    return Iv(k.lo[:, None], k.hi[:, None])
