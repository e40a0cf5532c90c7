"""Human-readable description of a model: the residual layout and each weight's meaning.

Axis labels come from :class:`lengthgen.model.Annotations` (tracr-style named dimensions), so a
printed entry reads ``POS_2[3] -> q[3]: 3.162`` instead of ``W_Q[0, 20, 3] = 3.162``.
"""
from __future__ import annotations

import re

import torch

from .model import Transformer


def _axis_labels(model: Transformer, name: str, head: int | None, shape: tuple[int, ...]) -> tuple[list[str], list[str]]:
    a, cfg = model.annotations, model.cfg
    resid = a.residual or [f"r{i}" for i in range(cfg.d_model)]
    hdims = (a.head_dims[head] if a.head_dims and head is not None else None) or [f"e{i}" for i in range(cfg.d_head)]
    mlp = a.mlp or [f"h{i}" for i in range(cfg.d_mlp)]
    vocab = a.vocab or [str(i) for i in range(max(cfg.d_vocab, cfg.d_vocab_out or 0))]
    leaf = name.rsplit(".", 1)[-1]
    table = {
        "W_E": (vocab, resid), "W_pos": ([f"ID {i}" for i in range(cfg.n_ctx)], resid),
        "W_Q": (resid, hdims), "W_K": (resid, hdims), "W_V": (resid, hdims), "W_O": (hdims, resid),
        "b_Q": ([""], hdims), "b_K": ([""], hdims), "b_V": ([""], hdims), "b_O": ([""], resid),
        "W_in": (resid, mlp), "b_in": ([""], mlp), "W_out": (mlp, resid), "b_out": ([""], resid),
        "W_U": (resid, vocab), "b_U": ([""], vocab),
    }
    if leaf in table:
        return table[leaf]
    return [str(i) for i in range(shape[0])], [str(i) for i in range(shape[-1])]


def _format_value(x: float) -> str:
    return f"{x:.6g}"


def _entries(matrix: torch.Tensor, rows: list[str], cols: list[str], limit: int) -> list[str]:
    m = matrix.reshape(1, -1) if matrix.dim() == 1 else matrix
    nz = torch.nonzero(m, as_tuple=False)
    lines = []
    for r, c in nz[:limit].tolist():
        src = f"{rows[r]} -> " if rows[r] else ""
        lines.append(f"      {src}{cols[c]}: {_format_value(float(m[r, c]))}")
    if len(nz) > limit:
        lines.append(f"      ... ({len(nz) - limit} more non-zero entries)")
    if not len(nz):
        lines.append("      (all zero)")
    return lines


def describe_model(model: Transformer, max_entries: int = 40) -> str:
    cfg, a = model.cfg, model.annotations
    out = [a.title or "Transformer", "=" * len(a.title or "Transformer")]
    out.append(
        f"d_model={cfg.d_model}  layers={cfg.n_layers}  heads={cfg.n_heads}  d_head={cfg.d_head}  d_mlp={cfg.d_mlp}  "
        f"vocab={cfg.d_vocab}  positions={cfg.positional} (n_ctx={cfg.n_ctx})  "
        f"attn_scale={cfg.attn_scale or 'sqrt(d_head)'}{'  scores x ln(keys seen)' if cfg.attn_log_length else ''}  norm={cfg.normalization}  act={cfg.act_fn}  dtype={cfg.dtype}"
    )
    if a.residual:
        out.append("\nResidual stream (named dimensions):")
        out += [f"  {i:4d}  {label}" for i, label in enumerate(a.residual)]
    out.append("\nWeights:")
    for name, param in model.named_parameters():
        note = a.notes.get(name) or a.notes.get(re.sub(r"blocks\.\d+\.", "blocks.*.", name))
        if note is None and not torch.any(param):
            continue
        out.append(f"\n  {name}  {tuple(param.shape)}")
        if note:
            out += [f"    {line}" for line in note.splitlines()]
        if name.endswith(("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")):
            for h in range(param.shape[0]):
                rows, cols = _axis_labels(model, name, h, tuple(param.shape[1:]))
                role = f" ({a.head_names[h]})" if a.head_names and h < len(a.head_names) else ""
                out.append(f"    head {h}{role}:")
                out += _entries(param[h].detach(), rows, cols, max_entries)
        else:
            rows, cols = _axis_labels(model, name, None, tuple(param.shape))
            out += _entries(param.detach(), rows, cols, max_entries)
    return "\n".join(out)
