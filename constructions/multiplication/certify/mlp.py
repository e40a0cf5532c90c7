"""The MLP half of the multiplication certificate: every answer-position class, every reachable local
configuration (docs/multiplication.md, "Certificate").

At an answer position the residual after layer-2 attention is, in the hard-max limit, a fixed vector
F (position rows, layer-1 flags, the sink's share, biases) plus one term per *variable*: the query's
own digit c_i and each digit a head reads (a_{i+1}, a_i, a_{i−1}, a_{i−2}, b_0, b_1 — whichever the
attended sets of :mod:`.attention` contain). Every number here is an interval enclosure computed from
W_E, W_V, W_O, W_in, b_in, W_out, b_out, W_U, b_U; the deviations of the attention layers enter
only as a box Δ.

1. **Configurations.** A configuration is the window a_{i−2} … a_{i+1} (digits outside a are 0), b_1,
   b_0 and the carry κ_{i−1} into place i−1, ranging over the set of carries that N×2 multiplication can
   reach (closure of κ' = ⌊(x·b_0 + y·b_1 + κ)/10⌋ from κ = 0; every κ_j lies in it by induction). The
   query's digit c_i and the target c_{i+1} follow by schoolbook multiplication. This covers every
   input: each input gives each answer position one configuration.
2. **Layer-2 MLP over its finite domain.** Units are grouped by the variables their pre-activation
   reads; each group is evaluated in interval arithmetic at every assignment of its variables (10^4
   points for a product b·A). The deviation box moves its output by at most |W_out|ᵀ·|W_in|ᵀ·Δ (ReLU is
   1-Lipschitz).
3. **Layer-3 MLP and readout.** Configurations are merged into groups with the same target whose
   layer-3 inputs round to the same point (2^-10 grid), and each group's box is the hull of its
   members' enclosures. On a box where no layer-3 unit changes sign the logits are affine; the check is
   ``gap(centre) − |∂gap/∂x|·(radius + ρ) > 0`` for every other token, with ρ the deviation box of the
   layer-3 inputs, and no unit may change sign within the box grown by ρ.

Steps 1–3 do not depend on W_Q, W_K (only ρ does), so :func:`class_tables` is cached across the
smallest-M search.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv

from .weights import DIGITS, EOS, TOKEN_NAMES, StructureError, Weights

MAX_ASSIGNMENTS = 100_000
GRID = 2.0**10
CHUNK = 4096
WINDOW = (1, 0, -1, -2)  # a_{i+1}, a_i, a_{i−1}, a_{i−2}


def reachable_carries() -> np.ndarray:
    """Carries of N×2 multiplication: the closure of {0} under κ' = ⌊(x·b_0 + y·b_1 + κ)/10⌋."""
    d = np.arange(10)
    column = (d[:, None, None, None] * d[None, :, None, None] + d[None, None, :, None] * d[None, None, None, :]).reshape(-1)
    seen = {0}
    while True:
        new = {int(v) for k in seen for v in np.unique((column + k) // 10)} | seen
        if new == seen:
            return np.array(sorted(seen))
        seen = new


@dataclass
class ClassSpec:
    """One answer-position class: the answer index i of its representative (−1 for ``=``), N, the fixed
    part F of the residual on the coordinates the MLPs and the readout read, and the digit terms
    ``terms[var]`` = enclosure [10, |D|] of what each value of the variable adds."""

    i: int
    n: int
    F: Iv
    terms: dict[tuple[str, int], Iv]

    def describe(self) -> str:
        where = "'='" if self.i == -1 else f"c_{self.i}" if self.i < 2 or self.i > self.n - 2 else f"c_i, 2 ≤ i ≤ {self.n - 2}"
        reads = ", ".join(f"b_{k}" if r == "b" else f"{r}_i" if k == 0 else f"{r}_(i{k:+d})" for r, k in self.terms)
        return f"{where} (reads {reads or 'no digit'})"


def configurations(i: int, n: int, carries: np.ndarray) -> dict[tuple[str, int], np.ndarray]:
    """Every local configuration of answer position i (step 1), as digit arrays per variable, plus
    ``target`` (the token to predict)."""
    free = {("a", r): (0 <= i + r < n) for r in WINDOW}
    low_vars = [("a", -1), ("a", -2), ("b", 0), ("b", 1)]
    grids = [np.arange(10) if free.get(v, True) else np.zeros(1, np.int64) for v in low_vars]
    kappa_prev = carries if i - 1 >= 1 else np.zeros(1, np.int64)
    mesh = [g.reshape(-1) for g in np.meshgrid(*grids, kappa_prev, indexing="ij")]
    a1, a2, b0, b1, kp = mesh
    kappa_i = (a1 * b0 + a2 * b1 + kp) // 10 if i >= 1 else np.zeros_like(a1)
    combo = np.column_stack([a1, a2, b0, b1, kappa_i])
    low = combo[_group_keys(list(combo.T))[1]]
    high = [np.arange(10) if free[("a", r)] else np.zeros(1, np.int64) for r in (0, 1)]
    hi_mesh = np.column_stack([g.reshape(-1) for g in np.meshgrid(*high, indexing="ij")])
    rows = np.repeat(np.arange(len(low)), len(hi_mesh))
    cols = np.tile(np.arange(len(hi_mesh)), len(low))
    a1, a2, b0, b1, kappa_i = low[rows].T
    a0, a_up = hi_mesh[cols].T
    out = {("a", -1): a1, ("a", -2): a2, ("b", 0): b0, ("b", 1): b1, ("a", 0): a0, ("a", 1): a_up}
    if i >= 0:
        column = a0 * b0 + a1 * b1 + kappa_i
        out[("c", 0)] = column % 10
        kappa_next = column // 10
    else:
        kappa_next = np.zeros_like(a0)
    digit = (a_up * b0 + a0 * b1 + kappa_next) % 10
    out["target"] = np.where(i <= n, np.asarray(DIGITS)[digit], EOS)
    return out


def _varying(table: Iv) -> np.ndarray:
    """Coordinates where the entries of a table [k, D] are not all the same enclosure."""
    return np.any(table.lo != table.lo[:1], axis=0) | np.any(table.hi != table.hi[:1], axis=0)


def _split(table: Iv, mask: np.ndarray) -> tuple[Iv, Iv]:
    """(the digit-independent coordinates of entry 0, the table with those coordinates set to 0)."""
    const = Iv(np.where(mask, 0.0, table.lo[0]), np.where(mask, 0.0, table.hi[0]))
    return const, Iv(np.where(mask, table.lo, 0.0), np.where(mask, table.hi, 0.0))


@dataclass
class ClassTables:
    """What :func:`check` needs of one class, independent of the deviations: per layer-3 group its
    target, ReLU pattern, hard-max margins ``margin[g, k]`` (lower bound of logit(target) − logit(k)
    over the group's box), its sign reserve (how far every layer-3 unit stays from 0, per unit of
    deviation), and per pattern |∂(logit_t − logit_k)/∂x|."""

    n_configs: int
    target: np.ndarray
    pattern: np.ndarray
    margin: np.ndarray
    reserve: np.ndarray  # [d_mlp]
    W3_abs: np.ndarray  # |W_in| of layer 3 on the coordinates it reads
    slope: np.ndarray  # [patterns, V, V, |d3u|]
    hardmax_error: str
    mlp2_groups: list[tuple[tuple, int]]

    @property
    def n_groups(self) -> int:
        return len(self.target)


def class_tables(W: Weights, spec: ClassSpec, D: np.ndarray, d3u: np.ndarray, carries: np.ndarray) -> ClassTables:
    """Steps 1–3 in the hard-max limit for one class. ``D`` are the residual coordinates the MLPs and
    the readout read, ``d3u`` the indices into D read by layer 3 or the readout."""
    cfg = configurations(spec.i, spec.n, carries)
    n_cfg = len(cfg["target"])
    for v in spec.terms:
        if v not in cfg:
            raise StructureError(f"{spec.describe()}: a head reads {v[0]}_(i{v[1]:+d}), outside the window "
                                 "a_(i−2) … a_(i+1) that the carry argument covers")
    base, var = spec.F, {}
    for v, table in spec.terms.items():
        const, var[v] = _split(table, _varying(table))
        base = base + const
    # step 2: layer-2 MLP units grouped by the variables their pre-activation reads
    W2 = W.W_in[1][D]
    reads = {v: np.any(W2[_varying(var[v])] != 0, axis=0) for v in var}
    groups: dict[tuple, list[int]] = {}
    for u in range(W2.shape[1]):
        groups.setdefault(tuple(v for v in var if reads[v][u]), []).append(u)
    parts: list[tuple[Iv, np.ndarray]] = [(var[v][:, d3u], cfg[v]) for v in var]
    mlp2 = []
    for key, units in groups.items():
        if 10 ** len(key) > MAX_ASSIGNMENTS:
            raise StructureError(f"{spec.describe()}: layer-2 MLP units read {len(key)} digits at once "
                                 f"(over {MAX_ASSIGNMENTS} assignments)")
        assign = np.array(list(itertools.product(range(10), repeat=len(key))), dtype=np.int64).reshape(10 ** len(key), len(key))
        x = Iv(np.repeat(base.lo[None], len(assign), 0), np.repeat(base.hi[None], len(assign), 0))
        for col, v in enumerate(key):
            x = x + var[v][assign[:, col]]
        z = I.affine(x, W2[:, units], W.b_in[1][units])
        parts.append((I.matmul(z.relu(), W.W_out[1][units][:, D[d3u]]), _index(cfg, key, n_cfg)))
        mlp2.append((key, len(units)))
    const3 = base[d3u] + W.b_out[1][D[d3u]] + W.b_O[2][D[d3u]]  # the layer-2 MLP's bias; layer-3 attention adds b_O
    moving = np.zeros(len(d3u), dtype=bool)
    for table, _ in parts:
        moving |= _varying(table)
    for table, _ in parts:
        const3 = const3 + _split(table, moving)[0]
    return _layer3(W, D[d3u], cfg["target"], const3, moving, parts, n_cfg, mlp2)


def _index(cfg: dict, key: tuple, n_cfg: int) -> np.ndarray:
    idx = np.zeros(n_cfg, dtype=np.int64)
    for v in key:
        idx = idx * 10 + cfg[v]
    return idx


def _group_keys(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Group index of each row of integer columns (1-D sorts only) and the first row of each group."""
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:  # the code stays below (rows)², far from int64's end
        uniq, inv = np.unique(col, return_inverse=True)
        code = np.unique(code * len(uniq) + inv.reshape(-1), return_inverse=True)[1].reshape(-1)
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    return inv.reshape(-1), first


def _layer3(W: Weights, cols: np.ndarray, target: np.ndarray, const3: Iv, moving: np.ndarray,
            parts: list[tuple[Iv, np.ndarray]], n_cfg: int, mlp2: list) -> ClassTables:
    """Step 3: merge configurations into boxes and check the layer-3 MLP and the readout on each."""
    mv = np.nonzero(moving)[0]
    val = Iv(np.repeat(const3.lo[mv][None], n_cfg, 0), np.repeat(const3.hi[mv][None], n_cfg, 0))
    for table, idx in parts:
        sub = Iv(table.lo[:, mv], table.hi[:, mv])
        # a part that is the same for every configuration still adds its value (a unit reading no digit writes too)
        val = val + (Iv(sub.lo[idx], sub.hi[idx]) if np.any(_varying(sub)) else sub[:1])
    centre = val.lo + 0.5 * (val.hi - val.lo)
    inv, first = _group_keys([np.round(centre[:, c] * GRID).astype(np.int64) for c in range(len(mv))] + [target])
    G = len(first)
    lo, hi = np.full((G, len(mv)), np.inf), np.full((G, len(mv)), -np.inf)
    for c in range(len(mv)):
        np.minimum.at(lo[:, c], inv, val.lo[:, c])
        np.maximum.at(hi[:, c], inv, val.hi[:, c])
    tgt = target[first]
    box_mv = Iv(lo, hi)
    W3, b3, WU = W.W_in[2][cols], W.b_in[2], W.W_U[cols]
    rest = Iv(np.where(moving, 0.0, const3.lo), np.where(moving, 0.0, const3.hi))
    z = I.affine(rest, W3, b3)[None] + I.matmul(box_mv, W3[mv])  # [G, d_mlp]: no N×d product per group
    active, inactive = z.lo >= 0, z.hi <= 0
    unstable = ~(active | inactive)
    error = ""
    if unstable.any():
        g, u = map(int, np.argwhere(unstable)[0])
        error = (f"layer-3 unit {u} changes sign inside the hard-max box of a group predicting token {int(tgt[g])} "
                 f"(pre-activation in [{z.lo[g, u]:.4g}, {z.hi[g, u]:.4g}])")
    reserve = np.where(unstable, -np.inf, np.where(active, z.lo, -z.hi)).min(0)  # per unit: distance of z from 0
    uniq_p, pattern = np.unique(np.packbits(active, axis=1), axis=0, return_inverse=True)
    pattern = pattern.reshape(-1)
    masks = np.unpackbits(uniq_p, axis=1, count=W3.shape[1]).astype(bool)
    H = I.matmul(W.W_out[2][:, cols], WU)  # [d_mlp, V]
    c_out = I.affine(W.b_out[2], W.W_U, W.b_U)  # what b_out of layer 3 and b_U add to the logits
    V = WU.shape[1]
    # on a box with a fixed ReLU pattern the logits are affine, x·J + K (one J, K per pattern)
    J = I.matmul(W3[None] * masks[:, None, :], H) + WU  # [P, r, V]
    K = I.matmul((b3[None] * masks)[:, None, :], H)[:, 0] + c_out  # [P, V]
    diff = Iv(J.lo[..., :, None], J.hi[..., :, None]) - Iv(J.lo[..., None, :], J.hi[..., None, :])  # [P, r, V(t), V(k)]
    slope = diff.mag().transpose(0, 2, 3, 1)  # [P, V(t), V(k), r]: |∂(logit_t − logit_k)/∂x_r|
    # gap = K_t − K + Σ_r x_r (J_rt − J_r): the coordinates that do not move are summed once per (pattern, target)
    pairs, pair = np.unique(pattern * V + tgt, return_inverse=True)
    pair = pair.reshape(-1)
    pp, pt = pairs // V, pairs % V
    still = np.nonzero(~moving)[0]
    fixed = Iv(const3.lo[still][None, :, None], const3.hi[still][None, :, None])
    Jpt = Iv(diff.lo[pp, :, pt], diff.hi[pp, :, pt])  # [pairs, r, V]
    Kp = K[pp]
    idx = np.arange(len(pairs))
    base = (fixed * Jpt[:, still]).sum(1) + (Iv(Kp.lo[idx, pt][:, None], Kp.hi[idx, pt][:, None]) - Kp)  # [pairs, V]
    margin = np.empty((G, V))
    for s in range(0, G, CHUNK):
        rows = np.arange(s, min(G, s + CHUNK))
        Jm = Jpt[pair[rows]][:, mv]  # [g, |mv|, V]
        gap = (Iv(lo[rows][:, :, None], hi[rows][:, :, None]) * Jm).sum(1) + base[pair[rows]]
        margin[rows] = I.lower_bound(gap.lo)  # NaN: an enclosure that overflowed (inf − inf) bounds nothing
        margin[rows, tgt[rows]] = np.inf
    if not error and np.any(margin <= 0):
        g, k = map(int, np.argwhere(margin <= 0)[0])
        error = (f"the hard-max limit does not separate token {int(tgt[g])} from token {k} on a group of configurations "
                 f"(margin lower bound {margin[g, k]:.4g})")
    return ClassTables(n_cfg, tgt, pattern, margin, reserve, np.abs(W3), slope, error, mlp2)


@dataclass
class Check:
    """Outcome of :func:`check` for one class. ``slack`` = the smaller of margin/need over every logit
    gap (readout) and reserve/deviation over every layer-3 unit (stability); > 1 passes."""

    slack: float
    margin: float
    need: float
    reserve: float
    deviation: float
    reason: str
    where: str


def check(tables: ClassTables, rho: np.ndarray) -> Check:
    """Step 3 with the deviation box ``rho`` of the layer-3 inputs (over d3u)."""
    shift = I.upper_bound(I.up_matmul_nonneg(rho[None], tables.W3_abs)[0])  # how far the deviations can move each unit
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(shift > 0, I.down(tables.reserve / np.where(shift > 0, shift, 1.0)), np.inf)
    u = int(np.argmin(ratios))
    stab, reserve, r_max = float(ratios[u]), float(tables.reserve[u]), float(shift[u])
    per = I.upper_bound(I.up_matmul_nonneg(tables.slope, rho))  # [P, V, V]; NaN (inf·0 of an overflowed slope): no bound
    need = per[tables.pattern, tables.target]  # [G, V]
    finite = np.isfinite(tables.margin)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(finite, I.down(tables.margin / np.where(need > 0, need, 0.0)), np.inf)
    g, k = np.unravel_index(int(np.argmin(ratio)), ratio.shape)
    read = float(ratio[g, k])
    where = f"logit({TOKEN_NAMES[int(tables.target[g])]}) − logit({TOKEN_NAMES[int(k)]})"
    if stab < read:
        reason = "" if stab > 1 else "stability"
        where = (f"layer-3 unit {u} keeps its sign: its pre-activation stays ≥ {reserve:.3g} from 0 in the hard-max "
                 f"limit, the deviations move it by ≤ {r_max:.3g}")
    else:
        reason = "" if read > 1 else "readout"
    return Check(min(stab, read), float(tables.margin[g, k]), float(need[g, k]), reserve, r_max, reason, where)
