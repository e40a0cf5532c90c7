"""The residual after attention as the trained-model certificate encloses it
(lengthgen.proof.trained_affine.attention_form, docs/certificate.md, "Trained models"), against
float64 forward passes of the committed packed checkpoint: at 2 digits with a one-significance
window, the keys of the other significance are free, and every assignment of their digits is run.
One head is kept at a time (the other's W_O zeroed), so that an input whose free keys all carry the
token that head scores highest realizes its free share λ⁺ and a vertex of the free values' hull:
the enclosure's generator set (the pyramid conv{(−1, 0), (1, τ_k)}) must hold it, and come close.
(The enclosure is symmetric about its centre, so the apex's sign cannot matter; the base's can.)"""
from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from lengthgen.proof.trained import Layout, PositionCertifier
from lengthgen.proof.trained_affine import attention_form
from lengthgen.proof.trained_tables import OneLayer, Tables
from lengthgen.runs import load_checkpoint
from lengthgen.tasks import ADDITION

START, N = 2, 2


@torch.inference_mode()
def residual_after_attention(model, pairs: list[tuple[int, int]]) -> np.ndarray:
    """hook_resid_mid at the '=' query of each pair [pairs, d] (float64)."""
    insts = [ADDITION.instance(str(a).zfill(N), str(b).zfill(N), start=START) for a, b in pairs]
    tokens = torch.as_tensor(np.stack([x.tokens for x in insts]))
    pos = torch.as_tensor(np.stack([x.pos_ids for x in insts]))
    _, cache = model.run_with_cache(tokens, pos, names_filter="blocks.0.hook_resid_mid", return_cache_object=False)
    return cache["blocks.0.hook_resid_mid"][:, insts[0].prompt_len - 1].numpy()


@pytest.mark.parametrize("head", [0, 1, None])
def test_the_attention_form_holds_every_free_key_assignment(head: int | None) -> None:
    """``head`` None: both heads at once, each with its own free keys' generators and box."""
    model, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed", N)
    model = copy.deepcopy(model).to(torch.float64)
    if head is not None:
        with torch.no_grad():
            model.blocks[0].attn.W_O[1 - head] = 0.0
    w = OneLayer.from_model(model)
    lay = Layout(N, START, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
    cert = PositionCertifier(w, Tables.build(w), lay, max_width=1, tail="affine")
    p = cert.inputs(0)  # answer position 0: the query '=' predicts c_0; window {0}, free: a_1, b_1
    assert p.window == (0, 0) and np.all(p.query_tok == lay.equals)
    a, b = p.a, p.b
    x = attention_form(cert, p.heads, p.slots, p.query_tok, cert.t.resid[:, p.qid][p.query_tok])
    radius = x.radius()
    assert len(x.blocks) == 2 and np.all(np.isfinite(radius))
    lead = range(1, 10)  # the free significance leads both 2-digit operands
    closest = 0.0
    for i in range(len(a)):
        pairs = [(10 * p + int(a[i, 0]), 10 * q + int(b[i, 0])) for p, q in itertools.product(lead, lead)]
        offset = np.abs(residual_after_attention(model, pairs) - x.c[i])
        assert np.all(offset <= radius[i] + 1e-9), (i, float((offset - radius[i]).max()))
        closest = max(closest, float((offset / radius[i]).max()))
    if head is not None:  # one head: some input reaches the bound on some coordinate (measured: to 1e-7)
        assert closest > 0.99, closest
