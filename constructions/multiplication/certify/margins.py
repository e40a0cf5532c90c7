"""All-inputs certificate for the N×2 multiplication construction at operand length N, in exact real
arithmetic (docs/multiplication.md, "Certificate").

Every number is read from the weights the model holds (W_E, W_pos, W_Q, W_K, W_V, W_O, b_*, W_in,
W_out, W_U) and every number compared with a margin is an interval enclosure
(:mod:`lengthgen.proof.interval`). The chain, one layer at a time:

a. **Layer 1** (:func:`.attention.head_attention` at every position): the key classes are the token
   kinds ($, digit, ``*``, ``=``); per head the attended set S, the leak λ₁ and the spread η₁, hence the
   total variation TV₁ to uniform on S and the deviation Δ₁ = Σ_h TV₁·range of each flag the head writes.
b. **Layer 2** (at every answer position): key classes are token kind × what layer 1 wrote, each
   widened by Δ₁ — so the score shifts that flag errors cause are inside the enclosures; the same
   bounds give TV₂ per head and Δ₂ = TV₂·range + (value shift by Δ₁).
c. **MLPs** (:mod:`.mlp`): per class of answer positions, every reachable local configuration, the
   product MLP over its finite domain, the digit MLP and the readout on boxes grown by Δ₁ + Δ₂.

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

from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv
from lengthgen.model import Transformer
from lengthgen.proof.weights import group_rows

from ..layout import START_ID
from .attention import MAX_MEMBERS, HeadResult, Keys, head_attention
from .mlp import ClassSpec, Check, check, class_tables, reachable_carries
from .weights import DIGITS, EQ, ROLE_A, ROLE_B, ROLE_C, ROLE_EQ, ROLE_TOKENS, Layout, StructureError, Weights

__all__ = ["Certificate", "certify"]
GROUP_OF_ROLE = {0: 0, ROLE_A: 1, ROLE_B: 1, ROLE_C: 1, 2: 2, ROLE_EQ: 3}  # $, digit, *, =


@dataclass
class Certificate:
    """Outcome of :func:`certify`. ``reason`` is "" on PASS, else ``structure`` (the weights lack the
    structure the chain relies on), ``hardmax`` (the hard-max limit itself is wrong), ``stability`` (a
    layer-3 unit can change sign within the deviations) or ``readout`` (the deviations exceed a logit
    margin)."""

    n: int
    passed: bool
    reason: str
    message: str
    heads: list[dict] = field(default_factory=list)
    deltas: dict[str, float] = field(default_factory=dict)
    classes: list[tuple[str, int, int, int, Check]] = field(default_factory=list)
    mlp2: list[tuple[tuple, int]] = field(default_factory=list)
    carries: tuple[int, int] = (0, 0)
    slack: float = 0.0


def _fail(n: int, reason: str, message: str, **kw) -> Certificate:
    return Certificate(n, False, reason, message, **kw)


def _value_parts(W: Weights, layer: int, h: int, rest: Iv, used: np.ndarray, cols: np.ndarray) -> tuple[Iv, Iv, Iv]:
    """Per head, on the residual coordinates ``cols`` it writes: W_E[t]·W_V·W_O for every token,
    (rest_c·W_V + b_V)·W_O per content class, W_pos[q]·W_V·W_O per ID."""
    WO = W.W_O[layer][h][:, cols]
    VO = I.matmul(W.W_V[layer][h], WO)
    tok = I.matmul(W.W_E, VO)
    cls = I.matmul(I.affine(rest, W.W_V[layer][h], W.b_V[layer][h]), WO)
    pos = I.matmul(W.W_pos[used], VO)
    return tok, cls, pos


def _range(tok: Iv, cls: Iv, pos: Iv) -> np.ndarray:
    """Upper bound of max − min of a key's value over all tokens, content classes and IDs, per coordinate."""
    top = I.up_add(tok.hi.max(0), cls.hi.max(0), pos.hi.max(0))
    bottom = I.down(I.down(tok.lo.min(0) + cls.lo.min(0)) + pos.lo.min(0))
    return I.up(top - bottom)


def _members(res: HeadResult, keys: Keys, q_pos: np.ndarray, name: str) -> np.ndarray:
    """Positions of S per query (−1 padded), the first token included when it belongs to S."""
    bos_in = res.in_s[:, keys.cls[0]]
    if res.members is not None:
        return np.column_stack([np.where(bos_in, 0, -1), res.members])
    if res.size.max() > MAX_MEMBERS:
        raise StructureError(f"{name} averages over up to {int(res.size.max())} keys; the chain handles at most {MAX_MEMBERS}")
    out = np.full((len(q_pos), MAX_MEMBERS), -1, dtype=np.int64)
    fill = np.zeros(len(q_pos), dtype=np.int64)
    for c, where in enumerate(keys.class_positions()):
        take = np.where(res.in_s[:, c], res.count[:, c], 0)
        for k in range(int(take.max(initial=0))):
            rows = np.nonzero(take > k)[0]
            out[rows, fill[rows]] = where[k]
            fill[rows] += 1
    return out


def _mean_over(members: np.ndarray, value_of: Iv, size: np.ndarray) -> Iv:
    """Mean over the members (−1 padded) of per-position enclosures ``value_of`` [positions, w]."""
    keep = (members >= 0)[..., None]
    idx = np.maximum(members, 0)
    total = Iv(np.where(keep, value_of.lo[idx], 0.0), np.where(keep, value_of.hi[idx], 0.0)).sum(1)
    return total / size[:, None].astype(np.float64)


def _written(W: Weights, layer: int, h: int) -> np.ndarray:
    return np.nonzero(np.any(W.W_O[layer][h] != 0, axis=0))[0]


def _layer(W: Weights, layer: int, keys: Keys, rest: Iv, q_pos: np.ndarray, q_content: Iv, q_cls: np.ndarray,
           used: np.ndarray):
    """One attention layer: per working head the bounds, the members of S and the value parts on the
    coordinates the head writes (every other coordinate of its output is exactly 0)."""
    out = []
    for h in W.working_heads(layer):
        name = f"layer {layer + 1} head {h}"
        res = head_attention(W.W_Q[layer][h], W.b_Q[layer][h], W.W_K[layer][h], W.b_K[layer][h], W.W_pos, W.scale,
                             keys, q_pos, q_content, q_cls, name)
        cols = _written(W, layer, h)
        tok, cls, pos = _value_parts(W, layer, h, rest, used, cols)
        out.append((h, name, res, _members(res, keys, q_pos, name), cols, tok, cls, pos))
    return out


def _scatter(values: np.ndarray, cols: np.ndarray, d: int) -> np.ndarray:
    full = np.zeros(d)
    full[cols] = values
    return full


def certify(model: Transformer, n: int, start: int = START_ID, cache: dict | None = None) -> Certificate:
    """Certify in exact real arithmetic that ``model`` predicts every answer token of every N×2
    product with an ``n``-digit first operand. ``cache`` keeps the M-independent MLP tables between
    calls on models that differ only in W_Q, W_K (the smallest-M search)."""
    W = Weights.from_model(model)
    if start + n + 2 >= model.cfg.n_ctx:
        raise ValueError(f"{n}-digit operands need position IDs up to {start + n + 2}; the model's table stops at "
                         f"{model.cfg.n_ctx - 1}")
    cache = {} if cache is None else cache
    try:
        W.check_shape()
        return _certify(W, n, start, cache)
    except StructureError as err:
        return _fail(n, "structure", str(err))


def _certify(W: Weights, n: int, start: int, cache: dict) -> Certificate:
    d = W.d_model
    L = Layout.build(n, start)
    Lk = len(L.ids)
    table, m_max = L.positions_by_id()
    used = np.unique(L.ids)
    id_row = np.searchsorted(used, L.ids)
    digit_cols = np.nonzero(np.any(W.W_E[DIGITS] != W.W_E[DIGITS[0]], axis=0))[0]
    # ---- a. layer 1: key classes are the token kinds
    group = np.array([GROUP_OF_ROLE[int(r)] for r in L.role])
    tokens_of = [ROLE_TOKENS[0], DIGITS, ROLE_TOKENS[2], ROLE_TOKENS[ROLE_EQ]]
    content1 = Iv(np.stack([W.W_E[t].min(0) for t in tokens_of]), np.stack([W.W_E[t].max(0) for t in tokens_of]))
    keys1 = Keys(group, L.ids, content1, table, m_max)
    heads_info: list[dict] = []
    W1 = np.nonzero(np.any([np.any(W.W_O[0][h] != 0, axis=0) for h in W.working_heads(0)] + [W.b_O[0] != 0, W.b_out[0] != 0],
                           axis=0))[0]  # every coordinate layer 1 can change
    out1 = Iv.exact(np.zeros((Lk, len(W1))) + (W.b_O[0] + W.b_out[0])[W1])  # the layer-1 MLP adds exactly b_out
    delta1 = np.zeros(d)
    first = [t[0] for t in tokens_of]  # every digit has the same layer-1 value (checked below)
    for h, name, res, members, cols, tok, cls, pos in _layer(W, 0, keys1, Iv.exact(np.zeros((4, d))), np.arange(Lk),
                                                             content1, group, used):
        if np.any(W.W_V[0][h][digit_cols]):
            raise StructureError(f"{name}: its values depend on the digit (W_V reads {', '.join(W.labels[c] for c in digit_cols)})")
        value_of = (Iv(tok.lo[first], tok.hi[first]) + cls)[group] + pos[id_row]  # [Lk, |cols|]
        mean = _mean_over(members, value_of, res.size)
        at = np.searchsorted(W1, cols)
        total = Iv(out1.lo[:, at], out1.hi[:, at]) + mean
        out1.lo[:, at], out1.hi[:, at] = total.lo, total.hi
        delta1 = I.up_add(delta1, _scatter(I.up(res.tv * _range(tok, cls, pos)), cols, d))
        heads_info.append(_head_info(name, res))
    # ---- b. layer 2: key classes are token kind × what layer 1 wrote, widened by Δ₁
    cls2 = group_rows(np.column_stack([group.astype(np.float64), out1.lo, out1.hi]))
    reps = np.array([int(np.argmax(cls2 == c)) for c in range(int(cls2.max()) + 1)])
    rest2 = Iv(np.zeros((len(reps), d)), np.zeros((len(reps), d)))
    rest2.lo[:, W1], rest2.hi[:, W1] = out1.lo[reps], out1.hi[reps]  # what layer 1 left (no token, no position)
    content2 = content1[group[reps]] + rest2
    widened = Iv(I.down(content2.lo - delta1), I.up(content2.hi + delta1))
    keys2 = Keys(cls2, L.ids, widened, table, m_max)
    Q = L.queries
    delta2 = np.zeros(d)
    layer2 = _layer(W, 1, keys2, rest2, Q, widened, cls2[Q], used)
    for h, name, res, members, cols, tok, cls, pos in layer2:
        # values read the residual, which layer 1 left off by ≤ Δ₁: each value moves by ≤ shift, so the
        # output moves by ≤ TV·(range + 2·shift) (leak and spread) + shift (the values inside S)
        shift = I.up_matmul_nonneg(delta1[None], I.matmul(W.W_V[1][h], W.W_O[1][h][:, cols]).mag())[0]
        move = I.up_add(I.up(res.tv * I.up_add(_range(tok, cls, pos), 2 * shift)), shift)
        delta2 = I.up_add(delta2, _scatter(move, cols, d))
        heads_info.append(_head_info(name, res))
    delta = I.up_add(delta1, delta2)
    # ---- c. MLPs: classes of answer positions, every local configuration
    D = np.nonzero(np.any(W.W_in[1] != 0, axis=1) | np.any(W.W_in[2] != 0, axis=1) | np.any(W.W_U != 0, axis=1))[0]
    d3u = np.nonzero(np.any(W.W_in[2][D] != 0, axis=1) | np.any(W.W_U[D] != 0, axis=1))[0]
    written = np.zeros(d, dtype=bool)
    for layer in (0, 1):
        for h in W.working_heads(layer):
            written |= np.any(W.W_O[layer][h] != 0, axis=0)
    written |= np.any(W.W_out[1] != 0, axis=0)
    perturbed = written[D[d3u]]
    lip = I.up_matmul_nonneg(I.up_matmul_nonneg(delta[None], np.abs(W.W_in[1])), np.abs(W.W_out[1]))[0]
    rho = I.up_add(delta, lip)[D[d3u]]
    fixed = Iv.exact(W.W_pos[L.ids[Q]][:, D] + W.b_O[1][D])
    in_d = np.isin(W1, D)
    add = Iv(np.zeros((len(Q), len(D))), np.zeros((len(Q), len(D))))
    add.lo[:, np.searchsorted(D, W1[in_d])] = out1.lo[Q][:, in_d]
    add.hi[:, np.searchsorted(D, W1[in_d])] = out1.hi[Q][:, in_d]
    fixed = fixed + add + np.where((L.role[Q] == ROLE_EQ)[:, None], W.W_E[EQ][D][None], 0.0)
    i_of = np.arange(len(Q)) - 1
    digit_terms = []  # per head: (head's digit table on D, variable code [Q, m], |S| [Q])
    token_fixed = np.array([ROLE_TOKENS[int(r)][0] for r in L.role])  # the token of each non-digit position
    for h, name, res, members, cols, tok, cls, pos in layer2:
        sel = np.isin(cols, D)  # the coordinates the MLPs and the readout read
        at = np.searchsorted(D, cols[sel])
        keep = members >= 0
        idx = np.maximum(members, 0)
        is_digit = keep & np.isin(L.role[idx], (ROLE_A, ROLE_B, ROLE_C))
        fix_tok = keep & ~is_digit
        value = cls[cls2[idx]] + pos[id_row[idx]] + Iv(np.where(fix_tok[..., None], tok.lo[token_fixed[idx]], 0.0),
                                                       np.where(fix_tok[..., None], tok.hi[token_fixed[idx]], 0.0))
        value = Iv(np.where(keep[..., None], value.lo, 0.0), np.where(keep[..., None], value.hi, 0.0))
        mean = value.sum(1) / res.size[:, None].astype(np.float64)  # [Q, |cols|]
        add = Iv(np.zeros((len(Q), len(D))), np.zeros((len(Q), len(D))))
        add.lo[:, at], add.hi[:, at] = mean.lo[:, sel], mean.hi[:, sel]
        fixed = fixed + add
        digit_tok = Iv(np.zeros((10, len(D))), np.zeros((10, len(D))))
        digit_tok.lo[:, at], digit_tok.hi[:, at] = tok.lo[DIGITS][:, sel], tok.hi[DIGITS][:, sel]
        rel = L.sig[idx] - np.where(L.role[idx] == ROLE_B, 0, i_of[:, None])
        code = np.where(is_digit, L.role[idx] * 1000 + rel + 500, -1)  # which variable each member reads
        digit_terms.append((digit_tok, code, res.size))
    family = np.column_stack([(0 <= i_of + r) & (i_of + r < n) for r in (1, 0, -1, -2)]
                             + [i_of >= 2, i_of >= 1, i_of >= 0, i_of <= n, L.role[Q] == ROLE_C])
    rows = np.column_stack([family.astype(np.float64), fixed.lo, fixed.hi]
                           + [np.column_stack([code, size]).astype(np.float64) for _, code, size in digit_terms])
    signature = group_rows(rows)  # answer positions with identical rows see the same local computation
    carries = reachable_carries()
    weights_key = _mlp_digest(W, D, d3u) + "".join(hashlib.sha1(t.lo.tobytes() + t.hi.tobytes()).hexdigest()
                                                   for t, _, _ in digit_terms)
    classes, slack, failure, mlp2, most = [], math.inf, None, [], 0
    for c in range(int(signature.max()) + 1):
        members_of_class = np.nonzero(signature == c)[0]
        k = int(members_of_class[0])
        spec = ClassSpec(int(i_of[k]), n, fixed[k], _terms(k, digit_terms, L.role[Q[k]] == ROLE_C, W, D))
        key = ("mlp", weights_key, rows[k].tobytes(), perturbed.tobytes())
        if key not in cache:
            cache[key] = class_tables(W, spec, D, d3u, perturbed, carries)
        tables = cache[key]
        if tables.hardmax_error:
            return _fail(n, "hardmax", f"{spec.describe()}: {tables.hardmax_error}", heads=heads_info)
        result = check(tables, rho, perturbed)
        classes.append((spec.describe(), len(members_of_class), tables.n_configs, tables.n_groups, result))
        if len(spec.terms) >= most:
            most, mlp2 = len(spec.terms), tables.mlp2_groups
        if result.slack < slack:
            slack = result.slack
            if not slack > 1:
                failure = (result.reason, spec.describe(), result)
    labels = W.labels
    deltas = {labels[r]: float(delta[r]) for r in np.nonzero(delta > 0)[0]}
    deltas.update({f"{labels[c]} (after the layer-2 MLP)": float(v) for c, v in zip(D[d3u], rho) if v > 0 and labels[c] not in deltas})
    cert = Certificate(n, failure is None, "", "PASS", heads_info, deltas, classes, mlp2,
                       (int(carries.min()), int(carries.max())), slack)
    if failure:
        reason, where, res = failure
        cert.reason = reason
        cert.message = (f"{where}: {res.where} needs {res.need:.3g} but its hard-max margin is {res.margin:.3g} "
                        f"(slack ×{res.slack:.3g})" if reason == "readout" else f"{where}: {res.where}")
    return cert


ROLE_VARIABLE = {ROLE_A: "a", ROLE_B: "b", ROLE_C: "c"}


def _terms(k: int, digit_terms: list, query_is_digit: bool, W: Weights, D: np.ndarray) -> dict:
    """What each digit variable adds to the residual (on D) at answer position k: the query's own token
    and, per head, each digit key of S times 1/|S|."""
    terms: dict[tuple[str, int], Iv] = {}
    if query_is_digit:
        terms[("c", 0)] = Iv.exact(W.W_E[DIGITS][:, D])
    for digit_tok, code, size in digit_terms:
        for c in code[k][code[k] >= 0]:
            var = (ROLE_VARIABLE[int(c) // 1000], int(c) % 1000 - 500)
            part = digit_tok / float(size[k])
            terms[var] = terms[var] + part if var in terms else part
    return dict(sorted(terms.items()))


def _mlp_digest(W: Weights, D: np.ndarray, d3u: np.ndarray) -> str:
    """Everything the MLP tables read besides the class (the same for every width d, so lengths share them)."""
    cols = D[d3u]
    h = hashlib.sha1()
    for arr in (W.W_in[1][D], W.b_in[1], W.W_out[1][:, cols], W.b_out[1][cols], W.W_in[2][cols], W.b_in[2],
                W.W_out[2][:, cols], W.W_U[cols], W.b_out[2][cols], W.b_O[2][cols], W.b_U, d3u):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(repr([W.labels[c] for c in D]).encode())
    return h.hexdigest()


def _head_info(name: str, res: HeadResult) -> dict:
    return {"name": name, "sizes": sorted(set(int(x) for x in res.size)), "gap": res.gap, "leak": res.leak,
            "eta": res.spread_eta, "tv": res.tv, "position_free": res.position_free}
