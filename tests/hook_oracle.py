"""An independent forward pass for checking lengthgen's hook points.

Written from the architecture's definition (TransformerLens's conventions: pre-LN blocks, scores
``q·k / attn_scale``, LayerNorm eps 1e-5 with ``hook_normalized`` before the gain and bias), in
float64, with explicit einsums, a mask built from position comparisons and an explicit softmax.
It shares no code with :mod:`lengthgen.model` or :mod:`lengthgen.attention`: only the parameters.
``edits`` maps hook names to functions applied where the hook point sits, so patching experiments
have an expectation that does not come from the hooks under test.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

Edits = dict[str, Callable[[torch.Tensor], torch.Tensor]]


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, prefix: str, h: Callable) -> torch.Tensor:
    centered = x - x.mean(-1, keepdim=True)
    scale = h(f"{prefix}.hook_scale", torch.sqrt((centered * centered).mean(-1, keepdim=True) + 1e-5))
    return h(f"{prefix}.hook_normalized", centered / scale) * w + b


def _visible(n: int, causal: bool, window: int | None) -> torch.Tensor:
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    ok = (j <= i) if causal else torch.ones(n, n, dtype=torch.bool)
    return ok & (j > i - window) if window is not None else ok


def reference_forward(model, tokens: torch.Tensor, pos: torch.Tensor | None = None, edits: Edits | None = None,
                      absolute: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(logits, activations)`` in float64 for ``tokens`` ``[batch, seq]`` at position IDs ``pos``
    (default 0..seq-1); activation shapes as in TransformerLens. ``absolute``: every parameter
    replaced by its absolute value (with edits feeding absolute activations, the linear maps then
    give ``|x| @ |W| + |b|``, the size of the terms a rounding error is relative to)."""
    cfg, edits, acts = model.cfg, edits or {}, {}
    p = {name: t.detach().to(torch.float64) for name, t in model.named_parameters()}
    p = {name: t.abs() for name, t in p.items()} if absolute else p

    def h(name: str, t: torch.Tensor) -> torch.Tensor:
        if name in edits:
            t = edits[name](t)
        acts[name] = t
        return t

    n = tokens.shape[1]
    x = h("hook_embed", p["embed.W_E"][tokens])
    if cfg.positional == "learned":
        ids = torch.arange(n).expand_as(tokens) if pos is None else pos
        x = x + h("hook_pos_embed", p["pos_embed.W_pos"][ids])
    scale = 1.0 / (math.sqrt(cfg.d_head) if cfg.attn_scale is None else cfg.attn_scale)
    windows = cfg.attn_windows or [None] * cfg.n_heads
    visible = torch.stack([_visible(n, cfg.causal, w) for w in windows])  # [head, q, k]
    ln = cfg.normalization == "LN"
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}"
        x = h(f"{b}.hook_resid_pre", x)
        a_in = _layer_norm(x, p[f"{b}.ln1.w"], p[f"{b}.ln1.b"], f"{b}.ln1", h) if ln else x
        q, k, v = (h(f"{b}.attn.hook_{c.lower()}",
                     torch.einsum("bpd,hde->bphe", a_in, p[f"{b}.attn.W_{c}"]) + p[f"{b}.attn.b_{c}"])
                   for c in "QKV")
        scores = torch.einsum("bihe,bjhe->bhij", q, k) * scale
        scores = h(f"{b}.attn.hook_attn_scores", scores.masked_fill(~visible, float("-inf")))
        weights = torch.exp(scores - scores.max(-1, keepdim=True).values)
        pattern = h(f"{b}.attn.hook_pattern", weights / weights.sum(-1, keepdim=True))
        z = h(f"{b}.attn.hook_z", torch.einsum("bhij,bjhe->bihe", pattern, v))
        result = h(f"{b}.attn.hook_result", torch.einsum("bihe,hed->bihd", z, p[f"{b}.attn.W_O"]))
        attn_out = h(f"{b}.hook_attn_out", result.sum(2) + p[f"{b}.attn.b_O"])
        if cfg.d_mlp <= 0:
            x = h(f"{b}.hook_resid_post", x + attn_out)
            continue
        mid = h(f"{b}.hook_resid_mid", x + attn_out)
        m_in = _layer_norm(mid, p[f"{b}.ln2.w"], p[f"{b}.ln2.b"], f"{b}.ln2", h) if ln else mid
        pre = h(f"{b}.mlp.hook_pre", m_in @ p[f"{b}.mlp.W_in"] + p[f"{b}.mlp.b_in"])
        post = pre.clamp(min=0) if cfg.act_fn == "relu" else 0.5 * pre * (1 + torch.erf(pre / math.sqrt(2)))
        post = h(f"{b}.mlp.hook_post", post)
        mlp_out = h(f"{b}.hook_mlp_out", post @ p[f"{b}.mlp.W_out"] + p[f"{b}.mlp.b_out"])
        x = h(f"{b}.hook_resid_post", mid + mlp_out)
    if ln:
        x = _layer_norm(x, p["ln_final.w"], p["ln_final.b"], "ln_final", h)
    return x @ p["unembed.W_U"] + p["unembed.b_U"], acts


#: activations that are linear maps of the previous one (dot products: error relative to |x| @ |W|)
LINEAR = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_result", "hook_attn_out", "mlp.hook_pre", "hook_mlp_out")


def stagewise_errors(model, tokens: torch.Tensor, pos: torch.Tensor | None,
                     cache: dict[str, torch.Tensor]) -> dict[str, float]:
    """For each hooked activation: its distance from the oracle's computation *from the model's
    own preceding activations* (so float32 rounding is measured one step at a time), relative to
    ``max(1, max |expected|)`` or, for dot products, to the largest ``|x| @ |W| + |b|``."""
    computed: dict[str, torch.Tensor] = {}
    sizes: dict[str, torch.Tensor] = {}

    def feed(name: str, store: dict, absolute: bool) -> Callable[[torch.Tensor], torch.Tensor]:
        def edit(t: torch.Tensor) -> torch.Tensor:
            store[name] = t
            ours = cache[name].to(torch.float64)
            return ours.abs() if absolute else ours
        return edit

    reference_forward(model, tokens, pos, edits={n: feed(n, computed, False) for n in cache})
    reference_forward(model, tokens, pos, edits={n: feed(n, sizes, True) for n in cache}, absolute=True)
    errors = {}
    for name, expected in computed.items():
        inf = torch.isinf(expected)
        assert torch.equal(torch.isinf(cache[name]), inf), f"{name}: masked entries differ"
        scale = max(1.0, float(expected[~inf].abs().max()) if (~inf).any() else 0.0)
        if name.endswith(LINEAR):
            scale = max(scale, float(sizes[name].max()))
        errors[name] = float((cache[name].to(torch.float64)[~inf] - expected[~inf]).abs().max()) / scale
    return errors


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    """``actual`` within ``tol × max(1, max|expected|)`` of ``expected``; ``-inf`` (masked scores)
    exactly where ``expected`` has it."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} vs {tuple(expected.shape)}"
    actual, expected = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    inf = torch.isinf(expected)
    assert torch.equal(torch.isinf(actual), inf), f"{what}: masked entries differ"
    finite = expected[~inf]
    bound = tol * max(1.0, float(finite.abs().max())) if finite.numel() else 0.0
    err = float((actual[~inf] - finite).abs().max()) if finite.numel() else 0.0
    assert err <= bound, f"{what}: max error {err:.3g} > {bound:.3g}"
