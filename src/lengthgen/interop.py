"""TransformerLens 3.x interop: any lengthgen model as a ``HookedTransformer`` and back.

Under TransformerLens 4 (which removed ``HookedTransformer``) no conversion is needed: every
lengthgen model has TL's hook points itself, so ``model.run_with_cache(tokens, pos_ids)`` and
``model.run_with_hooks(...)`` work on it directly (:mod:`lengthgen.hooks`). The converters here
serve TransformerLens 3.x and raise a one-line ImportError under 4.x that says so.

lengthgen's parameters already carry TransformerLens names and shapes (see :mod:`lengthgen.model`),
so conversion is a config translation plus a parameter copy. What needs care is positions: a
``HookedTransformer`` numbers the tokens 0..N−1, while lengthgen takes position IDs as data (position
coupling, Cho et al. 2024 §3, gives equal IDs to digits of equal significance).
:func:`run_with_position_ids` feeds arbitrary IDs through a hook on ``hook_pos_embed``.

Mapping (lengthgen ``TransformerConfig`` -> ``HookedTransformerConfig``)::

    positional="learned"  -> positional_embedding_type="standard" (W_pos copied, n_ctx rows)
    positional="none"     -> positional_embedding_type="rotary" with rotary_dim=0: a rotation of
                             zero dimensions is the identity, so the model sees no positions and
                             has neither W_pos nor hook_pos_embed (NoPE)
    attn_scale=None / a   -> use_attn_scale=True, attn_scale=sqrt(d_head) / a
    act_fn relu / gelu    -> act_fn "relu" / "gelu" (both exact-erf GELU)
    normalization None/LN -> normalization_type None / "LN" (pre-LN, eps 1e-5)
    d_mlp=0               -> attn_only=True
    causal=True / False   -> attention_dir="causal" / "bidirectional" (TransformerLens reads it at
                             every forward pass, so both directions compute the same attention)
    attn_windows (Hard-ALiBi, per head) -> refused: TransformerLens has no per-head window

Back from TransformerLens, what counts is what the modules compute, not what ``hooked.cfg`` says
now: each attention module copies ``attn_scale`` (and each LayerNorm its ``eps``) when it is built
and ignores later edits of the config, so the converter reads those values from the modules.

The converter refuses settings it does not understand instead of guessing: a lengthgen config
field it does not know (left at a non-default value), or any TransformerLens setting outside the
table above (rotary with rotary_dim > 0, ALiBi, shortformer, RMSNorm, gated MLPs, grouped-query or
local attention, soft caps, attention layers that disagree on their scale or direction, ...).

TransformerLens is an optional dependency, imported only when a function here is called
(``pip install -e ".[interp3]"`` installs 3.9.0, the version these converters are tested with).
The hooked model gets the dtype of the lengthgen model's parameters (after ``model.double()``,
float64), not the dtype its config names. Usage: docs/interop.md.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from typing import TYPE_CHECKING, Any, Callable

import torch

from .model import DTYPES, LN_EPS, Annotations, Transformer, TransformerConfig

if TYPE_CHECKING:  # pragma: no cover
    from transformer_lens import HookedTransformer, HookedTransformerConfig

__all__ = [
    "InteropError", "from_hooked_transformer", "position_id_hook", "run_with_position_ids",
    "to_hooked_transformer", "transformer_lens_config",
]

INSTALL_HINT = 'TransformerLens is not installed; install the extra: pip install -e ".[interp3]"'
#: under TransformerLens 4.x, which has no HookedTransformer to convert to
NATIVE_ROUTE = (
    "lengthgen.interop converts to TransformerLens 3.x's HookedTransformer, which TransformerLens 4 removed; "
    "with 4.x use the model itself, no conversion: model.run_with_cache(tokens, pos_ids), "
    'model.run_with_hooks(tokens, pos_ids, fwd_hooks=...) (docs/interop.md), or install 3.x: pip install -e ".[interp3]"'
)
#: name of the attribute that carries the lengthgen config/annotations through a round trip
STASH = "lengthgen_source"
#: lengthgen config fields this module translates (any other field must keep its default)
KNOWN_FIELDS = frozenset({
    "d_vocab", "d_model", "n_layers", "n_heads", "d_head", "d_mlp", "n_ctx", "positional",
    "attn_scale", "act_fn", "normalization", "attn_windows", "d_vocab_out", "dtype", "causal",
})
#: TransformerLens settings that change which hooks exist or how a model is set up, never what it
#: computes; every other setting must equal what lengthgen's config translates to
TL_BOOKKEEPING = frozenset({
    "device", "model_name", "use_attn_result", "use_split_qkv_input", "use_hook_mlp_in", "use_attn_in",
    "use_hook_tokens", "default_prepend_bos", "tokenizer_name", "tokenizer_prepends_bos",
    "original_architecture", "from_checkpoint", "checkpoint_index", "checkpoint_label_type",
    "checkpoint_value", "n_devices", "seed", "init_mode", "initializer_range", "init_weights", "n_params",
    "trust_remote_code", "tie_word_embeddings",
})


class InteropError(ValueError):
    """A model that cannot be converted faithfully (the message names the setting)."""


def _tl() -> Any:
    """The ``transformer_lens`` module, or a one-line ImportError saying which extra to install."""
    try:
        import transformer_lens
        from transformer_lens import HookedTransformer  # noqa: F401  (removed in TransformerLens 4.0)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "transformer_lens":
            raise ImportError(INSTALL_HINT) from None
        raise
    except ImportError:
        raise ImportError(NATIVE_ROUTE) from None
    return transformer_lens


def _check_lengthgen_config(cfg: TransformerConfig) -> None:
    """Refuse what TransformerLens cannot express, and config fields this module does not know."""
    defaults = {f.name: f.default for f in dataclasses.fields(cfg) if f.default is not dataclasses.MISSING}
    for f in dataclasses.fields(cfg):
        if f.name not in KNOWN_FIELDS and getattr(cfg, f.name) != defaults.get(f.name, object()):
            raise InteropError(
                f"lengthgen.interop does not know how to map TransformerConfig.{f.name}="
                f"{getattr(cfg, f.name)!r} to TransformerLens; refusing rather than dropping it"
            )
    if cfg.attn_windows is not None and any(w is not None for w in cfg.attn_windows):
        raise InteropError(
            f"Hard-ALiBi attention windows (attn_windows={cfg.attn_windows}) cannot be expressed in "
            "TransformerLens: it has no per-head attention window"
        )
    if cfg.positional not in ("learned", "none"):
        raise InteropError(f"positional scheme {cfg.positional!r} has no TransformerLens equivalent")


def transformer_lens_config(cfg: TransformerConfig, device: str | torch.device = "cpu") -> "HookedTransformerConfig":
    """The ``HookedTransformerConfig`` that computes what ``cfg`` computes (module docstring table)."""
    _check_lengthgen_config(cfg)
    tl = _tl()
    learned = cfg.positional == "learned"
    kwargs: dict[str, Any] = dict(
        d_model=cfg.d_model, d_head=cfg.d_head, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
        d_vocab=cfg.d_vocab, d_vocab_out=cfg.d_vocab_out, n_ctx=cfg.n_ctx, act_fn=cfg.act_fn,
        normalization_type=cfg.normalization, eps=LN_EPS, dtype=cfg.torch_dtype, device=str(device),
        positional_embedding_type="standard" if learned else "rotary", rotary_dim=None if learned else 0,
        use_attn_scale=True, attn_scale=math.sqrt(cfg.d_head) if cfg.attn_scale is None else float(cfg.attn_scale),
        attention_dir="causal" if cfg.causal else "bidirectional", init_weights=False, model_name="lengthgen",
    )
    if cfg.d_mlp > 0:
        kwargs["d_mlp"] = cfg.d_mlp
    else:
        kwargs["attn_only"] = True
    return tl.HookedTransformerConfig(**kwargs)


def to_hooked_transformer(model: Transformer) -> "HookedTransformer":
    """A ``HookedTransformer`` with the same config and a copy of every parameter of ``model``.

    Logits agree with ``model`` up to float rounding for the same tokens and position IDs (feed
    coupled or shifted IDs with :func:`run_with_position_ids`; a plain ``hooked(tokens)`` uses
    0..N−1). The lengthgen config and annotations ride along as ``hooked.lengthgen_source``, so
    :func:`from_hooked_transformer` gives back a bit-identical model."""
    tl = _tl()
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1:
        raise InteropError(f"the parameters mix dtypes {sorted(map(str, dtypes))}; TransformerLens models have one dtype")
    dtype = next((name for name, dt in DTYPES.items() if dt in dtypes), None)
    if dtype is None:
        raise InteropError(f"parameter dtype {dtypes.pop()} has no TransformerLens equivalent here")
    source_cfg = dataclasses.replace(model.cfg, dtype=dtype)  # what the parameters hold, not what cfg says
    tl_cfg = transformer_lens_config(source_cfg, device=model.device)
    with warnings.catch_warnings():  # 3.x announces HookedTransformer's removal in 4.0 on every build
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        hooked = tl.HookedTransformer(tl_cfg, move_to_device=False)
    dead = _unused_parameters(model.cfg)
    ours = {k: v for k, v in model.named_parameters() if k not in dead}
    theirs = dict(hooked.named_parameters())
    if set(ours) != set(theirs):
        raise InteropError(
            "parameter names differ between lengthgen and TransformerLens: only in lengthgen "
            f"{sorted(set(ours) - set(theirs))}, only in TransformerLens {sorted(set(theirs) - set(ours))}"
        )
    with torch.no_grad():
        for name, param in ours.items():
            if theirs[name].shape != param.shape:
                raise InteropError(f"{name}: shape {tuple(param.shape)} vs TransformerLens {tuple(theirs[name].shape)}")
            theirs[name].copy_(param)
    torch.nn.Module.to(hooked, model.device)  # cfg.device is already set; TL's own .to() prints
    setattr(hooked, STASH, {
        "config": copy.deepcopy(source_cfg), "annotations": copy.deepcopy(model.annotations),
        "unused": {k: v.detach().clone() for k, v in model.named_parameters() if k in dead},
    })
    return hooked.eval()


def _unused_parameters(cfg: TransformerConfig) -> set[str]:
    """Parameters a lengthgen model holds but never uses: the second LayerNorm of a block without
    MLP (``d_mlp=0``). TransformerLens's attention-only blocks have no such LayerNorm."""
    if cfg.d_mlp > 0 or cfg.normalization != "LN":
        return set()
    return {f"blocks.{layer}.ln2.{p}" for layer in range(cfg.n_layers) for p in ("w", "b")}


def _infer_lengthgen_config(tl_cfg: "HookedTransformerConfig") -> TransformerConfig:
    """The lengthgen config that computes what ``tl_cfg`` computes, with a clear error for the
    TransformerLens features lengthgen lacks (anything subtler is caught by the field comparison)."""
    kind, rotary_dim = tl_cfg.positional_embedding_type, tl_cfg.rotary_dim
    if kind == "rotary" and rotary_dim:
        raise InteropError(f"rotary position embeddings (RoPE, rotary_dim={rotary_dim}) have no lengthgen equivalent")
    if kind not in ("standard", "rotary"):
        raise InteropError(f"positional_embedding_type={kind!r} has no lengthgen equivalent (only 'standard' "
                           "learned absolute positions, or none)")
    if tl_cfg.normalization_type not in (None, "LN"):
        raise InteropError(f"normalization_type={tl_cfg.normalization_type!r} has no lengthgen equivalent (None or 'LN')")
    if tl_cfg.act_fn is not None and tl_cfg.act_fn not in ("relu", "gelu") and not tl_cfg.attn_only:
        raise InteropError(f"act_fn={tl_cfg.act_fn!r} has no lengthgen equivalent ('relu' or 'gelu')")
    if tl_cfg.attention_dir not in ("causal", "bidirectional"):
        raise InteropError(f"attention_dir={tl_cfg.attention_dir!r} has no lengthgen equivalent "
                           "('causal' or 'bidirectional')")
    dtype = next((name for name, dt in DTYPES.items() if dt == tl_cfg.dtype), None)
    if dtype is None:
        raise InteropError(f"dtype {tl_cfg.dtype} has no lengthgen equivalent")
    return TransformerConfig(
        d_vocab=tl_cfg.d_vocab, d_model=tl_cfg.d_model, n_layers=tl_cfg.n_layers, n_heads=tl_cfg.n_heads,
        d_head=tl_cfg.d_head, d_mlp=0 if tl_cfg.attn_only else tl_cfg.d_mlp, n_ctx=tl_cfg.n_ctx,
        positional="learned" if kind == "standard" else "none",
        attn_scale=float(tl_cfg.attn_scale) if tl_cfg.use_attn_scale else 1.0,
        act_fn=tl_cfg.act_fn if tl_cfg.act_fn in ("relu", "gelu") else "relu",
        normalization=tl_cfg.normalization_type, d_vocab_out=tl_cfg.d_vocab_out, dtype=dtype,
        causal=tl_cfg.attention_dir == "causal",
    )


def _computing_differences(tl_cfg: "HookedTransformerConfig", reference: "HookedTransformerConfig") -> list[str]:
    """Settings (other than bookkeeping) where ``tl_cfg`` differs from ``reference``."""
    def effective_scale(c: "HookedTransformerConfig") -> float:
        return float(c.attn_scale) if c.use_attn_scale else 1.0

    out = []
    if not math.isclose(effective_scale(tl_cfg), effective_scale(reference), rel_tol=1e-15):
        out.append(f"attn_scale={effective_scale(tl_cfg)!r}")
    for f in dataclasses.fields(tl_cfg):
        if f.name in TL_BOOKKEEPING or f.name in ("use_attn_scale", "attn_scale"):  # compared above
            continue
        ours, theirs = getattr(tl_cfg, f.name), getattr(reference, f.name)
        if isinstance(ours, float) and isinstance(theirs, float) and math.isclose(ours, theirs, rel_tol=1e-15):
            continue
        if ours != theirs:
            out.append(f"{f.name}={ours!r}")
    return out


def _computed_config(hooked: "HookedTransformer") -> "HookedTransformerConfig":
    """``hooked.cfg`` with the settings that TransformerLens's modules fix when they are built
    replaced by the values the modules hold: the attention scale (``use_attn_scale``, ``attn_scale``
    and ``scale_attn_by_inverse_layer_idx`` folded into one number per layer), the attention
    direction (a module may override the config's) and the LayerNorm eps. An edit of ``hooked.cfg``
    after construction changes none of them, so the config alone may describe another model."""
    cfg = copy.copy(hooked.cfg)
    attns = [block.attn for block in getattr(hooked, "blocks", [])]
    scales = sorted({float(attn.attn_scale) for attn in attns})
    if len(scales) > 1:
        raise InteropError(f"the attention layers divide their scores by different scales {scales}; "
                           "a lengthgen model has one attn_scale for every layer")
    directions = sorted({getattr(attn, "_attention_dir_override", None) or cfg.attention_dir for attn in attns})
    if len(directions) > 1:
        raise InteropError(f"the attention layers mix attention directions {directions}; a lengthgen model "
                           "is causal or non-causal throughout")
    if scales:
        cfg.use_attn_scale, cfg.attn_scale, cfg.scale_attn_by_inverse_layer_idx = True, scales[0], False
    if directions:
        cfg.attention_dir = directions[0]
    eps = sorted({float(m.eps) for m in hooked.modules() if isinstance(getattr(m, "eps", None), (int, float))})
    if len(eps) > 1:
        raise InteropError(f"the LayerNorms use different eps {eps}; lengthgen's LayerNorm has eps {LN_EPS}")
    if eps:
        cfg.eps = eps[0]
    return cfg


def from_hooked_transformer(hooked: "HookedTransformer") -> Transformer:
    """A lengthgen :class:`Transformer` computing what ``hooked`` computes (parameters copied).

    Works for models made by :func:`to_hooked_transformer` (config and annotations restored
    exactly) and for hand-configured ``HookedTransformer``s within the mapping of the module
    docstring; any other TransformerLens setting raises :class:`InteropError` naming it."""
    _tl()
    computed = _computed_config(hooked)
    inferred = _infer_lengthgen_config(computed)
    differences = _computing_differences(computed, transformer_lens_config(inferred, hooked.cfg.device or "cpu"))
    if differences:
        raise InteropError("TransformerLens settings with no lengthgen equivalent: " + ", ".join(differences))
    cfg, annotations, unused = inferred, Annotations(), {}
    stash = getattr(hooked, STASH, None)
    if stash is not None:
        stashed = copy.deepcopy(stash["config"])
        # the stash wins only where TransformerLens cannot tell (attn_scale None vs sqrt(d_head);
        # a NoPE model's n_ctx): it must translate to the very config the model has now
        if not _computing_differences(computed, transformer_lens_config(stashed, hooked.cfg.device or "cpu")):
            cfg, annotations, unused = stashed, copy.deepcopy(stash["annotations"]), stash["unused"]
    model = Transformer(cfg, annotations)
    dead = _unused_parameters(cfg)
    ours = {k: v for k, v in model.named_parameters() if k not in dead}
    theirs = dict(hooked.named_parameters())
    if set(ours) != set(theirs):
        raise InteropError(
            "this HookedTransformer has parameters lengthgen would not use: "
            f"{sorted(set(theirs) - set(ours))} (missing: {sorted(set(ours) - set(theirs))})"
        )
    with torch.no_grad():
        for name, param in ours.items():
            param.copy_(theirs[name])
        for name, value in unused.items():  # restored so that a round trip is bit-identical
            model.get_parameter(name).copy_(value)
    return model.to(hooked.cfg.device or "cpu").eval()


def _has_no_positions(hooked: "HookedTransformer") -> bool:
    """True for the NoPE mapping: rotary embeddings over zero dimensions (the identity)."""
    return hooked.cfg.positional_embedding_type == "rotary" and not hooked.cfg.rotary_dim


def position_id_hook(hooked: "HookedTransformer", pos_ids: torch.Tensor) -> tuple[str, Callable]:
    """``("hook_pos_embed", fn)`` for ``run_with_hooks``/``hooks``: replaces TransformerLens's
    0..N−1 position embeddings by ``W_pos[pos_ids]`` (``pos_ids``: ``[batch, seq]`` or ``[seq]``).

    Reads ``hooked.W_pos`` at call time, so edits to the position table take effect."""
    if hooked.cfg.positional_embedding_type != "standard":
        raise InteropError(
            f"position IDs need learned absolute positions ('standard'); this model uses "
            f"{hooked.cfg.positional_embedding_type!r}" + (" with rotary_dim=0 (no positions)" if not hooked.cfg.rotary_dim else "")
        )
    pos_ids = torch.as_tensor(pos_ids, dtype=torch.long, device=hooked.W_pos.device)
    if pos_ids.numel() and (pos_ids.min() < 0 or pos_ids.max() >= hooked.cfg.n_ctx):
        raise InteropError(
            f"position ID {int(pos_ids.max() if pos_ids.max() >= hooked.cfg.n_ctx else pos_ids.min())} is "
            f"outside the position table (IDs 0..{hooked.cfg.n_ctx - 1})"
        )

    def replace_positions(pos_embed: torch.Tensor, hook: Any) -> torch.Tensor:
        batch = pos_embed.shape[0]
        table = hooked.W_pos[pos_ids]
        return table.expand(batch, *table.shape[-2:]) if table.dim() == 2 else table

    return "hook_pos_embed", replace_positions


def run_with_position_ids(hooked: "HookedTransformer", tokens: torch.Tensor, pos_ids: torch.Tensor | None,
                          **run_with_cache_kwargs: Any) -> tuple[torch.Tensor, Any]:
    """``hooked.run_with_cache(tokens, **kwargs)`` with position IDs ``pos_ids`` instead of 0..N−1.

    ``pos_ids`` has the shape of ``tokens`` (or ``[seq]``, shared by the batch). Sequences may be
    longer than ``cfg.n_ctx`` as long as every ID lies in the table (coupled addition: 3n + 5
    tokens, IDs up to n + 2). A model without positions (NoPE) ignores ``pos_ids``, as lengthgen does.
    Returns ``(logits, cache)`` exactly as ``run_with_cache`` does; the cache's
    ``hook_pos_embed`` holds the embeddings that were actually used."""
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    if tokens.dim() == 1:
        tokens = tokens.unsqueeze(0)
    if pos_ids is not None and not _has_no_positions(hooked):
        pos_ids = torch.as_tensor(pos_ids, dtype=torch.long)
        if pos_ids.shape[-1] != tokens.shape[-1] or (pos_ids.dim() == 2 and pos_ids.shape != tokens.shape):
            raise InteropError(f"pos_ids shape {tuple(pos_ids.shape)} does not match tokens {tuple(tokens.shape)}")
        with hooked.hooks(fwd_hooks=[position_id_hook(hooked, pos_ids)]):
            return hooked.run_with_cache(tokens, **run_with_cache_kwargs)
    if hooked.cfg.positional_embedding_type == "standard" and tokens.shape[-1] > hooked.cfg.n_ctx:
        raise InteropError(f"{tokens.shape[-1]} tokens need position IDs: the table has {hooked.cfg.n_ctx} rows")
    return hooked.run_with_cache(tokens, **run_with_cache_kwargs)
