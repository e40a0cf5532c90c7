"""lengthgen.sparse: CSR kernels for mostly-zero weights give the dense model's outputs, never
train on stale copies, and refuse weights edited under them; compiled program P decodes its
trace with them exactly as with dense products (both against the machine simulator)."""
from __future__ import annotations

import pytest
import torch

from lengthgen.model import Transformer, TransformerConfig
from lengthgen.sparse import MAX_DENSITY, StaleSparseWeightsError, sparse_kernels


def _sparse_model(keep: float = 0.1, seed: int = 0) -> Transformer:
    cfg = TransformerConfig(d_vocab=12, d_model=16, n_layers=2, n_heads=3, d_head=5, d_mlp=24, n_ctx=40,
                            dtype="float64")
    model = Transformer(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * (torch.rand(p.shape, generator=gen) < keep))
    return model


def test_max_density_is_a_quarter() -> None:
    assert MAX_DENSITY == 0.25


def test_sparse_logits_equal_dense_ones_and_every_matrix_is_converted() -> None:
    model = _sparse_model()
    tokens = torch.randint(0, 12, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        dense = model(tokens)
        with sparse_kernels(model) as counts:
            sparse = model(tokens)
    assert counts == {"sparse": 12, "dense": 0}          # 2 layers x (W_Q, W_K, W_V, W_O, W_in, W_out)
    assert not torch.equal(dense, torch.zeros_like(dense))
    torch.testing.assert_close(sparse, dense, rtol=0, atol=1e-12)


def test_a_per_head_layout_error_would_show() -> None:
    """Heads with different weights: a CSR copy built from the wrong 2-D view (heads and d_head
    swapped) gives other q, k and v, so this is what the equality above rests on."""
    model = _sparse_model(keep=0.3, seed=2)
    tokens = torch.randint(0, 12, (2, 15), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        _, dense = model.run_with_cache(tokens)
        with sparse_kernels(model):
            _, sparse = model.run_with_cache(tokens)
    for name in ("blocks.0.attn.hook_q", "blocks.1.attn.hook_v", "blocks.0.mlp.hook_pre", "blocks.1.hook_attn_out"):
        torch.testing.assert_close(sparse[name], dense[name], rtol=0, atol=1e-12)


def test_dense_matrices_stay_dense() -> None:
    model = _sparse_model(keep=1.0)
    with sparse_kernels(model) as counts:
        assert counts == {"sparse": 0, "dense": 12}
    with sparse_kernels(model, max_density=1.0) as counts:
        assert counts == {"sparse": 12, "dense": 0}
    with pytest.raises(ValueError, match="max_density"):
        with sparse_kernels(model, max_density=1.5):
            pass


def test_training_inside_the_context_uses_the_parameters() -> None:
    model = _sparse_model()
    tokens = torch.randint(0, 12, (2, 10), generator=torch.Generator().manual_seed(4))
    model(tokens).sum().backward()
    expected = model.blocks[0].mlp.W_in.grad.clone()
    model.zero_grad()
    with sparse_kernels(model):
        model(tokens).sum().backward()
    assert torch.equal(model.blocks[0].mlp.W_in.grad, expected)


def test_a_weight_edited_inside_the_context_is_refused_and_the_copies_go_on_exit() -> None:
    model = _sparse_model()
    tokens = torch.randint(0, 12, (1, 8))
    with sparse_kernels(model):
        with torch.no_grad():
            model.blocks[1].mlp.W_out[0, 0] += 1.0
            with pytest.raises(StaleSparseWeightsError, match="W_out"):
                model(tokens)
    with torch.no_grad():
        after = model(tokens)                     # outside: dense again, with the edited weight
    assert all(not getattr(m, "_sparse_csr", {}) for m in model.modules())
    with torch.no_grad(), sparse_kernels(model):
        torch.testing.assert_close(model(tokens), after, rtol=0, atol=1e-12)


def test_program_p_decodes_the_same_trace_sparse_and_dense() -> None:
    """A random 4-state, 4-symbol machine at n-gram 16 (padded layers, as in the sweep benchmark):
    both kernels give the simulator's trace token for token."""
    from rasp.turing.library import sample_machine
    from rasp.turing.machines import Vocab, build_trace
    from rasp.turing.transformer import transformer_program

    sample = sample_machine(n_states=4, n_symbols=4, tape_len=(8, 10), min_steps=10, max_steps=60, seed=5,
                            max_tries=5000)
    ref = build_trace(sample.run, Vocab.for_machine(sample.machine))
    compiled = transformer_program(sample.machine, 16).to_transformer(len(ref), onehot_max=0)
    L = len(sample.tape)
    with sparse_kernels(compiled.model) as counts:
        assert counts["sparse"] >= 20                   # every layer's six matrices but a few
    assert compiled.greedy(ref[:L + 2], len(ref), sparse=True) == ref
    assert compiled.greedy(ref[:L + 2], len(ref), sparse=False) == ref


def test_every_converted_matrix_is_multiplied_sparse(monkeypatch) -> None:
    """The speed is the point: inside the context each of the twelve products goes through the
    CSR kernel (outside, none does)."""
    import lengthgen.model as model_module

    calls: list[tuple] = []
    real = model_module.sparse_matmul
    monkeypatch.setattr(model_module, "sparse_matmul", lambda x, csr: calls.append(tuple(csr.shape)) or real(x, csr))
    model = _sparse_model()
    tokens = torch.randint(0, 12, (1, 6))
    with torch.inference_mode():
        model(tokens)
        assert calls == []
        with sparse_kernels(model):
            model(tokens)
    assert sorted(calls) == sorted([(15, 16)] * 6 + [(16, 15)] * 2 + [(24, 16)] * 2 + [(16, 24)] * 2)
