"""lengthgen.train: loss goes down, bit-exact resume (also through the CLI), checkpoints, Ctrl-C, bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from lengthgen.runs import latest_checkpoint, load_trained
from lengthgen.train import TrainConfig, build_model, lr_at, main, train
from lengthgen.weights import load_model

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--d-model", "32", "--d-mlp", "64", "--batch-size", "32", "--train-digits", "1-3", "--max-digits", "6",
        "--no-progress", "--threads", "1"]


def tiny_cfg(**kw) -> TrainConfig:
    base = dict(d_model=32, d_mlp=64, batch_size=32, train_digits="1-3", max_digits=6, steps=12,
                checkpoint_every=4, log_every=1)
    base.update(kw)
    return TrainConfig(**base)


def state_of(run: Path) -> tuple[dict, dict, dict]:
    ck = latest_checkpoint(run)
    from safetensors.torch import load_file

    return (load_file(str(ck / "model.safetensors")), load_file(str(ck / "optimizer.safetensors")),
            json.loads((ck / "state.json").read_text()))


def test_a_few_steps_reduce_the_loss(tmp_path):
    torch.set_num_threads(1)
    assert train(tiny_cfg(steps=60, lr=3e-3), tmp_path / "r", progress=False) == 0
    log = json.loads((latest_checkpoint(tmp_path / "r") / "state.json").read_text())["log"]
    first, last = np.mean([e["loss"] for e in log[:3]]), np.mean([e["loss"] for e in log[-3:]])
    assert last < 0.8 * first, (first, last)
    model, notes, _ = load_trained(tmp_path / "r")
    assert notes == {"task": "addition", "positions": "coupled", "train_digits": "1-3", "kind": "trained"}
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["steps"] == 60


def test_resume_reproduces_an_uninterrupted_run_bit_for_bit(tmp_path):
    torch.set_num_threads(1)
    cfg = tiny_cfg(steps=12, checkpoint_every=100)
    assert train(cfg, tmp_path / "straight", progress=False) == 0
    assert train(cfg, tmp_path / "split", stop_after=5, progress=False) == 0  # stopped as asked: not an error
    assert latest_checkpoint(tmp_path / "split").name == "step_0000005"
    assert not (tmp_path / "split" / "model.safetensors").exists()  # not marked finished
    assert train(TrainConfig(), tmp_path / "split", resume=True, stop_after=4, progress=False) == 0  # cfg from run.json
    assert train(TrainConfig(), tmp_path / "split", resume=True, progress=False) == 0
    (wa, oa, sa), (wb, ob, sb) = state_of(tmp_path / "straight"), state_of(tmp_path / "split")
    assert wa.keys() == wb.keys() and oa.keys() == ob.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert all(torch.equal(oa[k], ob[k]) for k in oa)
    assert sa["rng"] == sb["rng"] and sa["step"] == sb["step"] == 12
    assert [e["loss"] for e in sa["log"]] == [e["loss"] for e in sb["log"]]
    # a different data seed really gives different weights (the comparison above can fail)
    assert train(tiny_cfg(steps=12, data_seed=1), tmp_path / "other", progress=False) == 0
    wc = state_of(tmp_path / "other")[0]
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)


def test_position_schemes_build_the_right_models():
    coupled = build_model(tiny_cfg(positions="coupled"))
    ape = build_model(tiny_cfg(positions="ape"))
    nope = build_model(tiny_cfg(positions="nope"))
    alibi = build_model(tiny_cfg(positions="hard-alibi", heads=4, window=3))
    assert coupled.cfg.n_ctx == 9 and coupled.cfg.positional == "learned"
    assert ape.cfg.n_ctx == 23 and nope.cfg.positional == "none" and not hasattr(nope.pos_embed, "W_pos")
    assert alibi.cfg.attn_windows == [3, 3, None, None] and alibi.cfg.positional == "none"
    w = coupled.blocks[0].attn.W_Q
    assert 0.01 < float(w.detach().std()) < 0.03  # trained init, not the model's zeros
    assert torch.equal(build_model(tiny_cfg()).blocks[0].attn.W_Q, w)  # seeded
    assert not torch.equal(build_model(tiny_cfg(seed=1)).blocks[0].attn.W_Q, w)


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    cfg = TrainConfig(steps=1000, lr=1e-3, warmup=0.02, min_lr_ratio=0.1)
    lrs = [lr_at(s, cfg) for s in range(1000)]
    assert lrs[0] == pytest.approx(1e-3 / 20) and lrs[19] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[19:], lrs[20:]))
    assert lrs[-1] == pytest.approx(1e-4, rel=1e-3)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_bad_input_is_one_line_exit_2_and_nothing_is_lost(tmp_path, capsys):
    def run(*args: str) -> int:
        return main([*TINY, *args])

    out = tmp_path / "run"
    assert run("--positions", "rope", "--out", str(out)) == 2
    assert "unknown position scheme" in one_error_line(capsys)
    assert run("--task", "sorting", "--out", str(out)) == 2
    assert "unknown task" in one_error_line(capsys)
    assert run("--train-digits", "1-9", "--out", str(out)) == 2
    assert "exceeds --max-digits" in one_error_line(capsys)
    assert run("--steps", "many", "--out", str(out)) == 2
    assert "expected a whole number" in one_error_line(capsys)
    assert not out.exists()
    assert run("--steps", "3", "--out", str(out)) == 0
    capsys.readouterr()
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert run("--steps", "3", "--out", str(out)) == 2
    assert "already exists" in one_error_line(capsys)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    stranger = tmp_path / "notes"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("mine")
    assert run("--steps", "3", "--out", str(stranger), "--force") == 2
    assert "not a lengthgen run" in one_error_line(capsys)
    assert (stranger / "keep.txt").read_text() == "mine"
    assert run("--resume", "--out", str(tmp_path / "nothing")) == 2
    assert "nothing to resume" in one_error_line(capsys)
    (latest_checkpoint(out) / "optimizer.safetensors").write_bytes(b"garbage")
    assert run("--resume", "--out", str(out)) == 2
    assert "optimizer" in one_error_line(capsys)
    assert run("--steps", "4", "--out", str(out), "--force") == 0  # --force replaces the run
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


def test_ctrl_c_saves_a_loadable_checkpoint(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lengthgen.train", "--steps", "1000000", "--checkpoint-every", "3", "--out", str(out), *TINY],
        env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.time() + 60
        while not (out / "latest.json").exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.time() < deadline, "no checkpoint within 60 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert code == 130, err
    assert "interrupted at step" in err and "Traceback" not in err
    step = json.loads((out / "latest.json").read_text())["step"]
    assert 3 <= step < 1000000
    ck = latest_checkpoint(out)
    assert json.loads((ck / "state.json").read_text())["step"] == step
    model = load_model(ck / "model.safetensors")
    assert model.cfg.d_model == 32 and not (out / "model.safetensors").exists()  # not marked finished
    assert not list((out / "checkpoints").glob(".*"))  # no temporary leftovers


def test_validation_log_and_keep_best(tmp_path):
    torch.set_num_threads(1)
    cfg = tiny_cfg(steps=12, val_digits="4-5", val_every=4, val_samples=20, keep_best=True)
    assert train(cfg, tmp_path / "r", progress=False) == 0
    log = json.loads((latest_checkpoint(tmp_path / "r") / "state.json").read_text())["log"]
    vals = [e for e in log if "val_em" in e]
    assert [e["step"] for e in vals] == [4, 8, 12] and all(set(e["val_em"]) == {"4", "5"} for e in vals)
    best = json.loads((tmp_path / "r" / "best" / "best.json").read_text())
    assert best["val_loss"] == min(e["val_loss"] for e in vals)
    assert best["step"] == next(e["step"] for e in vals if e["val_loss"] == best["val_loss"])
    model, notes, _ = load_trained(tmp_path / "r" / "best")
    assert notes["positions"] == "coupled"
    with pytest.raises(ValueError, match="needs --val-digits"):
        tiny_cfg(keep_best=True).validate()
    # validation only observes: the same run without it ends with the same weights
    assert train(tiny_cfg(steps=12), tmp_path / "plain", progress=False) == 0
    wa, wb = state_of(tmp_path / "r")[0], state_of(tmp_path / "plain")[0]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_hard_alibi_trains_and_its_windows_survive_the_checkpoint(tmp_path):
    torch.set_num_threads(1)
    assert train(tiny_cfg(positions="hard-alibi", heads=4, window=3, steps=4), tmp_path / "r", progress=False) == 0
    model, notes, _ = load_trained(tmp_path / "r")
    assert notes["positions"] == "hard-alibi" and model.cfg.attn_windows == [3, 3, None, None]
    _, cache = model(torch.tensor([[12, 1, 2, 10, 3, 4, 11]]), return_cache=True)
    pattern = cache["blocks.0.attn.hook_pattern"][0]
    assert (pattern[:2, 6, :4] == 0).all() and (pattern[2:, 6, :4] > 0).all()  # windowed heads see the last 3 only


def test_sinusoidal_position_init():
    """--pos-init sinusoidal: row p is (sin pω_i, cos pω_i) scaled to RMS embed_std (Vaswani et al. 2017, Section 3.5)."""
    cfg = TrainConfig(positions="coupled", d_model=16, heads=2, pos_init="sinusoidal", embed_std=0.5)
    W = build_model(cfg).pos_embed.W_pos.detach().double()
    p, i = 5, 3
    omega = 10000.0 ** (-2 * i / 16)
    scale = 0.5 * np.sqrt(2)
    assert W[p, 2 * i].item() == pytest.approx(scale * np.sin(p * omega), abs=1e-6)
    assert W[p, 2 * i + 1].item() == pytest.approx(scale * np.cos(p * omega), abs=1e-6)
    assert W.pow(2).mean().sqrt().item() == pytest.approx(0.5, rel=1e-6)
    with pytest.raises(Exception, match="pos-init"):
        TrainConfig(pos_init="fourier").validate()


def test_packed_training_runs_and_bad_pack_is_refused(tmp_path, capsys):
    torch.set_num_threads(1)
    cfg = tiny_cfg(steps=60, lr=3e-3, train_digits="1-2", max_digits=8, pack=0.5)
    assert train(cfg, tmp_path / "packed", progress=False) == 0
    sink = tiny_cfg(steps=4, train_digits="1-2", max_digits=14, pack=0.5, pack_problems=3, positions="coupled-sink")
    assert train(sink, tmp_path / "sink", progress=False) == 0  # packed rows under the coupled-sink rule train too
    log = json.loads((latest_checkpoint(tmp_path / "packed") / "state.json").read_text())["log"]
    assert np.mean([e["loss"] for e in log[-3:]]) < 0.8 * np.mean([e["loss"] for e in log[:3]])
    capsys.readouterr()
    out = str(tmp_path / "bad")
    assert main([*TINY, "--pack", "1.5", "--out", out]) == 2
    assert "0 <= pack <= 1" in one_error_line(capsys)
    assert main([*TINY, "--positions", "ape", "--pack", "0.5", "--out", out]) == 2
    assert "needs --positions coupled" in one_error_line(capsys)
    assert main([*TINY, "--task", "copy", "--positions", "coupled-sink", "--out", out]) == 2
    assert "coupled-sink is defined for addition" in one_error_line(capsys)
    assert main([*TINY, "--pack", "0.5", "--out", out]) == 2  # two 3-digit problems need 12 IDs; 6 digits give 8
    assert "raise --max-digits to at least" in one_error_line(capsys)
    assert not Path(out).exists()


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m lengthgen.train ARGS`` as a user runs it (a fresh process)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, "-m", "lengthgen.train", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_resume_through_the_cli_with_default_flags_is_bit_for_bit(tmp_path, capsys, monkeypatch, restore_threads):
    """No --threads anywhere: the run stores its thread count and --resume, in a fresh process,
    restores it. --stop-after is a normal stop (exit 0); a flag contradicting the run is refused."""
    flags = ["--d-model", "32", "--d-mlp", "64", "--batch-size", "32", "--train-digits", "1-3", "--max-digits", "6",
             "--steps", "10", "--no-progress", "--device", "cpu"]  # CPU even where CUDA is the default
    monkeypatch.chdir(tmp_path)
    assert main([*flags, "--out", "straight"]) == 0  # the reference, uninterrupted (2 threads: the default)
    first = cli(*flags, "--stop-after", "4", "--out", "split", cwd=tmp_path)
    assert first.returncode == 0 and "stopped after 4 steps as asked" in first.stderr, first.stderr
    run = json.loads((tmp_path / "split" / "run.json").read_text())
    assert run["runtime"] == {"threads": 2, "device": "cpu", "processes": 1}
    capsys.readouterr()
    assert main(["--resume", "--steps", "100", "--threads", "1", "--out", "split"]) == 2
    line = one_error_line(capsys)
    assert "--steps 100 (the run has 10)" in line and "--threads 1 (the run has 2)" in line
    resumed = cli("--resume", "--steps", "10", "--out", "split", "--no-progress", cwd=tmp_path)  # agrees: accepted
    assert resumed.returncode == 0, resumed.stderr
    (wa, oa, sa), (wb, ob, sb) = state_of(tmp_path / "straight"), state_of(tmp_path / "split")
    assert all(torch.equal(wa[k], wb[k]) for k in wa) and all(torch.equal(oa[k], ob[k]) for k in oa)
    no_time = lambda log: [{k: v for k, v in e.items() if k != "seconds"} for e in log]
    assert no_time(sa["log"]) == no_time(sb["log"]) and sa["rng"] == sb["rng"] and sb["step"] == 10


def test_out_that_cannot_be_written_is_one_line_exit_2(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for out in (blocker / "run", "/proc/lengthgen-run"):  # under a file; a place even root cannot write
        assert main(["--steps", "2", "--out", str(out), *TINY]) == 2
        assert "cannot be written" in one_error_line(capsys)
    assert blocker.read_text() == "not a directory"
