"""A generic decoder-only transformer with TransformerLens parameter names (nanoGPT-style).

The model knows nothing about any task. Positions are *data*: ``forward`` takes explicit position
IDs and looks them up in the learned table ``W_pos`` (so position coupling, Cho et al. 2024, Section 3, is a
property of the input, not of the model), or ignores them (``positional="none"``, NoPE).

Parameters, with TransformerLens names and shapes (state_dict keys equal TL's):

    embed.W_E [d_vocab, d_model]            pos_embed.W_pos [n_ctx, d_model]
    blocks.{l}.attn.W_Q/W_K/W_V [n_heads, d_model, d_head]   b_Q/b_K/b_V [n_heads, d_head]
    blocks.{l}.attn.W_O [n_heads, d_head, d_model]            b_O [d_model]
    blocks.{l}.mlp.W_in [d_model, d_mlp]  b_in [d_mlp]  W_out [d_mlp, d_model]  b_out [d_model]
    blocks.{l}.ln1.w/b, blocks.{l}.ln2.w/b, ln_final.w/b   (only when normalization == "LN")
    unembed.W_U [d_model, d_vocab_out]  b_U [d_vocab_out]

Attention scores are ``q·k / attn_scale`` (TL convention; ``attn_scale=None`` means
``sqrt(d_head)``; hand-built constructions use 1), times ``ln t`` with ``attn_log_length`` (t: the
keys the query sees; applied after ``hook_q``). Short sequences use the explicit-softmax path;
long ones switch to the O(N·d) kernels of :mod:`lengthgen.attention` automatically.

Activations pass through hook points with TL's names and shapes (:mod:`lengthgen.hooks`)::

    hook_embed, hook_pos_embed                                  [batch, pos, d_model]
    blocks.{l}.hook_resid_pre / hook_attn_out / hook_resid_mid / hook_mlp_out / hook_resid_post
    blocks.{l}.attn.hook_q / hook_k / hook_v / hook_z            [batch, pos, head, d_head]
    blocks.{l}.attn.hook_attn_scores / hook_pattern              [batch, head, query, key]  (dense path only)
    blocks.{l}.attn.hook_result                                  [batch, pos, head, d_model]
    blocks.{l}.mlp.hook_pre / hook_post                          [batch, pos, d_mlp]
    blocks.{l}.ln1/ln2.hook_scale [batch, pos, 1], .hook_normalized, ln_final.*   (LayerNorm models)

``hook_resid_mid`` and ``hook_mlp_out`` exist only in blocks with an MLP (``d_mlp > 0``), as in
TL's attention-only models. ``hook_attn_scores`` holds the masked scores (``-inf`` where a query
may not look). On the O(N·d) path no ``N × N`` matrix exists: a hook on ``hook_attn_scores`` or
``hook_pattern`` then raises :class:`LongInputHookError` instead of allocating one.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .attention import dense_scores, log_key_counts, long_attention
from .hooks import HookedModule, HookPoint
from .kv_cache import KVCache, StaticKVCache
from .lens import LensMixin
from .resources import require_memory
from .sparse import sparse_matmul, sparse_matrix

#: above this many query×key entries per head the model leaves the dense path
DENSE_ENTRIES_LIMIT = 1 << 22
POSITIONAL_KINDS = ("learned", "none")
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}
LN_EPS = 1e-5
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


@dataclass
class TransformerConfig:
    """Architecture of a :class:`Transformer`. ``attn_windows`` gives Hard-ALiBi windows per head
    (``None`` entries: plain causal); ``n_ctx`` is the number of rows of ``W_pos``, i.e. the largest
    usable position ID plus one. ``causal=False`` lets every position attend to every position
    (non-causal programs, e.g. compiled RASP in tracr's default mode); decoding with a KV cache
    then has no meaning."""

    d_vocab: int
    d_model: int
    n_layers: int = 1
    n_heads: int = 1
    d_head: int = 16
    d_mlp: int = 64
    n_ctx: int = 256
    positional: str = "learned"
    attn_scale: float | None = None
    act_fn: str = "relu"
    normalization: str | None = None
    attn_windows: list[int | None] | None = None
    d_vocab_out: int | None = None
    dtype: str = "float32"
    causal: bool = True
    attn_log_length: bool = False  # queries times ln(number of keys they see): attention.log_key_counts

    def __post_init__(self) -> None:
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(f"unknown positional scheme {self.positional!r}; choose one of {POSITIONAL_KINDS}")
        if self.act_fn not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.act_fn!r}; choose one of {tuple(ACTIVATIONS)}")
        if self.normalization not in (None, "LN"):
            raise ValueError(f"unknown normalization {self.normalization!r}; choose None or 'LN'")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {tuple(DTYPES)}")
        if not self.causal and self.attn_windows is not None and any(w is not None for w in self.attn_windows):
            raise ValueError("attn_windows (Hard-ALiBi) need causal attention")
        if self.attn_log_length and self.attn_windows is not None and any(w is not None for w in self.attn_windows):
            raise ValueError("attn_log_length counts every earlier key; it does not combine with attn_windows")
        if self.attn_windows is not None and len(self.attn_windows) != self.n_heads:
            raise ValueError(f"attn_windows needs one entry per head ({self.n_heads}), got {self.attn_windows}")
        if self.d_vocab_out is None:
            self.d_vocab_out = self.d_vocab

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def score_scale(self) -> float:
        """Multiplier applied to q·k (the inverse of TL's ``attn_scale``)."""
        return 1.0 / (math.sqrt(self.d_head) if self.attn_scale is None else self.attn_scale)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def attn_only(self) -> bool:
        """TL's name for a model without MLPs (read by TL's ActivationCache)."""
        return self.d_mlp <= 0

    @property
    def normalization_type(self) -> str | None:
        """TL's name for ``normalization`` (read by TL's ActivationCache)."""
        return self.normalization

    @property
    def itemsize(self) -> int:
        """Bytes per parameter (checked on every forward pass: no tensor is made for it)."""
        return self.torch_dtype.itemsize

    def parameter_count(self) -> int:
        """Number of parameters a :class:`Transformer` of this configuration holds (computed, not allocated)."""
        d, h, dh, m = self.d_model, self.n_heads, self.d_head, self.d_mlp
        attn = 3 * h * d * dh + 3 * h * dh + h * dh * d + d
        mlp = d * m + m + m * d + d if m > 0 else 0
        norms = 2 * d * (2 * self.n_layers + 1) if self.normalization == "LN" else 0
        table = self.n_ctx * d if self.positional == "learned" else 0
        return self.d_vocab * d + table + self.n_layers * (attn + mlp) + norms + d * self.d_vocab_out + self.d_vocab_out

    def activation_bytes(self, batch: int, seq: int) -> int:
        """Rough peak memory of one forward pass over ``batch × seq`` tokens on the O(N·d) path: the
        residual stream, queries/keys/values and the MLP's hidden layer of one layer, a few copies each."""
        per_token = 4 * self.d_model + 4 * self.n_heads * self.d_head + 2 * max(self.d_mlp, 0) + 2 * self.d_vocab_out
        return 3 * batch * seq * per_token * self.itemsize


@dataclass
class Annotations:
    """Names for a model's axes and meanings for its weights (tracr's ``residual_labels`` idea).

    ``residual``: one label per residual dimension; ``head_dims``: per head, one label per d_head
    dimension; ``head_names``: what each head does; ``mlp``: one label per hidden unit; ``vocab``: the token strings; ``notes``: for a
    parameter name, what the matrix does (in the words of the theorem it implements)."""

    residual: list[str] | None = None
    head_dims: list[list[str]] | None = None
    head_names: list[str] | None = None
    mlp: list[str] | None = None
    vocab: list[str] | None = None
    notes: dict[str, str] = field(default_factory=dict)
    title: str = ""


class LongInputHookError(ValueError):
    """A hook asked for the ``N × N`` attention scores or pattern of an input on the O(N·d) path."""


class LayerNorm(nn.Module):
    def __init__(self, d: int, dtype: torch.dtype):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d, dtype=dtype))
        self.b = nn.Parameter(torch.zeros(d, dtype=dtype))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model], before w and b (as in TL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.hook_scale.active or self.hook_normalized.active):
            return F.layer_norm(x, x.shape[-1:], self.w, self.b, eps=LN_EPS)
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt())
        return self.hook_normalized(x / scale) * self.w + self.b


def _head_hook(point: HookPoint, t: torch.Tensor) -> torch.Tensor:
    """Pass ``t`` ``[B, H, P, E]`` through ``point`` in TL's layout ``[B, P, H, E]``."""
    return point(t.transpose(1, 2)).transpose(1, 2) if point.active else t


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        h, d, e, dt = cfg.n_heads, cfg.d_model, cfg.d_head, cfg.torch_dtype
        self.cfg = cfg
        for name in ("W_Q", "W_K", "W_V"):
            setattr(self, name, nn.Parameter(torch.zeros(h, d, e, dtype=dt)))
        for name in ("b_Q", "b_K", "b_V"):
            setattr(self, name, nn.Parameter(torch.zeros(h, e, dtype=dt)))
        self.W_O = nn.Parameter(torch.zeros(h, e, d, dtype=dt))
        self.b_O = nn.Parameter(torch.zeros(d, dtype=dt))
        for name in ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z", "hook_result"):
            setattr(self, name, HookPoint())

    def matrices_2d(self) -> dict[str, torch.Tensor]:
        """Each weight as the ``[in, out]`` matrix of its product (for :mod:`lengthgen.sparse`)."""
        h, d, e = self.W_Q.shape
        out = {name: getattr(self, name).permute(1, 0, 2).reshape(d, h * e) for name in ("W_Q", "W_K", "W_V")}
        return {**out, "W_O": self.W_O.reshape(h * e, d)}

    def _project(self, x: torch.Tensor, name: str) -> torch.Tensor:
        W, b = getattr(self, name), getattr(self, "b" + name[1:])
        csr = sparse_matrix(self, name)
        if csr is None:
            return torch.einsum("bpd,hde->bhpe", x, W) + b[None, :, None, :]
        return sparse_matmul(x, csr).unflatten(-1, (W.shape[0], W.shape[2])).transpose(1, 2) + b[None, :, None, :]

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor, cache: KVCache | StaticKVCache | None,
                layer: int) -> torch.Tensor:
        """``x_q`` holds the residual at the query positions (the last ones of ``x_kv``); with a
        ``cache``, the keys/values of earlier positions are read from it and the new ones added."""
        q = _head_hook(self.hook_q, self._project(x_q, "W_Q"))
        k = _head_hook(self.hook_k, self._project(x_kv, "W_K"))
        v = _head_hook(self.hook_v, self._project(x_kv, "W_V"))
        if cache is not None:
            k, v = cache.append(layer, k, v)
        groups = _window_groups(self.cfg.attn_windows or [None] * self.cfg.n_heads)
        static = isinstance(cache, StaticKVCache)  # one query over a fixed-size buffer: O(capacity) scores
        if self.cfg.attn_log_length:
            q = q * log_key_counts(q.shape[-2], k.shape[-2], self.cfg.causal, q, cache.filled if static else None)
        if static or q.shape[-2] * k.shape[-2] <= DENSE_ENTRIES_LIMIT:
            scores = self._scores(q, k, groups, cache if static else None)
            pattern = self.hook_pattern(torch.softmax(self.hook_attn_scores(scores), dim=-1))
            z = torch.matmul(pattern, v)
        else:
            for point in (self.hook_attn_scores, self.hook_pattern):
                if point.active:
                    raise LongInputHookError(
                        f"{point.name} needs the full attention matrix, but this input ({q.shape[-2]} queries × "
                        f"{k.shape[-2]} keys per head, more than DENSE_ENTRIES_LIMIT = {DENSE_ENTRIES_LIMIT}) runs "
                        "on the O(N·d) attention path, which never builds it; on long inputs hook the O(N·d) "
                        "activations (hook_q/k/v/z/result, residual stream, MLP, LayerNorm) or shorten the input")
            z = q.new_empty(*q.shape[:-1], v.shape[-1])
            for heads, window in groups:
                # one group (the usual case) uses the tensors as they are: indexing with a list would
                # copy the whole KV cache at every decoding step
                if len(groups) == 1:
                    z = long_attention(q, k, v, self.cfg.score_scale, window, causal=self.cfg.causal)
                else:
                    z[:, heads] = long_attention(q[:, heads], k[:, heads], v[:, heads], self.cfg.score_scale,
                                                 window, causal=self.cfg.causal)
        z = _head_hook(self.hook_z, z)
        if self.hook_result.active:  # per-head outputs only when asked for: [B, P, H, d_model]
            return self.hook_result(torch.einsum("bhpe,hed->bphd", z, self.W_O)).sum(2) + self.b_O
        csr = sparse_matrix(self, "W_O")
        if csr is not None:
            return sparse_matmul(z.transpose(1, 2).flatten(-2), csr) + self.b_O
        return torch.einsum("bhpe,hed->bpd", z, self.W_O) + self.b_O

    def _scores(self, q: torch.Tensor, k: torch.Tensor, groups: list[tuple[list[int], int | None]],
                static: "StaticKVCache | None" = None) -> torch.Tensor:
        """Masked scores ``[B, H, Lq, Lk]`` of every head, each head with its own window; with a
        ``static`` cache, the mask is the cache's (which keys are written, and the window)."""

        def head_scores(q: torch.Tensor, k: torch.Tensor, window: int | None) -> torch.Tensor:
            allowed = None if static is None else static.visible(window if self.cfg.causal else None)
            return dense_scores(q, k, self.cfg.score_scale, window, causal=self.cfg.causal, allowed=allowed)

        if len(groups) == 1:
            return head_scores(q, k, groups[0][1])
        scores = q.new_empty(*q.shape[:-1], k.shape[-2])
        for heads, window in groups:
            scores[:, heads] = head_scores(q[:, heads], k[:, heads], window)
        return scores


def _window_groups(windows: list[int | None]) -> list[tuple[list[int], int | None]]:
    """Heads grouped by their Hard-ALiBi window, so each kernel call handles one window."""
    groups: dict[int | None, list[int]] = {}
    for head, window in enumerate(windows):
        groups.setdefault(window, []).append(head)
    return [(heads, window) for window, heads in groups.items()]


class MLP(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d, m, dt = cfg.d_model, cfg.d_mlp, cfg.torch_dtype
        self.W_in = nn.Parameter(torch.zeros(d, m, dtype=dt))
        self.b_in = nn.Parameter(torch.zeros(m, dtype=dt))
        self.W_out = nn.Parameter(torch.zeros(m, d, dtype=dt))
        self.b_out = nn.Parameter(torch.zeros(d, dtype=dt))
        self.act = ACTIVATIONS[cfg.act_fn]
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()  # [batch, pos, d_mlp]

    def matrices_2d(self) -> dict[str, torch.Tensor]:
        """Each weight as the ``[in, out]`` matrix of its product (for :mod:`lengthgen.sparse`)."""
        return {"W_in": self.W_in, "W_out": self.W_out}

    def _product(self, x: torch.Tensor, name: str) -> torch.Tensor:
        csr = sparse_matrix(self, name)
        return x @ getattr(self, name) if csr is None else sparse_matmul(x, csr)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        post = self.hook_post(self.act(self.hook_pre(self._product(x, "W_in") + self.b_in)))
        return self._product(post, "W_out") + self.b_out


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        norm = cfg.normalization == "LN"
        self.ln1 = LayerNorm(cfg.d_model, cfg.torch_dtype) if norm else nn.Identity()
        self.attn = Attention(cfg)
        self.ln2 = LayerNorm(cfg.d_model, cfg.torch_dtype) if norm else nn.Identity()
        self.mlp = MLP(cfg) if cfg.d_mlp > 0 else None
        names = ["hook_resid_pre", "hook_attn_out", "hook_resid_post"]
        names += ["hook_resid_mid", "hook_mlp_out"] if self.mlp is not None else []
        for name in names:
            setattr(self, name, HookPoint())  # [batch, pos, d_model]

    def forward(
        self, x: torch.Tensor, q_from: int = 0, cache: KVCache | StaticKVCache | None = None, layer: int = 0
    ) -> torch.Tensor:
        """Pre-LN residual block; only positions ``q_from:`` are computed (the rest are keys);
        ``layer`` indexes ``cache``."""
        x = self.hook_resid_pre(x)
        normed = self.ln1(x)
        attn_out = self.hook_attn_out(self.attn(normed[:, q_from:], normed, cache, layer))
        if self.mlp is None:
            return self.hook_resid_post(x[:, q_from:] + attn_out)
        resid_mid = self.hook_resid_mid(x[:, q_from:] + attn_out)
        return self.hook_resid_post(resid_mid + self.hook_mlp_out(self.mlp(self.ln2(resid_mid))))


class Transformer(LensMixin, HookedModule):
    """Token ids (and position IDs) in, logits out. See the module docstring; hooks, caching and
    TL's ActivationCache: :mod:`lengthgen.hooks` and :mod:`lengthgen.lens`."""

    def __init__(self, cfg: TransformerConfig, annotations: Annotations | None = None):
        super().__init__()
        require_memory(cfg.parameter_count() * cfg.itemsize, f"a model with {cfg.parameter_count():.3g} parameters "
                       f"(d_model {cfg.d_model}, position table of {cfg.n_ctx} rows)")
        self.cfg = cfg
        dt = cfg.torch_dtype
        self.embed = nn.Module()
        self.embed.W_E = nn.Parameter(torch.zeros(cfg.d_vocab, cfg.d_model, dtype=dt))
        self.pos_embed = nn.Module()
        if cfg.positional == "learned":
            self.pos_embed.W_pos = nn.Parameter(torch.zeros(cfg.n_ctx, cfg.d_model, dtype=dt))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_final = LayerNorm(cfg.d_model, dt) if cfg.normalization == "LN" else nn.Identity()
        self.unembed = nn.Module()
        self.unembed.W_U = nn.Parameter(torch.zeros(cfg.d_model, cfg.d_vocab_out, dtype=dt))
        self.unembed.b_U = nn.Parameter(torch.zeros(cfg.d_vocab_out, dtype=dt))
        self.annotations = annotations or Annotations()
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        if cfg.positional == "learned":
            self.hook_pos_embed = HookPoint()
        self.setup_hooks()

    @property
    def device(self) -> torch.device:
        return self.embed.W_E.device

    def embed_input(self, tokens: torch.Tensor, pos_ids: torch.Tensor | None, start: int = 0,
                    check_ids: bool = True) -> torch.Tensor:
        """Token plus position embeddings. ``check_ids=False`` skips the range checks of token and
        position IDs (each reads a value back from the device); only for IDs checked beforehand."""
        if check_ids and (tokens.min() < 0 or tokens.max() >= self.cfg.d_vocab):
            raise ValueError(f"token id out of range: ids must lie in [0, {self.cfg.d_vocab})")
        x = self.hook_embed(self.embed.W_E[tokens])
        if self.cfg.positional == "none":
            return x
        if pos_ids is None:
            pos_ids = torch.arange(start, start + tokens.shape[1], device=tokens.device).expand_as(tokens)
        if check_ids and (pos_ids.min() < 0 or pos_ids.max() >= self.cfg.n_ctx):
            raise ValueError(
                f"position ID {int(pos_ids.max())} is outside the position table (IDs 0..{self.cfg.n_ctx - 1}); "
                "use a model built with a larger n_ctx"
            )
        return x + self.hook_pos_embed(self.pos_embed.W_pos[pos_ids])

    def forward(
        self,
        tokens: torch.Tensor,
        pos_ids: torch.Tensor | None = None,
        *,
        cache: KVCache | StaticKVCache | None = None,
        logits_from: int = 0,
        return_cache: bool = False,
        check_ids: bool = True,
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits ``[batch, seq - logits_from, d_vocab_out]`` for ``tokens`` ``[batch, seq]``.

        ``pos_ids`` (same shape, int) are the position IDs; default ``0..seq-1`` after the cached
        prefix. ``cache`` makes this a decoding step: earlier keys/values are read from it and the
        new ones appended. ``logits_from`` skips the last layer's work for earlier positions
        (logits are then returned only from that position on). ``return_cache=True`` also returns a
        dict of every hooked activation under TransformerLens hook names (``run_with_cache`` with
        a plain dict; the attention patterns need the dense path, i.e. short inputs).
        ``check_ids=False`` skips the range checks of the IDs (:meth:`embed_input`).
        """
        if return_cache:
            return self.run_with_cache(tokens, pos_ids, cache=cache, logits_from=logits_from,
                                       return_cache_object=False)
        if tokens.dim() == 1:
            tokens = tokens.unsqueeze(0)
            pos_ids = None if pos_ids is None else pos_ids.reshape(1, -1)
        past_len = 0 if cache is None or pos_ids is not None or self.cfg.positional == "none" else cache.length
        require_memory(self.cfg.activation_bytes(*tokens.shape), f"a forward pass over {tokens.numel()} tokens")
        x = self.embed_input(tokens, pos_ids, start=past_len, check_ids=check_ids)
        for layer, block in enumerate(self.blocks):
            x = block(x, logits_from if layer == len(self.blocks) - 1 else 0, cache, layer)
        if not self.blocks:  # no layer to skip the earlier positions
            x = x[:, logits_from:]
        return self.ln_final(x) @ self.unembed.W_U + self.unembed.b_U

    def describe(self, max_entries: int = 40) -> str:
        from .describe import describe_model

        return describe_model(self, max_entries=max_entries)
