"""All-inputs certificate for Theorem 5.1's construction at operand length N (docs/certificate.md).

Each head's attention is uniform over a known key set S up to a softmax leak, and the FFN has
fixed decision margins (docs/theorem-5-1.md, "Error bound"). This module turns that into a check
that covers *every* input of length N and every answer position (``=``, c_0 … c_N), reading
everything from the weights the model holds (``W_E, W_pos, W_Q, W_K, W_V, W_O, W_in, W_out, W_U``
and biases). Every number it compares with a margin is an interval enclosure
(:mod:`lengthgen.proof.interval`):

1. **Attention** (:mod:`lengthgen.proof.attention`): per answer position and head,
   upper bounds of the leak λ (mass outside S relative to S) and of the score spread η inside S;
   the attention is then within total variation ``TV ≤ λ + (e^η − 1)/4`` of uniform on S.
2. **Values.** Each head's output moves by at most ``TV·range`` per residual coordinate, the range
   of its ``(y W_V + b_V + W_pos[q] W_V) W_O`` over all tokens and IDs: the PRE_SUM, PRE_CARRY and
   PRE_EOS bounds. The float term of the dtype (:mod:`lengthgen.proof.rounding`)
   is added.
3. **FFN** (:mod:`constructions.addition.certify.ffn`): answer positions are grouped into classes
   with the same S pattern relative to the query and the same positional effect on the FFN and the
   readout; for each class every *local configuration* (the digits S reads, the query's digit and
   a carry bit — up to 20 000 cases) is evaluated at the hard-max limit, and the FFN is checked to
   be ReLU-stable and to keep the right argmax within the bound box.

Every input of length N maps each answer position to one class and one configuration, so PASS is
a statement about all 10^{2N} inputs. Position IDs start at s = ``START_ID`` (the theorem's s = 2).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from lengthgen.model import Transformer
from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv
from lengthgen.proof.rounding import FloatTerms, attention_float_terms, zero_terms
from lengthgen.proof.weights import StructureError, Weights, group_rows

from ..model import START_ID, position_dims
from lengthgen.proof.attention import HeadBounds, head_bounds
from .ffn import ROLE_BOS, ClassSpec, LocalityError, ffn_check, ffn_tables, local_inputs_digest
from .layout import Layout

__all__ = ["Certificate", "Layout", "StructureError", "Weights", "certify", "position_effect", "tv_parts"]


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
    d = W.W_E.shape[1]
    return Certificate(n, d, position_dims(d), dtype, False, reason, message, **kw)


def _class_max(values: np.ndarray, cls: np.ndarray, n_cls: int) -> np.ndarray:
    worst = np.full(n_cls, -np.inf)
    np.maximum.at(worst, cls, values)
    return worst


def tv_parts(hb: HeadBounds, cls: np.ndarray, n_cls: int, pert: float) -> dict[str, np.ndarray]:
    """Per class: upper bounds of the leak λ and of the spread part (e^η − 1)/4 of the total
    variation, in exact arithmetic and with every score moved by ``pert`` (the float part is the
    difference, so leak + spread + float bounds the perturbed TV). Each is clamped at 1."""
    log_leak, eta = _class_max(hb.log_leak, cls, n_cls), _class_max(hb.eta, cls, n_cls)
    shift = float(I.up(2 * pert))
    leak = np.minimum(1.0, I.exp(Iv(log_leak, log_leak)).hi)
    leak_f = np.minimum(1.0, I.exp(Iv.exact(I.up(log_leak + shift))).hi)
    spread = np.minimum(1.0, (I.expm1(Iv(eta, eta)) / 4.0).hi)  # Iv division steps outward, subnormals too
    spread_f = np.minimum(1.0, (I.expm1(Iv.exact(I.up(eta + shift))) / 4.0).hi)
    return {"leak": leak, "spread": spread, "float": I.up_add(I.up(leak_f - leak), I.up(spread_f - spread)),
            "lam_f": leak_f}


def position_effect(W: Weights, L: Layout, heads: list[HeadBounds]) -> Iv:
    """Enclosure of the position-dependent part of the hard-max residual at each answer position:
    W_pos[query] plus, per head, the mean of ``W_pos[q] W_V W_O`` over S (``$`` has ID 0)."""
    ids_q = L.ids[L.queries]
    resid = Iv.exact(W.W_pos[ids_q])
    for h, hb in enumerate(heads):
        used = np.unique(np.concatenate([[0], L.ids[hb.members[hb.members >= 0]]]))
        out = I.matmul(I.matmul(W.W_pos[used], W.W_V[h]), W.W_O[h])
        row = np.searchsorted(used, np.where(hb.members >= 0, L.ids[np.maximum(hb.members, 0)], 0))
        keep = (hb.members >= 0)[..., None]
        terms = Iv(np.where(keep, out.lo[row], 0.0), np.where(keep, out.hi[row], 0.0))
        resid = resid + (terms.sum(1) + out[np.searchsorted(used, 0)][None]) / hb.size[:, None].astype(np.float64)
    return resid


def class_signature(L: Layout, heads: list[HeadBounds], n: int) -> np.ndarray:
    """One integer row per answer position (query ``k + 1`` predicts ``c_k``; ``k = -1`` is the
    query ``=``): the flags of the four query kinds whose local configurations differ from the
    interior's (``=``, whose token is not a digit; c_0, with no carry below; c_{n-1} and c_n, at
    the operands' top), then per head the role and significance relative to ``k`` of every key
    the head may attend. Positions with equal rows (and equal positional effects) form one class,
    which :func:`certify` checks at one representative."""
    k = np.arange(len(L.queries)) - 1
    fields = [k == -1, k == 0, k == n - 1, k == n]
    for hb in heads:
        mem = hb.members
        fields += [L.role[np.maximum(mem, 0)] * (mem >= 0), np.where(mem >= 0, L.sig[np.maximum(mem, 0)] - k[:, None], 0)]
    return np.concatenate([np.column_stack([f.astype(np.int64) for f in fields if f.ndim == 1])]
                          + [f.astype(np.int64) for f in fields if f.ndim == 2], axis=1)


def certify(model: Transformer, n: int, dtype: str | None = None, start: int = START_ID,
            cache: dict | None = None) -> Certificate:
    """Certify that ``model`` predicts every answer token of every ``n``-digit addition.

    ``dtype``: the arithmetic to certify — the model's own dtype by default, or "real" for exact
    real arithmetic (no float term). ``cache`` (a dict) keeps the M-independent FFN tables between
    calls on models that differ only in W_Q/W_K (the smallest-M search), and between lengths: a
    table is keyed by everything it is computed from (the weights it reads, the token arrays of
    its local configurations, the positional effect and the perturbed coordinates)."""
    try:
        W = Weights.from_model(model)
    except StructureError as err:
        d = model.cfg.d_model
        return Certificate(n, d, position_dims(d), dtype or model.cfg.dtype, False, "structure", str(err))
    dtype = dtype or W.dtype
    if start + n >= model.cfg.n_ctx:
        raise ValueError(f"{n}-digit operands need position IDs up to {start + n}; the model's table stops at "
                         f"{model.cfg.n_ctx - 1}")
    cache = {} if cache is None else cache
    L = Layout.build(n, start)
    table, m_max = L.positions_by_id()
    H = W.W_Q.shape[0]
    try:
        heads = [head_bounds(W, L, h, table, m_max, cache) for h in range(H)]
    except StructureError as err:
        return _fail(n, W, dtype, "structure", str(err))
    ft = zero_terms(W.W_E.shape[1], W.W_in.shape[1]) if dtype == "real" else attention_float_terms(
        W, dtype, len(L.ids), int(max(hb.size.max() for hb in heads)))
    if ft.overflow:
        return _fail(n, W, dtype, "float", f"{dtype} overflow: {ft.overflow}", float_terms=ft)
    # classes of answer positions: same S pattern relative to the query and same positional effect
    Q = len(L.queries)
    k = np.arange(Q) - 1
    sig = class_signature(L, heads, n)
    effect_key = ("effect", n, start, W.digest("W_pos", "W_V", "W_O", "W_in", "W_U"),
                  hashlib.sha1(b"".join(np.array(hb.members.shape).tobytes() + hb.members.tobytes()
                                        for hb in heads)).hexdigest())
    if effect_key not in cache:  # independent of W_Q, W_K once S is known
        resid_pos = position_effect(W, L, heads)
        cache[effect_key] = (I.matmul(resid_pos, W.W_in), I.matmul(resid_pos, W.W_U))
    pos_in, pos_logit = cache[effect_key]
    effect = np.concatenate([pos_in.key().reshape(Q, -1), pos_logit.key().reshape(Q, -1)], axis=1)
    group_key = ("classes", hashlib.sha1(sig.tobytes() + effect.tobytes()).hexdigest())
    if group_key not in cache:  # the grouping depends only on S patterns and positional effects
        cls = group_rows(np.column_stack([sig, group_rows(effect)]))
        cache[group_key] = (cls, [int(np.argmax(cls == c)) for c in range(int(cls.max()) + 1)])
    cls, reps = cache[group_key]
    n_cls = len(reps)
    coords = np.nonzero(sum(hb.range_out for hb in heads) + ft.resid_error + ft.tail_base > 0)[0]
    parts = [tv_parts(hb, cls, n_cls, ft.score_error) for hb in heads]
    deltas = {src: np.zeros((n_cls, W.W_E.shape[1])) for src in ("leak", "spread", "float")}
    for hb, part in zip(heads, parts):
        for src in deltas:
            deltas[src] = I.up_add(deltas[src], I.up_mul(part[src][:, None], hb.range_out[None, :]))
    lam_worst = np.max([part["lam_f"] for part in parts], axis=0)
    deltas["float"] = I.up_add(deltas["float"], ft.resid_error[None, :], ft.tail(lam_worst))
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
        try:  # both read the class's local configurations, which raise LocalityError when not local
            key = (digest, local_inputs_digest(spec), effect[i].tobytes(), coords.tobytes())
            if key not in cache:
                cache[key] = ffn_tables(W, spec, pos_in[i], pos_logit[i], coords)
        except LocalityError as err:
            return _fail(n, W, dtype, "structure", str(err), float_terms=ft)
        tables = cache[key]
        if tables.hardmax_error:
            return _fail(n, W, dtype, "hardmax", tables.hardmax_error, float_terms=ft)
        check = ffn_check(tables, {s: deltas[s][c] for s in deltas}, ft.pre_error, ft.logit_error, W.mlp_labels)
        classes.append((spec.describe(), int(np.sum(cls == c)), tables.n_configs, check))
        if check.slack < slack:
            slack = check.slack
            if not slack > 1:
                failure = (max(check.parts, key=check.parts.get), spec.describe(), check)
    labels = W.labels
    worst = {labels[r]: {s: float(deltas[s][:, r].max()) for s in deltas} for r in coords}
    head_info = []
    for hb, part in zip(heads, parts):
        head_info.append({"sizes": sorted(set(int(x) for x in hb.size)), "gap": float(hb.gap.min()),
                          "leak": float(part["leak"].max()), "eta": float(hb.eta.max()),
                          "tv": float(I.up_add(part["leak"], part["spread"], part["float"]).max())})
    cert = Certificate(n, W.W_E.shape[1], position_dims(W.W_E.shape[1]), dtype, failure is None, "", "PASS",
                       head_info, worst, classes, ft, slack)
    if failure:
        src, where, check = failure
        cert.reason = src
        cert.message = (f"{where}: {check.where} needs more than its margin allows (slack ×{check.slack:.3g}); "
                        f"the requirement is mostly {src} ("
                        + ", ".join(f"{s} {v:.3g}" for s, v in check.parts.items()) + ")")
    return cert
