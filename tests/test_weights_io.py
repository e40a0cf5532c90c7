"""Weights round-trip exactly through safetensors and .npz, with config and annotations."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from constructions.addition import build_model
from lengthgen.tasks import ADDITION
from lengthgen.weights import WeightFileError, load_model, save_model


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_construction_round_trips_bit_for_bit(tmp_path: Path, suffix: str) -> None:
    model, _ = build_model(n_digits=12, dtype=torch.float64)
    path = save_model(model, tmp_path / f"m{suffix}")
    loaded = load_model(path)
    assert loaded.cfg == model.cfg
    assert loaded.annotations == model.annotations
    for (name, a), (name2, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert name == name2 and a.dtype == b.dtype and torch.equal(a, b), name
    toks = torch.tensor(ADDITION.encode("$12+34="))[None]
    assert torch.equal(model(toks), loaded(toks))
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_bad_weight_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(WeightFileError, match="no such weight file"):
        load_model(tmp_path / "missing.safetensors")
    with pytest.raises(WeightFileError, match="unknown weight format"):
        load_model(tmp_path / "model.pt")
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(WeightFileError, match="not a readable"):
        load_model(corrupt)


def test_bfloat16_in_npz_is_refused_clearly(tmp_path: Path) -> None:
    model, _ = build_model(n_digits=3, dtype="bfloat16")
    with pytest.raises(WeightFileError, match=r"\.npz cannot hold bfloat16 tensors.*safetensors"):
        save_model(model, tmp_path / "m.npz")
    assert not list(tmp_path.iterdir())  # nothing written
    loaded = load_model(save_model(model, tmp_path / "m.safetensors"))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    half, _ = build_model(n_digits=3, dtype="float16")
    reloaded = load_model(save_model(half, tmp_path / "h.npz"))
    assert reloaded.cfg.dtype == "float16" and torch.equal(reloaded.unembed.W_U, half.unembed.W_U)
