"""What TransformerLens's analysis code reads from a model, on :class:`lengthgen.Transformer`.

``transformer_lens.ActivationCache`` (which :meth:`~lengthgen.hooks.HookedModule.run_with_cache`
returns when TransformerLens is installed) and TL's tools read a few things beyond the
activations: ``cfg.n_layers``/``n_heads``/``d_model``/``d_mlp``/``attn_only``/``normalization_type``
(on :class:`~lengthgen.model.TransformerConfig`), ``blocks[l].attn.W_O``, ``blocks[l].mlp.W_out``,
``ln_final``, and the methods and weight views below, named and shaped as in TL's
``HookedTransformer`` (stacked over layers: ``W_Q [n_layers, n_heads, d_model, d_head]``, ...).
"""
from __future__ import annotations

from operator import attrgetter

import torch

__all__ = ["LensMixin"]


def _stacked(path: str) -> property:
    get = attrgetter(path)
    return property(lambda self: torch.stack([get(block) for block in self.blocks]),
                    doc=f"``blocks[l].{path}`` stacked over layers (TL's name)")


def _alias(path: str) -> property:
    get = attrgetter(path)
    return property(get, doc=f"``{path}`` (TL's name)")


class LensMixin:
    """TL's weight views and the helpers ActivationCache calls (``logit_attrs``,
    ``get_full_resid_decomposition``, ``decompose_resid(apply_ln=True)``)."""

    W_Q, W_K, W_V, W_O = (_stacked(f"attn.{n}") for n in ("W_Q", "W_K", "W_V", "W_O"))
    b_Q, b_K, b_V, b_O = (_stacked(f"attn.{n}") for n in ("b_Q", "b_K", "b_V", "b_O"))
    W_in, b_in, W_out, b_out = (_stacked(f"mlp.{n}") for n in ("W_in", "b_in", "W_out", "b_out"))

    W_E, W_pos, W_U, b_U = (_alias(p) for p in ("embed.W_E", "pos_embed.W_pos", "unembed.W_U", "unembed.b_U"))

    def to_single_token(self, token: str) -> int:
        """The id of a token string, from ``annotations.vocab`` (models without one refuse)."""
        vocab = self.annotations.vocab
        if not vocab or token not in vocab:
            raise ValueError(f"token {token!r} is not in this model's annotations.vocab {vocab}; pass token ids")
        return vocab.index(token)

    def tokens_to_residual_directions(self, tokens: str | int | torch.Tensor) -> torch.Tensor:
        """Columns of ``W_U`` for ``tokens``: ``[d_model]`` for one token, else ``[*tokens.shape, d_model]``."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        if isinstance(tokens, torch.Tensor) and tokens.numel() > 1:
            return self.W_U[:, tokens].movedim(0, -1)
        return self.W_U[:, int(tokens)]

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> torch.Tensor:
        """Sum of the output biases (``b_O``, and ``b_out`` unless ``include_mlp_biases=False``)
        written into the residual stream before layer ``layer``; ``mlp_input`` adds that layer's ``b_O``."""
        total = torch.zeros(self.cfg.d_model, dtype=self.W_U.dtype, device=self.W_U.device)
        for block in self.blocks[:layer]:
            total = total + block.attn.b_O
            if include_mlp_biases and block.mlp is not None:
                total = total + block.mlp.b_out
        if mlp_input:
            if layer >= self.cfg.n_layers:
                raise ValueError("mlp_input needs a layer below n_layers (the unembedding has no attention)")
            total = total + self.blocks[layer].attn.b_O
        return total
