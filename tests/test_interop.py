"""lengthgen.interop: every model of the project as a TransformerLens HookedTransformer and back.

The references are independent of the converter: lengthgen's own forward pass (logits and
attention patterns), Python's ``a + b`` (through ``lengthgen.evaluate`` on a HookedTransformer
configured by hand here), and TransformerLens's own forward pass on its default positions.
The converters need TransformerLens 3.x (``pip install -e ".[interp3]"``): without it, or under
TransformerLens 4.x (the ``interp`` extra), the conversion tests are skipped; the 4.x message and
the missing-dependency message have their own tests, and the patching example (native hooks) always runs.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from constructions.addition import build_model, max_digits_for
from lengthgen.data import eval_batch, layout, sample_numbers
from lengthgen.evaluate import evaluate
from lengthgen.model import Transformer, TransformerConfig
from lengthgen.positions import random_start
from lengthgen.runs import load_trained

CHECKPOINTS = sorted(p for p in (Path(__file__).resolve().parents[1] / "checkpoints").iterdir() if p.is_dir())
TOL = {"float64": 1e-9, "float32": 1e-5}
pytestmark = pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")


def _has_hooked_transformer(tl) -> bool:
    try:  # TransformerLens 4 answers the removed names with an ImportError, even to hasattr
        return hasattr(tl, "HookedTransformerConfig")
    except ImportError:
        return False


def _transformer_lens():
    tl = pytest.importorskip("transformer_lens", reason='TransformerLens not installed (pip install -e ".[interp3]")')
    if not _has_hooked_transformer(tl):
        pytest.skip("installed TransformerLens has no HookedTransformer (4.x): conversion tests need 3.x")
    return tl


@pytest.fixture(scope="module")
def tl():
    return _transformer_lens()


@pytest.fixture(scope="module")
def interop(tl):
    from lengthgen import interop

    return interop


def random_model(cfg: TransformerConfig, seed: int) -> Transformer:
    """Gaussian weights scaled 1/sqrt(fan-in) (LayerNorm gains near 1), so logits are O(1)."""
    model = Transformer(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[-2] if p.dim() >= 2 else cfg.d_model
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64) / fan_in**0.5
            p.copy_((1.0 + 0.1 * noise) if name.endswith("ln1.w") or name.endswith("ln2.w") or name == "ln_final.w" else noise)
    return model.eval()


def coupled_inputs(n_ctx: int, n: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random n-digit additions with coupled position IDs from a random start (every ID < n_ctx)."""
    rng = np.random.default_rng(seed)
    lengths = np.full(batch, n)
    a, b = sample_numbers(rng, lengths, n), sample_numbers(rng, lengths, n)
    start = random_start(rng, n, n_ctx - 1, size=batch)
    tokens, pos, _ = layout(a, b, lengths, "coupled", start).to_torch()
    return tokens, pos


def as_dtype(model: Transformer, dtype: str) -> Transformer:
    out = Transformer(dataclasses.replace(model.cfg, dtype=dtype), model.annotations)
    out.load_state_dict({k: v.to(out.cfg.torch_dtype) for k, v in model.state_dict().items()})
    return out.eval()


def assert_agree(model: Transformer, hooked, interop, tokens: torch.Tensor, pos: torch.Tensor | None) -> None:
    """Logits and every layer's attention pattern agree within the dtype's tolerance."""
    tol = TOL[model.cfg.dtype]
    with torch.inference_mode():
        ours, acts = model(tokens, pos, return_cache=True)
        theirs, cache = interop.run_with_position_ids(hooked, tokens, pos)
    scale = max(1.0, float(ours.abs().max()))
    assert theirs.shape == ours.shape
    torch.testing.assert_close(theirs, ours, rtol=0, atol=tol * scale)
    for layer in range(model.cfg.n_layers):
        name = f"blocks.{layer}.attn.hook_pattern"
        torch.testing.assert_close(cache[name], acts[name], rtol=0, atol=tol)


def assert_identical(a: Transformer, b: Transformer) -> None:
    assert a.cfg == b.cfg and a.annotations == b.annotations
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k


RANDOM_CONFIGS = {
    "learned-LN-gelu": dict(normalization="LN", act_fn="gelu", attn_scale=None),
    "learned-noLN-relu-scale1": dict(normalization=None, act_fn="relu", attn_scale=1.0),
    "2layers-3heads-scale0.5": dict(n_layers=2, n_heads=3, attn_scale=0.5, normalization="LN"),
    "attn-only-vocab-out": dict(d_mlp=0, d_vocab_out=7, normalization="LN", act_fn="gelu"),
    "nope": dict(positional="none", normalization="LN", act_fn="gelu", n_ctx=1),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(RANDOM_CONFIGS))
def test_random_models_agree_on_coupled_inputs(interop, name, dtype):
    kw = dict(d_vocab=13, d_model=24, d_head=6, n_heads=2, d_mlp=32, n_ctx=30, dtype=dtype)
    cfg = TransformerConfig(**{**kw, **RANDOM_CONFIGS[name]})
    model = random_model(cfg, seed=len(name))
    hooked = interop.to_hooked_transformer(model)
    tokens, pos = coupled_inputs(30, n=7, batch=5, seed=1)  # NoPE gets IDs too: both sides ignore them
    assert_agree(model, hooked, interop, tokens, pos)
    assert_identical(interop.from_hooked_transformer(hooked), model)


@pytest.mark.parametrize("d_model", [21, 26, 40])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_construction_agrees_at_any_width(interop, d_model, dtype):
    longest = min(12, max_digits_for(d_model))  # d_model = 21 holds 2 digits (2^P - 2, P = 2)
    model, meta = build_model(n_digits=longest, d_model=d_model, dtype=dtype)
    hooked = interop.to_hooked_transformer(model)
    assert hooked.cfg.n_ctx == model.cfg.n_ctx and not hooked.cfg.use_attn_result
    for n in sorted({1, longest // 2 or 1, longest}):
        rng = np.random.default_rng(n)
        tokens, pos, _ = eval_batch(rng, 8, n, "coupled").to_torch()  # 3n + 5 tokens > n_ctx rows
        assert_agree(model, hooked, interop, tokens, pos)
    assert_identical(interop.from_hooked_transformer(hooked), model)


@pytest.mark.parametrize("ckpt", CHECKPOINTS, ids=lambda p: p.name)
def test_committed_checkpoints_agree_and_round_trip(interop, ckpt):
    model, notes, _ = load_trained(ckpt)
    scheme = notes["positions"]
    for candidate in (model, as_dtype(model, "float64")):
        hooked = interop.to_hooked_transformer(candidate)
        for n in (3, 5):
            rng = np.random.default_rng(n)
            tokens, pos, _ = eval_batch(rng, 16, n, scheme).to_torch()
            if scheme == "coupled":
                tokens, pos = coupled_inputs(candidate.cfg.n_ctx, n, 16, seed=n)  # random starts, not only s = 2
            assert_agree(candidate, hooked, interop, tokens, pos)
        assert_identical(interop.from_hooked_transformer(hooked), candidate)


def test_position_ids_matter_and_default_to_tl_numbering(interop):
    model = as_dtype(load_trained(CHECKPOINTS[[p.name for p in CHECKPOINTS].index("addition_coupled_1l2h_packed")])[0],
                     "float64")
    hooked = interop.to_hooked_transformer(model)
    tokens, pos = coupled_inputs(model.cfg.n_ctx, 4, 3, seed=7)
    shifted, _ = interop.run_with_position_ids(hooked, tokens, pos)
    plain, cache = interop.run_with_position_ids(hooked, tokens, None)
    torch.testing.assert_close(plain, model(tokens), rtol=0, atol=1e-9)  # None: TL's own 0..N-1
    assert (shifted - plain).abs().max() > 1e-3  # the hook changed something
    torch.testing.assert_close(cache["hook_pos_embed"][0], hooked.W_pos[: tokens.shape[1]], rtol=0, atol=0)
    # the hook also serves run_with_hooks, e.g. for patching
    hooked_logits = hooked.run_with_hooks(tokens, fwd_hooks=[interop.position_id_hook(hooked, pos)])
    torch.testing.assert_close(hooked_logits, shifted, rtol=0, atol=0)
    with pytest.raises(interop.InteropError, match="outside the position table"):
        interop.run_with_position_ids(hooked, tokens, pos + model.cfg.n_ctx)
    with pytest.raises(interop.InteropError, match="does not match"):
        interop.run_with_position_ids(hooked, tokens, pos[:, :-1])


def test_hand_built_tl_model_adds_through_evaluate(tl, interop):
    """A HookedTransformer configured by hand here (TL's own spelling: use_attn_scale=False,
    no LayerNorm) holding the Theorem 5.1 weights converts, and lengthgen.evaluate scores it 100%
    against Python's a + b; the hand-built config maps back to the construction's."""
    construction, _ = build_model(n_digits=8, dtype="float64")
    c = construction.cfg
    cfg = tl.HookedTransformerConfig(
        d_model=c.d_model, d_head=c.d_head, n_heads=2, n_layers=1, d_mlp=c.d_mlp, n_ctx=c.n_ctx, d_vocab=13,
        act_fn="relu", normalization_type=None, use_attn_scale=False, positional_embedding_type="standard",
        dtype=torch.float64, device="cpu", use_attn_result=True,
    )
    hooked = tl.HookedTransformer(cfg)
    missing, unexpected = hooked.load_state_dict(construction.state_dict(), strict=False)
    assert not unexpected and all(k.endswith(("mask", "IGNORE")) for k in missing)
    model = interop.from_hooked_transformer(hooked)
    assert dataclasses.replace(model.cfg, attn_scale=None) == dataclasses.replace(c, attn_scale=None)
    assert model.cfg.attn_scale == 1.0
    rows = evaluate(model, "coupled", [1, 4, 8], samples=50)
    assert [r["exact_match"] for r in rows] == [1.0, 1.0, 1.0]


def test_hand_built_random_tl_model_matches_tl_forward(tl, interop):
    cfg = tl.HookedTransformerConfig(d_model=16, d_head=4, n_heads=3, n_layers=2, d_mlp=20, n_ctx=40, d_vocab=13,
                                     act_fn="gelu", normalization_type="LN", dtype=torch.float64, seed=3)
    hooked = tl.HookedTransformer(cfg)
    model = interop.from_hooked_transformer(hooked)
    tokens = torch.randint(0, 13, (4, 40), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(model(tokens), hooked(tokens), rtol=0, atol=1e-9)
    rows = evaluate(model, "ape", [2, 3], samples=20)  # runs; random weights score ~nothing
    assert all(0.0 <= r["token_accuracy"] <= 1.0 for r in rows)


def test_refuses_hard_alibi_windows(interop):
    cfg = TransformerConfig(d_vocab=13, d_model=16, d_head=4, n_heads=2, attn_windows=[3, None])
    with pytest.raises(interop.InteropError, match="Hard-ALiBi"):
        interop.to_hooked_transformer(Transformer(cfg))
    same = TransformerConfig(d_vocab=13, d_model=16, d_head=4, n_heads=2, attn_windows=[None, None])
    interop.to_hooked_transformer(Transformer(same))  # no window at all: plain causal, maps


@pytest.mark.parametrize("setting, message", [
    (dict(positional_embedding_type="rotary"), "rotary"),
    (dict(positional_embedding_type="alibi"), "alibi"),
    (dict(positional_embedding_type="shortformer"), "shortformer"),
    (dict(normalization_type="RMS"), "RMS"),
    (dict(act_fn="gelu_new"), "gelu_new"),
    (dict(gated_mlp=True), "gated_mlp"),
    (dict(parallel_attn_mlp=True), "parallel_attn_mlp"),
    (dict(attn_scores_soft_cap=30.0), "attn_scores_soft_cap"),
    (dict(normalization_type="LN", eps=1e-6), "eps"),
])
def test_refuses_tl_settings_without_equivalent(tl, interop, setting, message):
    cfg = tl.HookedTransformerConfig(**{**dict(d_model=16, d_head=4, n_heads=2, n_layers=1, d_mlp=8, n_ctx=20,
                                               d_vocab=13, act_fn="relu"), **setting})
    with pytest.raises(interop.InteropError, match=message):
        interop.from_hooked_transformer(tl.HookedTransformer(cfg))


def test_non_causal_rasp_program_maps_to_bidirectional_attention(tl, interop):
    """A non-causal compiled RASP program (every position sees every position) becomes a
    TransformerLens model with attention_dir="bidirectional": TransformerLens's own forward pass
    reverses the input (Python's xs[::-1] is the reference) and agrees with lengthgen's; the same
    weights under TransformerLens's causal mask do not reverse, so the direction is what matters."""
    from lengthgen.decode import decided_argmax
    from rasp import lib
    from rasp.core import tokens as rasp_tokens
    from rasp.weights import compile_to_transformer

    ct = compile_to_transformer(lib.make_reverse(rasp_tokens), [0, 1, 2, 3], 8, causal=False)
    hooked = interop.to_hooked_transformer(ct.model)
    assert hooked.cfg.attention_dir == "bidirectional"
    causal_copy = interop.to_hooked_transformer(ct.model)
    causal_copy.cfg.attention_dir = "causal"  # TransformerLens reads the direction at every forward pass
    rng = np.random.default_rng(5)
    wrong_when_causal = 0
    for n in (1, 3, 5, 8):
        xs = [int(x) for x in rng.integers(0, 4, size=n)]
        ids = torch.tensor([ct.encode(xs)])
        assert_agree(ct.model, hooked, interop, ids, None)
        with torch.inference_mode():
            theirs = decided_argmax(hooked(ids)[0, 1:])
            masked = decided_argmax(causal_copy(ids)[0, 1:])
        assert [ct.classes[i] for i in theirs.tolist()] == xs[::-1]
        wrong_when_causal += [ct.classes[i] if i >= 0 else None for i in masked.tolist()] != xs[::-1]
    assert wrong_when_causal >= 2
    back = interop.from_hooked_transformer(hooked)
    assert not back.cfg.causal
    assert_identical(back, ct.model)
    # a HookedTransformer configured by hand as bidirectional converts to a non-causal model
    c = ct.model.cfg
    cfg = tl.HookedTransformerConfig(
        d_model=c.d_model, d_head=c.d_head, n_heads=c.n_heads, n_layers=c.n_layers, d_mlp=c.d_mlp, n_ctx=c.n_ctx,
        d_vocab=c.d_vocab, d_vocab_out=c.d_vocab_out, act_fn="relu", normalization_type=None,
        use_attn_scale=False, attention_dir="bidirectional", dtype=torch.float64, device="cpu")
    by_hand = tl.HookedTransformer(cfg)
    by_hand.load_state_dict(ct.model.state_dict(), strict=False)
    model = interop.from_hooked_transformer(by_hand)
    assert not model.cfg.causal and model.cfg.attn_scale == 1.0
    ids = torch.tensor([ct.encode([3, 1, 0, 2, 2])])
    with torch.inference_mode():
        torch.testing.assert_close(model(ids), by_hand(ids), rtol=0, atol=1e-9)


def test_attn_scale_is_what_the_modules_compute(tl, interop):
    """TransformerLens's attention modules copy attn_scale when they are built and ignore later
    edits of cfg.attn_scale (checked here on TransformerLens's own forward pass); the converted
    model computes what TransformerLens computes, and a round trip stays bit-identical."""
    cfg = tl.HookedTransformerConfig(d_model=16, d_head=4, n_heads=2, n_layers=2, d_mlp=20, n_ctx=12, d_vocab=13,
                                     act_fn="gelu", normalization_type="LN", dtype=torch.float64, seed=11)
    hooked = tl.HookedTransformer(cfg)
    tokens = torch.randint(0, 13, (3, 12), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        before = hooked(tokens)
        hooked.cfg.attn_scale, hooked.cfg.eps = 7.0, 1e-6  # edits the modules never see
        after = hooked(tokens)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    model = interop.from_hooked_transformer(hooked)
    assert model.cfg.attn_scale == 2.0  # sqrt(d_head), fixed when the modules were built
    with torch.inference_mode():
        torch.testing.assert_close(model(tokens), after, rtol=0, atol=1e-9)
        for block in hooked.blocks:  # the modules' own value is what TransformerLens divides by
            block.attn.attn_scale = 0.5
        rescaled = hooked(tokens)
    assert (rescaled - after).abs().max() > 1e-3
    model = interop.from_hooked_transformer(hooked)
    assert model.cfg.attn_scale == 0.5
    with torch.inference_mode():
        torch.testing.assert_close(model(tokens), rescaled, rtol=0, atol=1e-9)
    hooked.blocks[1].attn.attn_scale = 3.0
    with pytest.raises(interop.InteropError, match="different scales"):
        interop.from_hooked_transformer(hooked)
    # a converted lengthgen model whose TransformerLens config is edited afterwards comes back unchanged
    original = random_model(TransformerConfig(d_vocab=13, d_model=16, d_head=4, n_heads=2, n_ctx=12,
                                              normalization="LN", dtype="float64"), seed=4)
    converted = interop.to_hooked_transformer(original)
    converted.cfg.attn_scale = 9.0
    assert_identical(interop.from_hooked_transformer(converted), original)


def test_refuses_unknown_lengthgen_config_fields(interop):
    """A field added to TransformerConfig later (here: a non-causal flag) is refused unless it sits
    at its default, which old checkpoints load with and so must mean the old behaviour."""

    @dataclasses.dataclass
    class FutureConfig(TransformerConfig):
        bidirectional: bool = False

    model = Transformer(FutureConfig(d_vocab=13, d_model=16, d_head=4, n_heads=2))
    assert_identical(interop.from_hooked_transformer(interop.to_hooked_transformer(model)), model)
    model.cfg.bidirectional = True
    with pytest.raises(interop.InteropError, match="bidirectional"):
        interop.to_hooked_transformer(model)


def test_conversion_keeps_the_parameters_dtype(interop):
    """``model.double()`` casts the parameters but not ``cfg.dtype``; the hooked model follows the
    parameters (float64), computes what the float64 model computes, and converts back as float64."""
    model = random_model(TransformerConfig(d_vocab=13, d_model=16, d_head=4, n_heads=2, n_ctx=12,
                                           normalization="LN", act_fn="gelu"), seed=2).double()
    assert model.cfg.dtype == "float32"
    hooked = interop.to_hooked_transformer(model)
    assert hooked.cfg.dtype == torch.float64 and {p.dtype for p in hooked.parameters()} == {torch.float64}
    tokens = torch.randint(0, 13, (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        torch.testing.assert_close(hooked(tokens), model(tokens), rtol=0, atol=1e-12)
    back = interop.from_hooked_transformer(hooked)
    assert back.cfg.dtype == "float64" and back.annotations == model.annotations
    assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())
    model.unembed.b_U.data = model.unembed.b_U.data.float()
    with pytest.raises(interop.InteropError, match="mix dtypes"):
        interop.to_hooked_transformer(model)


def test_transformer_lens_4_names_the_native_route():
    tl = pytest.importorskip("transformer_lens", reason="TransformerLens not installed")
    if _has_hooked_transformer(tl):
        pytest.skip("TransformerLens 3.x is installed: the converters work")
    from lengthgen import interop

    model = Transformer(TransformerConfig(d_vocab=13, d_model=16, d_head=4))
    for call in (lambda: interop.to_hooked_transformer(model), lambda: interop.from_hooked_transformer(object())):
        with pytest.raises(ImportError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message and "TransformerLens 4 removed" in message
        assert "model.run_with_cache(tokens, pos_ids)" in message and ".[interp3]" in message


def _patching_example(name: str = "patching.py"):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "examples" / name
    spec = importlib.util.spec_from_file_location(Path(name).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_patching_example_construction_heads_mean_their_names(tmp_path, capsys):
    """Theorem 5.1's head 2 carries the carry: patching it from a carry-free partner flips exactly
    the digit that receives the carry, to the carry-free digit; patching head 1 flips nothing."""
    example = _patching_example()
    model = build_model(n_digits=6, dtype="float64")[0]
    flips = example.patch_flips(model, n=6, samples=60)
    offsets = list(example.OFFSETS)
    expected_head2 = [1.0 if d == 1 else 0.0 for d in offsets] + [1.0]
    np.testing.assert_array_equal(flips["head 2"], expected_head2)
    np.testing.assert_array_equal(flips["head 1"][:-1], 0.0)
    ablation = example.ablation_table(model, [3, 6], samples=30)
    assert ablation["none"] == [1.0, 1.0] and ablation["head 1"] == ablation["head 2"] == [0.0, 0.0]
    out = tmp_path / "patching.png"
    assert example.main(["--samples", "4", "--patch-samples", "6", "--max-digits", "3", "--patch-digits", "3",
                         "--out", str(out)]) == 0
    assert out.is_file() and out.with_suffix(".pdf").is_file() and "exact match" in capsys.readouterr().out
    assert example.main(["--max-digits", "16"]) == 2


def test_patching_example_refuses_zero_threads_in_one_line(tmp_path, capsys):
    from cli_checks import assert_one_line_error

    out = tmp_path / "patching.png"
    assert_one_line_error(_patching_example().main, ["--threads", "0", "--out", str(out)],
                          "python examples/patching.py", "--threads must be at least 1, got 0", capsys)
    assert list(tmp_path.iterdir()) == []


def test_patching_example_legends_at_one_digit_have_no_nan(tmp_path, capsys, monkeypatch):
    """n = 1 has no column i+1: the heads' legends (3 ablation + 2 patching lines per model) say only the heads' names, the table shows '-', never 'nan'."""
    import lengthgen.plot

    legends = []

    def keep_legends(fig, paths):
        legends.extend(t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())

    monkeypatch.setattr(lengthgen.plot, "save_figure", keep_legends)
    example = _patching_example()
    assert example.main(["--samples", "3", "--patch-samples", "4", "--max-digits", "1", "--patch-digits", "1",
                         "--out", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower() and "not measured (n = 1 has no column i+1)" in out
    assert len(legends) == 10 and not any("nan" in t.lower() for t in legends), legends
    assert "head 2 patched" in legends and "head 1 zero-ablated" in legends


def test_nnsight_example_gives_the_patching_numbers():
    """The same carry patching traced by nnsight (examples/nnsight_patching.py) gives the same
    flip table as run_with_hooks, and head 2 carries the carry."""
    pytest.importorskip("nnsight", reason="nnsight not installed")
    model = build_model(n_digits=6, dtype="float64")[0]
    hooks = _patching_example().patch_flips(model, n=6, samples=60)
    traced = _patching_example("nnsight_patching.py").nnsight_patch_flips(model, n=6, samples=60)
    assert list(traced) == list(hooks) == ["head 1", "head 2"]
    for head in hooks:
        np.testing.assert_array_equal(traced[head], hooks[head])
    offsets = list(_patching_example().OFFSETS)
    np.testing.assert_array_equal(traced["head 2"], [1.0 if d == 1 else 0.0 for d in offsets] + [1.0])


def test_missing_transformer_lens_names_the_extra(monkeypatch):
    from lengthgen import interop

    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # import now fails as if not installed
    with pytest.raises(ImportError, match=r'pip install -e "\.\[interp3\]"'):
        interop.to_hooked_transformer(Transformer(TransformerConfig(d_vocab=13, d_model=16, d_head=4)))
