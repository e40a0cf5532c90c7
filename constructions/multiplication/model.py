"""N×2 multiplication with coupled positions (Cho et al., "Position Coupling", NeurIPS 2024,
which applies coupling to N×2 multiplication): a hand-set 3-layer decoder-only transformer that
multiplies an N-digit number by a number below 100, for N ≤ 2^⌊(d−25)/4⌋ − 6.

The format and the position IDs are those of ``lengthgen.tasks.MULTIPLICATION_NX2`` (the authors'
coupled format: a_i, b_i and c_i share ID e − 1 − i; ``*`` and ``=`` share e). The mechanism here
was **designed** without the paper's proof, not quoted; docs/multiplication.md compares it with
the paper's theorem. What each layer does:

* layer 1 (2 heads) tells the segments apart — a digit of a, b or the answer has the same token and
  may have the same ID, so no head can single out b_0 before it knows which segment a key is in;
* layer 2 (6 heads) reads b_0, b_1, a_{i+1}, a_i, a_{i−1} and a_{i−2}; its MLP forms the products
  b_0·A0 + b_1·A1 (see :mod:`.heads`);
* layer 3 (no attention) turns T = b_0·A0 + b_1·A1 − 10·c_i into the digit ⌊(T + 54)/100⌋ mod 10
  and detects the end.

Why 3 blocks: there are 2 attention layers, as in the paper's theorem, but the products need one
ReLU layer after the operands are gathered and the digit of T another, and the gathering itself
can only happen in layer 2 (layer 1's keys carry no segment). Block 1's MLP and block 3's attention
are zero. docs/multiplication.md says what a version in 2 standard blocks would have to change.
"""
from __future__ import annotations

import numpy as np
import torch

from constructions.sizing import CapacityError, check_device, check_model, resolve_dtype, resolve_width
from lengthgen.decode import UndecidedPrediction, answer_to_int, decided_argmax, greedy_generate, greedy_generate_batch
from lengthgen.model import Annotations, Transformer, TransformerConfig
from lengthgen.tasks import MULTIPLICATION_NX2
from lengthgen.tasks.base import TaskInstance

from .heads import HEADS, N_HEADS, digit_mlp_basis, head_basis, product_mlp_basis, weight_entries
from .layout import (
    DEFAULT_TABLE_DIGITS, START_ID, d_model_for, max_digits_for, position_dims, position_table,
    required_sharpness, residual_basis,
)

TASK = MULTIPLICATION_NX2
N_LAYERS = 3

NOTES = {
    "embed.W_E": "digit k -> NUM = k; every token -> ONE; '$' -> IS_BOS, '*' -> IS_STAR, '=' -> IS_EQ.",
    "pos_embed.W_pos": "ID p -> POS = v_p, POS_MINUS1 = v_{p-1}, POS_PLUS1 = v_{p+1}, POS_PLUS2 = v_{p+2} (hypercube code, v_0 = 0).",
    "blocks.0.attn.W_Q": "Layer 1: head 0 averages over the separators seen ($ * =) -> segment flags; head 1 looks one ID up for a separator (marks b_0).",
    "blocks.1.attn.W_Q": "Layer 2: heads 0-1 read b_0, b_1 by segment flags; heads 2-5 read a_{i+1}, a_i, a_{i-1}, a_{i-2} by coupled ID within a's segment.",
    "blocks.1.mlp.W_in": "Units 0-35: PROD = b_0*A0 + b_1*A1 via b*A = sum_k ReLU(A + 1000(b-k)) - ReLU(1000(b-k)).",
    "blocks.2.mlp.W_in": "T = PROD - 10*NUM; steps at T = 100m + 46 (m < 180) -> DIGIT one-hot of floor((T+54)/100) mod 10; EOS ramp.",
    "unembed.W_U": "logit(k) = DIGIT[k]; logit('$') = 2*IS_EOS.",
}


DEFAULT_DIGITS = 10  # build_model() with no arguments


def build_model(
    n_digits: int | None = None,
    d_model: int | None = None,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    M: float | None = None,
) -> tuple[Transformer, dict]:
    """The N×2 multiplication transformer and its metadata ``(model, meta)``.

    ``d_model`` fixes P = ⌊(d−25)/4⌋; otherwise the smallest P with 2^P − 6 ≥ ``n_digits`` is used.
    With neither, the model is the smallest for 10-digit first operands (as ``build_model()`` of the
    addition construction).
    The position table covers ``n_digits`` digits of a (default: the bound, capped at 10^4). ``M``
    defaults to :func:`~.layout.required_sharpness` of the longest sequence the table allows."""
    if n_digits is None and d_model is None:
        n_digits = DEFAULT_DIGITS
    d_model, P, bound = resolve_width(n_digits, d_model, d_model_for=d_model_for, position_dims=position_dims,
                                      max_digits_for=max_digits_for, bound_name="this construction's bound 2^{P} - 6")
    table = n_digits if n_digits is not None else min(bound, DEFAULT_TABLE_DIGITS)
    n_positions = START_ID + table + 3  # IDs 0 .. e = s + N + 2
    n_tokens = 2 * table + 8
    M = required_sharpness(n_tokens) if M is None else float(M)
    dtype = resolve_dtype(dtype)
    check_device(device)
    prod_units, digit_units = product_mlp_basis(), digit_mlp_basis()
    d_mlp = max(len(prod_units), len(digit_units))
    cfg = TransformerConfig(
        d_vocab=len(TASK.vocab), d_model=d_model, n_layers=N_LAYERS, n_heads=N_HEADS, d_head=len(head_basis(P)),
        d_mlp=d_mlp, n_ctx=n_positions, positional="learned", attn_scale=1.0, act_fn="relu", normalization=None,
        dtype=str(dtype).removeprefix("torch."),
    )
    names = [" / ".join(f"L{layer + 1}: {HEADS[(layer, h)][0] if (layer, h) in HEADS else '-'}" for layer in range(2))
             for h in range(N_HEADS)]
    mlp_labels = [(f"{prod_units.labels[j]} | " if j < len(prod_units) else "") + digit_units.labels[j] for j in range(d_mlp)]
    annotations = Annotations(
        residual=residual_basis(d_model).labels, head_dims=[head_basis(P).labels] * N_HEADS, head_names=names,
        mlp=mlp_labels, vocab=list(TASK.vocab), notes=NOTES,
        title=f"N×2 multiplication transformer with coupled positions: d={d_model}, P={P}, M={M:.4g}",
    )
    model = Transformer(cfg, annotations)
    with torch.no_grad():
        for name, builder in weight_entries(d_model, M, TASK.vocab).items():
            matrix = builder.tensor(dtype)
            parts = name.split(".")
            if parts[-1].isdigit():  # one head of an attention matrix
                getattr(model.blocks[int(parts[1])].attn, parts[3])[int(parts[-1])].copy_(matrix)
            else:
                param = model.get_parameter(name)
                param[: matrix.shape[0], : matrix.shape[1]].copy_(matrix)
        model.pos_embed.W_pos.copy_(position_table(d_model, n_positions, dtype))
    model.eval().requires_grad_(False)
    meta = {
        "name": "N×2 multiplication with coupled positions: 3 layers, 8 heads",
        "author": "lengthgen (construction designed after Cho et al., NeurIPS 2024)",
        "params": sum(p.numel() for p in model.parameters()),
        "architecture": f"3 layers (attention heads 2 + 6 + 0), d_model={d_model}, d_head={cfg.d_head}, d_mlp={d_mlp}, ReLU, no LayerNorm",
        "tricks": "coupled position IDs, hypercube position code, BOS attention sink, segment flags, two-digit carry look-back",
        "d_model": d_model, "P": P, "M": M, "max_digits": table, "bound_digits": bound,
        "leak_bound": n_tokens * float(np.exp(-2 * M)),
    }
    return model.to(device), meta


def table_digits(model: Transformer) -> int:
    """Longest first operand the model's position table can address (IDs up to e = s + N + 2)."""
    return model.cfg.n_ctx - 3 - START_ID


def instance(a: int | str | np.ndarray, b: int | str | np.ndarray) -> TaskInstance:
    """``$a*b=`` laid out with the coupled IDs this construction uses (start s = 2); ``b`` < 100."""
    return TASK.instance(a, b, start=START_ID)


def check_operands(model: Transformer, n: int) -> None:
    check_model(model)
    if n > table_digits(model):
        raise CapacityError(
            f"a {n}-digit first operand needs position IDs up to {START_ID + n + 2}, but this model's table stops at "
            f"{model.cfg.n_ctx - 1} ({table_digits(model)} digits); build_model(n_digits={n}) makes one that fits"
        )


def multiply(model: Transformer, a: int | str, b: int | str, progress: bool = False) -> int:
    """a·b computed by the transformer (0 ≤ b ≤ 99): generic greedy decoding from ``$a*b=``; the
    answer's position IDs are input data known from N (position coupling). Raises
    :class:`UndecidedPrediction` when a step has no margin (never guesses a digit)."""
    inst = instance(a, b)
    check_operands(model, inst.n)
    out = greedy_generate(
        model, inst.tokens[: inst.prompt_len], inst.pos_ids[: inst.prompt_len],
        new_pos_ids=inst.pos_ids[inst.prompt_len:], stop_token=TASK.EOS, progress=progress,
    )
    return product_to_int(out, (a, b))


def multiply_many(model: Transformer, pairs: list[tuple[int, int]]) -> list[int]:
    """``multiply`` for many pairs (batched greedy decoding, grouped by the length of a)."""
    instances = [instance(a, b) for a, b in pairs]
    results: list[int] = [0] * len(pairs)
    for n, idxs in _by_length(instances).items():
        check_operands(model, n)
        group = [instances[i] for i in idxs]
        p = group[0].prompt_len
        rows = greedy_generate_batch(
            model, torch.tensor(np.stack([g.tokens[:p] for g in group])), torch.tensor(np.stack([g.pos_ids[:p] for g in group])),
            torch.tensor(np.stack([g.pos_ids[p:] for g in group])), stop_token=TASK.EOS,
        )
        for i, row in zip(idxs, rows):
            results[i] = product_to_int(row, pairs[i])
    return results


@torch.inference_mode()
def teacher_predictions(model: Transformer, instances: list[TaskInstance], batch_size: int = 8192) -> list[np.ndarray]:
    """Decided-argmax predictions (``lengthgen.decode.decided_argmax``: −1 where the top logit does
    not win by the margin) at every answer position of each laid-out instance, from one
    teacher-forced pass per batch. If they all equal ``inst.answer_tokens``, greedy decoding
    reproduces the answer exactly (induction over decoding steps)."""
    out: list[np.ndarray] = [np.empty(0)] * len(instances)
    for n, idxs in _by_length(instances).items():
        check_operands(model, n)
        for start in range(0, len(idxs), batch_size):
            chunk = idxs[start : start + batch_size]
            toks = torch.tensor(np.stack([instances[i].tokens for i in chunk]), device=model.device)
            pos = torch.tensor(np.stack([instances[i].pos_ids for i in chunk]), device=model.device)
            first = instances[chunk[0]].prompt_len - 1
            logits = model(toks[:, :-1], pos[:, :-1], logits_from=first)
            pred = decided_argmax(logits).cpu().numpy()
            for row, i in enumerate(chunk):
                out[i] = pred[row]
    return out


def _by_length(instances: list[TaskInstance]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for idx, inst in enumerate(instances):
        groups.setdefault(inst.n, []).append(idx)
    return groups


def product_to_int(tokens: list[int], pair: tuple) -> int:
    """The product's digits (c_0 first) as an int: :func:`lengthgen.decode.answer_to_int`."""
    return answer_to_int(tokens, TASK.EOS, TASK.decode, f"{pair[0]} × {pair[1]}")


__all__ = [
    "CapacityError", "START_ID", "TASK", "UndecidedPrediction", "product_to_int", "build_model", "check_operands", "d_model_for", "instance",
    "max_digits_for", "multiply", "multiply_many", "position_dims", "table_digits", "teacher_predictions",
]
