"""The attention-entropy penalty (``lengthgen.train --attn-entropy``, lengthgen.loss): the entropy
against −Σ p·log p in Python floats, finite gradients where a query cannot look, the loss against
an independent cross-entropy plus β times entropies recomputed from the attention pattern, and a
short run whose heads really get sharper."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from lengthgen import task_batches
from lengthgen.loss import masked_loss, row_entropy
from lengthgen.runs import latest_checkpoint
from lengthgen.train import build_model, main, train
from lengthgen.train_config import entropy_weight_at

from test_train import TINY, one_error_line, tiny_cfg


def python_entropy(row: list[float]) -> float:
    """−Σ p·log p over the finite scores, by math.exp in float64 (the oracle)."""
    finite = [s for s in row if s != -math.inf]
    top = max(finite)
    weights = [math.exp(s - top) for s in finite]
    total = sum(weights)
    return -sum(w / total * math.log(w / total) for w in weights if w > 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(-30, 30), st.just(-math.inf)), min_size=1, max_size=12).filter(
    lambda r: any(s != -math.inf for s in r)))
def test_row_entropy_is_shannon_entropy_over_the_visible_keys(row):
    got = row_entropy(torch.tensor([row], dtype=torch.float64)).item()
    assert got == pytest.approx(python_entropy(row), abs=1e-12, rel=1e-12)


def test_masked_keys_give_finite_gradients_and_a_one_hot_row_has_entropy_zero():
    s = torch.tensor([[0.0, 0.0, -math.inf], [50.0, -50.0, -math.inf], [3.0, -math.inf, -math.inf]],
                     dtype=torch.float64, requires_grad=True)
    h = row_entropy(s)
    assert h[0].item() == pytest.approx(math.log(2), abs=1e-15)
    assert h[2].item() == 0.0 and 0 <= h[1].item() < 1e-40
    h.sum().backward()
    assert torch.isfinite(s.grad).all()
    assert (s.grad[:, 2] == 0).all()  # a key the query cannot see gets no gradient


def batch_and_model(seed: int = 3):
    cfg = tiny_cfg(pack=0.5, max_digits=10)
    model = build_model(cfg).double()
    batch = task_batches.training_batch(cfg.task, np.random.default_rng(seed), 16, 1, 3, cfg.positions,
                                        model.cfg.n_ctx, cfg.pack)
    return model, batch.to_torch()


@pytest.mark.parametrize("beta", [None, 0.0, 0.25])
def test_the_loss_is_cross_entropy_plus_beta_times_the_mean_entropy_of_the_answer_queries(beta):
    model, (tokens, pos, mask) = batch_and_model()
    loss, batch_loss, _, _, entropy = masked_loss(model, tokens, pos, mask, entropy_weight=beta)
    _, cache = model.run_with_cache(tokens[:, :-1], pos[:, :-1])
    logits = model(tokens[:, :-1], pos[:, :-1])
    # oracle: log-softmax by hand, entropies from the cached pattern, both in Python loops
    nll, rows, ent = [], 0, 0.0
    for b, q in mask.nonzero().tolist():
        row = logits[b, q].tolist()
        top = max(row)
        lse = top + math.log(sum(math.exp(x - top) for x in row))
        nll.append(lse - row[tokens[b, q + 1]])
        pattern = cache["blocks.0.attn.hook_pattern"][b, :, q, : q + 1]
        for p in pattern.tolist():
            ent += -sum(x * math.log(x) for x in p if x > 0)
            rows += 1
    ce = sum(nll) / len(nll)
    assert batch_loss.item() == pytest.approx(ce, rel=1e-12)
    if beta is None:  # not measured
        assert entropy.item() == 0.0 and loss.item() == pytest.approx(ce, rel=1e-12)
    else:
        assert rows == 2 * int(mask.sum())  # every head of every answer query, nothing else
        assert entropy.item() == pytest.approx(ent / rows, rel=1e-10)
        assert loss.item() == pytest.approx(ce + beta * ent / rows, rel=1e-10)


def mean_entropy(model) -> float:
    model.eval()
    _, (tokens, pos, mask) = batch_and_model(seed=11)
    with torch.no_grad():
        return masked_loss(model.float(), tokens, pos, mask, entropy_weight=1.0)[4].item()


def test_the_penalty_sharpens_the_heads_and_is_logged(tmp_path):
    torch.set_num_threads(1)
    runs = {}
    for beta in (0.0, 1.0):
        assert train(tiny_cfg(steps=60, lr=3e-3, attn_entropy=beta, attn_entropy_start=0.0, pack=0.5,
                               max_digits=10), tmp_path / str(beta), progress=False) == 0
        from lengthgen.weights import load_model

        runs[beta] = mean_entropy(load_model(tmp_path / str(beta) / "model.safetensors"))
    assert runs[1.0] < 0.5 * runs[0.0], runs
    log = json.loads((latest_checkpoint(tmp_path / "1.0") / "state.json").read_text())["log"]
    # measured from the first step on, while its weight is still 0
    assert log[0]["attn_entropy"] > 0.5 and log[-1]["attn_entropy"] < 0.5 * log[0]["attn_entropy"]
    assert "attn_entropy" not in json.loads((latest_checkpoint(tmp_path / "0.0") / "state.json").read_text())["log"][-1]


@pytest.mark.parametrize("bad", ["-0.1", "nan", "inf"])
def test_a_bad_weight_is_one_line_exit_2(tmp_path, capsys, bad):
    assert main([*TINY, "--attn-entropy", bad, "--out", str(tmp_path / "r")]) == 2
    assert "--attn-entropy" in one_error_line(capsys)
    assert not (tmp_path / "r").exists()


def test_the_weight_is_zero_then_rises_linearly_to_beta_halfway_to_the_end():
    cfg = tiny_cfg(steps=100, attn_entropy=2.0, attn_entropy_start=0.5)
    assert [entropy_weight_at(s, cfg) for s in (0, 49, 50, 55, 62, 75, 99)] == [0.0, 0.0, 0.0, 0.4, 0.96, 2.0, 2.0]
    assert entropy_weight_at(0, tiny_cfg(steps=100, attn_entropy=2.0, attn_entropy_start=0.0)) == 0.0
    assert entropy_weight_at(50, tiny_cfg(steps=100, attn_entropy=2.0, attn_entropy_start=0.0)) == 2.0
    assert entropy_weight_at(99, tiny_cfg(steps=100, attn_entropy=0.0)) == 0.0


@pytest.mark.parametrize("bad", ["-0.1", "1", "nan"])
def test_a_bad_start_is_one_line_exit_2(tmp_path, capsys, bad):
    assert main([*TINY, "--attn-entropy", "0.1", "--attn-entropy-start", bad, "--out", str(tmp_path / "r")]) == 2
    assert "--attn-entropy-start" in one_error_line(capsys)
