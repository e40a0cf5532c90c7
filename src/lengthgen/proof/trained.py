"""The trained-model certificate for coupled addition: per answer position, local configurations.

Statement (docs/certificate.md, "Trained models"): for the uniform distribution over N-digit operand
pairs of :mod:`lengthgen.evaluate` (leading digits non-zero when N > 1), teacher-forced exact match
with the decision margin is at least ``1 − Σ_r (unproven mass at answer position r)``: teacher-forced,
every answer position sees the true prefix, so exact match is the event "every answer position
predicts its token with a margin" (lengthgen.evaluate's definition, equal to greedy decoding's exact
match by induction), and the union bound over the N + 2 answer positions gives the sum.

Answer position r (0 ≤ r ≤ N + 1) is the query at ``=`` (r = 0) or at answer digit c_{r−1}; it
predicts c_r (``$`` for r = N + 1). Layout: significance j of a, b and c has ID s + N − 1 − j, ``+`` and
``=`` have s + N, the opening ``$`` ID 0 (``coupled``) or s − 1 (``coupled-sink``,
:func:`lengthgen.positions.coupled_sink_addition_ids`).

Per answer position, a *window* W = [lo, hi] of significances (always holding the ones the query
token and the target depend on, widened toward the IDs whose keys may carry most attention) and a
*local configuration*: the digits a_j, b_j for j in W and the carry into lo. It fixes the query
token, the target and the tokens of every key in W (c_j by the carries); its probability is
exact: digits uniform (1/9 for the leading ones), P(carry into lo = 1) = (10^lo − 1)/(2·10^lo)
(independent of the digits in W). Every other digit key is treated pessimally: token any digit
(any non-zero digit at the lead), so per head its softmax share λ is at most
``W⁺/(Z⁻ + W⁺)`` (W⁺: the sum of e^{max score} over those keys, Z⁻: the fixed keys' weight) and its
mean value lies in the box of all its possible values: ``out = o_fixed + λ·(o_free − o_fixed)``
exactly, enclosed with λ ∈ [0, λ⁺]. The residual enclosure then goes through LN2, the MLP, the
final LN and the unembedding, first in plain interval arithmetic, then, for what that leaves
unproven, as an affine form (:mod:`lengthgen.proof.trained_affine`); the configuration is proven
when the target's logit beats every other by more than the margin in the enclosure. With a float
format on the weights (:mod:`lengthgen.proof.trained_float`) the same argument encloses the model's
float forward pass instead: every step is widened by its rounding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from itertools import product

import numpy as np

from ..decode import DECISION_MARGIN
from . import interval as I
from .interval import Iv
from .layers import exp_enclosure, exp_upper, recip
from .trained_affine import CHUNK as AFFINE_CHUNK
from .trained_affine import affine_differences, free_values
from .trained_tables import OneLayer, Tables
from .weights import StructureError

CHUNK = 2048  # configurations pushed through the layers at once
TAILS = ("interval", "both", "affine")  # plain intervals only; affine on what they leave; affine only
DIGITS = np.arange(10)


@dataclass
class Layout:
    """Token ids and the coupled layout of one operand length (``s``: the start ID; ``dollar_id``: the
    opening ``$``'s ID, 0 under the paper's rule and s − 1 under ``coupled-sink``)."""

    n: int
    s: int
    dollar: int
    plus: int
    equals: int
    dollar_id: int = 0

    def id_of(self, j: int) -> int:
        """Position ID of significance j (a_j, b_j, c_j)."""
        return self.s + self.n - 1 - j

    def query_id(self, r: int) -> int:
        return self.s + self.n - r

    def keys_seen(self, r: int) -> int:
        """Keys the query of answer position r sees: ``$ a + b =`` (2n + 3 tokens) and c_0..c_{r−1}."""
        return 2 * self.n + 3 + r

    def digit_set(self, j: int) -> np.ndarray:
        """The digits an operand holds at significance j under the evaluation distribution."""
        return DIGITS[1:] if (j == self.n - 1 and self.n > 1) else DIGITS

    def needed(self, r: int) -> tuple[int, int]:
        """Significances the query token and the target of answer position r depend on."""
        if r == 0:
            return 0, 0
        return min(r - 1, self.n - 1), min(r, self.n - 1)


@dataclass
class PositionResult:
    """What one answer position proved: counts, the unproven mass, the failed configurations."""

    r: int
    window: tuple[int, int]
    configurations: int  # ordered configurations (a_j, b_j, carry) of the window
    proven: int
    unproven_mass: Fraction
    failed: list[tuple[np.ndarray, np.ndarray, int]] = field(default_factory=list)  # (a, b window digits, carry), worst first
    max_free_share: float = 0.0  # the largest λ⁺ over heads and configurations
    min_margin: float = np.inf  # the smallest proven lower bound of (target − runner-up) logit
    enclosures: tuple | None = None  # with keep_enclosures: (a, b, carry, lo, hi) of logit[target] − logit[·]


@dataclass
class PositionInputs:
    """What :meth:`PositionCertifier.inputs` sets up for one answer position: the query ID, the
    window, the configurations (a ≤ b digits [C, w], carry into the window, multiplicity), the query
    token and target per configuration, the fixed keys' (tokens, ID) and the heads' constants."""

    qid: int
    window: tuple[int, int]
    a: np.ndarray
    b: np.ndarray
    carry: np.ndarray
    mult: np.ndarray
    query_tok: np.ndarray
    target: np.ndarray
    slots: list
    heads: list


def carry_probability(lo: int, carry: int) -> Fraction:
    """P(carry into significance lo = carry) for uniform lower digits: of the 10^{2lo} pairs of lo-digit
    numbers, 10^lo(10^lo − 1)/2 sum to at least 10^lo."""
    if lo == 0:
        return Fraction(1 - carry)
    m = 10**lo
    p1 = Fraction(m - 1, 2 * m)
    return p1 if carry else 1 - p1


def configurations(lay: Layout, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every local configuration of window [lo, hi] (see :func:`_configurations`)."""
    return _configurations(tuple(len(lay.digit_set(j)) for j in range(lo, hi + 1)), lo > 0)


@lru_cache(maxsize=16)
def _configurations(sizes: tuple[int, ...], with_carry: bool) -> tuple[np.ndarray, ...]:
    """Every local configuration of window [lo, hi] up to swapping a_j and b_j: a ≤ b digits [C, w],
    the carry into lo [C], and how many ordered configurations each stands for [C]. Swapping a_j and
    b_j permutes two keys of one ID, which changes no softmax, no key set and no sum digit."""
    pairs = []
    for size in sizes:
        d = DIGITS[10 - size:]
        pairs.append([(x, y, 1 if x == y else 2) for x in d for y in d if x <= y])
    carries = (0, 1) if with_carry else (0,)
    rows = [(tuple(p[0] for p in combo), tuple(p[1] for p in combo), int(np.prod([p[2] for p in combo])), k)
            for combo in product(*pairs) for k in carries]
    a = np.array([r[0] for r in rows], dtype=np.int64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    return a, b, np.array([r[3] for r in rows], dtype=np.int64), np.array([r[2] for r in rows], dtype=np.int64)


def propagate(a: np.ndarray, b: np.ndarray, carry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum digits c_j over the window and the carry out of its top (Python-integer school addition)."""
    c = np.empty_like(a)
    k = carry.copy()
    for i in range(a.shape[1]):
        t = a[:, i] + b[:, i] + k
        c[:, i], k = t % 10, t // 10
    return c, k


def refined_configurations(lay: Layout, parent: PositionResult, lo: int, hi: int
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The configurations of window [lo, hi] that lie inside one that ``parent`` (a result of a
    window inside [lo, hi]) left unproven, built from those alone: its window digits, any digits
    above it, and below it any digits and carry into lo whose carry into the parent's window is the
    parent's. Same form as :func:`configurations` (a ≤ b per significance, carry, multiplicity), but
    never the whole wider window: widening one significance costs 55·2 rows per unproven one."""
    plo, phi = parent.window
    if not lo <= plo <= phi <= hi:
        raise ValueError(f"window [{lo}, {hi}] does not contain the window [{plo}, {phi}] it refines")
    empty = np.zeros((0, hi - lo + 1), dtype=np.int64)
    if not parent.failed:
        return empty, empty.copy(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    fa, fb = (np.array([f[i] for f in parent.failed], dtype=np.int64).reshape(len(parent.failed), -1) for i in (0, 1))
    fc = np.array([f[2] for f in parent.failed], dtype=np.int64)
    # below: any digits and carry into lo (nothing below, plo = lo: one empty row per possible carry
    # into lo, which the parent's carry then picks); above: the digits each once (configurations
    # pairs each with both carries into phi + 1; nothing above: one empty row)
    ba, bb, bc, _ = configurations(lay, lo, plo - 1)
    carry_out = propagate(ba, bb, bc)[1]
    ta, tb, tc, _ = configurations(lay, phi + 1, hi)
    ta, tb = ta[tc == 0], tb[tc == 0]
    rows_a, rows_b, rows_c = [], [], []
    for i in range(len(fc)):
        below = np.flatnonzero(carry_out == fc[i])
        k, m = len(below), len(ta)
        rows_a.append(np.hstack([np.repeat(ba[below], m, 0), np.tile(fa[i], (k * m, 1)), np.tile(ta, (k, 1))]))
        rows_b.append(np.hstack([np.repeat(bb[below], m, 0), np.tile(fb[i], (k * m, 1)), np.tile(tb, (k, 1))]))
        rows_c.append(np.repeat(bc[below], m))
    a, b, carry = np.vstack(rows_a), np.vstack(rows_b), np.concatenate(rows_c)
    return a, b, carry, np.prod(np.where(a == b, 1, 2), axis=1).astype(np.int64)


class PositionCertifier:
    """Certificate of the answer positions of one operand length (see the module docstring)."""

    def __init__(self, w: OneLayer, tables: Tables, lay: Layout, max_width: int = 2, margin: float = DECISION_MARGIN,
                 keep_enclosures: bool = False, tail: str = "both"):
        if tail not in TAILS:
            raise ValueError(f"tail must be one of {', '.join(TAILS)}, not {tail!r}")
        self.w, self.t, self.lay, self.max_width, self.margin = w, tables, lay, max_width, margin
        self.keep, self.tail = keep_enclosures, tail
        self.V = w.W_E.shape[0]

    # -- keys -------------------------------------------------------------------------------------
    def _fixed_slots(self, r: int, lo: int, hi: int, a, b, c, top) -> list[tuple[np.ndarray, int]]:
        """(token per configuration, ID) of every key whose token the configuration fixes."""
        lay, C = self.lay, len(a)
        const = lambda tok: np.full(C, tok, dtype=np.int64)  # noqa: E731
        slots = [(const(lay.dollar), lay.dollar_id), (const(lay.plus), lay.s + lay.n), (const(lay.equals), lay.s + lay.n)]
        for i, j in enumerate(range(lo, hi + 1)):
            slots += [(a[:, i], lay.id_of(j)), (b[:, i], lay.id_of(j))]
            if j <= r - 1:
                slots.append((c[:, i], lay.id_of(j)))
        if r == lay.n + 1:
            slots.append((top, lay.s - 1))  # the query c_N itself
        return slots

    def _free_slots(self, r: int, lo: int, hi: int) -> list[tuple[np.ndarray, int]]:
        """(possible tokens, ID) of every digit key outside the window (c_j: any digit)."""
        lay, out = self.lay, []
        for j in range(lay.n):
            if lo <= j <= hi:
                continue
            out += [(lay.digit_set(j), lay.id_of(j))] * 2
            if j <= r - 1:
                out.append((DIGITS, lay.id_of(j)))
        return out

    def _window(self, r: int, scores: list[Iv]) -> tuple[int, int]:
        """The needed significances, widened (up to ``max_width``) toward the heavier neighbour ID:
        the one whose digit keys can score highest against the query, over heads and query tokens."""
        lo, hi = self.lay.needed(r)
        while hi - lo + 1 < self.max_width and (lo > 0 or hi < self.lay.n - 1):
            weight = {}
            for j in (lo - 1, hi + 1):
                if 0 <= j < self.lay.n:
                    weight[j] = max(float(np.max(s.hi[:, :10, self.lay.id_of(j)])) for s in scores)
            j = max(weight, key=weight.get)
            lo, hi = min(lo, j), max(hi, j)
        return lo, hi

    # -- one answer position -----------------------------------------------------------------------
    def inputs(self, r: int, sample: int | None = None, refine: PositionResult | None = None) -> PositionInputs:
        """Window, local configurations (at most ``sample`` of them, evenly spaced, when given; only
        those that refine a configuration ``refine`` left unproven, when given), query tokens,
        targets, fixed keys and per-head constants of answer position r (for :meth:`certify`,
        benchmarks and tests of single stages)."""
        lay = self.lay
        qid = lay.query_id(r)
        scores = [self.t.scores(h, qid, lay.keys_seen(r)) for h in range(self.w.n_heads)]
        lo, hi = self._window(r, scores)
        if refine is None:
            a, b, carry, mult = configurations(lay, lo, hi)
        else:
            a, b, carry, mult = refined_configurations(lay, refine, lo, hi)
            if self._mass(lo, hi, carry, mult) != refine.unproven_mass:
                raise RuntimeError(f"answer position {r}: the configurations of window [{lo}, {hi}] that refine "
                                   f"the unproven ones of {list(refine.window)} do not carry their mass")
        if sample is not None:
            pick = np.unique(np.linspace(0, len(a) - 1, min(sample, len(a))).astype(int))
            a, b, carry, mult = a[pick], b[pick], carry[pick], mult[pick]
        c, top = propagate(a, b, carry)
        query_tok = np.full(len(a), lay.equals) if r == 0 else (top if r - 1 == lay.n else c[:, r - 1 - lo])
        target = np.full(len(a), lay.dollar) if r == lay.n + 1 else (top if r == lay.n else c[:, r - lo])
        slots = self._fixed_slots(r, lo, hi, a, b, c, top)
        free = self._free_slots(r, lo, hi)
        heads = [self._head_constants(scores[h], h, slots, free) for h in range(self.w.n_heads)]
        return PositionInputs(qid, (lo, hi), a, b, carry, mult, query_tok, target, slots, heads)

    def _mass(self, lo: int, hi: int, carry: np.ndarray, mult: np.ndarray) -> Fraction:
        """Probability of a set of configurations of window [lo, hi] (``mult`` ordered ones each)."""
        digit_mass = Fraction(1)
        for j in range(lo, hi + 1):
            digit_mass /= len(self.lay.digit_set(j)) ** 2
        return digit_mass * sum((carry_probability(lo, k) * int(mult[carry == k].sum()) for k in (0, 1)), Fraction(0))

    def certify(self, r: int, refine: PositionResult | None = None) -> PositionResult:
        """What answer position r proves; with ``refine`` (a result of a narrower window), only the
        configurations that refine those it left unproven are certified, and the result counts the
        ones it proved as proven: each configuration of the wider window lies inside exactly one of
        the narrower window's, so a proof of that one covers it."""
        lay = self.lay
        p = self.inputs(r, refine=refine)
        qid, (lo, hi), a, b, carry, mult = p.qid, p.window, p.a, p.b, p.carry, p.mult
        query_tok, target, slots, heads = p.query_tok, p.target, p.slots, p.heads
        ok = np.zeros(len(a), dtype=bool)
        share, margins, kept = 0.0, [], []
        for start in range(0, len(a), CHUNK):
            sel = slice(start, start + CHUNK)
            tq = query_tok[sel]
            resid, lam = self.after_attention(heads, [(tok[sel], pid) for tok, pid in slots], tq, qid)
            share = max(share, float(lam.max(initial=0.0)))
            if self.tail == "affine":  # the affine tail alone (tests): every row through it
                diff = Iv(np.full((len(tq), self.V), -np.inf), np.full((len(tq), self.V), np.inf))
            else:  # a float radius given up (+inf, trained_float) makes inf − inf: NaN, read as no bound
                with np.errstate(invalid="ignore", over="ignore"):
                    diff = self._differences(self.w.tail(resid), target[sel])
                diff = Iv(I.lower_bound(diff.lo), I.upper_bound(diff.hi))
            if self.tail != "interval":
                self._tighten(diff, np.arange(len(a))[sel], heads, slots, query_tok, target, qid)
            low = diff.lo.copy()
            low[np.arange(len(low)), target[sel]] = np.inf
            ok[sel] = low.min(axis=1) > self.margin
            margins.append(low.min(axis=1))
            kept.append(diff)
        low = np.concatenate(margins) if margins else np.zeros(0)
        bad = np.flatnonzero(~ok)
        bad = bad[np.argsort(low[bad], kind="stable")]  # the likeliest real failures first
        smallest = float(low[ok].min()) if ok.any() else np.inf
        total = int(configurations(lay, lo, hi)[3].sum())
        if refine is not None:
            share, smallest = max(share, refine.max_free_share), min(smallest, refine.min_margin)
        return PositionResult(r, (lo, hi), total, total - int(mult[~ok].sum()), self._mass(lo, hi, carry[~ok], mult[~ok]),
                              [(a[i], b[i], int(carry[i])) for i in bad], share, smallest,
                              (a, b, carry, np.concatenate([k.lo for k in kept]), np.concatenate([k.hi for k in kept]))
                              if self.keep else None)

    def after_attention(self, heads: list[dict], slots, tq: np.ndarray, qid: int) -> tuple[Iv, np.ndarray]:
        """The plain enclosure of the residual after attention [C, d] (with a float format, of the
        float one) at query ID ``qid`` with query tokens ``tq`` and the fixed keys ``slots``, and the
        largest free-key share λ⁺ of any head [C]."""
        resid = self.t.resid[:, qid][tq] + self.w.b_O
        share = np.zeros(len(tq))
        for k in heads:
            out, lam = self._head(k, slots, tq)
            resid = resid + out
            share = np.maximum(share, lam)
        return self.t.after_attention(resid), share

    def _tighten(self, diff: Iv, index: np.ndarray, heads: list[dict], slots, query_tok: np.ndarray,
                 target: np.ndarray, qid: int) -> None:
        """Second pass on the rows of ``diff`` (configurations ``index``) that the plain pass leaves
        unproven: intersect with the affine tail's enclosure (:mod:`lengthgen.proof.trained_affine`)."""
        low = diff.lo.copy()
        low[np.arange(len(low)), target[index]] = np.inf
        todo = np.flatnonzero(~(low.min(axis=1) > self.margin))
        for start in range(0, len(todo), AFFINE_CHUNK):
            rows = todo[start:start + AFFINE_CHUNK]
            g = index[rows]
            tq = query_tok[g]
            with np.errstate(invalid="ignore", over="ignore"):
                sub = affine_differences(self, heads, [(tok[g], pid) for tok, pid in slots], tq,
                                         self.t.resid[:, qid][tq], target[g])
            both = diff[rows].intersect(sub)  # both enclose the same numbers
            diff.lo[rows], diff.hi[rows] = both.lo, both.hi

    def _head_constants(self, s: Iv, h: int, slots, free) -> dict:
        """Per query token: a reference score (the largest possible fixed-key score) and the bound W⁺
        on the free keys' weight relative to it; the box of the free keys' head outputs; and, on the
        IDs of the fixed keys, the tables e = exp(score − reference) and e·(value·W_O)."""
        ids = sorted({pid for _, pid in slots})
        ref = np.full(self.V, -np.inf)
        for tok, pid in slots:
            ref = np.maximum(ref, s.hi[:, np.unique(tok), pid].max(axis=1))
        out = self.t.out[h]
        sub = Iv(s.lo[:, :, ids], s.hi[:, :, ids])
        e = exp_enclosure(sub - Iv.exact(ref[:, None, None]))  # [V, V, ids]
        weighted = lambda table: Iv(e.lo[..., None], e.hi[..., None]) * table[:, ids][None]  # noqa: E731
        w_free = np.zeros(self.V)
        box = Iv(np.zeros(self.w.d_model), np.zeros(self.w.d_model))
        if free:
            best = np.stack([s.hi[:, toks, pid].max(axis=1) for toks, pid in free], axis=1)  # [V, F]
            with np.errstate(invalid="ignore"):
                terms = exp_upper(I.up(best - ref[:, None]))
            w_free = I.up(terms.sum(axis=1) * I.up_sum_factor(len(free)))
            box = Iv(np.min([out.lo[toks, pid].min(axis=0) for toks, pid in free], axis=0),
                     np.max([out.hi[toks, pid].max(axis=0) for toks, pid in free], axis=0))
        affine = self.tail != "interval"  # the affine tail's value-space tables
        return {"w_free": w_free, "box": box, "index": {pid: i for i, pid in enumerate(ids)}, "e": e,
                "eo": weighted(out), "ev": weighted(self.t.value[h]) if affine else None,
                "free_v": free_values(self.t.value[h], free, self.w.W_O[h]) if free and affine else None}

    def fixed_mean(self, k: dict, slots, tq: np.ndarray, table: str = "eo") -> tuple[Iv, np.ndarray]:
        """The fixed keys' softmax-weighted mean of ``out`` (``table`` "eo") or of the value vectors
        ("ev") [C, ·], and the bound λ⁺ [C] on the free keys' share ``W⁺/(Z⁻ + W⁺)``."""
        e, eo, index = k["e"], k[table], k["index"]
        z = Iv(np.zeros(len(tq)), np.zeros(len(tq)))
        num = Iv(np.zeros((len(tq), eo.shape[-1])), np.zeros((len(tq), eo.shape[-1])))
        for tok, pid in slots:
            i = index[pid]
            z = z + Iv(e.lo[tq, tok, i], e.hi[tq, tok, i])
            num = num + Iv(eo.lo[tq, tok, i], eo.hi[tq, tok, i])
        if np.any(z.lo <= 0):
            raise StructureError("attention scores of one query span more than e^745: the fixed keys' softmax "
                                 "weight underflows, which this certificate does not handle")
        wf = k["w_free"][tq]
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = np.minimum(np.where(wf > 0, I.up(wf / I.down(z.lo + wf)), 0.0), 1.0)
        return num * recip(z)[:, None], lam

    def _head(self, k: dict, slots, tq: np.ndarray) -> tuple[Iv, np.ndarray]:
        """Enclosure of one head's output [C, d] and the bound λ⁺ [C] on the free keys' share."""
        fixed, lam = self.fixed_mean(k, slots, tq)
        if not np.any(lam):
            return fixed, lam
        box = k["box"]
        spread = Iv(box.lo - fixed.hi, box.hi - fixed.lo)
        spread = Iv(I.down(spread.lo), I.up(spread.hi))
        return fixed + Iv(np.zeros_like(lam), lam)[:, None] * spread, lam

    def _differences(self, x: Iv, target: np.ndarray) -> Iv:
        """Enclosure of logit[target] − logit[o] for every token o, per row [rows, V]."""
        lo, hi = np.empty((len(target), self.V)), np.empty((len(target), self.V))
        WU, bU = Iv.exact(self.w.W_U), Iv.exact(self.w.b_U)
        for t in np.unique(target):
            rows = np.flatnonzero(target == t)
            diff = I.matmul(x[rows], WU[:, [int(t)]] - WU) + (bU[[int(t)]] - bU)
            lo[rows], hi[rows] = diff.lo, diff.hi
        return self.w.round_logits(Iv(lo, hi), x.mag(), target)
