"""Checks of a rasp.certify certificate against a float64 forward pass (tests/hook_oracle.py) and
the RASP interpreter (rasp.evaluate, dense path): the printed leak bounds contain the attention mass
off the intended keys, the eps bounds contain the residual's deviation from the encodings."""
from __future__ import annotations

import itertools

import numpy as np
import torch

from hook_oracle import reference_forward
from rasp.core import Aggregate, Comparison, Select, indices
from rasp.evaluate import evaluate


def intended(node, ev, i: int) -> set[int]:
    """Model key positions (BOS = 0) that the RASP semantics intends for the query token ``i``."""
    sel = ev.selector(node.sop.selector)[i]
    chosen = [j for j in range(i + 1) if sel[j]]
    if not isinstance(node.sop, Aggregate):                       # selector width: BOS and selected
        return {0} | {j + 1 for j in chosen}
    if not chosen:
        return {0}
    if node.sop.reduce == "mean":
        return {j + 1 for j in chosen}
    vals = ev.column(node.sop.sop)
    best = (max if node.sop.reduce == "max" else min)(vals[j] for j in chosen)
    return {j + 1 for j in chosen if vals[j] == best}


def expected(ct, ev, i: int, sub: int) -> np.ndarray:
    """The residual the invariant describes at token ``i`` after sub-layer ``sub`` (head 2l, MLP 2l+1)."""
    lay = ct.layout
    out = np.zeros(len(lay))
    out[lay.one] = 1.0
    for node in ct.program.nodes:
        if id(node) not in lay.dims or (node.kind not in ("token", "position") and node.slot > sub + (node.kind == "width")):
            continue
        v = ev.column(node.sop)[i]
        if node.kind == "width":
            out[lay.scratch(node)] = 1.0 / (v + 1)
            if node.slot > sub:
                continue
        for d, c in lay.write(node, v).items():
            out[d] += c
    return out


def model_forward(model, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The model's own forward pass (its dtype and kernels; the dense path, since hooks are
    cached), activations converted to float64 exactly."""
    logits, cache = model.run_with_cache(ids, return_cache_object=False)
    return logits.detach().double(), {k: v.detach().double() for k, v in cache.items()}


def assert_bounds_hold(ct, program, cert, batches, forward=reference_forward) -> float:
    """``batches``: lists of equally long inputs; ``forward``: the pass whose activations must
    lie inside the bounds (default: tests/hook_oracle.py's float64 einsums; :func:`model_forward`
    for a float32 certificate). Returns the largest measured mass off the intended keys."""
    rows = {(r.layer, r.head): r for r in cert.heads}
    worst_leak = 0.0
    theta = 0.0 if cert.dtype == "float64" else 1e-5    # float32 weights: relative error of each weight
    for batch in batches:
        n = len(batch[0])
        ids = torch.tensor([ct.encode(xs) for xs in batch])
        logits, acts = forward(ct.model, ids)
        for b, xs in enumerate(batch):
            ev = evaluate(program, xs, causal=True, fast=False)
            want = ev.column(program)
            if ct.program.output.numerical:
                assert np.allclose(logits[b, 1:, 0].numpy(), want, atol=1e-9)
            else:
                got = ct.decode(logits[b, 1:])
                assert got == want, (xs, got, want)
            for layer, heads in enumerate(ct.heads):
                pattern = acts[f"blocks.{layer}.attn.hook_pattern"][b].numpy()
                scores = acts[f"blocks.{layer}.attn.hook_attn_scores"][b].numpy()
                for h, spec in enumerate(heads):
                    for i in range(n):
                        keep = intended(spec.node, ev, i)
                        off = sum(pattern[h, i + 1, j] for j in range(i + 2) if j not in keep)
                        assert off <= rows[layer, h].leak * (1 + theta), (xs, layer, h, i, off)
                        rivals = [scores[h, i + 1, j] for j in range(i + 2) if j not in keep]
                        if rivals:     # the printed margin is at most the measured one (float64 scores)
                            gap = min(scores[h, i + 1, j] for j in keep) - max(rivals)
                            assert rows[layer, h].margin <= gap + 1e-12 * (1 + abs(max(rivals))), (xs, layer, h, i, gap)
                        worst_leak = max(worst_leak, off)
            for sub in range(2 * len(ct.heads)):
                hook = f"blocks.{sub // 2}.hook_resid_{'mid' if sub % 2 == 0 else 'post'}"
                resid = acts[hook][b].numpy()
                eps = np.array(cert.eps[sub])
                for i in range(n):
                    exp = expected(ct, ev, i, sub)
                    dev = np.abs(resid[i + 1] - exp)
                    assert np.all(dev <= eps), (xs, hook, i, dev.max())
    return worst_leak


def all_inputs(vocab: list, n: int) -> list[list[list]]:
    """Every input of 1..n tokens, one batch per length (the ``batches`` of :func:`assert_bounds_hold`)."""
    return [[list(x) for x in itertools.product(vocab, repeat=k)] for k in range(1, n + 1)]


def shift(sop):
    """The previous position's value of ``sop`` ("_" at the first position): one mean head."""
    return Aggregate(Select(indices, indices - 1, Comparison.EQ), sop, default="_")
