"""A float64 forward pass of a 1-layer model, recomputed in numpy from the model's parameters.

The tests of the certificates (docs/certificate.md, "What the tests pin") compare every bound a
certificate prints with what this pass measures: attention scores and pattern (softmax recomputed
here, not read from the certificate or from torch's kernels), the residual stream after attention,
the FFN pre-activations and the logits. Nothing here imports certificate code."""
from __future__ import annotations

import numpy as np
import torch


def params(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """float64 copies of every parameter (exact for every float format)."""
    return {k: v.detach().to(torch.float64).numpy() for k, v in model.state_dict().items()}


def forward64(model: torch.nn.Module, tokens: np.ndarray, pos: np.ndarray) -> dict[str, np.ndarray]:
    """One sequence, causal: scores [H, T, T], pattern [H, T, T], per-head value outputs
    ``head_values`` [H, T, d] (the rows the pattern averages), resid_mid [T, d], pre [T, d_mlp]
    (empty without an MLP), logits [T, V]."""
    p = params(model)
    a = "blocks.0.attn."
    x = p["embed.W_E"][tokens] + p["pos_embed.W_pos"][pos]
    q = np.einsum("td,hde->hte", x, p[a + "W_Q"]) + p[a + "b_Q"][:, None]
    k = np.einsum("td,hde->hte", x, p[a + "W_K"]) + p[a + "b_K"][:, None]
    v = np.einsum("td,hde->hte", x, p[a + "W_V"]) + p[a + "b_V"][:, None]
    T = len(tokens)
    scores = np.einsum("hqe,hke->hqk", q, k) * float(model.cfg.score_scale)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool))[None], scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    pattern = w / w.sum(-1, keepdims=True)
    head_values = np.einsum("hte,hed->htd", v, p[a + "W_O"])
    resid = x + np.einsum("hqk,hkd->qd", pattern, head_values) + p[a + "b_O"]
    out = {"scores": scores, "pattern": pattern, "head_values": head_values, "resid_mid": resid}
    if "blocks.0.mlp.W_in" in p:
        pre = resid @ p["blocks.0.mlp.W_in"] + p["blocks.0.mlp.b_in"]
        resid_post = resid + np.maximum(pre, 0) @ p["blocks.0.mlp.W_out"] + p["blocks.0.mlp.b_out"]
    else:
        pre, resid_post = np.zeros((T, 0)), resid
    out.update(pre=pre, resid_post=resid_post, logits=resid_post @ p["unembed.W_U"] + p["unembed.b_U"])
    return out


def hardmax64(model: torch.nn.Module, tokens: np.ndarray, pos: np.ndarray, attended: list[list[list[int]]]
              ) -> dict[str, np.ndarray]:
    """The same pass with each head's attention uniform on the given key positions
    (``attended[h][t]``: the positions query t attends to), i.e. the hard-max limit."""
    full = forward64(model, tokens, pos)
    H, T = full["pattern"].shape[:2]
    pattern = np.zeros((H, T, T))
    for h in range(H):
        for t in range(T):
            pattern[h, t, attended[h][t]] = 1 / len(attended[h][t])
    p = params(model)
    x = p["embed.W_E"][tokens] + p["pos_embed.W_pos"][pos]
    resid = x + np.einsum("hqk,hkd->qd", pattern, full["head_values"]) + p["blocks.0.attn.b_O"]
    out = {"pattern": pattern, "resid_mid": resid}
    if "blocks.0.mlp.W_in" in p:
        pre = resid @ p["blocks.0.mlp.W_in"] + p["blocks.0.mlp.b_in"]
        resid_post = resid + np.maximum(pre, 0) @ p["blocks.0.mlp.W_out"] + p["blocks.0.mlp.b_out"]
    else:
        pre, resid_post = np.zeros((T, 0)), resid
    out.update(pre=pre, logits=resid_post @ p["unembed.W_U"] + p["unembed.b_U"])
    return out


def attention_measures(scores: np.ndarray, pattern: np.ndarray, S: list[int]) -> tuple[float, float, float]:
    """For one query row: the leak λ (mass outside S relative to the mass on S), the spread η
    (max − min score on S) and the total variation to uniform on S."""
    on = np.zeros(len(pattern), dtype=bool)
    on[S] = True
    lam = float(pattern[~on].sum() / pattern[on].sum())
    eta = float(scores[S].max() - scores[S].min())
    uniform = on / on.sum()
    return lam, eta, 0.5 * float(np.abs(pattern - uniform).sum())


def addition_passes(model: torch.nn.Module, a: str, b: str, start: int) -> tuple:
    """For the addition ``a + b`` with coupled IDs from ``start``: the float64 pass, each head's
    attended set S measured from it (``$`` and the keys within 1 of the row's top score), the
    hard-max pass on those sets, the answer rows, their targets (the digits of the Python integer
    a + b, then ``$``), and the tokens and IDs fed in."""
    from lengthgen.tasks import ADDITION

    inst = ADDITION.instance(a, b, start=start)
    tok, pos = inst.tokens[:-1], inst.pos_ids[:-1]
    f = forward64(model, tok, pos)
    H, T = f["scores"].shape[:2]
    S = [[[0] + [j for j in range(1, t + 1) if f["scores"][h, t, j] >= f["scores"][h, t, : t + 1].max() - 1]
          for t in range(T)] for h in range(H)]
    q = np.arange(inst.prompt_len - 1, T)
    n = max(len(a), len(b))
    want = np.array([ADDITION.vocabulary[ch] for ch in str(int(a) + int(b)).zfill(n + 1)[::-1]] + [ADDITION.EOS])
    return f, S, hardmax64(model, tok, pos, S), q, want, tok, pos
