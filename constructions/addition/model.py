"""Theorem 5.1 of Cho et al., "Position Coupling" (NeurIPS 2024): a 1-layer, 2-head decoder-only
transformer with coupled positions adds operands of up to 2^⌊(d−17)/2⌋ − 2 digits.

The weights follow shared/design/theorem-5-1-addition.md §3. The dimension names, their order and
the query layout are the paper's (its Appendix E, Tables 9–22); the initial values of the token
dimensions, the content of POS_2, the BOS attention sink, the output factors 3 and 4, the FFN's
trapezoid bumps and the linear readout are **reconstructed** (§3.2–3.8, tagged [C] there) and are
proven right here by the tests, not quoted.

Residual stream, d = 17 + 2P (+ unused dimensions when d − 17 is odd):

    NUM, IS_BOS, FULL_ONES, PRE_SUM, PRE_CARRY, PRE_EOS, SUM[0..9], IS_EOS, POS_1[0..P-1], POS_2[0..P-1]

Position ID p is coded by the hypercube vector v_p = ((−1)^{bit_i(p−1)})_i (v_0 = 0), so
⟨v_p, v_q⟩ = P for p = q and ≤ P − 2 otherwise (§3.3). POS_1 holds v_p, POS_2 holds v_{p−1}.

* Head 1 ("addition without carry", §3.4): query √M·POS_2 ⊕ √(MP)·FULL_ONES, key √M·POS_1 ⊕
  √(MP)·IS_BOS. The maximal keys of the token at significance i are {$, a_{i+1}, b_{i+1}}; value
  NUM, output ×3 → PRE_SUM = a_{i+1} + b_{i+1}.
* Head 2 ("carry detection", §3.5): query √M·POS_1 ⊕ √(MP)·FULL_ONES, same key. Maximal keys
  {$, a_i, b_i, c_i}; values NUM (×4 → PRE_CARRY = a_i + b_i + c_i) and IS_BOS (×1 → PRE_EOS, the
  sink's share: 1/2 only at the last answer digit).
* FFN (§3.7): t = PRE_SUM + (PRE_CARRY − 2·NUM)/10 lies within 0.1 of a_{i+1} + b_{i+1} + carry_i;
  80 ReLUs make trapezoids SUM_k = trap(t − k) + trap(t − k − 10) (1 for |u| ≤ 0.15, 0 for
  |u| ≥ 0.35); 2 ReLUs make IS_EOS = ramp(PRE_EOS; 0.375 → 0.4375).
* Readout (§3.8): logit(k) = SUM_k, logit($) = 2·IS_EOS.

Error bound (§3.9, re-derived): every key outside the maximal set scores at most MP − 2M, so the
leaked softmax mass is δ ≤ N·e^{−2M} for N tokens. A convex combination of values in [0, 9] then
moves by at most 9δ, so |ΔPRE_SUM| ≤ 27δ, |ΔPRE_CARRY| ≤ 36δ, |Δt| ≤ 27δ + 3.6δ < 31δ and
|ΔPRE_EOS| ≤ δ. The trapezoids and the EOS ramp are exact while |Δt| < 0.05 and |ΔPRE_EOS| <
0.0417, i.e. for δ < 1/620. :func:`required_sharpness` picks M = ½·ln(1000·N), so δ ≤ 1/1000.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from lengthgen.basis import MatrixBuilder, NamedBasis
from lengthgen.decode import greedy_generate, greedy_generate_batch
from lengthgen.model import Annotations, Transformer, TransformerConfig
from lengthgen.positions import coupled_addition_ids
from lengthgen.tasks import ADDITION
from lengthgen.tasks.addition import digits_of, digits_to_str

TOKEN_BLOCKS: list[tuple[str, int | None]] = [
    ("NUM", None), ("IS_BOS", None), ("FULL_ONES", None), ("PRE_SUM", None), ("PRE_CARRY", None),
    ("PRE_EOS", None), ("SUM", 10), ("IS_EOS", None),
]
N_TOKEN_DIMS = 17
START_ID = 2  # s: operands get IDs s..s+n-1, "+"/"=" get s+n, the overflow digit s-1 (§1.2)
TRAP_OFFSETS = ((0.35, 1), (0.15, -1), (-0.15, -1), (-0.35, 1))  # ReLU(u + off) · sign / 0.2
TRAP_WIDTH = 0.20
EOS_RAMP = (0.375, 0.4375)
DEFAULT_TABLE_DIGITS = 10_000
HEAD_NAMES = ("head 1: addition without carry", "head 2: carry and EOS detection")


class CapacityError(ValueError):
    """More digits than a construction (or its position table) can hold."""


def position_dims(d_model: int) -> int:
    """P = ⌊(d − 17)/2⌋ position dimensions per block (Theorem 5.1)."""
    if d_model < 21:
        raise CapacityError(f"d_model must be at least 21 (17 token dimensions + 2·2 position dimensions), got {d_model}")
    return (d_model - N_TOKEN_DIMS) // 2


def max_digits_for(d_model: int) -> int:
    """Theorem 5.1's bound 2^P − 2: IDs s−1 .. s+n must be n + 2 distinct non-zero hypercube codes."""
    return 2 ** position_dims(d_model) - 2


def d_model_for(n_digits: int) -> int:
    """Smallest embedding dimension whose bound 2^P − 2 reaches ``n_digits``."""
    p = max(2, math.ceil(math.log2(n_digits + 2)))
    return N_TOKEN_DIMS + 2 * p


def required_sharpness(n_tokens: int) -> float:
    """M = ½·ln(1000·N): keeps the softmax leak δ ≤ N·e^{−2M} at most 1/1000 (module docstring)."""
    return 0.5 * math.log(1000 * n_tokens)


def hypercube_codes(ids: np.ndarray, P: int) -> np.ndarray:
    """Rows v_p = ((−1)^{bit_i(p−1)})_{i<P} for p ≥ 1 and v_p = 0 for p ≤ 0 (§3.3; the offset p−1
    and v_0 = 0 are reconstructed). ⟨v_p, v_q⟩ = P − 2·Hamming(p−1, q−1) for p, q ≥ 1."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1, 1)
    bits = ((ids - 1) >> np.arange(P, dtype=np.int64)) & 1
    return np.where(ids >= 1, 1 - 2 * bits, 0).astype(np.int8)


def hypercube_code(p: int, P: int) -> list[int]:
    """v_p for one ID (see :func:`hypercube_codes`)."""
    return hypercube_codes(np.array([p]), P)[0].tolist()


def position_table(d_model: int, n_positions: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """W_pos: row p holds v_p in POS_1 and v_{p−1} in POS_2 (§3.2–3.3), for IDs 0 .. n_positions−1."""
    basis, P = residual_basis(d_model), position_dims(d_model)
    ids = np.arange(n_positions)
    table = torch.zeros(n_positions, d_model, dtype=dtype)
    table[:, basis.block("POS_1")] = torch.from_numpy(hypercube_codes(ids, P)).to(dtype)
    table[:, basis.block("POS_2")] = torch.from_numpy(hypercube_codes(ids - 1, P)).to(dtype)
    return table


def residual_basis(d_model: int) -> NamedBasis:
    P = position_dims(d_model)
    blocks = TOKEN_BLOCKS + [("POS_1", P), ("POS_2", P)]
    spare = d_model - N_TOKEN_DIMS - 2 * P
    return NamedBasis(blocks + ([("UNUSED", spare)] if spare else []))


def head_basis(P: int) -> NamedBasis:
    """Per-head dimensions: P position-matching dims, the BOS sink, then two value dims."""
    return NamedBasis([("pos", P), ("sink", None), ("val_NUM", None), ("val_IS_BOS", None)])


def mlp_basis() -> NamedBasis:
    units = [(f"trap_m{m}_{'+' if off > 0 else '-'}{abs(off):.2f}", None) for m in range(20) for off, _ in TRAP_OFFSETS]
    return NamedBasis(units + [(f"eos_{EOS_RAMP[0]}", None), (f"eos_{EOS_RAMP[1]}", None)])


def weight_entries(
    d_model: int, M: Any, n_positions: int | None, sqrt: Callable[[Any], Any] = math.sqrt,
    number: Callable[[float], Any] = float,
) -> dict[str, MatrixBuilder]:
    """Every weight of the construction as named entries. ``sqrt``/``number`` let exact-arithmetic
    checks pass sympy functions (e.g. ``sympy.sqrt`` and ``sympy.nsimplify``). ``W_pos`` is included
    when ``n_positions`` is given (entry by entry: meant for short tables; ``build_model`` uses the
    vectorized :func:`position_table`, which holds the same numbers)."""
    resid = residual_basis(d_model)
    P = position_dims(d_model)
    head, mlp = head_basis(P), mlp_basis()
    vocab = NamedBasis([(t, None) for t in ADDITION.vocab])
    W: dict[str, MatrixBuilder] = {}

    W_E = W["W_E"] = MatrixBuilder(vocab, resid)
    for tok in ADDITION.vocab:
        W_E.add(tok, "FULL_ONES", 1)
        if tok.isdigit() and tok != "0":
            W_E.add(tok, "NUM", int(tok))
    W_E.add("$", "IS_BOS", 1)

    if n_positions is not None:
        ids = NamedBasis([(f"id{p}", None) for p in range(n_positions)])
        W_pos = W["W_pos"] = MatrixBuilder(ids, resid)
        table = position_table(d_model, n_positions)
        for p, j in torch.nonzero(table).tolist():
            W_pos.add(f"id{p}", resid.labels[j], int(table[p, j]))

    for h, query_block in enumerate(("POS_2", "POS_1")):
        W[f"W_Q{h}"] = MatrixBuilder(resid, head).add_block(query_block, "pos", sqrt(M)).add("FULL_ONES", "sink", sqrt(M * P))
        W[f"W_K{h}"] = MatrixBuilder(resid, head).add_block("POS_1", "pos", sqrt(M)).add("IS_BOS", "sink", sqrt(M * P))
    W["W_V0"] = MatrixBuilder(resid, head).add("NUM", "val_NUM", 1)
    W["W_O0"] = MatrixBuilder(head, resid).add("val_NUM", "PRE_SUM", 3)
    W["W_V1"] = MatrixBuilder(resid, head).add("NUM", "val_NUM", 1).add("IS_BOS", "val_IS_BOS", 1)
    W["W_O1"] = MatrixBuilder(head, resid).add("val_NUM", "PRE_CARRY", 4).add("val_IS_BOS", "PRE_EOS", 1)

    W_in = W["W_in"] = MatrixBuilder(resid, mlp)
    W_out = W["W_out"] = MatrixBuilder(mlp, resid)
    tenth, fifth = number(0.1), number(0.2)
    for unit in mlp.labels[:80]:
        m, (off, sign) = int(unit.split("_")[1][1:]), TRAP_OFFSETS[mlp.index(unit) % 4]
        # pre-activation t − m + off with t = PRE_SUM + (PRE_CARRY − 2·NUM)/10; FULL_ONES is the bias
        W_in.add("PRE_SUM", unit, 1).add("PRE_CARRY", unit, tenth).add("NUM", unit, -fifth)
        W_in.add("FULL_ONES", unit, number(off) - m)
        W_out.add(unit, f"SUM[{m % 10}]", sign / number(TRAP_WIDTH))
    ramp = number(EOS_RAMP[1]) - number(EOS_RAMP[0])
    for unit, threshold, sign in zip(mlp.labels[80:], EOS_RAMP, (1, -1)):
        W_in.add("PRE_EOS", unit, 1).add("FULL_ONES", unit, -number(threshold))
        W_out.add(unit, "IS_EOS", sign / ramp)

    W_U = W["W_U"] = MatrixBuilder(resid, vocab)
    for k in range(10):
        W_U.add(f"SUM[{k}]", str(k), 1)
    W_U.add("IS_EOS", "$", 2)
    return W


NOTES = {
    "embed.W_E": "Token embedding (§3.2): digit k -> NUM = k; every token -> FULL_ONES = 1; '$' -> IS_BOS = 1.",
    "pos_embed.W_pos": "Coupled position ID p -> POS_1 = v_p, POS_2 = v_{p-1}; v is the hypercube code (§3.3), v_0 = 0.",
    "blocks.0.attn.W_Q": "Head 1 query: sqrt(M)*POS_2 (the ID one step more significant) and sqrt(MP)*FULL_ONES.\n"
    "Head 2 query: sqrt(M)*POS_1 (its own ID) and sqrt(MP)*FULL_ONES. Scores peak at MP on the keys to gather.",
    "blocks.0.attn.W_K": "Both heads: key sqrt(M)*POS_1 and sqrt(MP)*IS_BOS, so '$' always scores MP (attention sink).",
    "blocks.0.attn.W_V": "Head 1 reads NUM; head 2 reads NUM and IS_BOS.",
    "blocks.0.attn.W_O": "Head 1: 3*mean over {$, a_{i+1}, b_{i+1}} -> PRE_SUM = a_{i+1}+b_{i+1}.\n"
    "Head 2: 4*mean over {$, a_i, b_i, c_i} -> PRE_CARRY = a_i+b_i+c_i; sink share -> PRE_EOS (1/2 only at c_n).",
    "blocks.0.mlp.W_in": "t = PRE_SUM + (PRE_CARRY - 2*NUM)/10 (+FULL_ONES offsets): 4 hinges per value m = 0..19;\n"
    "two hinges on PRE_EOS at 0.375 and 0.4375.",
    "blocks.0.mlp.W_out": "Trapezoids (ReLU(u+.35) - ReLU(u+.15) - ReLU(u-.15) + ReLU(u-.35))/0.2 -> SUM[m mod 10];\n"
    "the EOS ramp -> IS_EOS.",
    "unembed.W_U": "Readout: logit(k) = SUM[k]; logit('$') = 2*IS_EOS.",
}


def build_model(
    n_digits: int | None = None,
    d_model: int | None = None,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    M: float | None = None,
) -> tuple[Transformer, dict]:
    """The Theorem 5.1 transformer and its metadata (AdderBoard-style ``(model, meta)``).

    ``d_model`` fixes P = ⌊(d−17)/2⌋; otherwise the smallest P with 2^P − 2 ≥ ``n_digits`` is used.
    The position table holds IDs for ``n_digits`` digits (default: the theorem's bound, capped at
    10^4 digits, so d = 512 does not allocate 2^247 rows). ``M`` defaults to
    :func:`required_sharpness` of the longest sequence the table allows.
    """
    if n_digits is None and d_model is None:
        raise ValueError("give n_digits or d_model")
    if n_digits is not None and n_digits < 1:
        raise CapacityError(f"n_digits must be at least 1, got {n_digits}")
    d_model = d_model_for(n_digits) if d_model is None else d_model
    P, bound = position_dims(d_model), max_digits_for(d_model)
    if n_digits is not None and n_digits > bound:
        raise CapacityError(
            f"{n_digits} digits exceed Theorem 5.1's bound 2^{P} - 2 = {bound} for d_model = {d_model}; "
            f"d_model = {d_model_for(n_digits)} fits"
        )
    table_digits = n_digits if n_digits is not None else min(bound, DEFAULT_TABLE_DIGITS)
    n_positions = START_ID + table_digits + 1
    M = required_sharpness(3 * table_digits + 5) if M is None else float(M)
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    cfg = TransformerConfig(
        d_vocab=len(ADDITION.vocab), d_model=d_model, n_layers=1, n_heads=2, d_head=P + 3, d_mlp=82,
        n_ctx=n_positions, positional="learned", attn_scale=1.0, act_fn="relu", normalization=None,
        dtype=str(dtype).removeprefix("torch."),
    )
    W = weight_entries(d_model, M, None)
    annotations = Annotations(
        residual=residual_basis(d_model).labels, head_dims=[head_basis(P).labels] * 2, head_names=list(HEAD_NAMES), mlp=mlp_basis().labels,
        vocab=list(ADDITION.vocab), notes=NOTES,
        title=f"Theorem 5.1 addition transformer (Cho et al. 2024): d={d_model}, P={P}, M={M:.4g}",
    )
    model = Transformer(cfg, annotations)
    with torch.no_grad():
        model.embed.W_E.copy_(W["W_E"].tensor(dtype))
        model.pos_embed.W_pos.copy_(position_table(d_model, n_positions, dtype))
        attn = model.blocks[0].attn
        for h in range(2):
            attn.W_Q[h].copy_(W[f"W_Q{h}"].tensor(dtype))
            attn.W_K[h].copy_(W[f"W_K{h}"].tensor(dtype))
            attn.W_V[h].copy_(W[f"W_V{h}"].tensor(dtype))
            attn.W_O[h].copy_(W[f"W_O{h}"].tensor(dtype))
        model.blocks[0].mlp.W_in.copy_(W["W_in"].tensor(dtype))
        model.blocks[0].mlp.W_out.copy_(W["W_out"].tensor(dtype))
        model.unembed.W_U.copy_(W["W_U"].tensor(dtype))
    model.eval().requires_grad_(False)
    meta = {
        "name": "Theorem 5.1 (Position Coupling): 1-layer 2-head addition transformer",
        "author": "lengthgen (construction after Cho et al., NeurIPS 2024)",
        "params": sum(p.numel() for p in model.parameters()),
        "architecture": f"1 layer, 2 heads, d_model={d_model}, d_head={P + 3}, d_mlp=82, ReLU, no LayerNorm",
        "tricks": "coupled position IDs, hypercube position code, BOS attention sink",
        "d_model": d_model, "P": P, "M": M, "max_digits": table_digits, "theorem_max_digits": bound,
        "leak_bound": (3 * table_digits + 5) * math.exp(-2 * M),
    }
    return model.to(device), meta


def table_digits(model: Transformer) -> int:
    """Longest operands the model's position table can address (IDs up to s + n)."""
    return model.cfg.n_ctx - 1 - START_ID


def check_operands(model: Transformer, n: int) -> None:
    if n > table_digits(model):
        raise CapacityError(
            f"{n}-digit operands need position IDs up to {START_ID + n}, but this model's table stops at "
            f"{model.cfg.n_ctx - 1} ({table_digits(model)} digits); build_model(n_digits={n}) makes one that fits"
        )


def add(model: Transformer, a: int | str, b: int | str, progress: bool = False) -> int:
    """a + b computed by the transformer: generic greedy decoding from the prompt ``$a+b=``.

    The position IDs of the answer tokens are part of the input (coupling makes them known from n)."""
    inst = ADDITION.instance(str(a), str(b), start=START_ID)
    check_operands(model, inst.n)
    out = greedy_generate(
        model, inst.tokens[: inst.prompt_len], inst.pos_ids[: inst.prompt_len],
        new_pos_ids=inst.pos_ids[inst.prompt_len :], stop_token=ADDITION.EOS, progress=progress,
    )
    return _answer_to_int(out)


def add_many(model: Transformer, pairs: list[tuple[int, int]]) -> list[int]:
    """``add`` for many pairs at once (batched greedy decoding; pairs are grouped by length n)."""
    by_length: dict[int, list[int]] = {}
    instances = [ADDITION.instance(str(a), str(b), start=START_ID) for a, b in pairs]
    for idx, inst in enumerate(instances):
        by_length.setdefault(inst.n, []).append(idx)
    results: list[int] = [0] * len(pairs)
    for n, idxs in by_length.items():
        check_operands(model, n)
        group = [instances[i] for i in idxs]
        p = group[0].prompt_len
        rows = greedy_generate_batch(
            model, torch.tensor(np.stack([g.tokens[:p] for g in group])), torch.tensor(np.stack([g.pos_ids[:p] for g in group])),
            torch.tensor(np.stack([g.pos_ids[p:] for g in group])), stop_token=ADDITION.EOS,
        )
        for i, row in zip(idxs, rows):
            results[i] = _answer_to_int(row)
    return results


def _answer_to_int(tokens: list[int]) -> int:
    """Reversed answer digits (c_0 first, optional final '$') -> int; refuses non-digits."""
    if tokens and tokens[-1] == ADDITION.EOS:
        tokens = tokens[:-1]
    if not tokens or any(t > 9 for t in tokens):
        raise ArithmeticError(f"the model produced a non-digit answer: {ADDITION.decode(tokens)!r}")
    return int(digits_to_str(np.array(tokens[::-1], dtype=np.uint8)))


__all__ = [
    "CapacityError", "HEAD_NAMES", "START_ID", "add", "add_many", "build_model", "check_operands", "d_model_for",
    "hypercube_code", "hypercube_codes", "max_digits_for", "position_dims", "position_table", "required_sharpness",
    "residual_basis", "weight_entries",
]
