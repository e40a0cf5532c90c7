"""Random initialisation for :class:`~lengthgen.model.Transformer` (whose parameters start at zero).

Hand-set constructions fill the zero parameters themselves; experiments that need a *generic* model
(e.g. the Proposition 5.2 counterexample search, docs/proposition-5-2.md) call
:func:`init_random_`, which is deterministic for a given seed and independent of torch's global RNG.
Training (``lengthgen.train``) starts from :func:`init_weights_` (GPT-2 style), optionally with a
sinusoidal position table (:func:`sinusoidal_table`).
"""
from __future__ import annotations

import math

import torch
from torch import nn

#: leaf name -> index of the fan-in axis (or axes) of that parameter, TransformerLens shapes
_FAN_IN_AXES: dict[str, tuple[int, ...]] = {
    "W_E": (), "W_pos": (),            # lookup tables: one row per token / ID, fan-in 1
    "W_Q": (1,), "W_K": (1,), "W_V": (1,),  # [n_heads, d_model, d_head]
    "W_O": (0, 1),                     # [n_heads, d_head, d_model]: all heads feed the residual
    "W_in": (0,), "W_out": (0,), "W_U": (0,),
}


def init_random_(
    model: nn.Module, seed: int = 0, weight_scale: float = 1.0, bias_std: float = 0.1,
    norm_std: float = 0.1,
) -> nn.Module:
    """Fill every parameter of ``model`` with random values, in place, and return ``model``.

    Weight matrices (TransformerLens names ``W_*``) get N(0, weight_scale² / fan_in), so each
    pre-activation has variance of order one; embedding and position tables get N(0, weight_scale²).
    Biases (``b_*``) get N(0, bias_std²). LayerNorm gains get 1 + N(0, norm_std²) and LayerNorm biases
    N(0, norm_std²). Parameters are drawn in ``named_parameters`` order from a generator seeded with
    ``seed``, so the same seed and architecture give the same model on any machine.
    """
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    with torch.no_grad():
        for name, param in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float64)
            if leaf in _FAN_IN_AXES:
                fan_in = math.prod(param.shape[a] for a in _FAN_IN_AXES[leaf])
                value = noise * (weight_scale / math.sqrt(max(fan_in, 1)))
            elif leaf.startswith("b_"):
                value = noise * bias_std
            elif leaf == "w":  # LayerNorm gain
                value = 1.0 + noise * norm_std
            elif leaf == "b":  # LayerNorm bias
                value = noise * norm_std
            else:  # a parameter this helper does not know: fan-in = its first axis
                fan_in = param.shape[0] if param.dim() > 1 else 1
                value = noise / math.sqrt(max(fan_in, 1))
            param.copy_(value.to(param.dtype))
    return model


def random_transformer(
    d_vocab: int, *, n_layers: int = 1, d_model: int = 32, n_heads: int = 2, d_head: int | None = None,
    d_mlp: int | None = None, positional: str = "none", n_ctx: int = 256, act_fn: str = "relu",
    normalization: str | None = None, dtype: str = "float32", seed: int = 0,
):
    """A :class:`~lengthgen.model.Transformer` with random weights (:func:`init_random_`).

    Defaults: 1 layer, no positional information (NoPE), ``d_head = d_model // n_heads``,
    ``d_mlp = 4 * d_model``."""
    from .model import Transformer, TransformerConfig

    cfg = TransformerConfig(
        d_vocab=d_vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        d_head=d_head if d_head is not None else max(1, d_model // n_heads),
        d_mlp=d_mlp if d_mlp is not None else 4 * d_model, n_ctx=n_ctx, positional=positional,
        act_fn=act_fn, normalization=normalization, dtype=dtype,
    )
    model = init_random_(Transformer(cfg), seed)
    model.eval()
    return model


__all__ = ["init_random_", "random_transformer"]


def sinusoidal_table(n_positions: int, d_model: int) -> torch.Tensor:
    """Vaswani et al. 2017, Section 3.5: row p = (sin(p·ω_i), cos(p·ω_i))_i with ω_i = 10000^(−2i/d).

    Used only as an *initialization* of the learned table (``--pos-init sinusoidal``): a shift of
    the position ID is then one rotation of each frequency pair, the same for every ID."""
    pos = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * omega)
    table[:, 1::2] = torch.cos(pos * omega)[:, : d_model // 2]
    return table.float()


def init_weights_(model: nn.Module, seed: int, std: float = 0.02, embed_std: float | None = None) -> nn.Module:
    """GPT-2 style init: weights N(0, std) (output projections std/√(2·layers)), biases 0, LN 1/0;
    token and position embeddings N(0, ``embed_std``) (default ``std``).

    Deterministic in ``seed`` (own generator, parameters in ``named_parameters`` order)."""
    gen = torch.Generator().manual_seed(seed)
    out_std = std / math.sqrt(2 * model.cfg.n_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if ".ln" in name or name.startswith("ln_final"):
                p.fill_(1.0 if leaf == "w" else 0.0)
            elif leaf.startswith("b"):
                p.zero_()
            else:
                s = out_std if leaf in ("W_O", "W_out") else std
                if leaf in ("W_E", "W_pos") and embed_std is not None:
                    s = embed_std
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) * s)
    return model
