"""The FFN half of the Theorem 5.1 certificate: decision margins read from W_in, W_out, W_U.

The FFN (docs/theorem-5-1.md, "Feed-forward network" and "Readout") turns ``t = PRE_SUM + (PRE_CARRY − 2·NUM)/10`` into a one-hot of the
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

import hashlib
from dataclasses import dataclass

import numpy as np

from lengthgen.tasks import ADDITION

from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv

ROLE_NONE, ROLE_A, ROLE_B, ROLE_C, ROLE_PLUS, ROLE_EQ, ROLE_BOS = range(7)
ROLE_NAMES = {ROLE_A: "a", ROLE_B: "b", ROLE_C: "c", ROLE_PLUS: "+", ROLE_EQ: "=", ROLE_BOS: "$"}
FIXED_TOKEN = {ROLE_PLUS: ADDITION.PLUS, ROLE_EQ: ADDITION.EQUALS, ROLE_BOS: ADDITION.BOS}
MAX_LOCAL_SIGNIFICANCES = 2


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
    stab_min: np.ndarray  # [d_mlp] lower bound, over configs, of |pre-activation|
    active_any: np.ndarray  # [d_mlp] the unit at its binding configuration is active
    abs_win: np.ndarray  # [R, d_mlp]
    gap: np.ndarray  # [C, V] lower bound of logit(target) − logit(other); +inf at the target
    sens: np.ndarray  # [C, R, V] upper bound of |∂gap/∂resid_r| on the config's affine piece
    target: np.ndarray  # [C]
    wo_wu: Iv  # [d_mlp, V] enclosure of W_out·W_U
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


def local_inputs_digest(spec: ClassSpec) -> str:
    """A digest of everything :func:`ffn_tables` reads from ``spec``: the query and target tokens
    of every local configuration and, per head, |S| and the token array of each member in order.
    Classes with equal digests (at any length) have equal tables for equal weights and effects."""
    tokens, query, target, _ = _configs(spec)
    h = hashlib.sha1(np.ascontiguousarray(query).tobytes() + np.ascontiguousarray(target).tobytes())
    for mem in spec.members:
        h.update(len(mem).to_bytes(4, "little"))
        for role, sig, _ in mem:
            h.update(np.ascontiguousarray(tokens[(role, sig)], dtype=np.int64).tobytes())
    return h.hexdigest()


def ffn_tables(W, spec: ClassSpec, pos_in: Iv, pos_logit: Iv, coords: np.ndarray) -> FFNTables:
    """Enclosures of the hard-max residual stream, pre-activations and logits for every local
    configuration of ``spec``, and the FFN's margins there.

    ``pos_in``, ``pos_logit``: the position-dependent part of the residual (W_pos[query] plus the
    heads' position-value terms) mapped through W_in and W_U; ``coords``: residual coordinates
    that may be perturbed."""
    tokens, query, target, text = _configs(spec)
    count = len(query)
    # resid = W_E[query] + b_O + Σ_h mean over S of head_out[token]; W_in and W_U are linear, so
    # pre and the residual part of the logits are sums of per-token rows (exact arithmetic)
    own = Iv.exact(W.W_E + W.b_O[None, :])
    pre = I.affine(own, W.W_in)[query] + (pos_in + W.b_in)[None]
    direct = I.matmul(own, W.W_U)[query] + pos_logit[None]
    for h, mem in enumerate(spec.members):
        head_out = I.matmul(I.affine(W.W_E, W.W_V[h], W.b_V[h]), W.W_O[h]) / float(len(mem))  # [vocab, d]
        to_in, to_logit = I.matmul(head_out, W.W_in), I.matmul(head_out, W.W_U)
        for role, sig, _ in mem:
            pre = pre + to_in[tokens[(role, sig)]]
            direct = direct + to_logit[tokens[(role, sig)]]
    wo_wu = I.matmul(W.W_out, W.W_U)
    logits = direct + I.matmul(pre.relu(), wo_wu) + I.affine(W.b_out, W.W_U, W.b_U)[None]
    rows = np.arange(count)
    gap_iv = logits[rows, target][:, None] - logits
    gap = I.lower_bound(gap_iv.lo)  # inf − inf in an overflowing enclosure: no bound
    gap[rows, target] = np.inf
    error = None
    bad = np.nonzero(gap.min(1) <= 0)[0]
    if len(bad):
        i = int(bad[0])
        centre, _ = logits.center_radius()
        got = ADDITION.decode([int(np.argmax(centre[i]))])
        want = ADDITION.decode([int(target[i])])
        detail = ", ".join(f"{ROLE_NAMES[r]}_{s}={ADDITION.decode([int(t[i])])}" for (r, s), t in tokens.items()
                           if r in (ROLE_A, ROLE_B, ROLE_C))
        error = (f"{spec.describe()}: at the hard-max limit the model predicts {got!r} instead of {want!r} "
                 f"({detail}; {len(bad)} of {count} local configurations not provably right)")
    stab = np.nan_to_num(pre.mig(), nan=0.0)  # an enclosure that overflowed to NaN keeps no sign
    active = pre.lo > 0
    sens = _sensitivities(W, active, target, coords, wo_wu)
    binding = stab.argmin(0)
    return FFNTables(spec, count, coords, stab.min(0), active[binding, np.arange(stab.shape[1])],
                     np.abs(W.W_in[coords]), gap, sens, target, wo_wu, error)


def _sensitivities(W, active: np.ndarray, target: np.ndarray, coords: np.ndarray, wo_wu: Iv) -> np.ndarray:
    """Upper bounds of |∂(logit_target − logit_v)/∂resid_r| = |g_rt − g_rv| with
    ``g = W_U + (active ⊙ W_in)·W_out·W_U`` on each configuration's affine piece (computed once per
    distinct activation pattern and target)."""
    rows = np.column_stack([np.packbits(active, axis=1), target.astype(np.int64)[:, None].view(np.uint8)])
    rows = np.ascontiguousarray(rows)
    _, first, which = np.unique(rows.view(np.dtype((np.void, rows.shape[1]))).reshape(-1), return_index=True,
                                return_inverse=True)
    which = which.reshape(-1)
    out = np.empty((len(first), len(coords), W.W_U.shape[1]))
    for j, c in enumerate(first):
        on, t = active[c].astype(np.float64), int(target[c])
        g = Iv.exact(W.W_U[coords]) + I.matmul(W.W_in[coords] * on[None, :], wo_wu)
        out[j] = (g[:, [t]] - g).mag()
    return out[which]


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
    source name ("leak", "spread", "float") to an upper bound per residual coordinate. Margins are
    lower ends of enclosures, requirements are rounded up, and each slack (margin / requirement) is
    rounded down, so ``slack > 1`` proves margin > requirement."""
    total = I.up_add(*deltas.values())[t.coords]
    rad = I.up_add(I.up_matmul_nonneg(t.abs_win.T, total), pre_err)
    with np.errstate(divide="ignore", invalid="ignore"):
        stab_ratio = np.where(rad > 0, I.down(t.stab_min / np.where(rad > 0, rad, 1.0)), np.inf)
    u = int(np.argmin(stab_ratio))
    diff = (t.wo_wu[:, :, None] - t.wo_wu[:, None, :]).mag()  # [d_mlp, V, V]
    pre_term = I.up_matmul_nonneg(diff.transpose(1, 2, 0), pre_err)  # [V, V]
    req = I.up_add(I.up_matmul_nonneg(t.sens.transpose(0, 2, 1), total), logit_err, pre_term[t.target])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(req > 0, I.down(t.gap / np.where(req > 0, req, 1.0)), np.inf)
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
