"""Copy and reverse with coupled positions (Cho et al., "Position Coupling", NeurIPS 2024, which
applies coupling to copy/reverse): one layer, one head, no MLP, for inputs of up to 2^P − 2 digits.

The format and IDs are those of ``lengthgen.tasks.COPY`` / ``REVERSE`` with start s = 1: the output
digit y_j shares its ID with the input digit it copies (copy: x_i, y_i -> s + i, ``=`` -> s;
reverse: x_i -> s + i − 1, ``=`` -> s + n, y_j -> s + n − j). So the token that predicts the next
output digit looks **one ID up** (copy) or **one ID down** (reverse) from its own: that is the only
difference between the two constructions. The mechanism is designed here, not quoted (the paper
reports experiments for these tasks, no construction); docs/copying.md.

Residual stream, d = 23 + 2P (+ an unused dimension when d − 23 is odd):

    DIGIT[0..9], IS_BOS, ONE, COPIED[0..9], SINK_SHARE, POS[0..P-1], POS_NEXT[0..P-1]

POS holds the hypercube code v_p of the token's ID (v_0 = 0, as in Theorem 5.1's construction);
POS_NEXT holds v_{p+1} (copy) or v_{p−1} (reverse).

* The head ("read the digit at the neighbouring ID"): query √M·POS_NEXT ⊕ √(MP)·ONE, key
  √M·POS ⊕ √(MP)·IS_BOS. At the query for y_{j+1} the maximal keys are {$, the input digit y_{j+1}
  copies} — the output digit with that ID is not generated yet — or {$} alone after the last digit.
  Value DIGIT ⊕ IS_BOS, output ×2: COPIED = one-hot of the digit to copy, SINK_SHARE = 1 (or 2 at
  the end).
* Readout: logit(k) = COPIED[k], logit($) = 1.5·(SINK_SHARE − ONE): the copied digit wins by 1, and
  at the end ``$`` wins by 1.5.

Error bound: every key outside the maximal set scores ≤ MP − 2M, so the leaked mass is δ ≤ N·e^{−2M}
for N tokens; every logit then moves by at most 3·δ·2 (values in [0, 1], ×2, ×1.5), and the margins
(1 and 1.5) survive while δ < 1/12. :func:`required_sharpness` picks M = ½·ln(1000·N): δ ≤ 10^{−3}.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from lengthgen.positions import hypercube_codes
from constructions.sizing import CapacityError, check_device, resolve_dtype, resolve_width
from lengthgen.basis import MatrixBuilder, NamedBasis
from lengthgen.decode import UNDECIDED, UndecidedPrediction, greedy_generate, teacher_forced_argmax
from lengthgen.runs import checkpoint_notes, model_notes
from lengthgen.model import Annotations, Transformer, TransformerConfig
from lengthgen.tasks import COPY, REVERSE
from lengthgen.tasks.copying import CopyTask

START_ID = 1
N_TOKEN_DIMS = 23
DEFAULT_TABLE_DIGITS = 10_000
TASKS = {"copy": COPY, "reverse": REVERSE}


def _task(task: str | CopyTask) -> CopyTask:
    if isinstance(task, CopyTask):
        return task
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose copy or reverse")
    return TASKS[task]


def id_step(task: CopyTask) -> int:
    """+1 for copy (the next output digit copies the input digit one ID up), −1 for reverse."""
    return -1 if task.reverse else 1


def position_dims(d_model: int) -> int:
    if d_model < N_TOKEN_DIMS + 4:
        raise CapacityError(f"d_model must be at least {N_TOKEN_DIMS + 4} (23 token dimensions + 2·2 position dimensions), got {d_model}")
    return (d_model - N_TOKEN_DIMS) // 2


def max_digits_for(d_model: int) -> int:
    """n ≤ 2^P − 2: the IDs 1 .. n + 2 that queries may target (copy) or tokens use (reverse,
    1 .. n + 1) all get distinct non-zero codes."""
    return 2 ** position_dims(d_model) - 2


def d_model_for(n_digits: int) -> int:
    return N_TOKEN_DIMS + 2 * max(2, math.ceil(math.log2(n_digits + 2)))


def required_sharpness(n_tokens: int) -> float:
    """M = ½·ln(1000·N): the leak δ ≤ N·e^{−2M} is at most 10^{−3} (module docstring)."""
    return 0.5 * math.log(1000 * n_tokens)


def residual_basis(d_model: int) -> NamedBasis:
    P = position_dims(d_model)
    blocks = [("DIGIT", 10), ("IS_BOS", None), ("ONE", None), ("COPIED", 10), ("SINK_SHARE", None), ("POS", P), ("POS_NEXT", P)]
    spare = d_model - N_TOKEN_DIMS - 2 * P
    return NamedBasis(blocks + ([("UNUSED", spare)] if spare else []))


def head_basis(P: int) -> NamedBasis:
    return NamedBasis([("pos", P), ("sink", None)] + [(f"val_DIGIT[{k}]", None) for k in range(10)] + [("val_IS_BOS", None)])


def position_table(task: CopyTask, d_model: int, n_positions: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    basis, P = residual_basis(d_model), position_dims(d_model)
    ids = np.arange(n_positions)
    table = torch.zeros(n_positions, d_model, dtype=dtype)
    table[:, basis.block("POS")] = torch.from_numpy(hypercube_codes(ids, P)).to(dtype)
    table[:, basis.block("POS_NEXT")] = torch.from_numpy(hypercube_codes(ids + id_step(task), P)).to(dtype)
    return table


def neighbour_head(resid: NamedBasis, head: NamedBasis, M: float, P: int) -> dict[str, MatrixBuilder]:
    """The only head: read the digit at the neighbouring coupled ID, with the BOS sink (module docstring)."""
    W_Q = MatrixBuilder(resid, head).add_block("POS_NEXT", "pos", math.sqrt(M)).add("ONE", "sink", math.sqrt(M * P))
    W_K = MatrixBuilder(resid, head).add_block("POS", "pos", math.sqrt(M)).add("IS_BOS", "sink", math.sqrt(M * P))
    W_V, W_O = MatrixBuilder(resid, head), MatrixBuilder(head, resid)
    for k in range(10):
        W_V.add(f"DIGIT[{k}]", f"val_DIGIT[{k}]", 1)
        W_O.add(f"val_DIGIT[{k}]", f"COPIED[{k}]", 2)
    W_V.add("IS_BOS", "val_IS_BOS", 1)
    W_O.add("val_IS_BOS", "SINK_SHARE", 2)
    return {"W_Q": W_Q, "W_K": W_K, "W_V": W_V, "W_O": W_O}


def weight_entries(task: CopyTask, d_model: int, M: float) -> dict[str, MatrixBuilder]:
    resid, P = residual_basis(d_model), position_dims(d_model)
    vocab = NamedBasis([(t, None) for t in task.vocab])
    W = {"embed.W_E": MatrixBuilder(vocab, resid), "unembed.W_U": MatrixBuilder(resid, vocab)}
    for tok in task.vocab:
        W["embed.W_E"].add(tok, "ONE", 1)
        if tok.isdigit():
            W["embed.W_E"].add(tok, f"DIGIT[{tok}]", 1)
    W["embed.W_E"].add("$", "IS_BOS", 1)
    W.update({f"blocks.0.attn.{name}": m for name, m in neighbour_head(resid, head_basis(P), M, P).items()})
    for k in range(10):
        W["unembed.W_U"].add(f"COPIED[{k}]", str(k), 1)
    W["unembed.W_U"].add("SINK_SHARE", "$", 1.5).add("ONE", "$", -1.5)
    return W


def build_model(
    task: str | CopyTask = "copy", n_digits: int | None = None, d_model: int | None = None,
    dtype: torch.dtype | str = torch.float32, device: str | torch.device = "cpu", M: float | None = None,
) -> tuple[Transformer, dict]:
    """The 1-layer copy (or reverse) transformer and its metadata ``(model, meta)``; arguments as
    for ``constructions.addition.build_model`` (bound 2^P − 2, P = ⌊(d − 23)/2⌋)."""
    task = _task(task)
    d_model, P, bound = resolve_width(n_digits, d_model, d_model_for=d_model_for, position_dims=position_dims,
                                      max_digits_for=max_digits_for, bound_name="the bound 2^{P} - 2")
    table = n_digits if n_digits is not None else min(bound, DEFAULT_TABLE_DIGITS)
    n_positions, n_tokens = START_ID + table + 2, 2 * table + 3
    M = required_sharpness(n_tokens) if M is None else float(M)
    dtype = resolve_dtype(dtype)
    check_device(device)
    cfg = TransformerConfig(
        d_vocab=len(task.vocab), d_model=d_model, n_layers=1, n_heads=1, d_head=len(head_basis(P)), d_mlp=0,
        n_ctx=n_positions, positional="learned", attn_scale=1.0, normalization=None, dtype=str(dtype).removeprefix("torch."),
    )
    annotations = Annotations(
        residual=residual_basis(d_model).labels, head_dims=[head_basis(P).labels],
        head_names=[f"read the digit at ID {'+1' if id_step(task) > 0 else '-1'}"], vocab=list(task.vocab),
        title=f"{task.name} transformer with coupled positions: d={d_model}, P={P}, M={M:.4g}",
        notes=checkpoint_notes(task=task.name, positions="coupled", name=f"{task.name} construction",
                               kind="construction"),
    )
    model = Transformer(cfg, annotations)
    with torch.no_grad():
        for name, builder in weight_entries(task, d_model, M).items():
            parts = name.split(".")
            matrix = builder.tensor(dtype)
            if parts[0] == "blocks":
                getattr(model.blocks[0].attn, parts[-1])[0].copy_(matrix)
            else:
                model.get_parameter(name).copy_(matrix)
        model.pos_embed.W_pos.copy_(position_table(task, d_model, n_positions, dtype))
    model.eval().requires_grad_(False)
    meta = {
        "name": f"{task.name} with coupled positions: 1 layer, 1 head, no MLP", "task": task.name,
        "params": sum(p.numel() for p in model.parameters()), "d_model": d_model, "P": P, "M": M,
        "max_digits": table, "bound_digits": bound, "leak_bound": n_tokens * math.exp(-2 * M),
    }
    return model.to(device), meta


def check_length(model: Transformer, n: int) -> None:
    table = model.cfg.n_ctx - 2 - START_ID
    if n > table:
        raise CapacityError(f"{n} digits need position IDs up to {START_ID + n}, but this model's table holds "
                            f"{table} digits; build_model(n_digits={n}) makes one that fits")


def transform(model: Transformer, task: str | CopyTask, x: str) -> str:
    """The copy (or reverse) of the digit string ``x`` computed by greedy decoding (the digits, without
    the end marker ``$`` the model writes last). Raises ``ValueError`` for a model built for the other
    task and :class:`~lengthgen.decode.UndecidedPrediction` at a step without margin."""
    task = _task(task)
    built_for = model_notes(model).get("task") if isinstance(model, Transformer) else None
    if built_for is not None and built_for != task.name:
        raise ValueError(f"this model was built for {built_for!r}, not {task.name!r}; "
                         f"build_model({task.name!r}) makes one that does it")
    inst = task.instance(x, start=START_ID)
    check_length(model, inst.n)
    out = greedy_generate(model, inst.tokens[: inst.prompt_len], inst.pos_ids[: inst.prompt_len],
                          new_pos_ids=inst.pos_ids[inst.prompt_len:], stop_token=task.EOS)
    if UNDECIDED in out:
        raise UndecidedPrediction(f"{task.name} of {x}: output token {out.index(UNDECIDED)} is undecided: its two "
                                  "largest logits are within the decision margin of lengthgen.decode")
    if not out or out[-1] != task.EOS:
        raise ArithmeticError(f"the model did not end its output with the end marker: {task.decode(out)!r}")
    return task.decode(out[:-1])


def answer_predictions(model: Transformer, task: str | CopyTask, x: str | np.ndarray, mode: str,
                       progress: bool = False) -> np.ndarray:
    """The model's answer tokens y_1 .. y_n, ``$`` for the input ``x``, each by
    :func:`lengthgen.decode.decided_argmax` (no margin: ``UNDECIDED``, never a token).

    ``teacher``: one forward pass over prompt + true answer, the prediction at every answer position
    (all right ⇔ greedy decoding reproduces the answer, by induction over the steps); ``greedy``:
    token-by-token decoding with a key/value cache, ending after ``$`` or at an undecided step."""
    task = _task(task)
    inst = task.instance(x, start=START_ID)
    check_length(model, inst.n)
    if mode == "teacher":
        return teacher_forced_argmax(model, inst.tokens, inst.pos_ids, first=inst.prompt_len - 1).cpu().numpy()
    if mode == "greedy":
        return np.array(greedy_generate(model, inst.tokens[: inst.prompt_len], inst.pos_ids[: inst.prompt_len],
                                        new_pos_ids=inst.pos_ids[inst.prompt_len:], stop_token=task.EOS,
                                        progress=progress), dtype=np.int64)
    raise ValueError(f"unknown mode {mode!r}; choose 'teacher' or 'greedy'")


def nope_twin(model: Transformer) -> Transformer:
    """The same weights without positional information (NoPE): same layers, heads and widths."""
    cfg = TransformerConfig(**{**model.cfg.to_dict(), "positional": "none"})
    twin = Transformer(cfg, model.annotations)
    state = {k: v for k, v in model.state_dict().items() if k != "pos_embed.W_pos"}
    twin.load_state_dict(state)
    return twin.eval().requires_grad_(False)


__all__ = [
    "CapacityError", "START_ID", "answer_predictions", "build_model", "check_length", "d_model_for", "id_step", "max_digits_for",
    "nope_twin", "position_dims", "required_sharpness", "residual_basis", "transform",
]
