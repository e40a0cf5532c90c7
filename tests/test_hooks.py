"""Native TransformerLens hook points on every lengthgen model (lengthgen.hooks, lengthgen.model).

The oracle is tests/hook_oracle.py, a float64 forward pass written from the architecture's
definition that shares no code with the model; logits are also compared with the model's own
plain forward pass (no hooks). Patching is checked against the oracle with the same edit applied,
and position hooks against the plain forward pass at other position IDs. TransformerLens itself is
needed only for the ActivationCache tests (skipped without it).
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import lengthgen.model as model_module
from hook_oracle import assert_matches, reference_forward, stagewise_errors
from lengthgen.data import eval_batch
from lengthgen.model import LongInputHookError, Transformer, TransformerConfig
from lengthgen.runs import load_trained

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "addition_coupled_1l2h"
PATTERN_HOOKS = ("hook_attn_scores", "hook_pattern")


def as_dtype(model: Transformer, dtype: str) -> Transformer:
    out = Transformer(dataclasses.replace(model.cfg, dtype=dtype), model.annotations)
    out.load_state_dict({k: v.to(out.cfg.torch_dtype) for k, v in model.state_dict().items()})
    return out.eval()


def addition_case(dtype: str):
    from constructions.addition import build_model

    model, _ = build_model(n_digits=8, dtype=dtype)
    tokens, pos, _ = eval_batch(np.random.default_rng(3), 3, 8, "coupled").to_torch()
    return model, tokens[:, :-1], pos[:, :-1]


def multiplication_case(dtype: str):
    from constructions.multiplication import build_model, instance

    model, _ = build_model(n_digits=6, dtype=dtype)
    rows = [instance(a, b) for a, b in ((987654, 73), (100203, 99), (555555, 45))]
    tokens = torch.tensor(np.array([r.tokens[:-1] for r in rows]))
    return model, tokens, torch.tensor(np.array([r.pos_ids[:-1] for r in rows]))


def rasp_case(dtype: str):
    from rasp import lib
    from rasp.core import tokens as rasp_tokens
    from rasp.weights import compile_to_transformer

    ct = compile_to_transformer(lib.make_reverse(rasp_tokens), [0, 1, 2, 3], 8, causal=False,
                                dtype=getattr(torch, dtype))
    return ct.model, torch.tensor([ct.encode([3, 1, 0, 2, 2, 1]), ct.encode([0, 1, 2, 3, 3, 0])]), None


def checkpoint_case(dtype: str):
    model, notes, _ = load_trained(CHECKPOINT)
    tokens, pos, _ = eval_batch(np.random.default_rng(5), 4, 5, notes["positions"]).to_torch()
    return as_dtype(model, dtype), tokens[:, :-1], pos[:, :-1]


def windowed_case(dtype: str):
    """Random weights, LayerNorm, two layers, one Hard-ALiBi head (two window groups)."""
    cfg = TransformerConfig(d_vocab=11, d_model=16, n_layers=2, n_heads=3, d_head=4, d_mlp=24, n_ctx=40,
                            normalization="LN", act_fn="gelu", attn_windows=[None, 3, None], dtype=dtype)
    model = Transformer(cfg)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / 3)
    return model.eval(), torch.randint(0, 11, (2, 30), generator=gen), None


CASES = {"addition": addition_case, "multiplication": multiplication_case, "rasp": rasp_case,
         "checkpoint": checkpoint_case, "windowed": windowed_case}


def hook_names(model: Transformer, dense: bool = True) -> list[str]:
    return [n for n in model.hook_dict if dense or not n.endswith(PATTERN_HOOKS)]


@pytest.mark.parametrize("case", list(CASES))
def test_every_hooked_activation_matches_the_oracle_float64(case):
    model, tokens, pos = CASES[case]("float64")
    with torch.inference_mode():
        plain = model(tokens, pos)
        logits, cache = model.run_with_cache(tokens, pos, return_cache_object=False)
        expected_logits, expected = reference_forward(model, tokens, pos)
    assert_matches(logits, plain, 1e-12, "logits while caching")  # LayerNorm's and hook_result's hooked branches
    assert_matches(plain, expected_logits, 1e-12, "logits")
    assert sorted(cache) == sorted(model.hook_dict) == sorted(expected)  # every point fired, TL's names
    for name in model.hook_dict:
        assert_matches(cache[name], expected[name], 1e-12, name)
    assert max(stagewise_errors(model, tokens, pos, cache).values()) <= 1e-12


@pytest.mark.parametrize("case", list(CASES))
def test_every_hooked_activation_matches_the_oracle_float32(case):
    """float32 rounding grows through a deep computation (the addition construction's MLP output
    cancels terms ~10^5 times larger than itself), so each activation is compared with the float64
    oracle's computation from the model's own preceding activations, one step at a time."""
    model, tokens, pos = CASES[case]("float32")
    with torch.inference_mode():
        plain = model(tokens, pos)
        logits, cache = model.run_with_cache(tokens, pos, return_cache_object=False)
        hooked = model.run_with_hooks(tokens, pos, fwd_hooks=[(lambda name: True, lambda t, hook: t.clone())])
    assert_matches(logits, plain, 1e-6, "logits while caching")
    assert_matches(hooked, plain, 1e-6, "logits through identity hooks")
    assert sorted(cache) == sorted(model.hook_dict)
    errors = stagewise_errors(model, tokens, pos, cache)
    assert max(errors.values()) <= 1e-6, max(errors.items(), key=lambda kv: kv[1])


def _edit(t: torch.Tensor) -> torch.Tensor:
    """A per-coordinate change no LayerNorm undoes (keeps -inf scores at -inf)."""
    i = torch.arange(t.shape[-1], dtype=t.dtype)
    return t * (1.5 + 0.5 * torch.cos(i)) + 0.1 * torch.sin(i + 1)


@pytest.mark.parametrize("case", ["checkpoint", "windowed"])  # (hand-set models saturate: small edits vanish)
def test_editing_any_hook_point_patches_the_forward_pass(case):
    model, tokens, pos = CASES[case]("float64")
    with torch.inference_mode():
        plain = model(tokens, pos)
        for name in model.hook_dict:
            patched = model.run_with_hooks(tokens, pos, fwd_hooks=[(name, lambda t, hook: _edit(t))])
            expected, _ = reference_forward(model, tokens, pos, edits={name: _edit})
            assert_matches(patched, expected, 1e-12, f"logits patched at {name}")
            assert (patched - plain).abs().max() > 1e-3, f"editing {name} changed nothing"
        assert torch.equal(model(tokens, pos), plain)  # every hook was removed


def test_patching_positions_is_running_at_other_position_ids():
    """Replacing hook_pos_embed by W_pos[other] is the plain forward pass at position IDs other."""
    model, tokens, pos = CASES["addition"]("float64")
    other = torch.where(pos > 1, pos - 1, pos)
    swap = ("hook_pos_embed", lambda t, hook: model.pos_embed.W_pos[other])
    with torch.inference_mode():
        torch.testing.assert_close(model.run_with_hooks(tokens, pos, fwd_hooks=[swap]), model(tokens, other),
                                   rtol=0, atol=0)
        assert (model(tokens, other) - model(tokens, pos)).abs().max() > 1e-3


def test_long_inputs_hook_everything_but_the_pattern(monkeypatch):
    monkeypatch.setattr(model_module, "DENSE_ENTRIES_LIMIT", 16)  # every pass takes the O(N·d) path
    for case in ("checkpoint", "windowed"):
        model, tokens, pos = CASES[case]("float64")
        names = hook_names(model, dense=False)
        with torch.inference_mode():
            logits, cache = model.run_with_cache(tokens, pos, names_filter=names, return_cache_object=False)
            expected_logits, expected = reference_forward(model, tokens, pos)
            assert_matches(logits, expected_logits, 1e-12, "logits")
            assert sorted(cache) == sorted(names)
            for name in names:
                assert_matches(cache[name], expected[name], 1e-12, name)
            z = "blocks.0.attn.hook_z"
            patched = model.run_with_hooks(tokens, pos, fwd_hooks=[(z, lambda t, hook: _edit(t))])
            assert_matches(patched, reference_forward(model, tokens, pos, edits={z: _edit})[0], 1e-12, "patched z")
            for name in ("blocks.0.attn.hook_pattern", "blocks.1.attn.hook_attn_scores"):
                if name in model.hook_dict:
                    with pytest.raises(LongInputHookError, match=f"{name} needs the full attention matrix"):
                        model.run_with_cache(tokens, pos, names_filter=name)
            with pytest.raises(LongInputHookError, match="O\\(N·d\\) attention path"):
                model(tokens, pos, return_cache=True)
            assert not any(hp.active for hp in model.hook_points())  # the failed runs left no hook behind
            assert_matches(model(tokens, pos), expected_logits, 1e-12, "logits after the failed runs")


def test_hooks_are_removed_after_errors_and_permanent_hooks_stay():
    model, tokens, pos = CASES["checkpoint"]("float64")
    with torch.inference_mode():
        plain = model(tokens, pos)

        def boom(t, hook):
            raise RuntimeError("inside a hook")

        with pytest.raises(RuntimeError, match="inside a hook"):
            model.run_with_hooks(tokens, pos, fwd_hooks=[("blocks.0.mlp.hook_post", boom)])
        assert not any(hp.has_hooks() or hp.active for hp in model.hook_points())
        model.add_perma_hook("blocks.0.hook_resid_mid", lambda t, hook: _edit(t))
        edited = reference_forward(model, tokens, pos, edits={"blocks.0.hook_resid_mid": _edit})[0]
        model.run_with_hooks(tokens, pos, fwd_hooks=[("hook_embed", lambda t, hook: t)])
        assert_matches(model(tokens, pos), edited, 1e-12, "with the permanent hook")
        model.reset_hooks()
        assert_matches(model(tokens, pos), edited, 1e-12, "reset_hooks keeps permanent hooks")
        model.reset_hooks(including_permanent=True)
        assert torch.equal(model(tokens, pos), plain)
    with pytest.raises(KeyError, match="no hook point named 'blocks.0.attn.hook_nope'"):
        model.run_with_hooks(tokens, pos, fwd_hooks=[("blocks.0.attn.hook_nope", boom)])


def test_names_filters_and_batch_removal():
    model, tokens, pos = CASES["multiplication"]("float64")
    with torch.inference_mode():
        _, by_str = model.run_with_cache(tokens, pos, names_filter="blocks.1.hook_resid_post", return_cache_object=False)
        _, by_list = model.run_with_cache(tokens, pos, names_filter=["hook_embed", "blocks.0.mlp.hook_pre"],
                                          return_cache_object=False)
        _, by_fn = model.run_with_cache(tokens, pos, names_filter=lambda n: n.endswith("hook_q"),
                                        return_cache_object=False)
        _, single = model.run_with_cache(tokens[:1], pos[:1], names_filter="hook_embed", remove_batch_dim=True,
                                         return_cache_object=False)
    assert list(by_str) == ["blocks.1.hook_resid_post"] and sorted(by_list) == ["blocks.0.mlp.hook_pre", "hook_embed"]
    assert sorted(by_fn) == [f"blocks.{layer}.attn.hook_q" for layer in range(model.cfg.n_layers)]
    assert torch.equal(single["hook_embed"], by_list["hook_embed"][0])
    with pytest.raises(ValueError, match="batch of 1"):
        model.run_with_cache(tokens, pos, remove_batch_dim=True)


def test_backward_hooks_see_the_gradient():
    model, tokens, pos = CASES["checkpoint"]("float64")
    name = "blocks.0.hook_resid_mid"
    grads = {}
    with model.hooks(bwd_hooks=[(name, lambda g, hook: grads.__setitem__(hook.name, g.detach()))]):
        model(tokens, pos).sum().backward()
    model.zero_grad()
    p = {k: v.detach().clone() for k, v in model.named_parameters()}
    leaf = {}

    def keep(t):
        leaf["t"] = t.detach().requires_grad_(True)
        return leaf["t"]

    logits, _ = reference_forward(model, tokens, pos, edits={name: keep})
    (expected,) = torch.autograd.grad(logits.sum(), leaf["t"])
    assert_matches(grads[name], expected, 1e-12, "gradient at resid_mid")
    assert all(torch.equal(v, p[k]) for k, v in model.named_parameters())


def test_generic_model_does_not_import_transformer_lens():
    code = ("import sys, torch; import lengthgen; from constructions.addition import build_model; "
            "m, _ = build_model(n_digits=8); t = torch.tensor([[12, 1, 2, 3, 10, 4, 5, 6, 11]]); "
            "_, c = m.run_with_cache(t, return_cache_object=False); m(t, return_cache=True); "
            "print('transformer_lens' in sys.modules, type(c).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["False", "dict"]


def test_without_transformer_lens_the_cache_is_a_dict(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # import now fails as if not installed
    model, tokens, pos = CASES["addition"]("float64")
    _, cache = model.run_with_cache(tokens, pos)
    assert type(cache) is dict and "blocks.0.attn.hook_pattern" in cache


# ---- TransformerLens's ActivationCache (3.x and 4.x) on the native hooks ----------------------

@pytest.fixture(scope="module")
def ActivationCache():
    tl = pytest.importorskip("transformer_lens", reason='TransformerLens not installed (pip install -e ".[interp]")')
    return tl.ActivationCache


@pytest.mark.parametrize("case", ["checkpoint", "multiplication"])
def test_activation_cache_shorthands_and_logit_lens(ActivationCache, case):
    model, tokens, pos = CASES[case]("float64")
    with torch.inference_mode():
        logits, cache = model.run_with_cache(tokens, pos)
        _, expected = reference_forward(model, tokens, pos)
    assert isinstance(cache, ActivationCache)
    last = model.cfg.n_layers - 1
    for key, name in ((("pattern", 0), "blocks.0.attn.hook_pattern"), (("z", last, "attn"), f"blocks.{last}.attn.hook_z"),
                      (("resid_post", -1), f"blocks.{last}.hook_resid_post"), (("q", 0), "blocks.0.attn.hook_q")):
        assert_matches(cache[key], expected[name], 1e-12, str(key))
    stack, labels = cache.accumulated_resid(apply_ln=True, return_labels=True)
    assert labels == [f"{layer}_pre" for layer in range(model.cfg.n_layers)] + ["final_post"]
    with torch.inference_mode():
        assert_matches(stack[-1] @ model.W_U + model.b_U, logits, 1e-12, "logit lens of the last layer")


@pytest.mark.parametrize("case", ["checkpoint", "multiplication", "addition"])
def test_activation_cache_decompositions_add_up(ActivationCache, case):
    model, tokens, pos = CASES[case]("float64")
    with torch.inference_mode():
        _, cache = model.run_with_cache(tokens, pos)
        _, expected = reference_forward(model, tokens, pos)
        final = expected[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"]
        parts, labels = cache.decompose_resid(return_labels=True)
        assert labels[:2] == ["embed", "pos_embed"] and labels[-1].endswith("_mlp_out")
        assert_matches(parts.sum(0), final, 1e-12, "decompose_resid")
        for neurons in (False, True):
            full = cache.get_full_resid_decomposition(expand_neurons=neurons)
            assert_matches(full.sum(0), final, 1e-12, f"full decomposition (neurons={neurons})")
        heads, head_labels = cache.stack_head_results(return_labels=True)
        assert head_labels[:2] == ["L0H0", "L0H1"]
        assert_matches(heads[1], expected["blocks.0.attn.hook_result"][:, :, 1], 1e-12, "L0H1")
        # logit attribution: components scaled as the final LayerNorm scales them, against W_U's columns
        attrs = cache.logit_attrs(parts, tokens)
        x = expected["ln_final.hook_normalized"] if model.cfg.normalization == "LN" else final
        direct = (x * model.W_U.T[tokens]).sum(-1)
        assert_matches(attrs.sum(0), direct, 1e-12, "logit_attrs")
