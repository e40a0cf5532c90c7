"""The generic transformer: names and shapes, caching, the long path, positions as data."""
from __future__ import annotations

import pytest
import torch

import lengthgen.model as model_module
from lengthgen.decode import (
    DECISION_MARGIN, UNDECIDED, decided_argmax, greedy_generate, greedy_generate_batch, teacher_forced_argmax,
)
from lengthgen.model import KVCache, Transformer, TransformerConfig


def random_model(seed: int = 0, **overrides) -> Transformer:
    cfg = dict(d_vocab=11, d_model=16, n_layers=2, n_heads=2, d_head=8, d_mlp=24, n_ctx=64, dtype="float64")
    cfg.update(overrides)
    model = Transformer(TransformerConfig(**cfg))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model.eval()


def test_transformerlens_names_and_shapes() -> None:
    m = random_model(n_layers=1, normalization="LN")
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert shapes["embed.W_E"] == (11, 16) and shapes["pos_embed.W_pos"] == (64, 16)
    assert shapes["blocks.0.attn.W_Q"] == (2, 16, 8) and shapes["blocks.0.attn.W_O"] == (2, 8, 16)
    assert shapes["blocks.0.attn.b_Q"] == (2, 8) and shapes["blocks.0.attn.b_O"] == (16,)
    assert shapes["blocks.0.mlp.W_in"] == (16, 24) and shapes["blocks.0.mlp.W_out"] == (24, 16)
    assert shapes["unembed.W_U"] == (16, 11) and "ln_final.w" in shapes and "blocks.0.ln1.b" in shapes


def test_nope_model_has_no_position_table_and_ignores_ids() -> None:
    m = random_model(positional="none")
    assert "pos_embed.W_pos" not in m.state_dict()
    toks = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(m(toks, torch.tensor([[9, 3, 1, 0]])), m(toks))


@pytest.mark.parametrize("overrides", [{}, {"normalization": "LN", "act_fn": "gelu"}, {"attn_windows": [2, None]}])
def test_kv_cache_decoding_equals_full_forward(overrides: dict) -> None:
    m = random_model(**overrides)
    toks = torch.randint(0, 11, (1, 20), generator=torch.Generator().manual_seed(1))
    pos = torch.randint(0, 64, (1, 20), generator=torch.Generator().manual_seed(2))
    full = m(toks, pos)
    cache = KVCache()
    parts = [m(toks[:, :7], pos[:, :7], cache=cache)]
    for t in range(7, 20):
        parts.append(m(toks[:, t : t + 1], pos[:, t : t + 1], cache=cache))
    assert cache.length == 20
    assert (torch.cat(parts, dim=1) - full).abs().max() < 1e-10


def test_logits_from_skips_only_earlier_positions() -> None:
    m = random_model()
    toks = torch.randint(0, 11, (3, 30), generator=torch.Generator().manual_seed(3))
    assert (m(toks, logits_from=12) - m(toks)[:, 12:]).abs().max() < 1e-10


def test_long_path_is_used_and_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    m = random_model(attn_windows=[None, 5])
    toks = torch.randint(0, 11, (2, 40), generator=torch.Generator().manual_seed(4))
    dense = m(toks)
    calls = []
    original = model_module.long_attention
    monkeypatch.setattr(model_module, "long_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    monkeypatch.setattr(model_module, "DENSE_ENTRIES_LIMIT", 10)
    assert (m(toks) - dense).abs().max() < 1e-10
    assert calls  # the long path really ran


def test_activation_cache_has_tl_hook_names() -> None:
    m = random_model()
    logits, acts = m(torch.tensor([[1, 2, 3]]), return_cache=True)
    assert acts["blocks.1.attn.hook_pattern"].shape == (1, 2, 3, 3)
    assert acts["blocks.0.hook_resid_post"].shape == (1, 3, 16)
    assert torch.allclose(acts["blocks.0.attn.hook_pattern"].sum(-1), torch.ones(1, dtype=torch.float64))
    assert {"hook_embed", "blocks.0.mlp.hook_post", "blocks.0.attn.hook_z", "blocks.1.hook_resid_mid"} <= set(acts)


def test_position_ids_out_of_table_are_refused() -> None:
    m = random_model()
    with pytest.raises(ValueError, match="outside the position table"):
        m(torch.tensor([[1, 2]]), torch.tensor([[0, 64]]))
    with pytest.raises(ValueError, match="token id out of range"):
        m(torch.tensor([[11]]))


def test_greedy_generate_is_argmax_of_full_forward() -> None:
    m = random_model()
    prompt = [1, 4, 2, 7]
    out = greedy_generate(m, prompt, max_new_tokens=6)
    seq = list(prompt)
    for _ in range(6):
        seq.append(int(m(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[4:]


def test_decided_argmax_needs_a_margin() -> None:
    logits = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0 - DECISION_MARGIN / 2], [0.0, 1.0, 0.99], [3.0, -1.0, 2.0]])
    assert decided_argmax(logits).tolist() == [UNDECIDED, UNDECIDED, 1, 0]
    assert decided_argmax(logits, margin=2.0).tolist() == [UNDECIDED] * 4
    assert decided_argmax(logits.to(torch.bfloat16)).tolist() == [UNDECIDED, UNDECIDED, 1, 0]


def copy_or_tie_model() -> Transformer:
    """No layers: token 1 predicts 1 by a margin of 1; after token 2 every logit is 0 (a tie)."""
    m = Transformer(TransformerConfig(d_vocab=3, d_model=2, n_layers=0, positional="none", dtype="float64"))
    with torch.no_grad():
        m.embed.W_E.zero_()
        m.embed.W_E[1, 0] = 1.0
        m.unembed.W_U.zero_()
        m.unembed.W_U[0, 1] = 1.0
    return m.eval()


def test_greedy_decoding_ends_at_an_undecided_step() -> None:
    """An undecided step ends the row with UNDECIDED (no token is picked); other rows go on."""
    m = copy_or_tie_model()
    assert greedy_generate(m, [0, 2], max_new_tokens=4) == [UNDECIDED]
    assert greedy_generate(m, [0, 1], max_new_tokens=4) == [1, 1, 1, 1]
    rows = greedy_generate_batch(m, torch.tensor([[0, 1], [0, 2]]), max_new_tokens=3, stop_token=0)
    assert rows == [[1, 1, 1], [UNDECIDED]]
    assert teacher_forced_argmax(m, [0, 2, 1, 1], None, first=1).tolist() == [UNDECIDED, 1]


@pytest.mark.parametrize("bad", [{"positional": "rope"}, {"act_fn": "tanh"}, {"normalization": "RMS"}, {"dtype": "int8"},
                                 {"attn_windows": [1]}])
def test_config_rejects_unknown_options(bad: dict) -> None:
    with pytest.raises(ValueError):
        TransformerConfig(d_vocab=3, d_model=4, n_heads=2, **bad)
