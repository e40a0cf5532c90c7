"""Every weight of the N×2 multiplication construction, one short function per head and per MLP
(docs/multiplication.md has the derivation; the format is the coupled one of ``multiplication_nx2``).

The model predicts c_{i+1} at the token c_i (ID q = e − 1 − i; the ``=`` token plays c_{−1} with
digit 0) from the identity, for b = 10·b_1 + b_0 and every i ≥ −1,

    c_{i+1} = ⌊(T + 54)/100⌋ mod 10,   T = b_0·A0 + b_1·A1 − 10·c_i,
    A0 = 100·a_{i+1} + 10·a_i + a_{i−1},   A1 = 100·a_i + 10·a_{i−1} + a_{i−2}

(digits outside the operands are 0). Why: with U = a_{i+1}·b_0 + a_i·b_1 and the carries κ_j into
place j, the column sums give T = 100·(U + κ_{i+1}) − κ_{i−1} + c_{i−1}, and κ_{i−1} ≤ 17,
c_{i−1} ≤ 9, so T − 100·K ∈ [−17, 9] for K = U + κ_{i+1}, whose last digit is c_{i+1}. Two places
of look-back in a replace the unbounded carry chain; the answer digit c_{i−1} is not needed.

Scores are q·k with scale 1. M is the sharpness, P the position dimensions.
"""
from __future__ import annotations

import math
from typing import Callable

from lengthgen.basis import MatrixBuilder, NamedBasis

from .layout import position_dims, residual_basis

HeadWeights = dict[str, MatrixBuilder]  # keys W_Q, W_K, W_V, W_O
MUL_SCALE = 1000  # > max A (999): the product units switch off a term when b < k
#: T lies in [100K − 17, 100K + 9] (module docstring): the step from K to K + 1 ramps over
#: 100K + 45 .. 100K + 47, in the middle of the gap (100K + 9, 100K + 83), so an error of up to 36
#: in T changes nothing
STEP_EDGES = (45.0, 47.0)
EOS_EDGES = (0.2, 0.3)
MAX_CARRIED = 180  # K = U + κ_{i+1} ≤ 162 + 17 = 179


def head_basis(P: int) -> NamedBasis:
    """Per-head dimensions: P position-matching dims, the BOS sink, a type channel, two values."""
    return NamedBasis([("pos", P), ("sink", None), ("type", None), ("val_0", None), ("val_1", None)])


def _head(resid: NamedBasis, head: NamedBasis) -> HeadWeights:
    return {"W_Q": MatrixBuilder(resid, head), "W_K": MatrixBuilder(resid, head),
            "W_V": MatrixBuilder(resid, head), "W_O": MatrixBuilder(head, resid)}


# ------------------------------------------------------------------ layer 1: where am I?
def segment_head(resid: NamedBasis, head: NamedBasis, M: float, P: int) -> HeadWeights:
    """Layer 1, segment flags. Every query scores 2M on ``$``, ``*`` and ``=`` and 0 elsewhere, so
    it averages over the separators seen so far: SEEN_STAR = SEEN_EQ = 0 on a's digits, SEEN_STAR
    = 1/2 on ``*`` and b's digits, SEEN_STAR = SEEN_EQ = 1/3 on ``=`` and the answer."""
    w = _head(resid, head)
    w["W_Q"].add("ONE", "sink", math.sqrt(2 * M))
    for token in ("IS_BOS", "IS_STAR", "IS_EQ"):
        w["W_K"].add(token, "sink", math.sqrt(2 * M))
    w["W_V"].add("IS_STAR", "val_0", 1).add("IS_EQ", "val_1", 1)
    w["W_O"].add("val_0", "SEEN_STAR", 1).add("val_1", "SEEN_EQ", 1)
    return w


def next_separator_head(resid: NamedBasis, head: NamedBasis, M: float, P: int) -> HeadWeights:
    """Layer 1, "is a separator one ID above me": query v_{p+1}, key v_p, with the BOS sink.
    NEXT_SEP = 1/2 on b_0 (``*`` has ID e = its ID + 1), 2/3 on c_0, 0 on b_1 and every a digit."""
    w = _head(resid, head)
    w["W_Q"].add_block("POS_PLUS1", "pos", math.sqrt(M)).add("ONE", "sink", math.sqrt(M * P))
    w["W_K"].add_block("POS", "pos", math.sqrt(M)).add("IS_BOS", "sink", math.sqrt(M * P))
    w["W_V"].add("IS_STAR", "val_0", 1).add("IS_EQ", "val_0", 1)
    w["W_O"].add("val_0", "NEXT_SEP", 1)
    return w


# ------------------------------------------------------------------ layer 2: gather the operands
def b_digit_head(which: int) -> Callable[[NamedBasis, NamedBasis, float, int], HeadWeights]:
    """Layer 2, read b_0 (``which`` = 0) or b_1 (1) by the layer-1 flags alone (no position match):
    key feature 4M·(SEEN_STAR + NEXT_SEP − 2·SEEN_EQ − IS_STAR) is 4M on b_0 and ≤ 2M elsewhere;
    4M·(SEEN_STAR − NEXT_SEP − 2·SEEN_EQ − IS_STAR) is 2M on b_1 and ≤ 0 elsewhere."""
    def build(resid: NamedBasis, head: NamedBasis, M: float, P: int) -> HeadWeights:
        w = _head(resid, head)
        w["W_Q"].add("ONE", "type", 1)
        sign = 1 if which == 0 else -1
        for flag, coef in (("SEEN_STAR", 1), ("NEXT_SEP", sign), ("SEEN_EQ", -2), ("IS_STAR", -1)):
            w["W_K"].add(flag, "type", 4 * M * coef)
        w["W_V"].add("NUM", "val_0", 1)
        w["W_O"].add("val_0", f"B{which}", 1)
        return w
    build.__name__ = f"b{which}_head"
    return build


#: ID offset of the digit of a each a-head reads, and its weights in A0 and A1 (×2: sink share)
A_HEADS = {"a_{i+1}": ("POS_MINUS1", 100, 0), "a_i": ("POS", 10, 100),
           "a_{i-1}": ("POS_PLUS1", 1, 10), "a_{i-2}": ("POS_PLUS2", 0, 1)}
EOS_SIGN = {"a_{i-1}": 1, "a_{i-2}": -1}


def a_digit_head(name: str) -> Callable[[NamedBasis, NamedBasis, float, int], HeadWeights]:
    """Layer 2, read a digit of a by coupled position (Theorem 5.1's hypercube match) restricted to
    a's segment: score M⟨v_target, v_p⟩ + MP·IS_BOS − 4M·(SEEN_STAR + SEEN_EQ). The maximal keys are
    {$, a_j} (or {$} when a_j does not exist, reading 0); b and answer digits with the same ID and
    every other ID score ≤ MP − 2M. Output 2·mean into A0/A1; the sink share (1/2, or 1 when a_j is
    absent) of a_{i−1} minus that of a_{i−2} goes to EOS_PRE: 1/2 only at the last answer digit."""
    block, into_a0, into_a1 = A_HEADS[name]

    def build(resid: NamedBasis, head: NamedBasis, M: float, P: int) -> HeadWeights:
        w = _head(resid, head)
        w["W_Q"].add_block(block, "pos", math.sqrt(M)).add("ONE", "sink", math.sqrt(M * P)).add("ONE", "type", 1)
        w["W_K"].add_block("POS", "pos", math.sqrt(M)).add("IS_BOS", "sink", math.sqrt(M * P))
        w["W_K"].add("SEEN_STAR", "type", -4 * M).add("SEEN_EQ", "type", -4 * M)
        w["W_V"].add("NUM", "val_0", 1).add("IS_BOS", "val_1", 1)
        for target, factor in (("A0", into_a0), ("A1", into_a1)):
            if factor:
                w["W_O"].add("val_0", target, 2 * factor)
        if name in EOS_SIGN:
            w["W_O"].add("val_1", "EOS_PRE", EOS_SIGN[name])
        return w
    build.__name__ = f"a_head_{name}"
    return build


#: (layer, head) -> (what the head reads, its builder)
HEADS: dict[tuple[int, int], tuple[str, Callable]] = {
    (0, 0): ("separators seen ($, *, =)", segment_head),
    (0, 1): ("separator at ID+1 (marks b_0)", next_separator_head),
    (1, 0): ("b_0", b_digit_head(0)),
    (1, 1): ("b_1", b_digit_head(1)),
    **{(1, 2 + k): (name, a_digit_head(name)) for k, name in enumerate(A_HEADS)},
}
N_HEADS = 6


# ------------------------------------------------------------------ MLPs and readout
def product_mlp_basis() -> NamedBasis:
    return NamedBasis([(f"{b}x{a}_k{k}_{part}", None) for b, a in (("B0", "A0"), ("B1", "A1"))
                       for k in range(1, 10) for part in ("on", "off")])


def product_mlp(resid: NamedBasis) -> tuple[MatrixBuilder, MatrixBuilder]:
    """Layer 2 MLP: PROD = b_0·A0 + b_1·A1, exact on integers b ≤ 9, A ≤ 999, as
    b·A = Σ_{k=1..9} ReLU(A + 1000(b − k)) − ReLU(1000(b − k))."""
    units = product_mlp_basis()
    W_in, W_out = MatrixBuilder(resid, units), MatrixBuilder(units, resid)
    for b, a in (("B0", "A0"), ("B1", "A1")):
        for k in range(1, 10):
            on, off = f"{b}x{a}_k{k}_on", f"{b}x{a}_k{k}_off"
            W_in.add(a, on, 1).add(b, on, MUL_SCALE).add("ONE", on, -MUL_SCALE * k)
            W_in.add(b, off, MUL_SCALE).add("ONE", off, -MUL_SCALE * k)
            W_out.add(on, "PROD", 1).add(off, "PROD", -1)
    return W_in, W_out


def digit_mlp_basis() -> NamedBasis:
    steps = [(f"T>{100 * m}_{edge}", None) for m in range(MAX_CARRIED) for edge in STEP_EDGES]
    return NamedBasis(steps + [("base", None)] + [(f"eos_{edge}", None) for edge in EOS_EDGES])


def digit_mlp(resid: NamedBasis) -> tuple[MatrixBuilder, MatrixBuilder]:
    """Layer 3 MLP: DIGIT = one-hot of K mod 10, K = ⌊(T + 54)/100⌋, T = PROD − 10·NUM, as
    1[DIGIT 0] + Σ_m step_m·(1[DIGIT (m+1) mod 10] − 1[DIGIT m mod 10]), step_m = [K > m]
    (a ramp over T = 100m + 45 .. 100m + 47, see STEP_EDGES); IS_EOS = ramp(EOS_PRE; 0.2 → 0.3)."""
    units = digit_mlp_basis()
    W_in, W_out = MatrixBuilder(resid, units), MatrixBuilder(units, resid)
    width = STEP_EDGES[1] - STEP_EDGES[0]
    for m in range(MAX_CARRIED):
        for edge, sign in zip(STEP_EDGES, (1, -1)):
            unit = f"T>{100 * m}_{edge}"
            W_in.add("PROD", unit, 1).add("NUM", unit, -10).add("ONE", unit, -(100 * m + edge))
            W_out.add(unit, f"DIGIT[{(m + 1) % 10}]", sign / width).add(unit, f"DIGIT[{m % 10}]", -sign / width)
    W_in.add("ONE", "base", 1)
    W_out.add("base", "DIGIT[0]", 1)
    for edge, sign in zip(EOS_EDGES, (1, -1)):
        W_in.add("EOS_PRE", f"eos_{edge}", 1).add("ONE", f"eos_{edge}", -edge)
        W_out.add(f"eos_{edge}", "IS_EOS", sign / (EOS_EDGES[1] - EOS_EDGES[0]))
    return W_in, W_out


def weight_entries(d_model: int, M: float, vocab: tuple[str, ...]) -> dict[str, MatrixBuilder]:
    """Every weight as named entries, keyed by TransformerLens parameter name (``blocks.1.attn.W_Q.3``
    for head 3 of layer 2)."""
    resid, P = residual_basis(d_model), position_dims(d_model)
    head, tokens = head_basis(P), NamedBasis([(t, None) for t in vocab])
    W: dict[str, MatrixBuilder] = {}
    W_E = W["embed.W_E"] = MatrixBuilder(tokens, resid)
    for tok in vocab:
        W_E.add(tok, "ONE", 1)
        if tok.isdigit() and tok != "0":
            W_E.add(tok, "NUM", int(tok))
    W_E.add("$", "IS_BOS", 1).add("*", "IS_STAR", 1).add("=", "IS_EQ", 1)
    for (layer, h), (_, build) in HEADS.items():
        for name, builder in build(resid, head, M, P).items():
            W[f"blocks.{layer}.attn.{name}.{h}"] = builder
    W["blocks.1.mlp.W_in"], W["blocks.1.mlp.W_out"] = product_mlp(resid)
    W["blocks.2.mlp.W_in"], W["blocks.2.mlp.W_out"] = digit_mlp(resid)
    W_U = W["unembed.W_U"] = MatrixBuilder(resid, tokens)
    for k in range(10):
        W_U.add(f"DIGIT[{k}]", str(k), 1)
    W_U.add("IS_EOS", "$", 2)
    return W
