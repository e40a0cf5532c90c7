"""bench/bench_query_scale.py's one change to a model: every attention score multiplied by the
factor, nothing else (docs/training.md, the query-factor table)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from lengthgen.model import Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parents[1]


def scale_queries():
    spec = importlib.util.spec_from_file_location("bench_query_scale", ROOT / "bench" / "bench_query_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scale_queries


def test_every_score_is_multiplied_by_the_factor_and_nothing_else() -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_vocab=13, d_model=16, n_layers=2, n_heads=2, d_head=8, d_mlp=32, n_ctx=32,
                            act_fn="gelu", normalization="LN", dtype="float64")
    model = Transformer(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("b_Q"):
                p.normal_()  # a zero bias would hide a bias left unscaled
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = torch.randint(0, 13, (2, 12))
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_attn_scores"))
    scale_queries()(model, 2.5)
    for name, value in model.state_dict().items():
        factor = 2.5 if name.endswith(("attn.W_Q", "attn.b_Q")) else 1.0
        torch.testing.assert_close(value, factor * before[name], rtol=0, atol=0, msg=name)
    _, scaled = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_attn_scores"))
    assert len(cache) == 2
    for name in cache:
        visible = torch.isfinite(cache[name])
        torch.testing.assert_close(scaled[name][visible], 2.5 * cache[name][visible], rtol=1e-12, atol=1e-12)
