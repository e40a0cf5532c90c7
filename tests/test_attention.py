"""Every attention path equals the explicit-softmax reference (up to float rounding)."""
from __future__ import annotations

import pytest
import torch

from lengthgen.attention import chunked_attention, dense_attention, long_attention


def _qkv(lq: int, lk: int, dtype: torch.dtype, device: str = "cpu", ev: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, lq, 6, generator=g, dtype=dtype) * 2
    k = torch.randn(2, 3, lk, 6, generator=g, dtype=dtype) * 2
    v = torch.randn(2, 3, lk, ev, generator=g, dtype=dtype)
    return q.to(device), k.to(device), v.to(device)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("lq,lk", [(1, 1), (7, 7), (300, 300), (5, 1000), (999, 1300), (1, 777)])
def test_long_and_chunked_paths_match_dense(lq: int, lk: int, dtype: torch.dtype, tol: float) -> None:
    q, k, v = _qkv(lq, lk, dtype)
    ref, _, pattern = dense_attention(q, k, v, scale=0.7)
    assert torch.allclose(pattern.sum(-1), torch.ones((), dtype=dtype))
    assert (torch.triu(pattern[..., lk - lq :], diagonal=1) == 0).all()  # lower-right causal
    for out in (long_attention(q, k, v, 0.7), chunked_attention(q, k, v, 0.7, query_block=64, key_block=128)):
        assert out.shape == ref.shape
        assert (out - ref).abs().max() < tol


@pytest.mark.parametrize("window", [1, 3, 50])
def test_hard_alibi_window(window: int) -> None:
    q, k, v = _qkv(200, 260, torch.float64)
    ref, _, pattern = dense_attention(q, k, v, 1.0, window)
    q_pos = torch.arange(60, 260).unsqueeze(1)
    k_pos = torch.arange(260).unsqueeze(0)
    outside = (k_pos > q_pos) | (k_pos <= q_pos - window)
    assert (pattern[..., outside] == 0).all()
    for out in (long_attention(q, k, v, 1.0, window), chunked_attention(q, k, v, 1.0, window, 32, 64)):
        assert (out - ref).abs().max() < 1e-12


def test_window_one_copies_own_value() -> None:
    q, k, v = _qkv(10, 10, torch.float64)
    out, _, _ = dense_attention(q, k, v, 1.0, window=1)
    assert torch.equal(out, v)


def test_huge_scores_stay_finite() -> None:
    """Scores of order 1e4 (M·P at d = 512) must not overflow: softmax subtracts the row max."""
    q, k, v = _qkv(40, 90, torch.float32)
    out = long_attention(q * 100, k * 100, v, 1.0)
    ref, _, _ = dense_attention(q.double() * 100, k.double() * 100, v.double(), 1.0)
    assert torch.isfinite(out).all() and (out.double() - ref).abs().max() < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_long_path_matches_dense(dtype: torch.dtype) -> None:
    q, k, v = _qkv(333, 1000, dtype, device="cuda")
    ref, _, _ = dense_attention(q.double(), k.double(), v.double(), 0.5)
    out = long_attention(q, k, v, 0.5)
    assert (out.double() - ref).abs().max() < (1e-4 if dtype == torch.float32 else 1e-10)


def test_cpu_long_path_in_query_chunks_reports_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    import lengthgen.attention as attention

    monkeypatch.setattr(attention, "QUERY_CHUNK", 64)
    q, k, v = _qkv(300, 500, torch.float64)
    ref, _, _ = dense_attention(q, k, v, 0.9)
    seen: list[tuple[int, int]] = []
    with attention.report_progress(lambda done, total: seen.append((done, total))):
        out = long_attention(q, k, v, 0.9)
    assert (out - ref).abs().max() < 1e-12
    if attention.cpu_flash_kernel() is not None:
        assert seen == [(64, 300), (128, 300), (192, 300), (256, 300), (300, 300)]


class _AtenWithoutCpuFlash:
    """torch.ops.aten as a torch build without the private fused CPU op would show it."""

    def __init__(self, aten: object) -> None:
        self._aten = aten

    def __getattr__(self, name: str) -> object:
        if name == "_scaled_dot_product_flash_attention_for_cpu":
            raise AttributeError(name)
        return getattr(self._aten, name)


def test_long_path_without_the_private_cpu_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch without aten._scaled_dot_product_flash_attention_for_cpu falls back to the chunked
    kernel: same results, on the attention call and through a whole model on the long path."""
    import lengthgen.attention as attention
    import lengthgen.model as model_module
    from constructions.addition import add, build_model

    monkeypatch.setattr(torch.ops, "aten", _AtenWithoutCpuFlash(torch.ops.aten))
    assert attention.cpu_flash_kernel() is None
    chunked_calls: list[int] = []
    real_chunked = attention.chunked_attention

    def counting_chunked(*args, **kwargs):
        chunked_calls.append(1)
        return real_chunked(*args, **kwargs)

    monkeypatch.setattr(attention, "chunked_attention", counting_chunked)
    q, k, v = _qkv(300, 500, torch.float64)
    ref, _, _ = dense_attention(q, k, v, 0.9)
    assert (long_attention(q, k, v, 0.9) - ref).abs().max() < 1e-12 and chunked_calls
    monkeypatch.setattr(model_module, "DENSE_ENTRIES_LIMIT", 16)  # every pass takes the long path
    model, _ = build_model(n_digits=40)
    a, b = 10**40 - 1, 1
    calls_before = len(chunked_calls)
    assert add(model, a, b) == a + b and len(chunked_calls) > calls_before
