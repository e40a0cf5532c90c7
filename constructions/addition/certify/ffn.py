"""The FFN half of the Theorem 5.1 certificate: decision margins read from W_in, W_out, W_U.

Design note §3.7–3.8: the FFN turns ``t = PRE_SUM + (PRE_CARRY − 2·NUM)/10`` into a one-hot of the
next digit with trapezoids, and PRE_EOS into IS_EOS with a ramp; the readout takes the argmax.
The certificate does not use these constants. For one *class* of answer positions (same attended
key pattern relative to the query) it enumerates every local configuration — the digits the
attended keys and the query hold, plus the incoming carry — builds the residual stream at the
hard-max limit (uniform attention over S) from the weights, and checks

* **hard-max correctness**: the argmax of the logits is the right next token (strictly);
* **ReLU stability**: every hidden unit's pre-activation keeps its sign for every residual
  perturbation in the box ``|Δ_r| ≤ Δ[r]`` (so the FFN is affine on the box);
* **readout margin**: on that affine piece, ``logit(target) − logit(other)`` stays positive:
  ``gap > Σ_r |∂gap/∂resid_r|·Δ[r]`` + float terms.

The tables are independent of the attention's sharpness M, so the smallest-M search reuses them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lengthgen.tasks import ADDITION

ROLE_NONE, ROLE_A, ROLE_B, ROLE_C, ROLE_PLUS, ROLE_EQ, ROLE_BOS = range(7)
ROLE_NAMES = {ROLE_A: "a", ROLE_B: "b", ROLE_C: "c", ROLE_PLUS: "+", ROLE_EQ: "=", ROLE_BOS: "$"}
FIXED_TOKEN = {ROLE_PLUS: ADDITION.PLUS, ROLE_EQ: ADDITION.EQUALS, ROLE_BOS: ADDITION.BOS}
MAX_LOCAL_SIGNIFICANCES = 2
FLOAT64_SLACK = 1e-9


class LocalityError(ValueError):
    """A head attends to digits farther than two significances apart (no finite local check)."""


@dataclass(frozen=True)
class ClassSpec:
    """A representative answer position: query at answer index k (−1 for ``=``), its ID, and per
    head the attended set S as (role, significance, ID) triples (``$`` included)."""

    n: int
    k: int
    query_id: int
    members: tuple[tuple[tuple[int, int, int], ...], ...]

    def describe(self) -> str:
        q = "'='" if self.k == -1 else f"c_{self.k}"
        heads = []
        for h, mem in enumerate(self.members):
            names = [ROLE_NAMES[r] + (f"_{s}" if r in (ROLE_A, ROLE_B, ROLE_C) else "") for r, s, _ in mem]
            heads.append(f"head {h + 1} -> {{{', '.join(names)}}}")
        return f"query {q}: " + "; ".join(heads)


@dataclass
class FFNTables:
    spec: ClassSpec
    n_configs: int
    coords: np.ndarray  # residual coordinates the perturbation box acts on
    stab_min: np.ndarray  # [d_mlp] min over configs of |pre-activation|
    active_any: np.ndarray  # [d_mlp] the unit at its binding configuration is active
    abs_win: np.ndarray  # [R, d_mlp]
    gap: np.ndarray  # [C, V] logit(target) − logit(other); +inf at the target
    sens: np.ndarray  # [C, R, V] |∂gap/∂resid_r| on the config's affine piece
    target: np.ndarray  # [C]
    wo_wu: np.ndarray  # [d_mlp, V]
    hardmax_error: str | None


def _configs(spec: ClassSpec) -> tuple[dict, np.ndarray, np.ndarray, str]:
    """Token arrays for every local configuration: {(role, sig): tokens}, query tokens, targets."""
    n, k = spec.n, spec.k
    if k == -1:  # '=' predicts c_0 = (a_0 + b_0) mod 10
        need = {0}
    elif k <= n - 1:  # c_k predicts c_{k+1}: significances k and k + 1 (if it exists)
        need = {k, k + 1} if k + 1 <= n - 1 else {k}
    else:  # c_n (= carry out of n − 1) predicts '$'
        need = {n - 1}
    for mem in spec.members:
        for role, sig, _ in mem:
            if role in (ROLE_A, ROLE_B):
                need.add(sig)
            elif role == ROLE_C:
                need.add(min(sig, n - 1))
    lo, hi = min(need), max(need)
    width = hi - lo + 1
    if width > MAX_LOCAL_SIGNIFICANCES:
        raise LocalityError(f"{spec.describe()} reads significances {lo}..{hi}")
    n_carry = 2 if lo >= 1 else 1
    count = 100**width * n_carry
    idx = np.arange(count)
    carry = idx % n_carry
    rest = idx // n_carry
    a = np.zeros((count, width), dtype=np.int64)
    b = np.zeros((count, width), dtype=np.int64)
    for j in range(width):
        a[:, j], rest = rest % 10, rest // 10
        b[:, j], rest = rest % 10, rest // 10
    c = np.zeros((count, width + 1), dtype=np.int64)
    cin = carry.copy()
    for j in range(width):
        total = a[:, j] + b[:, j] + cin
        c[:, j], cin = total % 10, total // 10
    c[:, width] = cin  # only read as the overflow digit c_n (hi = n − 1)
    digits = {ROLE_A: a, ROLE_B: b, ROLE_C: c}
    tokens = {}
    for mem in spec.members:
        for role, sig, _ in mem:
            tokens[(role, sig)] = digits[role][:, sig - lo] if role in digits else np.full(count, FIXED_TOKEN[role])
    query = np.full(count, ADDITION.EQUALS) if k == -1 else c[:, k - lo]
    target = np.full(count, ADDITION.EOS) if k == n else c[:, k + 1 - lo]
    text = f"a[{lo}..{hi}], b[{lo}..{hi}]" + (", carry in" if n_carry == 2 else "")
    return tokens, query, target, text


def ffn_tables(W, spec: ClassSpec, resid_pos: np.ndarray, coords: np.ndarray) -> FFNTables:
    """Hard-max residuals for every local configuration of ``spec`` and the FFN's margins there.

    ``resid_pos``: the position-dependent part of the residual (W_pos[query] plus the heads'
    position-value terms); ``coords``: residual coordinates that may be perturbed."""
    tokens, query, target, text = _configs(spec)
    count = len(query)
    resid = W.W_E[query] + resid_pos[None, :] + W.b_O[None, :]
    for h, mem in enumerate(spec.members):
        o_tok = (W.W_E @ W.W_V[h] + W.b_V[h]) @ W.W_O[h]
        for role, sig, _ in mem:
            resid += o_tok[tokens[(role, sig)]] / len(mem)
    pre = resid @ W.W_in + W.b_in
    active = pre > 0
    logits = (resid + np.maximum(pre, 0) @ W.W_out + W.b_out) @ W.W_U + W.b_U
    rows = np.arange(count)
    gap = logits[rows, target][:, None] - logits
    gap[rows, target] = np.inf
    error = None
    bad = np.nonzero(gap.min(1) <= 0)[0]
    if len(bad):
        i = int(bad[0])
        got = ADDITION.decode([int(np.argmax(logits[i]))])
        want = ADDITION.decode([int(target[i])])
        detail = ", ".join(f"{ROLE_NAMES[r]}_{s}={ADDITION.decode([int(t[i])])}" for (r, s), t in tokens.items()
                           if r in (ROLE_A, ROLE_B, ROLE_C))
        error = (f"{spec.describe()}: at the hard-max limit the model predicts {got!r} instead of {want!r} "
                 f"({detail}; {len(bad)} of {count} local configurations wrong)")
    wo_wu = W.W_out @ W.W_U
    grad = W.W_U[coords][None, :, :] + np.einsum("cu,ru,uv->crv", active.astype(float), W.W_in[coords], wo_wu)
    sens = np.abs(grad[rows, :, target][:, :, None] - grad)
    binding = np.abs(pre).argmin(0)
    return FFNTables(spec, count, coords, np.abs(pre).min(0), pre[binding, np.arange(pre.shape[1])] > 0,
                     np.abs(W.W_in[coords]), gap, sens, target, wo_wu, error)


@dataclass
class FFNCheck:
    slack: float  # min over conditions of margin / requirement (> 1 means PASS)
    where: str
    stab_margin: float
    stab_required: float
    logit_margin: float
    logit_required: float
    parts: dict[str, float]  # the binding requirement split by source


def ffn_check(t: FFNTables, deltas: dict[str, np.ndarray], pre_err: np.ndarray, logit_err: float,
              unit_names: list[str] | None = None) -> FFNCheck:
    """Check the box ``Σ deltas`` (+ float terms) against the class's margins. ``deltas`` maps a
    source name ("leak", "spread", "float") to a per-residual-coordinate bound. Requirements are
    inflated and margins deflated by ``FLOAT64_SLACK`` (relative), which dominates the rounding of
    these float64 evaluations (sums of ≤ 100 terms: γ_100 < 10^-13)."""
    total = sum(deltas.values())[t.coords]
    rad = (t.abs_win.T @ total + pre_err) * (1 + FLOAT64_SLACK)
    stab_min = t.stab_min * (1 - FLOAT64_SLACK)
    with np.errstate(divide="ignore"):
        stab_ratio = np.where(rad > 0, stab_min / np.maximum(rad, 1e-300), np.inf)
    u = int(np.argmin(stab_ratio))
    pre_term = np.abs(t.wo_wu[:, :, None] - t.wo_wu[:, None, :]).transpose(1, 2, 0) @ pre_err  # [V, V]
    req = (np.einsum("crv,r->cv", t.sens, total) + logit_err + pre_term[t.target]) * (1 + FLOAT64_SLACK)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(req > 0, t.gap * (1 - FLOAT64_SLACK) / np.maximum(req, 1e-300), np.inf)
    c, v = np.unravel_index(int(np.argmin(ratio)), ratio.shape)
    stab_slack, logit_slack = float(stab_ratio[u]), float(ratio[c, v])
    if stab_slack <= logit_slack:
        parts = {k: float(t.abs_win[:, u] @ d[t.coords]) for k, d in deltas.items()}
        parts["float"] = parts.get("float", 0.0) + float(pre_err[u])
        name = unit_names[u] if unit_names else f"unit {u}"
        where = f"ReLU {name} stays {'on' if t.active_any[u] else 'off'} (min |pre-activation| {t.stab_min[u]:.4g})"
    else:
        parts = {k: float(t.sens[c, :, v] @ d[t.coords]) for k, d in deltas.items()}
        parts["float"] = parts.get("float", 0.0) + logit_err + float(pre_term[t.target[c], v])
        where = f"logit gap to {ADDITION.decode([int(v)])!r} (gap {t.gap[c, v]:.4g})"
    finite = np.isfinite(t.gap)
    return FFNCheck(min(stab_slack, logit_slack), where, float(t.stab_min.min()), float(rad.max()),
                    float(t.gap[finite].min()) if finite.any() else np.inf, float(req[finite].max()) if finite.any() else 0.0,
                    parts)
