"""All-inputs certificate for Theorem 5.1's construction at operand length N (issue 3, item 2).

Design note §3.9 argues: each head's attention is uniform over a known key set S up to a softmax
leak, and the FFN has fixed margins. This module turns that into a check that covers *every* input
of length N and every answer position (``=``, c_0 … c_N), reading everything from the weights the
model holds (``W_E, W_pos, W_Q, W_K, b_Q, b_K, W_V, W_O, W_in, W_out, W_U`` and biases):

1. **Scores.** A query (token x, ID p) and a key (token y, ID q) score ``α·κ`` with
   ``α = scale·(x W_Q + W_pos[p] W_Q + b_Q)``, ``κ = y W_K + b_K + W_pos[q] W_K``. Per query the
   certificate finds the best position vector ``b*`` coordinate by coordinate over the values
   ``K_e`` that column e of ``W_pos W_K`` takes on the IDs the format uses, and the ID q* that
   holds it. S = {``$``} ∪ {visible keys with ID q*}.
2. **Leak, for every input.** The key vectors of distinct IDs are checked to be distinct, so the
   other IDs contribute at most ``∏_e F_e − 1`` with ``F_e = Σ_{v∈K_e} e^{α_e v − max}`` — for
   the hypercube code this is ``Σ_{h≥1} C(P,h)·e^{−2M·h}``, the count of IDs at Hamming distance h
   weighted by their score gap. With at most m keys per ID (the format's multiplicity) the mass
   outside S is ``λ ≤ m·e^{T + π* − s_min(S)}·(∏F − 1)/|S|``. Scores inside S differ by at most η
   (float32 weights break the design's exact ties), so the attention is within total variation
   ``TV ≤ λ + (e^η − 1)/4`` of uniform on S (the two-level extreme point of the simplex).
3. **Values.** Each head's output moves by at most ``TV·range`` per residual coordinate, the range
   of its ``(y W_V + b_V + W_pos[q] W_V) W_O`` over all tokens and IDs: the PRE_SUM, PRE_CARRY and
   PRE_EOS bounds. The float term (:mod:`constructions.addition.certify.rounding`) is added for the dtype.
4. **FFN.** Query positions are grouped into classes with the same S pattern relative to the
   query; for each class every *local configuration* (the digits S reads, the query's digit and a
   carry bit — up to 20 000 cases) is evaluated at the hard-max limit, and the FFN is checked to be
   ReLU-stable and to keep the right argmax within the bound box
   (:mod:`constructions.addition.certify.ffn`).

Every input of length N maps each answer position to one class and one configuration, so PASS is
a statement about all 10^{2N} inputs. Position IDs start at s = ``START_ID`` (the theorem's s = 2).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from lengthgen.model import Transformer
from lengthgen.positions import coupled_addition_ids
from lengthgen.tasks import ADDITION

from ..model import START_ID, position_dims
from .ffn import (ROLE_A, ROLE_B, ROLE_BOS, ROLE_C, ROLE_EQ, ROLE_PLUS, ClassSpec, LocalityError, ffn_check,
                          ffn_tables)
from .rounding import FloatTerms, attention_float_terms, zero_terms
from .interval import interval_check

DIGITS = [ADDITION.vocabulary[str(k)] for k in range(10)]
BOS, PLUS, EQ = ADDITION.BOS, ADDITION.PLUS, ADDITION.EQUALS
MAX_CODE_VALUES = 16


class StructureError(ValueError):
    """The weights do not have the structure the certificate relies on (it then FAILs)."""


@dataclass
class Weights:
    """float64 copies of a 1-layer model's parameters (exact: every float format embeds in float64)."""

    W_E: np.ndarray
    W_pos: np.ndarray
    W_Q: np.ndarray
    b_Q: np.ndarray
    W_K: np.ndarray
    b_K: np.ndarray
    W_V: np.ndarray
    b_V: np.ndarray
    W_O: np.ndarray
    b_O: np.ndarray
    W_in: np.ndarray
    b_in: np.ndarray
    W_out: np.ndarray
    b_out: np.ndarray
    W_U: np.ndarray
    b_U: np.ndarray
    scale: float
    dtype: str
    labels: list[str]
    mlp_labels: list[str]

    @classmethod
    def from_model(cls, model: Transformer) -> "Weights":
        cfg = model.cfg
        if cfg.n_layers != 1 or cfg.normalization is not None or cfg.act_fn != "relu" or cfg.positional != "learned" \
                or cfg.attn_windows is not None or cfg.d_mlp == 0:
            raise StructureError("the certificate covers 1-layer, ReLU, LayerNorm-free models with learned positions")
        f = lambda t: t.detach().to("cpu", torch.float64).numpy().copy()
        a, m = model.blocks[0].attn, model.blocks[0].mlp
        labels = model.annotations.residual or [f"r{i}" for i in range(cfg.d_model)]
        mlp_labels = model.annotations.mlp or [f"unit {i}" for i in range(cfg.d_mlp)]
        return cls(f(model.embed.W_E), f(model.pos_embed.W_pos), f(a.W_Q), f(a.b_Q), f(a.W_K), f(a.b_K), f(a.W_V),
                   f(a.b_V), f(a.W_O), f(a.b_O), f(m.W_in), f(m.b_in), f(m.W_out), f(m.b_out), f(model.unembed.W_U),
                   f(model.unembed.b_U), float(cfg.score_scale), cfg.dtype, list(labels), list(mlp_labels))

    def digest(self, *names: str) -> str:
        h = hashlib.sha1()
        for name in names:
            h.update(np.ascontiguousarray(getattr(self, name)).tobytes())
        return h.hexdigest()


@dataclass
class Layout:
    """The format ``$ a + b = c`` for operand length n (§1.1), keys only (the final ``$`` is never read)."""

    n: int
    start: int
    ids: np.ndarray
    role: np.ndarray
    sig: np.ndarray

    @classmethod
    def build(cls, n: int, start: int = START_ID) -> "Layout":
        ids = coupled_addition_ids(n, start)[:-1]
        role = np.concatenate([[ROLE_BOS], np.full(n, ROLE_A), [ROLE_PLUS], np.full(n, ROLE_B), [ROLE_EQ],
                               np.full(n + 1, ROLE_C)])
        sig = np.concatenate([[-1], np.arange(n - 1, -1, -1), [-1], np.arange(n - 1, -1, -1), [-1], np.arange(n + 1)])
        return cls(n, start, ids.astype(np.int64), role.astype(np.int64), sig.astype(np.int64))

    @property
    def queries(self) -> np.ndarray:
        """Positions whose prediction belongs to the answer: ``=`` and c_0 … c_n."""
        return np.arange(2 * self.n + 2, 3 * self.n + 4)

    def positions_by_id(self) -> tuple[np.ndarray, int]:
        """[max_id + 1, m] table of the positions (≥ 1) holding each ID, −1 padded; m = max multiplicity."""
        pos = np.arange(1, len(self.ids))
        order = np.argsort(self.ids[1:], kind="stable")
        sid, spos = self.ids[1:][order], pos[order]
        first = np.searchsorted(sid, sid, side="left")
        rank = np.arange(len(sid)) - first
        m = int(rank.max()) + 1
        table = np.full((int(self.ids.max()) + 1, m), -1, dtype=np.int64)
        table[sid, rank] = spos
        return table, m


@dataclass
class HeadBounds:
    """Per query (answer position) bounds for one head."""

    members: np.ndarray  # [Q, m] positions of S besides '$' (−1 padded)
    size: np.ndarray  # |S|
    eta: np.ndarray  # score spread inside S (exact weights, before the float term)
    log_leak: np.ndarray  # log of the bound on the mass outside S (exact weights)
    gap: np.ndarray  # s_min(S) − best score outside S (for the report)
    log_rpos: np.ndarray  # log(∏F − 1) or log of the tie-case sum
    range_out: np.ndarray  # [d] range of the head's output per residual coordinate


def _head_bounds(W: Weights, L: Layout, h: int, pos_table: np.ndarray, m_max: int) -> HeadBounds:
    q_pos = L.queries
    used = np.unique(L.ids)
    code = used[used > 0]
    kE = W.W_E @ W.W_K[h] + W.b_K[h]
    qE = W.W_E @ W.W_Q[h] + W.b_Q[h]
    kP = W.W_pos[code] @ W.W_K[h]
    kP0 = W.W_pos[0] @ W.W_K[h]
    values = [np.unique(kP[:, e]) for e in range(kP.shape[1])]
    if max(len(v) for v in values) > MAX_CODE_VALUES:
        raise StructureError(f"head {h + 1}: a key coordinate takes more than {MAX_CODE_VALUES} values over the IDs")
    radix = [len(v) for v in values]
    if sum(math.log2(r) for r in radix) > 62:
        raise StructureError(f"head {h + 1}: position key vectors span more than 2^62 combinations")
    key_code = np.zeros(len(code), dtype=np.int64)  # mixed-radix index of each ID's key vector in ∏ K_e
    for e, vals_e in enumerate(values):
        key_code = key_code * radix[e] + np.searchsorted(vals_e, kP[:, e])
    order = np.argsort(key_code, kind="stable")
    sorted_codes = key_code[order]
    if len(code) > 1 and np.any(sorted_codes[1:] == sorted_codes[:-1]):
        i = int(np.nonzero(sorted_codes[1:] == sorted_codes[:-1])[0][0])
        raise StructureError(f"head {h + 1}: position IDs {code[order[i]]} and {code[order[i + 1]]} have the same "
                             "key vector (W_pos·W_K is not injective on the IDs the format uses)")
    qP = W.W_pos[L.ids[q_pos]] @ W.W_Q[h]
    # query token rows: '=' for the first query, digits otherwise (one variant per distinct row)
    digit_rows = np.unique(qE[DIGITS], axis=0)
    variants = [(np.array([0]), qE[EQ])] + [(np.arange(1, len(q_pos)), row) for row in digit_rows]
    Q = len(q_pos)
    out = {k: np.full(Q, -np.inf) for k in ("eta", "log_leak", "log_rpos")}
    gap = np.full(Q, np.inf)
    members = np.full((Q, m_max), -1, dtype=np.int64)
    qstar_seen = np.full(Q, -2, dtype=np.int64)
    role_tok = {ROLE_A: DIGITS, ROLE_B: DIGITS, ROLE_C: DIGITS, ROLE_PLUS: [PLUS], ROLE_EQ: [EQ]}
    code_tokens = DIGITS + [PLUS, EQ]
    for rows, qrow in variants:
        alpha = W.scale * (qrow[None, :] + qP[rows])
        best, log_g, log_f = np.zeros(len(rows)), np.zeros(len(rows)), np.zeros(len(rows))
        tie = np.zeros(len(rows), dtype=bool)
        second = np.full(len(rows), np.inf)
        bcode = np.zeros(len(rows), dtype=np.int64)
        for e, vals_e in enumerate(values):  # per coordinate, on the few distinct values of α_e
            a_e, inv = np.unique(alpha[:, e], return_inverse=True)
            vals = a_e[:, None] * vals_e[None, :]
            top = vals.max(1)
            is_top = vals == top[:, None]
            rel = np.exp(vals - top[:, None])
            tie |= (is_top.sum(1) > 1)[inv]
            second = np.minimum(second, (top - np.where(is_top, -np.inf, vals).max(1))[inv])
            log_g += np.log1p(np.where(is_top, 0.0, rel).sum(1))[inv]
            log_f += np.log(rel.sum(1))[inv]
            best += top[inv]
            bcode = bcode * radix[e] + vals.argmax(1)[inv]
        with np.errstate(divide="ignore"):
            log_rpos = np.where(tie, np.minimum(log_f, math.log(len(code))),
                                np.log(np.minimum(np.expm1(log_g), len(code) * np.exp(-second))))
        where = np.minimum(np.searchsorted(sorted_codes, bcode), len(code) - 1)
        found = (sorted_codes[where] == bcode) & ~tie
        qstar = np.where(found, code[order[where]], -1)
        tau = alpha @ kE.T
        s_bos = tau[:, BOS] + alpha @ kP0
        cand = pos_table[np.maximum(qstar, 0)] if len(pos_table) else np.full((len(rows), m_max), -1)
        cand = np.where((qstar[:, None] >= 0) & (cand >= 0) & (cand <= q_pos[rows][:, None]), cand, -1)
        s_hi, s_lo = s_bos.copy(), s_bos.copy()
        for role, toks in role_tok.items():
            hit = (cand >= 0) & (L.role[np.maximum(cand, 0)] == role)
            lo, hi = best + tau[:, toks].min(1), best + tau[:, toks].max(1)
            s_hi = np.where(hit.any(1), np.maximum(s_hi, hi), s_hi)
            s_lo = np.where(hit.any(1), np.minimum(s_lo, lo), s_lo)
        size = 1 + (cand >= 0).sum(1)
        t_code = tau[:, code_tokens].max(1)
        log_leak = math.log(m_max) + log_rpos + (t_code + best - s_lo) - np.log(size)
        out["eta"][rows] = np.maximum(out["eta"][rows], s_hi - s_lo)
        out["log_leak"][rows] = np.maximum(out["log_leak"][rows], log_leak)
        out["log_rpos"][rows] = np.maximum(out["log_rpos"][rows], log_rpos)
        gap[rows] = np.minimum(gap[rows], s_lo - (t_code + best - np.where(tie, 0.0, second)))
        if np.any((qstar_seen[rows] != -2) & (qstar_seen[rows] != qstar)):
            raise StructureError(f"head {h + 1}: the attended ID depends on the query's digit")
        qstar_seen[rows] = qstar
        members[rows] = np.sort(cand, axis=1)[:, ::-1]
    oE = (W.W_E @ W.W_V[h] + W.b_V[h]) @ W.W_O[h]
    oP = W.W_pos[used] @ W.W_V[h] @ W.W_O[h]
    range_out = (oE.max(0) + oP.max(0)) - (oE.min(0) + oP.min(0))
    return HeadBounds(members, (members >= 0).sum(1) + 1, out["eta"], out["log_leak"], gap, out["log_rpos"], range_out)


def _group_rows(rows: np.ndarray) -> np.ndarray:
    """Group index of each row (rows with identical bytes share one), in order of first appearance."""
    rows = np.ascontiguousarray(rows)
    seen: dict[bytes, int] = {}
    return np.array([seen.setdefault(r.tobytes(), len(seen)) for r in rows], dtype=np.int64)


@dataclass
class Certificate:
    """Outcome of :func:`certify`. ``reason`` is "" on PASS, else one of ``structure`` (the weights
    lack the structure the argument needs), ``hardmax`` (the hard-max limit itself is wrong),
    ``leak`` / ``spread`` / ``float`` (the FFN margin is exceeded, mainly because of the softmax
    leak, of unequal scores inside S, or of floating-point rounding)."""

    n: int
    d_model: int
    P: int
    dtype: str
    passed: bool
    reason: str
    message: str
    heads: list[dict] = field(default_factory=list)
    deltas: dict[str, dict[str, float]] = field(default_factory=dict)
    classes: list[tuple[str, int, int, object]] = field(default_factory=list)
    float_terms: FloatTerms | None = None
    slack: float = 0.0


def _fail(n: int, W: Weights, dtype: str, reason: str, message: str, **kw) -> Certificate:
    P = (W.W_E.shape[1] - 17) // 2
    return Certificate(n, W.W_E.shape[1], P, dtype, False, reason, message, **kw)


def certify(model: Transformer, n: int, dtype: str | None = None, start: int = START_ID,
            cache: dict | None = None, interval: bool = True) -> Certificate:
    """Certify that ``model`` predicts every answer token of every ``n``-digit addition.

    ``dtype``: the arithmetic to certify — the model's own dtype by default, or "real" for exact
    real arithmetic (no float term). ``cache`` (a dict) keeps the M-independent FFN tables between
    calls on models that differ only in W_Q/W_K (the smallest-M search). ``interval`` re-derives the
    binding bounds in mpmath intervals (:mod:`constructions.addition.certify.interval`)."""
    W = Weights.from_model(model)
    dtype = dtype or W.dtype
    if start + n >= model.cfg.n_ctx:
        raise ValueError(f"{n}-digit operands need position IDs up to {start + n}; the model's table stops at "
                         f"{model.cfg.n_ctx - 1}")
    cache = {} if cache is None else cache
    L = Layout.build(n, start)
    table, m_max = L.positions_by_id()
    H = W.W_Q.shape[0]
    try:
        heads = [_head_bounds(W, L, h, table, m_max) for h in range(H)]
    except StructureError as err:
        return _fail(n, W, dtype, "structure", str(err))
    lam_exact = [np.minimum(1.0, np.exp(np.minimum(hb.log_leak, 1.0))) for hb in heads]
    ft = zero_terms(W.W_E.shape[1], W.W_in.shape[1]) if dtype == "real" else attention_float_terms(
        W, dtype, len(L.ids), int(max(hb.size.max() for hb in heads)))
    if ft.overflow:
        return _fail(n, W, dtype, "float", f"{dtype} overflow: {ft.overflow}", float_terms=ft)
    pos_abs = np.abs(W.W_pos).max(0)
    smag = max(abs(W.scale) * float(np.sum((np.abs(W.W_E @ W.W_Q[h] + W.b_Q[h]).max(0) + pos_abs @ np.abs(W.W_Q[h]))
                                          * (np.abs(W.W_E @ W.W_K[h] + W.b_K[h]).max(0) + pos_abs @ np.abs(W.W_K[h]))))
               for h in range(H))
    arith = 64 * (W.W_E.shape[1] + W.W_Q.shape[2]) * 2.0**-53 * smag  # our own float64 score arithmetic
    pert = ft.score_error + arith
    parts = []  # per head: (leak, spread, float) TV parts per query
    for hb, lam in zip(heads, lam_exact):
        # total variation never exceeds 1, so each part is clamped there (also keeps inf/nan out)
        lam_f = np.minimum(1.0, np.exp(np.minimum(hb.log_leak + 2 * pert, 1.0)))
        spread = np.minimum(1.0, np.expm1(np.minimum(hb.eta, 10.0)) / 4)
        spread_f = np.minimum(1.0, np.expm1(np.minimum(hb.eta + 2 * pert, 10.0)) / 4)
        parts.append({"leak": lam, "spread": spread, "float": (lam_f - lam) + (spread_f - spread), "lam_f": lam_f})
    # classes of answer positions: same S pattern relative to the query and same positional effect
    Q = len(L.queries)
    k = np.arange(Q) - 1
    fields = [k == -1, k == 0, k == n - 1, k == n]
    resid_pos = W.W_pos[L.ids[L.queries]].copy()
    for h, hb in enumerate(heads):
        oP = W.W_pos @ W.W_V[h] @ W.W_O[h]
        mem = hb.members
        ids = np.where(mem >= 0, L.ids[np.maximum(mem, 0)], -1)
        resid_pos += (oP[0] + np.where((ids >= 0)[..., None], oP[np.maximum(ids, 0)], 0).sum(1)) / hb.size[:, None]
        fields += [L.role[np.maximum(mem, 0)] * (mem >= 0), np.where(mem >= 0, L.sig[np.maximum(mem, 0)] - k[:, None], 0)]
    effect = np.concatenate([resid_pos @ W.W_in, resid_pos @ W.W_U], axis=1)
    sig = np.concatenate([np.column_stack([f.astype(np.int64) for f in fields if f.ndim == 1])]
                         + [f.astype(np.int64) for f in fields if f.ndim == 2], axis=1)
    group_key = ("classes", hashlib.sha1(sig.tobytes() + effect.tobytes()).hexdigest())
    if group_key not in cache:  # the grouping depends only on S patterns and positional effects
        cls = _group_rows(np.column_stack([sig, _group_rows(effect)]))
        cache[group_key] = (cls, [int(np.argmax(cls == c)) for c in range(int(cls.max()) + 1)])
    cls, reps = cache[group_key]
    n_cls = len(reps)
    keys = [sig[i] for i in reps]
    coords = np.nonzero(sum(hb.range_out for hb in heads) + ft.resid_error + ft.tail_base > 0)[0]
    deltas = {src: np.zeros((n_cls, W.W_E.shape[1])) for src in ("leak", "spread", "float")}
    for hb, part in zip(heads, parts):
        for src in ("leak", "spread", "float"):
            worst = np.zeros(n_cls)
            np.maximum.at(worst, cls, part[src])
            deltas[src] += worst[:, None] * hb.range_out[None, :]
    lam_worst = np.zeros(n_cls)
    for part in parts:
        np.maximum.at(lam_worst, cls, part["lam_f"])
    deltas["float"] += ft.resid_error[None, :] + ft.tail(lam_worst)
    if not (all(np.all(np.isfinite(v)) for v in deltas.values()) and np.all(np.isfinite(ft.pre_error))
            and math.isfinite(ft.logit_error)):
        return _fail(n, W, dtype, "float", "a bound is not finite (overflow in the float term)", float_terms=ft)
    digest = W.digest("W_E", "W_V", "b_V", "W_O", "b_O", "W_in", "b_in", "W_out", "b_out", "W_U", "b_U")
    classes, slack, failure = [], math.inf, None
    for c in range(n_cls):
        i = reps[c]
        members = tuple(((ROLE_BOS, -1, 0),) + tuple((int(L.role[p]), int(L.sig[p]), int(L.ids[p]))
                                                    for p in hb.members[i] if p >= 0) for hb in heads)
        spec = ClassSpec(n, int(k[i]), int(L.ids[L.queries[i]]), members)
        key = (digest, n, keys[c].tobytes(), effect[i].tobytes(), coords.tobytes())
        try:
            if key not in cache:
                cache[key] = ffn_tables(W, spec, resid_pos[i], coords)
        except LocalityError as err:
            return _fail(n, W, dtype, "structure", str(err), float_terms=ft)
        tables = cache[key]
        if tables.hardmax_error:
            return _fail(n, W, dtype, "hardmax", tables.hardmax_error, float_terms=ft)
        check = ffn_check(tables, {s: deltas[s][c] for s in deltas}, ft.pre_error, ft.logit_error, W.mlp_labels)
        classes.append((spec.describe(), int(np.sum(cls == c)), tables.n_configs, check))
        if check.slack < slack:
            slack = check.slack
            if slack <= 1:
                failure = (max(check.parts, key=check.parts.get), spec.describe(), check)
    interval = interval_check(W, L, heads, parts, cls, k, m_max, pert, cache) if interval else [None] * H
    labels = W.labels
    worst = {labels[r]: {s: float(deltas[s][:, r].max()) for s in deltas} for r in coords}
    head_info = []
    for h, (hb, part) in enumerate(zip(heads, parts)):
        head_info.append({"sizes": sorted(set(int(x) for x in hb.size)), "gap": float(hb.gap.min()),
                          "leak": float(part["leak"].max()), "eta": float(hb.eta.max()),
                          "tv": float((part["leak"] + part["spread"] + part["float"]).max()),
                          "rpos": float(np.exp(hb.log_rpos.max())), "interval": interval[h]})
    cert = Certificate(n, W.W_E.shape[1], position_dims(W.W_E.shape[1]), dtype, failure is None, "", "PASS",
                       head_info, worst, classes, ft, slack)
    if failure:
        src, where, check = failure
        cert.reason = src
        cert.message = (f"{where}: {check.where} needs more than its margin allows (slack ×{check.slack:.3g}); "
                        f"the requirement is mostly {src} ("
                        + ", ".join(f"{s} {v:.3g}" for s, v in check.parts.items()) + ")")
    return cert
