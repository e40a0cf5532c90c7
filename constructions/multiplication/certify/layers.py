"""The attention half of the multiplication certificate: layer 1 at every position, then the key
classes of layer 2 and layer 2 at the answer positions (docs/multiplication.md, "Certificate",
steps 1 and 2).

Each step returns a named record: :class:`Frame` (the layout), :class:`Layer1` (the hard-max flags
and Δ₁), :class:`Layer2` (the key classes, each working head's members and value parts, and Δ₂).
The per-head bounds (leak λ, spread η, TV ≤ λ + (e^η − 1)/4) come from
:func:`.attention.head_attention`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lengthgen.proof import interval as I
from lengthgen.proof.interval import Iv
from lengthgen.proof.weights import group_rows

from .attention import MAX_MEMBERS, HeadResult, Keys, head_attention
from .weights import DIGITS, ROLE_A, ROLE_B, ROLE_C, ROLE_EQ, ROLE_TOKENS, Layout, StructureError, Weights

#: layer 1's key classes: the token kinds ``$``, digit, ``*``, ``=`` (a, b and c digits share one)
TOKEN_KINDS = ([ROLE_TOKENS[0][0]], DIGITS, [ROLE_TOKENS[2][0]], [ROLE_TOKENS[ROLE_EQ][0]])
KIND_OF_ROLE = {0: 0, ROLE_A: 1, ROLE_B: 1, ROLE_C: 1, 2: 2, ROLE_EQ: 3}


@dataclass
class Frame:
    """What the layout fixes: the positions of ``$ a * b = c`` for an n-digit a, their IDs, the token
    kind of each position (layer 1's key class), the positions holding each ID."""

    layout: Layout
    kind: np.ndarray  # [positions] index into TOKEN_KINDS
    pos_table: np.ndarray  # [max ID + 1, m] positions holding each ID, −1 padded
    m_max: int
    used_ids: np.ndarray  # the IDs that occur, sorted
    id_row: np.ndarray  # [positions] row of the position's ID in used_ids

    @classmethod
    def build(cls, n: int, start: int) -> "Frame":
        layout = Layout.build(n, start)
        table, m_max = layout.positions_by_id()
        used = np.unique(layout.ids)
        kind = np.array([KIND_OF_ROLE[int(r)] for r in layout.role])
        return cls(layout, kind, table, m_max, used, np.searchsorted(used, layout.ids))


@dataclass
class ValueParts:
    """What a head's value adds on the coordinates ``cols`` it writes: W_E[t]·W_V·W_O per token,
    (rest_c·W_V + b_V)·W_O per content class, W_pos[q]·W_V·W_O per ID (rows of ``used_ids``)."""

    token: Iv
    content: Iv
    position: Iv

    def range(self) -> np.ndarray:
        """Upper bound of max − min of a key's value over all tokens, content classes and IDs, per coordinate."""
        top = I.up_add(self.token.hi.max(0), self.content.hi.max(0), self.position.hi.max(0))
        bottom = I.down(I.down(self.token.lo.min(0) + self.content.lo.min(0)) + self.position.lo.min(0))
        return I.up(top - bottom)


@dataclass
class HeadPass:
    """One working head at the queries of its layer: its bounds, the positions of its attended set S
    per query (−1 padded), the coordinates it writes and its value parts."""

    head: int
    name: str
    bounds: HeadResult
    members: np.ndarray
    cols: np.ndarray
    values: ValueParts


@dataclass
class Layer1:
    """Layer 1 in the hard-max limit: ``written`` = every coordinate it can change, ``out`` its
    enclosure per position [positions, |written|]; ``delta`` = Δ₁ over the residual [d]."""

    keys: Keys
    written: np.ndarray
    out: Iv
    delta: np.ndarray
    heads: list[HeadPass]


@dataclass
class Layer2:
    """Layer 2 at the answer positions: key class of every position (token kind × what layer 1
    wrote), the per-class residual layer 1 left (``rest``), the heads, and Δ₂ over the residual [d]."""

    cls: np.ndarray
    rest: Iv
    heads: list[HeadPass]
    delta: np.ndarray


def _members(res: HeadResult, keys: Keys, n_queries: int, name: str) -> np.ndarray:
    """Positions of S per query (−1 padded), the first token included when it belongs to S."""
    bos_in = res.in_s[:, keys.cls[0]]
    if res.members is not None:
        return np.column_stack([np.where(bos_in, 0, -1), res.members])
    if res.size.max() > MAX_MEMBERS:
        raise StructureError(f"{name} averages over up to {int(res.size.max())} keys; the chain handles at most {MAX_MEMBERS}")
    out = np.full((n_queries, MAX_MEMBERS), -1, dtype=np.int64)
    fill = np.zeros(n_queries, dtype=np.int64)
    for c, where in enumerate(keys.class_positions()):
        take = np.where(res.in_s[:, c], res.count[:, c], 0)
        for k in range(int(take.max(initial=0))):
            rows = np.nonzero(take > k)[0]
            out[rows, fill[rows]] = where[k]
            fill[rows] += 1
    return out


def written_by(W: Weights, layer: int, h: int) -> np.ndarray:
    """The residual coordinates head h of ``layer`` writes (W_O column not all zero)."""
    return np.nonzero(np.any(W.W_O[layer][h] != 0, axis=0))[0]


def _heads(W: Weights, layer: int, keys: Keys, rest: Iv, q_pos: np.ndarray, q_content: Iv, q_cls: np.ndarray,
           frame: Frame) -> list[HeadPass]:
    """Every working head of ``layer``: its bounds at the queries, the members of S, its value parts."""
    out = []
    for h in W.working_heads(layer):
        name = f"layer {layer + 1} head {h}"
        res = head_attention(W.W_Q[layer][h], W.b_Q[layer][h], W.W_K[layer][h], W.b_K[layer][h], W.W_pos, W.scale,
                             keys, q_pos, q_content, q_cls, name)
        cols = written_by(W, layer, h)
        WO = W.W_O[layer][h][:, cols]
        VO = I.matmul(W.W_V[layer][h], WO)
        values = ValueParts(I.matmul(W.W_E, VO), I.matmul(I.affine(rest, W.W_V[layer][h], W.b_V[layer][h]), WO),
                            I.matmul(W.W_pos[frame.used_ids], VO))
        out.append(HeadPass(h, name, res, _members(res, keys, len(q_pos), name), cols, values))
    return out


def scatter(values: np.ndarray, cols: np.ndarray, d: int) -> np.ndarray:
    """``values`` on the coordinates ``cols`` of a zero vector of length d."""
    full = np.zeros(d)
    full[cols] = values
    return full


def layer1(W: Weights, frame: Frame) -> Layer1:
    """Step 1: key classes are the token kinds; per head S, λ, η, TV₁; the flags in the hard-max limit
    (mean over S of each member's value) and Δ₁ = Σ_h TV₁·range on the coordinates head h writes.
    Fails (structure) when a head's values read the digit: the chain gives every digit one value."""
    d, L = W.d_model, len(frame.layout.ids)
    content = Iv(np.stack([W.W_E[t].min(0) for t in TOKEN_KINDS]), np.stack([W.W_E[t].max(0) for t in TOKEN_KINDS]))
    keys = Keys(frame.kind, frame.layout.ids, content, frame.pos_table, frame.m_max)
    change = [np.any(W.W_O[0][h] != 0, axis=0) for h in W.working_heads(0)] + [W.b_O[0] != 0, W.b_out[0] != 0]
    written = np.nonzero(np.any(change, axis=0))[0]
    out = Iv.exact(np.zeros((L, len(written))) + (W.b_O[0] + W.b_out[0])[written])  # the layer-1 MLP adds exactly b_out
    delta = np.zeros(d)
    digit_cols = np.nonzero(np.any(W.W_E[DIGITS] != W.W_E[DIGITS[0]], axis=0))[0]
    first = [t[0] for t in TOKEN_KINDS]  # one token per kind: every digit has the same value (checked below)
    heads = _heads(W, 0, keys, Iv.exact(np.zeros((len(TOKEN_KINDS), d))), np.arange(L), content, frame.kind, frame)
    for hp in heads:
        if np.any(W.W_V[0][hp.head][digit_cols]):
            raise StructureError(f"{hp.name}: its values depend on the digit (W_V reads "
                                 f"{', '.join(W.labels[c] for c in digit_cols)})")
        v = hp.values
        value_of = (Iv(v.token.lo[first], v.token.hi[first]) + v.content)[frame.kind] + v.position[frame.id_row]
        keep = (hp.members >= 0)[..., None]
        idx = np.maximum(hp.members, 0)
        total = Iv(np.where(keep, value_of.lo[idx], 0.0), np.where(keep, value_of.hi[idx], 0.0)).sum(1)
        mean = total / hp.bounds.size[:, None].astype(np.float64)
        at = np.searchsorted(written, hp.cols)
        summed = Iv(out.lo[:, at], out.hi[:, at]) + mean
        out.lo[:, at], out.hi[:, at] = summed.lo, summed.hi
        delta = I.up_add(delta, scatter(I.up(hp.bounds.tv * v.range()), hp.cols, d))
    return Layer1(keys, written, out, delta, heads)


def layer2(W: Weights, frame: Frame, l1: Layer1) -> Layer2:
    """Step 2: key classes are token kind × what layer 1 wrote (its hard-max enclosure), each widened
    by Δ₁, so the score shifts the flag errors cause are inside; per head S, λ, η, TV₂ at the answer
    positions and Δ₂ = TV₂·(range + 2·shift) + shift, shift = Δ₁·|W_V W_O| (the values inside S move)."""
    d = W.d_model
    cls = group_rows(np.column_stack([frame.kind.astype(np.float64), l1.out.lo, l1.out.hi]))
    reps = np.array([int(np.argmax(cls == c)) for c in range(int(cls.max()) + 1)])
    rest = Iv(np.zeros((len(reps), d)), np.zeros((len(reps), d)))
    rest.lo[:, l1.written], rest.hi[:, l1.written] = l1.out.lo[reps], l1.out.hi[reps]  # no token, no position
    content = l1.keys.content[frame.kind[reps]] + rest
    widened = Iv(I.down(content.lo - l1.delta), I.up(content.hi + l1.delta))
    keys = Keys(cls, frame.layout.ids, widened, frame.pos_table, frame.m_max)
    Q = frame.layout.queries
    heads = _heads(W, 1, keys, rest, Q, widened, cls[Q], frame)
    delta = np.zeros(d)
    for hp in heads:
        shift = I.up_matmul_nonneg(l1.delta[None], I.matmul(W.W_V[1][hp.head], W.W_O[1][hp.head][:, hp.cols]).mag())[0]
        move = I.up_add(I.up(hp.bounds.tv * I.up_add(hp.values.range(), 2 * shift)), shift)
        delta = I.up_add(delta, scatter(move, hp.cols, d))
    return Layer2(cls, rest, heads, delta)
