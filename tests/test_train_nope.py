"""A trained 1-layer NoPE model is caught by the Proposition 5.2 counterexample search."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from constructions.nope import Distinguished, find_counterexample
from lengthgen.runs import load_trained
from lengthgen.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "checkpoints" / "addition_nope_1l2h"


def check_caught(model: torch.nn.Module) -> None:
    cert = find_counterexample(model, task="addition", n_digits=3)
    assert not cert.problems(model)  # the certificate re-verifies from scratch


def test_freshly_trained_nope_model_is_caught(tmp_path):
    torch.set_num_threads(1)
    cfg = TrainConfig(positions="nope", d_model=32, d_mlp=64, batch_size=64, train_digits="1-3", steps=40, lr=3e-3,
                      checkpoint_every=1000)
    assert train(cfg, tmp_path / "nope", progress=False) == 0
    model, notes, _ = load_trained(tmp_path / "nope")
    assert notes["positions"] == "nope" and model.cfg.n_layers == 1
    check_caught(model)


def test_same_recipe_with_coupled_positions_is_not_caught(tmp_path):
    """Control: the search does not catch everything (a coupled model reads positions)."""
    from constructions.nope.certificate import coupled_pos_ids

    torch.set_num_threads(1)
    cfg = TrainConfig(positions="coupled", d_model=32, d_mlp=64, batch_size=64, train_digits="1-3", max_digits=6,
                      steps=40, lr=3e-3, checkpoint_every=1000)
    assert train(cfg, tmp_path / "coupled", progress=False) == 0
    model, _, _ = load_trained(tmp_path / "coupled")
    with pytest.raises(Distinguished):
        find_counterexample(model, task="addition", n_digits=3, pos_ids_fn=coupled_pos_ids("addition", start=2),
                            budget=2000)


@pytest.mark.skipif(not COMMITTED.exists(), reason="checkpoints/addition_nope_1l2h not committed")
def test_committed_nope_checkpoint_is_caught():
    model, notes, _ = load_trained(COMMITTED)
    assert notes["positions"] == "nope" and model.cfg.n_layers == 1
    check_caught(model)
