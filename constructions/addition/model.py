"""Theorem 5.1 of Cho et al., "Position Coupling" (NeurIPS 2024): a 1-layer, 2-head decoder-only
transformer with coupled positions adds operands of up to 2^⌊(d−17)/2⌋ − 2 digits.

* :mod:`constructions.addition.layout`: the named residual basis and the hypercube position code;
* :mod:`constructions.addition.weights`: every weight, one function per part (embedding, head 1,
  head 2, feed-forward network, readout);
* this module: :func:`build_model` (a standard :class:`lengthgen.Transformer` holding those
  weights) and :func:`add`, the AdderBoard-style interface (generic greedy decoding).

Error bound (docs/theorem-5-1.md, "The error bound"): every key outside a head's maximal set scores
at most MP − 2M, so the leaked softmax mass is δ ≤ N·e^{−2M} for N tokens. A convex combination
of values in [0, 9] then moves by at most 9δ, so |ΔPRE_SUM| ≤ 27δ, |ΔPRE_CARRY| ≤ 36δ, |Δt| ≤
27δ + 3.6δ < 31δ and |ΔPRE_EOS| ≤ δ. The trapezoids and the EOS ramp are exact while |Δt| < 0.05
and |ΔPRE_EOS| < 0.0417, i.e. for δ < 1/620. :func:`required_sharpness` picks M = ½·ln(1000·N),
so δ ≤ 1/1000.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from lengthgen.decode import UndecidedPrediction, answer_to_int, greedy_generate, greedy_generate_batch, teacher_forced_argmax
from lengthgen.model import Annotations, Transformer, TransformerConfig
from lengthgen.tasks import ADDITION

from .layout import (
    EOS_RAMP, N_TOKEN_DIMS, START_ID, TOKEN_BLOCKS, TRAP_OFFSETS, TRAP_WIDTH, CapacityError, d_model_for,
    head_basis, hypercube_code, hypercube_codes, max_digits_for, mlp_basis, position_dims, position_table,
    required_sharpness, residual_basis,
)
from ..sizing import check_device, check_model, resolve_dtype, resolve_width
from .weights import weight_entries

DEFAULT_TABLE_DIGITS = 10_000
ADDERBOARD_DIGITS = 10  # build_model() with no arguments: the smallest model for 10-digit operands
HEAD_NAMES = ("head 1: addition without carry", "head 2: carry and EOS detection")


NOTES = {
    "embed.W_E": "Token embedding: digit k -> NUM = k; every token -> FULL_ONES = 1; '$' -> IS_BOS = 1.",
    "pos_embed.W_pos": "Coupled position ID p -> POS_1 = v_p, POS_2 = v_{p-1}; v is the hypercube code, v_0 = 0.",
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
    With neither, the model is the smallest for 10-digit operands (AdderBoard calls
    ``build_model()`` so). The position table holds IDs for ``n_digits`` digits (default with only
    ``d_model``: the theorem's bound, capped at 10^4 digits, so d = 512 does not allocate 2^247
    rows). ``M`` defaults to :func:`required_sharpness` of the longest sequence the table allows.
    """
    if n_digits is None and d_model is None:
        n_digits = ADDERBOARD_DIGITS
    d_model, P, bound = resolve_width(n_digits, d_model, d_model_for=d_model_for, position_dims=position_dims,
                                      max_digits_for=max_digits_for, bound_name="Theorem 5.1's bound 2^{P} - 2")
    table_digits = n_digits if n_digits is not None else min(bound, DEFAULT_TABLE_DIGITS)
    n_positions = START_ID + table_digits + 1
    M = required_sharpness(3 * table_digits + 5) if M is None else float(M)
    dtype = resolve_dtype(dtype)
    check_device(device)
    cfg = TransformerConfig(
        d_vocab=len(ADDITION.vocab), d_model=d_model, n_layers=1, n_heads=2, d_head=P + 3, d_mlp=len(mlp_basis()),
        n_ctx=n_positions, positional="learned", attn_scale=1.0, act_fn="relu", normalization=None,
        dtype=str(dtype).removeprefix("torch."),
    )
    W = weight_entries(d_model, M, None)
    annotations = Annotations(
        residual=residual_basis(d_model).labels, head_dims=[head_basis(P).labels] * 2, head_names=list(HEAD_NAMES),
        mlp=mlp_basis().labels, vocab=list(ADDITION.vocab), notes=NOTES,
        title=f"Theorem 5.1 addition transformer (Cho et al. 2024): d={d_model}, P={P}, M={M:.4g}",
    )
    model = Transformer(cfg, annotations)
    with torch.no_grad():
        model.embed.W_E.copy_(W["W_E"].tensor(dtype))
        model.pos_embed.W_pos.copy_(position_table(d_model, n_positions, dtype))
        attn = model.blocks[0].attn
        for h in range(2):
            for name in ("W_Q", "W_K", "W_V", "W_O"):
                getattr(attn, name)[h].copy_(W[f"{name}{h}"].tensor(dtype))
        model.blocks[0].mlp.W_in.copy_(W["W_in"].tensor(dtype))
        model.blocks[0].mlp.W_out.copy_(W["W_out"].tensor(dtype))
        model.unembed.W_U.copy_(W["W_U"].tensor(dtype))
    model.eval().requires_grad_(False)
    meta = {
        "name": "Theorem 5.1 (Position Coupling): 1-layer 2-head addition transformer",
        "author": "lengthgen (construction after Cho et al., NeurIPS 2024)",
        "params": sum(p.numel() for p in model.parameters()),
        "architecture": f"1 layer, 2 heads, d_model={d_model}, d_head={P + 3}, d_mlp={cfg.d_mlp}, ReLU, no LayerNorm",
        "tricks": "coupled position IDs, hypercube position code, BOS attention sink",
        "d_model": d_model, "P": P, "M": M, "max_digits": table_digits, "theorem_max_digits": bound,
        "leak_bound": (3 * table_digits + 5) * math.exp(-2 * M),
    }
    return model.to(device), meta


def table_digits(model: Transformer) -> int:
    """Longest operands the model's position table can address (IDs up to s + n)."""
    return model.cfg.n_ctx - 1 - START_ID


def check_operands(model: Transformer, n: int) -> None:
    check_model(model)
    if n > table_digits(model):
        raise CapacityError(
            f"{n}-digit operands need position IDs up to {START_ID + n}, but this model's table stops at "
            f"{model.cfg.n_ctx - 1} ({table_digits(model)} digits); build_model(n_digits={n}) makes one that fits"
        )


Operand = int | str | np.ndarray


def answer_predictions(model: Transformer, a: Operand, b: Operand, mode: str,
                       progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, expected) answer tokens c_0 .. c_n, ``$`` for ``a + b``; ``expected`` comes from
    Python integers. Both modes apply :func:`lengthgen.decode.decided_argmax` (a prediction
    without margin is :data:`~lengthgen.decode.UNDECIDED`, never a token):

    * ``teacher``: one forward pass over prompt + true answer, the prediction at every answer
      position. All right ⇔ greedy decoding reproduces the answer (induction over steps).
    * ``greedy``: token-by-token decoding with a key/value cache; it ends after ``$`` or at the
      first undecided step."""
    inst = ADDITION.instance(a, b, start=START_ID)
    check_operands(model, inst.n)
    if mode == "teacher":
        pred = teacher_forced_argmax(model, inst.tokens, inst.pos_ids, first=inst.prompt_len - 1).cpu().numpy()
    elif mode == "greedy":
        pred = np.array(greedy_generate(
            model, inst.tokens[: inst.prompt_len], inst.pos_ids[: inst.prompt_len],
            new_pos_ids=inst.pos_ids[inst.prompt_len :], stop_token=ADDITION.EOS, progress=progress,
        ), dtype=np.int64)
    else:
        raise ValueError(f"unknown mode {mode!r}; choose 'teacher' or 'greedy'")
    return pred, inst.answer_tokens


def first_wrong_position(predicted: np.ndarray, expected: np.ndarray) -> int | None:
    """Index of the first answer position where ``predicted`` differs from ``expected`` (or where
    one of them ends first); None when they are equal."""
    length = min(len(predicted), len(expected))
    mismatch = np.nonzero(np.asarray(predicted[:length]) != np.asarray(expected[:length]))[0]
    if len(mismatch):
        return int(mismatch[0])
    return None if len(predicted) == len(expected) else length


def add(model: Transformer, a: int | str, b: int | str, progress: bool = False) -> int:
    """a + b computed by the transformer: generic greedy decoding from the prompt ``$a+b=``.

    The position IDs of the answer tokens are part of the input (coupling makes them known from n).
    Raises :class:`UndecidedPrediction` when a step has no margin (never guesses a digit)."""
    inst = ADDITION.instance(a, b, start=START_ID)
    check_operands(model, inst.n)
    out = greedy_generate(
        model, inst.tokens[: inst.prompt_len], inst.pos_ids[: inst.prompt_len],
        new_pos_ids=inst.pos_ids[inst.prompt_len :], stop_token=ADDITION.EOS, progress=progress,
    )
    return _answer(out, (a, b))


def add_many(model: Transformer, pairs: list[tuple[int, int]]) -> list[int]:
    """``add`` for many pairs at once (batched greedy decoding; pairs are grouped by length n)."""
    by_length: dict[int, list[int]] = {}
    instances = [ADDITION.instance(a, b, start=START_ID) for a, b in pairs]
    for idx, inst in enumerate(instances):
        by_length.setdefault(inst.n, []).append(idx)
    results: list[int] = [0] * len(pairs)
    for n, idxs in by_length.items():
        check_operands(model, n)
        group = [instances[i] for i in idxs]
        p = group[0].prompt_len
        prompts, prompt_ids, answer_ids = (torch.tensor(np.stack(part)) for part in (
            [g.tokens[:p] for g in group], [g.pos_ids[:p] for g in group], [g.pos_ids[p:] for g in group]))
        rows = greedy_generate_batch(model, prompts, prompt_ids, answer_ids, stop_token=ADDITION.EOS)
        for i, row in zip(idxs, rows):
            results[i] = _answer(row, pairs[i])
    return results



def _answer(tokens: list[int], pair: tuple) -> int:
    return answer_to_int(tokens, ADDITION.EOS, ADDITION.decode, f"{pair[0]} + {pair[1]}")


__all__ = [
    "ADDERBOARD_DIGITS", "CapacityError", "EOS_RAMP", "HEAD_NAMES", "N_TOKEN_DIMS", "START_ID", "TOKEN_BLOCKS",
    "TRAP_OFFSETS", "TRAP_WIDTH", "UndecidedPrediction", "add", "add_many", "answer_predictions", "build_model",
    "check_operands", "d_model_for", "first_wrong_position", "head_basis", "hypercube_code", "hypercube_codes",
    "max_digits_for", "mlp_basis", "position_dims", "position_table", "required_sharpness", "residual_basis",
    "weight_entries",
]
