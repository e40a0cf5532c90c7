"""All-inputs certificate for the copy/reverse construction at input length N (docs/copying.md,
"Certificate").

The construction has one layer, one head and no MLP, and uses the hypercube position code and the
``$`` sink of Theorem 5.1's addition, so the attention half of the addition certificate
(:mod:`lengthgen.proof.attention`, docs/certificate.md) applies unchanged; only
the readout is simpler (logits are affine in the residual stream). Everything is read from the
weights the model holds, and every compared number is an interval enclosure
(:mod:`lengthgen.proof.interval`):

1. **Attention**, per answer position (``=``, y_1 … y_n): the position part of every score comes from
   the values that each coordinate of ``W_pos·W_K`` takes on the IDs the format uses (so the ID
   relation enters only through these values, established once from the actual ``W_pos`` rows);
   the attended set S = {``$``} ∪ {visible keys at the winning ID q*}; the leak λ (mass outside S
   relative to S) and the spread η of the scores in S, for every input; hence the attention is within
   total variation ``TV ≤ λ + (e^η − 1)/4`` of uniform on S.
2. **Value path**: the head's output moves by at most ``TV·range`` per residual coordinate, with
   ``range`` the spread of ``(y W_V + b_V + W_pos[q] W_V) W_O`` over all tokens y and IDs q.
3. **Readout**: answer positions with the same S pattern (roles and which positions hold the same
   input digit) and the same positional effect on the logits form a class. For each class every
   assignment of the free input digits (at most 10^3) is evaluated at the hard-max limit (uniform
   attention on S); the right token must win, and ``logit(target) − logit(other)`` must exceed
   ``Σ_r |W_U[r, target] − W_U[r, other]|·Δ[r]`` (plus the float term of the dtype).

Every input of length N maps each answer position to one class and one digit assignment, so PASS is
a statement about all 10^N inputs. The float term (``float32``, ``float64``) is the addition
certificate's rounding model (:mod:`lengthgen.proof.rounding`, assumptions
(F1)–(F3)) evaluated with no hidden units: every operation of this forward pass is one that model
bounds, and a skipped MLP adds nothing.
"""
from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from lengthgen.proof import interval as I
from lengthgen.proof.attention import head_bounds
from lengthgen.proof.interval import Iv
from lengthgen.proof.weights import StructureError, Weights
from constructions.addition.certify.margins import position_effect, tv_parts
from lengthgen.proof.rounding import FloatTerms, attention_float_terms, zero_terms
from lengthgen.model import Transformer
from lengthgen.tasks import COPY
from lengthgen.tasks.copying import CopyTask

from ..model import START_ID, _task, position_dims
from .layout import BOS, DIGITS, EQ, ROLE_EQ, ROLE_IN, CopyLayout

DTYPES = ("real", "float64", "float32")
MAX_FREE_DIGITS = 3
SOURCES = ("leak", "spread", "float")


@dataclass
class ClassCheck:
    """One class of answer positions: how many, how many digit assignments, and the binding check."""

    description: str
    positions: int
    configs: int
    slack: float  # lower bound of margin / requirement over the class (inf: nothing required)
    where: str
    parts: dict[str, float]


@dataclass
class Certificate:
    """Outcome of :func:`certify`; ``reason`` is "" on PASS, else ``structure`` (the weights lack
    the structure the argument needs), ``hardmax`` (the hard-max limit itself is not proven right)
    or ``leak`` / ``spread`` / ``float`` (the readout margin is exceeded, mainly because of that term)."""

    task: str
    n: int
    d_model: int
    dtype: str
    passed: bool
    reason: str
    message: str
    heads: list[dict] = field(default_factory=list)
    deltas: dict[str, dict[str, float]] = field(default_factory=dict)
    classes: list[ClassCheck] = field(default_factory=list)
    float_terms: FloatTerms | None = None
    slack: float = 0.0

    @property
    def P(self) -> int:
        return position_dims(self.d_model)


def _readout_tables(W: Weights) -> dict[str, Iv | list[Iv]]:
    """Enclosures of the token parts of the logits: ``W_E W_U`` (the query's own token), per head
    ``(W_E W_V + b_V) W_O W_U`` (an attended key's token), and ``b_O W_U + b_U``."""
    return {
        "query": I.matmul(W.W_E, W.W_U),
        "value": [I.matmul(I.matmul(I.affine(W.W_E, W.W_V[h], W.b_V[h]), W.W_O[h]), W.W_U) for h in range(len(W.W_V))],
        "bias": I.affine(W.b_O[None], W.W_U, W.b_U)[0],
    }


def _same_source(sig: np.ndarray) -> np.ndarray:
    """Per column, the first column holding the same input digit (−1 for no digit): the pattern of
    which positions must hold equal digits."""
    pattern = np.full(sig.shape, -1, dtype=np.int64)
    for j in range(sig.shape[1]):
        for i in range(j, -1, -1):
            pattern[:, j] = np.where((sig[:, i] == sig[:, j]) & (sig[:, j] >= 0), i, pattern[:, j])
    return pattern


def _describe(L: CopyLayout, i: int, members: list[np.ndarray]) -> str:
    def name(pos: int) -> str:
        n = L.n
        return "$" if pos == 0 else "=" if pos == n + 1 else f"x_{pos}" if pos <= n else f"y_{pos - n - 1}"

    q = int(L.queries[i])
    heads = "; ".join("{" + ", ".join(["$"] + [name(int(p)) for p in mem[i] if p >= 0]) + "}" for mem in members)
    target = "'$'" if L.target_sig[i] < 0 else f"the digit of x_{L.target_sig[i] + 1}"
    return f"query {name(q)} -> S = {heads}, predicts {target}"


def _check_class(W: Weights, tables: dict, effect: Iv, roles: np.ndarray, pattern: np.ndarray, sizes: list[int],
                 deltas: dict[str, np.ndarray], logit_error: float) -> tuple[str | None, float, str, dict[str, float], int]:
    """Hard-max logits of one class for every assignment of its free digits, and the readout
    margin against the box ``deltas``. Columns: the query, each head's members, the target."""
    free = sorted({int(p) for p in pattern if p >= 0})
    if len(free) > MAX_FREE_DIGITS:
        raise StructureError(f"an answer position depends on {len(free)} input digits (at most {MAX_FREE_DIGITS} "
                             "are enumerated)")
    configs = np.array(list(itertools.product(range(10), repeat=len(free))), dtype=np.int64).reshape(-1, len(free))
    C = len(configs)

    def token(col: int) -> np.ndarray:
        if pattern[col] >= 0:
            return np.asarray(DIGITS)[configs[:, free.index(int(pattern[col]))]]
        return np.full(C, EQ if roles[col] == ROLE_EQ else BOS)

    logits = tables["query"][token(0)] + tables["bias"][None] + effect[None]
    per_head = (len(pattern) - 2) // len(sizes)  # member columns of each head (−1 padded, members first)
    for h, size in enumerate(sizes):
        value = tables["value"][h]
        head = value[np.full(C, BOS)]
        for col in range(1 + h * per_head, size + h * per_head):
            head = head + value[token(col)]
        logits = logits + head / float(size)
    target = token(len(pattern) - 1)
    rows = np.arange(C)
    gap = logits[rows, target][:, None] - logits  # [C, V]
    # a NaN end point proves nothing: weights are finite (require_finite), but an enclosure whose float64
    # centre overflowed (|W_E·W_U| past 1.8e308 in a float64 model) has inf − inf = NaN as its lower end
    gap_lo = I.lower_bound(gap.lo)
    gap_lo[rows, target] = np.inf
    if np.any(gap_lo <= 0):
        c, v = np.unravel_index(int(np.argmin(gap_lo)), gap_lo.shape)
        digits = ", ".join(str(d) for d in configs[c]) or "none"
        return (f"at the hard-max limit the right token is not proven to beat {COPY.vocab[int(v)]!r} (free digits {digits}; "
                f"gap ≥ {gap_lo[c, v]:.4g})"), 0.0, "", {}, C
    W_U = W.W_U
    sens = I.up(np.abs(W_U.T[:, None, :] - W_U.T[None, :, :]))  # [V, V, d] ≥ |W_U[r, t] − W_U[r, o]|
    total = I.up_add(*deltas.values())
    # a coordinate that cannot move adds exactly 0, also where |W_U[r, t] − W_U[r, o]| overflowed to
    # inf (inf·0 would be NaN, which the comparisons below would read as "nothing required")
    sens = np.where(total > 0, sens, 0.0)
    req = I.up_add(I.up_matmul_nonneg(sens, total), logit_error)  # [V, V]
    need = req[target]  # [C, V]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(need > 0, I.down(gap_lo / np.where(need > 0, need, 1.0)), np.inf)
    c, v = np.unravel_index(int(np.argmin(ratio)), ratio.shape)
    t = int(target[c])
    parts = {s: float(sens[t, v] @ deltas[s]) for s in SOURCES}
    parts["float"] += logit_error
    where = f"logit gap of {COPY.vocab[t]!r} over {COPY.vocab[int(v)]!r} (gap ≥ {gap_lo[c, v]:.4g})"
    return None, float(ratio[c, v]), where, parts, C


def certify(model: Transformer, task: str | CopyTask, n: int, dtype: str | None = None, start: int = START_ID,
            cache: dict | None = None) -> Certificate:
    """Certify that ``model`` predicts every answer token of the copy (or reverse) of every
    ``n``-digit input. ``dtype``: "real" (exact real arithmetic) or the float format whose
    rounding is bounded ("float64", "float32"); default: the model's own. ``cache`` keeps the
    tables that do not depend on W_Q, W_K between calls (the smallest-M search)."""
    task = _task(task)
    d = model.cfg.d_model

    def fail(reason: str, message: str, **kw) -> Certificate:
        return Certificate(task.name, n, d, dtype or model.cfg.dtype, False, reason, message, **kw)

    try:
        W = Weights.from_model(model, mlp=False)
    except StructureError as err:
        return fail("structure", str(err))
    dtype = dtype or W.dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    L = CopyLayout.build(task, n, start)
    if int(L.ids.max()) >= model.cfg.n_ctx:
        raise ValueError(f"{n} digits need position IDs up to {int(L.ids.max())}; the model's table stops at "
                         f"{model.cfg.n_ctx - 1}")
    cache = {} if cache is None else cache
    table, m_max = L.positions_by_id()
    # every ID of the position table joins the key alphabet: copy's last query singles out ID n + 2, which no key holds
    table = np.concatenate([table, np.full((model.cfg.n_ctx - len(table), m_max), -1, dtype=np.int64)])
    extra = np.setdiff1d(np.arange(1, model.cfg.n_ctx), L.ids)
    try:
        heads = [head_bounds(W, L, h, table, m_max, cache, extra_ids=extra) for h in range(W.W_Q.shape[0])]
    except StructureError as err:
        return fail("structure", str(err))
    ft = zero_terms(d, 0) if dtype == "real" else attention_float_terms(
        W, dtype, len(L.ids), int(max(hb.size.max() for hb in heads)))
    if ft.overflow:
        return fail("float", f"{dtype} overflow: {ft.overflow}", float_terms=ft)
    Q = len(L.queries)
    members = [hb.members for hb in heads]
    effect_key = ("effect", task.name, n, start, W.digest("W_pos", "W_V", "W_O", "W_U"),
                  hashlib.sha1(b"".join(m.tobytes() for m in members)).hexdigest())
    if effect_key not in cache:  # independent of W_Q, W_K once S is known
        cache[effect_key] = I.matmul(position_effect(W, L, heads), W.W_U)
    effect = cache[effect_key]
    q = L.queries
    roles, sigs = [L.role[q]], [L.sig[q]]
    for mem in members:
        ok = mem >= 0
        roles += list(np.where(ok, L.role[np.maximum(mem, 0)], -1).T)
        sigs += list(np.where(ok, L.sig[np.maximum(mem, 0)], -1).T)
    roles.append(np.full(Q, ROLE_IN))
    sigs.append(L.target_sig)
    roles, pattern = np.column_stack(roles), _same_source(np.column_stack(sigs))
    sizes = np.column_stack([hb.size for hb in heads])
    rows = np.concatenate([roles, pattern, sizes, effect.key().reshape(Q, -1).view(np.int64)], axis=1)
    _, first, cls = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    cls, n_cls = cls.reshape(-1), len(first)
    parts = [tv_parts(hb, cls, n_cls, ft.score_error) for hb in heads]
    deltas = {s: np.zeros((n_cls, d)) for s in SOURCES}
    for hb, part in zip(heads, parts):
        for s in SOURCES:
            deltas[s] = I.up_add(deltas[s], I.up_mul(part[s][:, None], hb.range_out[None, :]))
    lam_worst = np.max([part["lam_f"] for part in parts], axis=0)
    deltas["float"] = I.up_add(deltas["float"], ft.resid_error[None, :], ft.tail(lam_worst))
    if not (all(np.all(np.isfinite(v)) for v in deltas.values()) and math.isfinite(ft.logit_error)):
        return fail("float", "a bound is not finite (overflow in the float term)", float_terms=ft)
    tables_key = ("readout", W.digest("W_E", "W_V", "b_V", "W_O", "b_O", "W_U", "b_U"))
    if tables_key not in cache:
        cache[tables_key] = _readout_tables(W)
    tables = cache[tables_key]
    classes, slack, failure = [], math.inf, None
    for c in np.argsort(first):
        i = int(first[c])
        desc = _describe(L, i, members)
        try:
            bad, c_slack, where, c_parts, configs = _check_class(
                W, tables, effect[i], roles[i], pattern[i], [int(s) for s in sizes[i]],
                {s: deltas[s][c] for s in SOURCES}, ft.logit_error)
        except StructureError as err:
            return fail("structure", f"{desc}: {err}", float_terms=ft)
        if bad:
            return fail("hardmax", f"{desc}: {bad}", float_terms=ft)
        classes.append(ClassCheck(desc, int(np.sum(cls == c)), configs, c_slack, where, c_parts))
        if c_slack < slack:
            slack = c_slack
            if not slack > 1:
                failure = classes[-1]
    worst = {W.labels[r]: {s: float(deltas[s][:, r].max()) for s in SOURCES}
             for r in np.nonzero(sum(deltas.values()).max(0) > 0)[0]}
    head_info = [{"sizes": sorted(set(int(x) for x in hb.size)), "gap": float(hb.gap.min()),
                  "leak": float(part["leak"].max()), "eta": float(hb.eta.max()),
                  "tv": float(I.up_add(part["leak"], part["spread"], part["float"]).max())}
                 for hb, part in zip(heads, parts)]
    cert = Certificate(task.name, n, d, dtype, failure is None, "", "PASS", head_info, worst, classes, ft, slack)
    if failure:
        src = max(failure.parts, key=failure.parts.get)
        cert.reason = src
        cert.message = (f"{failure.description}: the {failure.where} needs more than its margin allows (slack "
                        f"×{failure.slack:.3g}); the requirement is mostly {src} ("
                        + ", ".join(f"{s} {v:.3g}" for s, v in failure.parts.items()) + ")")
    return cert
