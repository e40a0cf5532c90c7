"""Log-length scaled attention (``attn_log_length``): every score times ln t, t the keys the query sees.

The model's attention is checked against an explicit float64 softmax written here from the
hooked queries, keys and values (not the model's kernels), on the dense path, the O(N·d) path, a
pass that scores only the last positions, and greedy decoding with both KV caches. The trained-model
certificate's enclosure of the factor, and of the scores it gives the answer queries, is checked
against ln t and the model's own float64 scores.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import lengthgen.model as model_module
from lengthgen.attention import log_key_counts
from lengthgen.data import DataError
from lengthgen.decode import greedy_generate
from lengthgen.model import Transformer, TransformerConfig
from lengthgen.proof.trained import Layout, PositionCertifier
from lengthgen.proof.trained_float import FloatFormat
from lengthgen.proof.trained_tables import LOG_FACTOR_SLACK, OneLayer, Tables, log_length_factor
from lengthgen.proof.weights import StructureError
from lengthgen.runs import load_checkpoint
from lengthgen.tasks import ADDITION
from lengthgen.train_config import TrainConfig

HOOKS = ("blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v", "blocks.0.attn.hook_z")


def random_model(dtype: str = "float64", log_length: bool = True, seed: int = 0, n_ctx: int = 64) -> Transformer:
    cfg = TransformerConfig(d_vocab=13, d_model=16, n_heads=2, d_head=8, d_mlp=32, n_ctx=n_ctx, attn_scale=2.0,
                            normalization="LN", act_fn="gelu", dtype=dtype, attn_log_length=log_length)
    model = Transformer(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.7)
    return model.eval()


def explicit_z(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Causal softmax attention with scores ``scale·q·k·ln(i + 1)`` at query i, in float64 numpy;
    hook layout [batch, pos, head, d_head]."""
    B, T, H, _ = q.shape
    z = np.zeros_like(v)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                s = scale * math.log(i + 1) * (k[b, : i + 1, h] @ q[b, i, h])
                p = np.exp(s - s.max())
                z[b, i, h] = (p / p.sum()) @ v[b, : i + 1, h]
    return z


def test_the_factor_is_ln_of_the_keys_each_query_sees() -> None:
    like = torch.zeros(1, dtype=torch.float64)
    causal = log_key_counts(3, 7, True, like)[:, 0].tolist()  # the last 3 of 7 positions: t = 5, 6, 7
    assert causal == [math.log(5), math.log(6), math.log(7)]
    assert log_key_counts(2, 7, False, like)[:, 0].tolist() == [math.log(7)] * 2
    assert log_key_counts(1, 9, True, like, filled=torch.tensor(4))[:, 0].tolist() == [math.log(5)]
    assert log_key_counts(1, 1, True, like)[:, 0].tolist() == [0.0]  # the first position sees only itself
    f32 = log_key_counts(1, 300, True, torch.zeros(1, dtype=torch.float32))
    assert f32.dtype == torch.float32 and float(f32) == float(np.float32(math.log(300)))


@pytest.mark.parametrize("long_path", [False, True])
def test_attention_equals_an_explicit_softmax_with_the_factor(long_path: bool, monkeypatch) -> None:
    if long_path:
        monkeypatch.setattr(model_module, "DENSE_ENTRIES_LIMIT", 16)
    model = random_model()
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 13, (2, 30), generator=gen)
    pos = torch.randint(0, 64, (2, 30), generator=gen)
    _, cache = model.run_with_cache(tokens, pos, names_filter=lambda name: name in HOOKS, return_cache_object=False)
    act = {name.split(".")[-1]: cache[name].numpy() for name in HOOKS}
    expected = explicit_z(act["hook_q"], act["hook_k"], act["hook_v"], 1 / model.cfg.attn_scale)
    np.testing.assert_allclose(act["hook_z"], expected, rtol=0, atol=1e-12)
    plain = Transformer(TransformerConfig(**{**model.cfg.to_dict(), "attn_log_length": False}))
    plain.load_state_dict(model.state_dict())
    assert (plain(tokens, pos) - model(tokens, pos)).abs().max() > 1e-2  # the factor changes the output


def test_scoring_only_the_last_positions_keeps_each_querys_count() -> None:
    model = random_model()
    tokens = torch.randint(0, 13, (3, 25), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(25).expand(3, -1)
    full = model(tokens, pos)
    torch.testing.assert_close(model(tokens, pos, logits_from=17), full[:, 17:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("static", [False, True])
def test_greedy_decoding_with_a_cache_equals_full_passes(static: bool) -> None:
    model = random_model(seed=3)
    prompt = [12, 3, 1, 4, 1, 5, 9, 2, 6]
    out = greedy_generate(model, prompt, max_new_tokens=12, margin=0.0, static_cache=static)
    seq = list(prompt)
    for _ in range(12):  # no cache: each step one full forward pass
        logits = model(torch.tensor([seq]))[0, -1]
        seq.append(int(torch.argmax(logits)))
    assert out == seq[len(prompt):]


def test_refused_where_it_has_no_meaning() -> None:
    with pytest.raises(ValueError, match="attn_windows"):
        TransformerConfig(d_vocab=5, d_model=8, n_heads=2, attn_windows=[3, None], attn_log_length=True)
    with pytest.raises(DataError, match="hard-alibi"):
        TrainConfig(positions="hard-alibi", attn_log_length=True).validate()
    with pytest.raises(StructureError) as refused:  # the whole line a user reads
        OneLayer.from_model(random_model("float32"), FloatFormat("float32"))
    assert str(refused.value) == ("the float statement does not cover log-length scaled attention (attn_log_length) "
                                  "yet; certify this model in real arithmetic")


def test_the_interop_refuses_a_field_transformerlens_lacks() -> None:
    from lengthgen import interop

    with pytest.raises(interop.InteropError, match="attn_log_length"):
        interop._check_lengthgen_config(random_model().cfg)


@pytest.mark.parametrize("t", [1, 2, 3, 35, 305, 300_005])
def test_the_certificates_factor_holds_ln_t_and_its_roundings(t: int) -> None:
    f = log_length_factor(t)
    exact = math.log(t)
    for value in (exact, float(np.float32(exact)), float(np.float32(np.nextafter(exact, 0)))):
        assert f.lo[0] <= value <= f.hi[0]
    assert f.hi[0] - f.lo[0] <= 3 * LOG_FACTOR_SLACK * exact + 1e-300  # and no wider than its slack
    assert LOG_FACTOR_SLACK == 2.0 ** -22
    with pytest.raises(ValueError, match="^a query sees at least one key"):
        log_length_factor(0)


@torch.no_grad()
def test_the_certificates_scores_hold_the_models_scores_at_every_answer_query() -> None:
    """Real arithmetic, a float64 model: the enclosure the certifier takes for answer position r
    (with ``Layout.keys_seen``) holds the model's score of every key, and the one for a count one
    off does not (the factor's slack is far below the difference)."""
    n, start = 3, 2
    model = random_model(n_ctx=start + n + 1)
    w = OneLayer.from_model(model)
    tables = Tables.build(w)
    lay = Layout(n, start, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
    inst = ADDITION.instance("407", "596", start=start)
    tokens, pos = torch.as_tensor(inst.tokens[None, :-1]), torch.as_tensor(inst.pos_ids[None, :-1])
    _, cache = model.run_with_cache(tokens, pos, names_filter=lambda name: name == "blocks.0.attn.hook_attn_scores",
                                    return_cache_object=False)
    scores = cache["blocks.0.attn.hook_attn_scores"][0].numpy()  # [head, query, key]
    toks, ids = inst.tokens[:-1], inst.pos_ids[:-1]
    first = inst.prompt_len - 1
    for r in range(n + 2):
        i = first + r
        assert lay.keys_seen(r) == i + 1 and lay.query_id(r) == ids[i]
        for h in range(model.cfg.n_heads):
            measured = scores[h, i, : i + 1]
            for seen, holds in ((lay.keys_seen(r), True), (lay.keys_seen(r) + 1, False)):
                s = tables.scores(h, lay.query_id(r), seen)
                lo, hi = s.lo[toks[i], toks[: i + 1], ids[: i + 1]], s.hi[toks[i], toks[: i + 1], ids[: i + 1]]
                inside = np.all((lo <= measured) & (measured <= hi))
                assert inside == holds, (r, h, seen)
    with pytest.raises(ValueError, match="^a log-length scaled model's scores depend on how many keys"):
        tables.scores(0, lay.query_id(0))
    cert = PositionCertifier(w, tables, lay)
    assert cert.inputs(1).qid == lay.query_id(1)  # the certifier's own call passes the count


@pytest.mark.parametrize("n", [1, 2])
def test_the_certificate_of_a_log_length_model_is_sound_on_every_pair(n: int) -> None:
    """A committed checkpoint made log-length scaled (its queries divided by ln(2n + 5), the middle
    answer query's factor, so that it still adds): every float64 logit difference of every pair lies
    in its configuration's enclosure, every wrong answer is unproven, and the bound is at most the
    exhaustive exact match and, with no key pessimal at N ≤ 2, within 0.01 of it."""
    from tests.test_certify_trained import all_pairs, assert_sound

    base, _, _ = load_checkpoint("checkpoints/addition_coupled_1l2h_packed_entropy_003", n)
    model = Transformer(dataclasses.replace(base.cfg, attn_log_length=True))
    model.load_state_dict(base.state_dict())
    with torch.no_grad():
        for p in (model.blocks[0].attn.W_Q, model.blocks[0].attn.b_Q):
            p /= math.log(2 * n + 5)
    out = assert_sound(model, n, all_pairs(n), exhaustive=True)
    assert out["accuracy_lower_bound"] >= out["accuracy"] - 0.01 and out["accuracy"] > 0.9
