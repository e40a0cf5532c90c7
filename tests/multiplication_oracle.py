"""An oracle for the multiplication certificate's bounds, independent of the certificate's code
(docs/multiplication.md, "Certificate", the table "Which test pins which bound").

Two float64 passes over the weights a model holds:

* the *measured* pass is the model's own forward (``Transformer.forward`` in float64, with its hooks);
* the *hard-max* pass (:func:`forward64` with ``hard=True``) replaces every working head's softmax by
  the uniform average over the key set the design says it attends to (:func:`designed_set`, written
  from the "Heads" table of docs/multiplication.md, not from the certificate's attended sets).

The certificate bounds the difference between the two: its leak, spread and total variation per
head, its deviations Δ₁ (after layer 1), Δ₁ + Δ₂ (after layer-2 attention) and ρ (after the layer-2
MLP). :func:`measure` returns the measured counterparts, worst case over the given inputs.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch

from constructions.multiplication import instance
from multiplication_checks import expected_sets


def designed_set(n: int, ids: np.ndarray, tokens: np.ndarray, layer: int, head: int, q: int) -> set[int] | None:
    """Keys the design's head (layer, head) averages over at query q (docs/multiplication.md, "Heads"),
    or None where the design says nothing (non-working heads; layer 2 before the answer)."""
    from constructions.multiplication.model import TASK
    separators = {TASK.BOS, TASK.TIMES, TASK.EQUALS}
    if layer == 0 and head == 0:  # the separators seen
        return {k for k in range(q + 1) if int(tokens[k]) in separators}
    if layer == 0 and head == 1:  # '$' and the tokens one ID up
        return {0} | {k for k in range(q + 1) if ids[k] == ids[q] + 1}
    if layer == 1 and head < 6 and q >= n + 4:
        return expected_sets(n, q)[head]
    return None


def _weights(model) -> dict[str, np.ndarray]:
    return {name: p.detach().to(torch.float64).numpy() for name, p in model.named_parameters()}


def forward64(model, tokens: np.ndarray, ids: np.ndarray, n: int, hard: bool) -> dict[str, np.ndarray]:
    """A float64 forward pass in numpy (no normalization, scale 1, ReLU: the construction's config).
    ``hard``: every head with a designed set averages uniformly over it."""
    w = _weights(model)
    L = len(tokens)
    x = w["embed.W_E"][tokens] + w["pos_embed.W_pos"][ids]
    out: dict[str, np.ndarray] = {}
    causal = np.tril(np.ones((L, L), dtype=bool))
    for layer in range(model.cfg.n_layers):
        p = f"blocks.{layer}."
        q = np.einsum("pd,hde->hpe", x, w[p + "attn.W_Q"]) + w[p + "attn.b_Q"][:, None]
        k = np.einsum("pd,hde->hpe", x, w[p + "attn.W_K"]) + w[p + "attn.b_K"][:, None]
        v = np.einsum("pd,hde->hpe", x, w[p + "attn.W_V"]) + w[p + "attn.b_V"][:, None]
        scores = np.where(causal, np.einsum("hqe,hke->hqk", q, k), -np.inf)
        pattern = np.exp(scores - scores.max(-1, keepdims=True))
        pattern /= pattern.sum(-1, keepdims=True)
        if hard:
            for h in range(pattern.shape[0]):
                for i in range(L):
                    s = designed_set(n, ids, tokens, layer, h, i)
                    if s is not None:
                        pattern[h, i] = 0.0
                        pattern[h, i, sorted(s)] = 1.0 / len(s)
        z = np.einsum("hqk,hke->hqe", pattern, v)
        x = x + np.einsum("hqe,hed->qd", z, w[p + "attn.W_O"]) + w[p + "attn.b_O"]
        out[p + "resid_mid"], out[p + "scores"], out[p + "pattern"] = x, scores, pattern
        pre = x @ w[p + "mlp.W_in"] + w[p + "mlp.b_in"]
        x = x + np.maximum(pre, 0.0) @ w[p + "mlp.W_out"] + w[p + "mlp.b_out"]
        out[p + "mlp_pre"], out[p + "resid_post"] = pre, x
    out["logits"] = x @ w["unembed.W_U"] + w["unembed.b_U"]
    return out


def float64_copy(model):
    """A float64 copy of ``model`` (exact: every float32 number is a float64 number)."""
    return copy.deepcopy(model).to(torch.float64)


def torch_forward64(m64, tokens: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
    """The model's own forward (``Transformer.forward`` with its hooks) on a float64 copy, as forward64's keys."""
    logits, acts = m64(torch.tensor(tokens[None]), torch.tensor(ids[None]), return_cache=True)
    out = {"logits": logits[0].detach().numpy()}
    for layer in range(m64.cfg.n_layers):
        p = f"blocks.{layer}."
        out[p + "resid_mid"] = acts[p + "hook_resid_mid"][0].detach().numpy()
        out[p + "resid_post"] = acts[p + "hook_resid_post"][0].detach().numpy()
        out[p + "scores"] = acts[p + "attn.hook_attn_scores"][0].detach().numpy()
        out[p + "pattern"] = acts[p + "attn.hook_pattern"][0].detach().numpy()
        out[p + "mlp_pre"] = acts[p + "mlp.hook_pre"][0].detach().numpy()
    return out


@dataclass
class Measured:
    """Worst case over the inputs: per working head (layer, head) the leak (mass outside the designed
    set over mass inside), the spread (max − min score inside), the score gap (min inside − max
    of the other visible keys, smallest over queries), the total variation to uniform on the
    set; per residual label the deviation from the hard-max pass after layer 1 (every position),
    after layer-2 attention and after the layer-2 MLP (answer positions), and per layer-3 unit the
    deviation of its pre-activation; over the answer positions the smallest logit gap of the target over every other token."""

    leak: dict[tuple[int, int], float] = field(default_factory=dict)
    spread: dict[tuple[int, int], float] = field(default_factory=dict)
    tv: dict[tuple[int, int], float] = field(default_factory=dict)
    gap: dict[tuple[int, int], float] = field(default_factory=dict)  # smallest: min score inside − max outside
    delta1: dict[str, float] = field(default_factory=dict)
    delta12: dict[str, float] = field(default_factory=dict)
    rho: dict[str, float] = field(default_factory=dict)
    shift3: np.ndarray | None = None  # per layer-3 unit: |pre-activation − hard-max pre-activation|
    min_gap: float = np.inf
    wrong: list = field(default_factory=list)


def _worst(into: dict, key, value: float) -> None:
    into[key] = max(into.get(key, 0.0), float(value))


def measure(model, n: int, pairs: list[tuple[str, int]]) -> Measured:
    """Measured counterparts of every bound the certificate prints, worst case over ``pairs``."""
    labels = model.annotations.residual
    m, m64 = Measured(), float64_copy(model)
    for a, b in pairs:
        inst = instance(a, b)
        tokens, ids = inst.tokens[:-1], inst.pos_ids[:-1]  # the final '$' is never a key or a query
        real, hard = torch_forward64(m64, tokens, ids), forward64(model, tokens, ids, n, hard=True)
        answers = range(n + 4, len(tokens))
        for layer in (0, 1):
            p = f"blocks.{layer}."
            for h in range(real[p + "pattern"].shape[0]):
                for q in range(len(tokens)):
                    s = designed_set(n, ids, tokens, layer, h, q)
                    if s is None:
                        continue
                    row, inside = real[p + "pattern"][h, q], sorted(s)
                    mass = row[inside].sum()
                    _worst(m.leak, (layer, h), (1.0 - mass) / mass)
                    sc = real[p + "scores"][h, q, inside]
                    _worst(m.spread, (layer, h), sc.max() - sc.min())
                    outside = sorted(set(range(q + 1)) - s)
                    if outside:
                        gap = sc.min() - real[p + "scores"][h, q, outside].max()
                        m.gap[(layer, h)] = min(m.gap.get((layer, h), np.inf), float(gap))
                    uniform = np.zeros_like(row)
                    uniform[inside] = 1.0 / len(inside)
                    _worst(m.tv, (layer, h), 0.5 * np.abs(row - uniform).sum())
        for c, label in enumerate(labels):
            _worst(m.delta1, label, np.abs(real["blocks.0.resid_post"][:, c] - hard["blocks.0.resid_post"][:, c]).max())
            for key, into in (("blocks.1.resid_mid", m.delta12), ("blocks.1.resid_post", m.rho)):
                _worst(into, label, np.abs(real[key][answers, c] - hard[key][answers, c]).max())
        moved = np.abs(real["blocks.2.mlp_pre"][answers] - hard["blocks.2.mlp_pre"][answers]).max(0)
        m.shift3 = moved if m.shift3 is None else np.maximum(m.shift3, moved)
        target = inst.tokens[n + 5:]
        for q, t in zip(answers, target):
            logits = real["logits"][q]
            gap = logits[t] - np.delete(logits, t).max()
            m.min_gap = min(m.min_gap, float(gap))
            if gap <= 0:
                m.wrong.append((a, b, q))
    return m


def exceeded(m: Measured, cert) -> list[tuple[str, float, float]]:
    """(label, measured, bound) wherever a measured deviation Δ₁, Δ₁ + Δ₂ or ρ exceeds what the
    certificate prints, up to the float64 rounding of the measurement (a label it does not list has
    bound 0; ρ is compared on the labels it lists, the coordinates layer 3 and the readout read)."""
    out = []
    for measured, bounds in ((m.delta1, cert.delta1), (m.delta12, cert.deltas), (m.rho, cert.rho)):
        for label, value in measured.items():
            bound = bounds.get(label, 0.0)
            if (label in cert.rho or measured is not m.rho) and not value <= bound * (1 + 1e-9) + 1e-11:
                out.append((label, value, bound))
    return out
