"""All-inputs certificate for the N×2 multiplication construction at operand length N, in exact real
arithmetic (docs/multiplication.md, "Certificate").

Every number is read from the weights the model holds (W_E, W_pos, W_Q, W_K, W_V, W_O, b_*, W_in,
W_out, W_U) and every number compared with a margin is an interval enclosure
(:mod:`lengthgen.proof.interval`). :func:`certify` runs the chain as named steps, in the order of
docs/multiplication.md, "Certificate":

1. :func:`.layers.layer1` — layer 1 at every position: S, λ₁, η₁, TV₁ per head and Δ₁;
2. :func:`.layers.layer2` — the key classes of layer 2 (widened by Δ₁), S, λ₂, η₂, TV₂ and Δ₂;
3. :func:`deviations` — the deviation box ρ of what layer 3 and the readout read:
   ρ = Δ₁ + Δ₂ + |W_out|ᵀ|W_in|ᵀ(Δ₁ + Δ₂) (the layer-2 MLP is 1-Lipschitz per unit);
4. :func:`answer_residual` — at each answer position, the hard-max residual on the coordinates the
   MLPs read: a fixed part plus one term per digit variable a head reads;
5. :func:`answer_classes` — answer positions with the same local computation form a class;
6. :func:`check_classes` — per class the MLP tables (:mod:`.mlp`) and the readout check against ρ.

PASS means: for the weights held, every one of the 10^N·100 inputs with an N-digit a (leading zeros
included) and every answer position (``=`` and c_0 … c_{N+1}), teacher-forced, the correct next token
has the largest logit, in exact real arithmetic with softmax attention. Float rounding is **not**
covered.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from lengthgen.model import Transformer
from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv
from lengthgen.proof.weights import group_rows

from ..layout import START_ID
from .attention import HeadResult
from .layers import Frame, Layer1, Layer2, layer1, layer2
from .mlp import Check, ClassSpec, check, class_tables, reachable_carries
from .weights import DIGITS, EQ, ROLE_A, ROLE_B, ROLE_C, ROLE_EQ, ROLE_TOKENS, StructureError, Weights

__all__ = ["Certificate", "certify"]

Variable = tuple[str, int]  # ("a", r): a_{i+r}; ("b", k): b_k; ("c", 0): the query's own digit c_i
ROLE_LETTER = {ROLE_A: "a", ROLE_B: "b", ROLE_C: "c"}


@dataclass
class Certificate:
    """Outcome of :func:`certify`. ``reason`` is "" on PASS, else ``structure`` (the weights lack the
    structure the chain relies on), ``hardmax`` (the hard-max limit itself is wrong), ``stability`` (a
    layer-3 unit can change sign within the deviations) or ``readout`` (the deviations exceed a logit
    margin). ``delta1`` (after layer 1, every position), ``deltas`` (Δ₁ + Δ₂, after layer-2 attention,
    answer positions) and ``rho`` (after the layer-2 MLP, on every coordinate layer 3 and the readout
    read) map residual labels to the certified bound of |residual − hard-max residual|."""

    n: int
    passed: bool
    reason: str
    message: str
    heads: list[dict] = field(default_factory=list)
    delta1: dict[str, float] = field(default_factory=dict)
    deltas: dict[str, float] = field(default_factory=dict)
    rho: dict[str, float] = field(default_factory=dict)
    classes: list[tuple[str, int, int, int, Check]] = field(default_factory=list)
    mlp2: list[tuple[tuple, int]] = field(default_factory=list)
    carries: tuple[int, int] = (0, 0)
    slack: float = 0.0


@dataclass
class Deviations:
    """Step 3. ``D``: the residual coordinates the MLPs and the readout read; ``read3``: indices into D
    read by layer 3 or the readout."""

    delta: np.ndarray  # Δ₁ + Δ₂ over the residual
    D: np.ndarray
    read3: np.ndarray
    rho: np.ndarray  # over D[read3]


@dataclass
class DigitReads:
    """What one layer-2 head adds per digit it reads: ``table`` [10, |D|] (W_E[digit]·W_V·W_O), and per
    answer position the variables its digit members read (``var`` [Q, m], index into the variable
    list, −1 for no digit) and |S|."""

    table: Iv
    var: np.ndarray
    size: np.ndarray


@dataclass
class AnswerResidual:
    """Step 4: the hard-max residual on D at answer position k is
    ``fixed[k] + Σ_heads Σ_{members} table[digit]/size[k]`` (+ W_E[c_i] for a digit query)."""

    fixed: Iv  # [Q, |D|]
    reads: list[DigitReads]
    variables: list[Variable]
    i: np.ndarray  # answer index i of each query ('=' is −1)
    digit_query: np.ndarray  # the query is an answer digit c_i (not '=')


def _fail(n: int, reason: str, message: str, **kw) -> Certificate:
    return Certificate(n, False, reason, message, **kw)


def certify(model: Transformer, n: int, start: int = START_ID, cache: dict | None = None) -> Certificate:
    """Certify in exact real arithmetic that ``model`` predicts every answer token of every N×2
    product with an ``n``-digit first operand. ``cache`` keeps the M-independent MLP tables between
    calls on models that differ only in W_Q, W_K (the smallest-M search)."""
    if start + n + 2 >= model.cfg.n_ctx:
        raise ValueError(f"{n}-digit operands need position IDs up to {start + n + 2}; the model's table stops at "
                         f"{model.cfg.n_ctx - 1}")
    cache = {} if cache is None else cache
    try:
        W = Weights.from_model(model)
        W.check_shape()
        return _certify(W, n, start, cache)
    except StructureError as err:
        return _fail(n, "structure", str(err))


def _certify(W: Weights, n: int, start: int, cache: dict) -> Certificate:
    frame = Frame.build(n, start)
    l1 = layer1(W, frame)
    l2 = layer2(W, frame, l1)
    heads = [_head_info(hp.name, hp.bounds) for hp in l1.heads + l2.heads]
    dev = deviations(W, l1, l2)
    answer = answer_residual(W, frame, l1, l2, dev.D)
    labels = W.labels
    cert = Certificate(n, True, "", "PASS", heads,
                       delta1={labels[c]: float(l1.delta[c]) for c in np.nonzero(l1.delta > 0)[0]},
                       deltas={labels[c]: float(dev.delta[c]) for c in np.nonzero(dev.delta > 0)[0]},
                       rho={labels[c]: float(v) for c, v in zip(dev.D[dev.read3], dev.rho)})
    return check_classes(W, cert, dev, answer, answer_classes(frame, answer), cache)


def deviations(W: Weights, l1: Layer1, l2: Layer2) -> Deviations:
    """Step 3: Δ = Δ₁ + Δ₂; the layer-2 MLP moves its output by at most |W_out|ᵀ|W_in|ᵀΔ (ReLU is
    1-Lipschitz), so what layer 3 and the readout read is off by at most ρ = Δ + |W_out|ᵀ|W_in|ᵀΔ."""
    delta = I.up_add(l1.delta, l2.delta)
    D = np.nonzero(np.any(W.W_in[1] != 0, axis=1) | np.any(W.W_in[2] != 0, axis=1) | np.any(W.W_U != 0, axis=1))[0]
    read3 = np.nonzero(np.any(W.W_in[2][D] != 0, axis=1) | np.any(W.W_U[D] != 0, axis=1))[0]
    lip = I.up_matmul_nonneg(I.up_matmul_nonneg(delta[None], np.abs(W.W_in[1])), np.abs(W.W_out[1]))[0]
    return Deviations(delta, D, read3, I.up_add(delta, lip)[D[read3]])


def _on(D: np.ndarray, cols: np.ndarray, values: Iv, rows: int) -> Iv:
    """[rows, |D|] enclosure holding ``values`` [rows, |cols|] at the coordinates cols (⊂ D) and 0 elsewhere."""
    out = Iv(np.zeros((rows, len(D))), np.zeros((rows, len(D))))
    at = np.searchsorted(D, cols)
    out.lo[:, at], out.hi[:, at] = values.lo, values.hi
    return out


def answer_residual(W: Weights, frame: Frame, l1: Layer1, l2: Layer2, D: np.ndarray) -> AnswerResidual:
    """Step 4, at the answer positions Q in the hard-max limit, on D: W_pos, the layer-2 bias, what
    layer 1 wrote, the ``=`` token's embedding, each head's mean over its members' class and ID parts
    and the token part of its non-digit members — plus, per head, which digit variables its digit
    members are (a_{i+r} relative to the query's answer index i; b_k absolute)."""
    L, Q = frame.layout, frame.layout.queries
    fixed = Iv.exact(W.W_pos[L.ids[Q]][:, D] + W.b_O[1][D])
    in_d = np.isin(l1.written, D)
    fixed = fixed + _on(D, l1.written[in_d], Iv(l1.out.lo[Q][:, in_d], l1.out.hi[Q][:, in_d]), len(Q))
    fixed = fixed + np.where((L.role[Q] == ROLE_EQ)[:, None], W.W_E[EQ][D][None], 0.0)
    i_of = np.arange(len(Q)) - 1
    non_digit_token = np.array([ROLE_TOKENS[int(r)][0] for r in L.role])
    roles, rels, digits, raw = [], [], [], []
    for hp in l2.heads:
        sel = np.isin(hp.cols, D)  # the coordinates the MLPs and the readout read
        keep = hp.members >= 0
        idx = np.maximum(hp.members, 0)
        is_digit = keep & np.isin(L.role[idx], (ROLE_A, ROLE_B, ROLE_C))
        tok = hp.values.token
        fix_tok = (keep & ~is_digit)[..., None]
        value = (hp.values.content[l2.cls[idx]] + hp.values.position[frame.id_row[idx]]
                 + Iv(np.where(fix_tok, tok.lo[non_digit_token[idx]], 0.0), np.where(fix_tok, tok.hi[non_digit_token[idx]], 0.0)))
        value = Iv(np.where(keep[..., None], value.lo, 0.0), np.where(keep[..., None], value.hi, 0.0))
        mean = value.sum(1) / hp.bounds.size[:, None].astype(np.float64)  # [Q, |cols|]
        fixed = fixed + _on(D, hp.cols[sel], Iv(mean.lo[:, sel], mean.hi[:, sel]), len(Q))
        table = _on(D, hp.cols[sel], Iv(tok.lo[DIGITS][:, sel], tok.hi[DIGITS][:, sel]), 10)
        roles.append(L.role[idx])
        rels.append(L.sig[idx] - np.where(L.role[idx] == ROLE_B, 0, i_of[:, None]))
        digits.append(is_digit)
        raw.append((table, hp.bounds.size))
    variables, index = _variable_index(roles, rels, digits)
    reads = [DigitReads(table, var, size) for (table, size), var in zip(raw, index)]
    return AnswerResidual(fixed, reads, variables, i_of, L.role[Q] == ROLE_C)


def _variable_index(roles: list[np.ndarray], rels: list[np.ndarray], digits: list[np.ndarray]
                    ) -> tuple[list[Variable], list[np.ndarray]]:
    """The variables (letter, offset) the heads' digit members read, sorted, and per head the index of
    each member's variable (−1 for a member that is not a digit)."""
    pairs = np.concatenate([np.column_stack([r[m], k[m]]) for r, k, m in zip(roles, rels, digits)] + [np.zeros((0, 2), np.int64)])
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    index, at = [], 0
    for m in digits:
        var = np.full(m.shape, -1, dtype=np.int64)
        var[m] = inverse.reshape(-1)[at: at + int(m.sum())]
        at += int(m.sum())
        index.append(var)
    return [(ROLE_LETTER[int(r)], int(k)) for r, k in uniq], index


@dataclass
class AnswerClasses:
    """Step 5: ``signature[k]`` = class of answer position k; ``rows`` what two positions must share to
    be in one class (which window digits exist, the fixed part, which variables each head reads, |S|)."""

    signature: np.ndarray
    rows: np.ndarray


def answer_classes(frame: Frame, answer: AnswerResidual) -> AnswerClasses:
    """Step 5: answer positions with identical rows see the same local computation."""
    n, i = frame.layout.n, answer.i
    family = np.column_stack([(0 <= i + r) & (i + r < n) for r in (1, 0, -1, -2)]
                             + [i >= 2, i >= 1, i >= 0, i <= n, answer.digit_query])
    rows = np.column_stack([family.astype(np.float64), answer.fixed.lo, answer.fixed.hi]
                           + [np.column_stack([r.var, r.size]).astype(np.float64) for r in answer.reads])
    return AnswerClasses(group_rows(rows), rows)


def _terms(k: int, answer: AnswerResidual, query_is_digit: bool, W: Weights, D: np.ndarray) -> dict[Variable, Iv]:
    """What each digit variable adds to the residual (on D) at answer position k: the query's own token
    and, per head, each digit key of S times 1/|S|."""
    terms: dict[Variable, Iv] = {}
    if query_is_digit:
        terms[("c", 0)] = Iv.exact(W.W_E[DIGITS][:, D])
    for r in answer.reads:
        for v in r.var[k][r.var[k] >= 0]:
            var, part = answer.variables[int(v)], r.table / float(r.size[k])
            terms[var] = terms[var] + part if var in terms else part
    return dict(sorted(terms.items()))


def check_classes(W: Weights, cert: Certificate, dev: Deviations, answer: AnswerResidual, classes: AnswerClasses,
                  cache: dict) -> Certificate:
    """Step 6: per class, the MLP tables of :mod:`.mlp` (cached: they do not depend on W_Q, W_K) and the
    check against ρ; the smallest slack over the classes decides (> 1 passes)."""
    carries = reachable_carries()
    weights_key = _mlp_digest(W, dev.D, dev.read3) + "".join(
        hashlib.sha1(r.table.lo.tobytes() + r.table.hi.tobytes()).hexdigest() for r in answer.reads)
    slack, failure, most = math.inf, None, 0
    for c in range(int(classes.signature.max()) + 1):
        members = np.nonzero(classes.signature == c)[0]
        k = int(members[0])
        spec = ClassSpec(int(answer.i[k]), cert.n, answer.fixed[k], _terms(k, answer, bool(answer.digit_query[k]), W, dev.D))
        key = ("mlp", weights_key, classes.rows[k].tobytes(), repr(answer.variables))
        if key not in cache:
            cache[key] = class_tables(W, spec, dev.D, dev.read3, carries)
        tables = cache[key]
        if tables.hardmax_error:
            cert.passed, cert.reason, cert.message = False, "hardmax", f"{spec.describe()}: {tables.hardmax_error}"
            return cert
        result = check(tables, dev.rho)
        cert.classes.append((spec.describe(), len(members), tables.n_configs, tables.n_groups, result))
        if len(spec.terms) >= most:
            most, cert.mlp2 = len(spec.terms), tables.mlp2_groups
        if result.slack < slack:
            slack = result.slack
            if not slack > 1:
                failure = (result.reason, spec.describe(), result)
    cert.carries, cert.slack = (int(carries.min()), int(carries.max())), slack
    if failure:
        reason, where, res = failure
        cert.passed, cert.reason = False, reason
        cert.message = (f"{where}: {res.where} needs {res.need:.3g} but its hard-max margin is {res.margin:.3g} "
                        f"(slack ×{res.slack:.3g})" if reason == "readout" else f"{where}: {res.where}")
    return cert


def _mlp_digest(W: Weights, D: np.ndarray, read3: np.ndarray) -> str:
    """Everything the MLP tables read besides the class (the same for every width d, so lengths share them)."""
    cols = D[read3]
    h = hashlib.sha1()
    for arr in (W.W_in[1][D], W.b_in[1], W.W_out[1][:, cols], W.b_out[1][cols], W.W_in[2][cols], W.b_in[2],
                W.W_out[2][:, cols], W.W_U[cols], W.b_out[2][cols], W.b_O[2][cols], W.b_U, read3):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(repr([W.labels[c] for c in D]).encode())
    return h.hexdigest()


def _head_info(name: str, res: HeadResult) -> dict:
    return {"name": name, "sizes": sorted(set(int(x) for x in res.size)), "gap": res.gap, "leak": res.leak,
            "eta": res.spread_eta, "tv": res.tv, "position_free": res.position_free}
