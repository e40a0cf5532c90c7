"""All-inputs certificate for the N×2 multiplication construction at operand length N, in exact real
arithmetic (docs/multiplication.md, "Certificate").

Every number is read from the weights the model holds (W_E, W_pos, W_Q, W_K, W_V, W_O, b_*, W_in,
W_out, W_U) and every number compared with a margin is an interval enclosure
(:mod:`constructions.addition.certify.interval`). The chain, one layer at a time:

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

from constructions.addition.certify import interval as I
from constructions.addition.certify.interval import Iv
from lengthgen.model import Transformer

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


def _group_rows(rows: np.ndarray) -> np.ndarray:
    """Group index of each row (identical bytes share one), in order of first appearance."""
    _, first, inv = np.unique(np.ascontiguousarray(rows).view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))),
                              return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))
    return order[inv.reshape(-1)]


def _hull(rows: np.ndarray) -> Iv:
    return Iv(rows.min(0), rows.max(0))


def _value_parts(W: Weights, layer: int, h: int, rest: Iv, used: np.ndarray) -> tuple[Iv, Iv, Iv]:
    """Per head: W_E[t]·W_V·W_O for every token, (rest_c·W_V + b_V)·W_O per content class, W_pos[q]·W_V·W_O per ID."""
    WV, WO = W.W_V[layer][h], W.W_O[layer][h]
    tok = I.matmul(I.matmul(W.W_E, WV), WO)
    cls = I.matmul(I.affine(rest, WV, W.b_V[layer][h]), WO)
    pos = I.matmul(I.matmul(W.W_pos[used], WV), WO)
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


def _layer(W: Weights, layer: int, keys: Keys, rest: Iv, q_pos: np.ndarray, q_content: Iv, q_cls: np.ndarray,
           used: np.ndarray, id_row: np.ndarray):
    """One attention layer: per working head the bounds, the members of S and the value parts."""
    out = []
    for h in W.working_heads(layer):
        name = f"layer {layer + 1} head {h}"
        res = head_attention(W.W_Q[layer][h], W.b_Q[layer][h], W.W_K[layer][h], W.b_K[layer][h], W.W_pos, W.scale,
                             keys, q_pos, q_content, q_cls, name)
        tok, cls, pos = _value_parts(W, layer, h, rest, used)
        members = _members(res, keys, q_pos, name)
        out.append((h, name, res, members, tok, cls, pos))
    return out


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
    zero_rest = Iv.exact(np.zeros((4, d)))
    heads_info: list[dict] = []
    out1 = Iv.exact(np.zeros((Lk, d)))
    delta1 = np.zeros(d)
    for h, name, res, members, tok, cls, pos in _layer(W, 0, keys1, zero_rest, np.arange(Lk), content1, group, used, id_row):
        if np.any(W.W_V[0][h][digit_cols]):
            raise StructureError(f"{name}: its values depend on the digit (W_V reads {', '.join(W.labels[c] for c in digit_cols)})")
        first = [t[0] for t in tokens_of]  # every digit has the same value (checked above)
        value_of = (Iv(tok.lo[first], tok.hi[first]) + cls)[group] + pos[id_row]
        out1 = out1 + _mean_over(members, value_of, res.size)
        delta1 = I.up_add(delta1, I.up(res.tv * _range(tok, cls, pos)))
        heads_info.append(_head_info(name, res))
    out1 = out1 + W.b_O[0] + W.b_out[0]  # the layer-1 MLP adds exactly b_out (W_out = 0 is checked)
    # ---- b. layer 2: key classes are token kind × what layer 1 wrote, widened by Δ₁
    cls2 = _group_rows(np.column_stack([group.astype(np.float64), out1.lo, out1.hi]))
    reps = np.array([int(np.argmax(cls2 == c)) for c in range(int(cls2.max()) + 1)])
    rest2 = out1[reps]  # what layer 1 left at each class (no token, no position)
    content2 = content1[group[reps]] + rest2
    widened = Iv(I.down(content2.lo - delta1), I.up(content2.hi + delta1))
    keys2 = Keys(cls2, L.ids, widened, table, m_max)
    Q = L.queries
    delta2 = np.zeros(d)
    layer2 = _layer(W, 1, keys2, rest2, Q, widened, cls2[Q], used, id_row)
    for h, name, res, members, tok, cls, pos in layer2:
        # values read the residual, which layer 1 left off by ≤ Δ₁: each value moves by ≤ shift, so the
        # output moves by ≤ TV·(range + 2·shift) (leak and spread) + shift (the values inside S)
        shift = I.up_matmul_nonneg(delta1[None], I.matmul(W.W_V[1][h], W.W_O[1][h]).mag())[0]
        delta2 = I.up_add(delta2, I.up(res.tv * I.up_add(_range(tok, cls, pos), 2 * shift)), shift)
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
    fixed = Iv.exact(W.W_pos[L.ids[Q]][:, D]) + out1[Q][:, D] + (W.b_O[1] + W.b_O[2])[D]
    fixed = fixed + np.where((L.role[Q] == ROLE_EQ)[:, None], W.W_E[EQ][D][None], 0.0)
    terms: list[dict] = [{} for _ in Q]
    i_of = np.arange(len(Q)) - 1
    for k in np.nonzero(L.role[Q] == ROLE_C)[0]:
        terms[k][("c", 0)] = Iv.exact(W.W_E[DIGITS][:, D])
    for h, name, res, members, tok, cls, pos in layer2:
        keep = members >= 0
        idx = np.maximum(members, 0)
        is_digit = keep & np.isin(L.role[idx], (ROLE_A, ROLE_B, ROLE_C))
        token_fixed = np.array([ROLE_TOKENS[int(r)][0] for r in L.role])  # one token per non-digit role
        value_fixed = cls[cls2] + pos[id_row]  # [Lk, d] … restricted below
        part = Iv(np.where(keep[..., None], value_fixed.lo[idx][..., D], 0.0), np.where(keep[..., None], value_fixed.hi[idx][..., D], 0.0))
        fix_tok = keep & ~is_digit
        part = part + Iv(np.where(fix_tok[..., None], tok.lo[token_fixed[idx]][..., D], 0.0),
                         np.where(fix_tok[..., None], tok.hi[token_fixed[idx]][..., D], 0.0))
        fixed = fixed + part.sum(1) / res.size[:, None].astype(np.float64)
        digit_tok = Iv(tok.lo[DIGITS][:, D], tok.hi[DIGITS][:, D])
        for k, j in zip(*np.nonzero(is_digit)):
            p = int(members[k, j])
            rel = int(L.sig[p]) - (int(i_of[k]) if L.role[p] != ROLE_B else 0)
            var = ({ROLE_A: "a", ROLE_B: "b", ROLE_C: "c"}[int(L.role[p])], rel)
            add = digit_tok / float(res.size[k])
            terms[k][var] = terms[k][var] + add if var in terms[k] else add
    carries = reachable_carries()
    weights_key = _mlp_digest(W, D, d3u)
    signature = []
    for k, i in enumerate(i_of):
        family = (tuple(0 <= i + r < n for r in (1, 0, -1, -2)), i >= 2, i >= 1, i >= 0, i <= n)
        parts = [repr(family).encode(), fixed.lo[k].tobytes(), fixed.hi[k].tobytes()]
        for var in sorted(terms[k]):
            parts += [repr(var).encode(), terms[k][var].lo.tobytes(), terms[k][var].hi.tobytes()]
        signature.append(hashlib.sha1(b"|".join(parts)).hexdigest())
    classes, slack, failure, mlp2, most = [], math.inf, None, [], 0
    order = {}
    for k, sig in enumerate(signature):
        order.setdefault(sig, []).append(k)
    for sig, rows in order.items():
        k = rows[0]
        spec = ClassSpec(int(i_of[k]), n, fixed[k], {v: t for v, t in sorted(terms[k].items())})
        key = ("mlp", weights_key, sig, perturbed.tobytes())
        if key not in cache:
            cache[key] = class_tables(W, spec, D, d3u, perturbed, carries)
        tables = cache[key]
        if tables.hardmax_error:
            return _fail(n, "hardmax", f"{spec.describe()}: {tables.hardmax_error}", heads=heads_info)
        result = check(tables, rho, perturbed)
        classes.append((spec.describe(), len(rows), tables.n_configs, tables.n_groups, result))
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


def _mlp_digest(W: Weights, D: np.ndarray, d3u: np.ndarray) -> str:
    """Everything the MLP tables read besides the class (the same for every width d, so lengths share them)."""
    cols = D[d3u]
    h = hashlib.sha1()
    for arr in (W.W_in[1][D], W.b_in[1], W.W_out[1][:, cols], W.b_out[1][cols], W.W_in[2][cols], W.b_in[2],
                W.W_out[2][:, cols], W.W_U[cols], W.b_out[2][cols], W.b_U, d3u):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(repr([W.labels[c] for c in D]).encode())
    return h.hexdigest()


def _head_info(name: str, res: HeadResult) -> dict:
    return {"name": name, "sizes": sorted(set(int(x) for x in res.size)), "gap": res.gap, "leak": res.leak,
            "eta": res.spread_eta, "tv": res.tv, "position_free": res.position_free}
