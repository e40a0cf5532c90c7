"""Run directories and checkpoints of trained models (issue 6, item 3), and the shared CLI parser.

A run directory ``runs/NAME`` holds::

    run.json                       the training configuration (written once, atomically)
    checkpoints/step_0001500/      model.safetensors (lengthgen.weights), optimizer.safetensors,
                                   state.json (step, numpy RNG state, log, elapsed seconds)
    latest.json                    {"step": 1500, "dir": "checkpoints/step_0001500"}
    model.safetensors, summary.json   the final weights and numbers, once training has finished

Every file is written to a temporary name and renamed into place; a checkpoint directory is filled
under a temporary name and renamed as a whole, then ``latest.json`` is switched to it. A crash at
any point therefore leaves the previous checkpoint loadable. A committed checkpoint (e.g.
``checkpoints/addition_coupled_1l2h/``) is just ``model.safetensors`` + ``run.json`` + ``summary.json``.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from .cli import ArgumentParser as OneLineParser, fail  # noqa: F401  (re-exported for train/evaluate/plot)
from .model import Transformer
from .weights import WeightFileError, load_model, save_model

NOTE_PREFIX = "lengthgen."
KEEP_CHECKPOINTS = 2


class RunError(ValueError):
    """A run directory or checkpoint that cannot be used as asked (message is user-facing)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would surprise users of committed files
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RunError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: unreadable JSON ({exc})") from None


def save_optimizer(opt: torch.optim.Optimizer, path: Path) -> None:
    """Optimizer state as safetensors (tensors) + JSON metadata (param groups, scalars)."""
    from safetensors.torch import save_file

    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for key, val in st.items():
            if torch.is_tensor(val):
                tensors[f"state.{idx}.{key}"] = val.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{key}"] = val
    meta = {"param_groups": json.dumps(sd["param_groups"]), "scalars": json.dumps(scalars)}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=meta)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_optimizer(opt: torch.optim.Optimizer, path: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        state: dict[int, dict[str, Any]] = {}
        for key, val in tensors.items():
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = val
        for key, val in json.loads(meta["scalars"]).items():
            idx, name = key.split(".", 1)
            state.setdefault(int(idx), {})[name] = val
        groups = json.loads(meta["param_groups"])
        for g in groups:
            if "betas" in g:
                g["betas"] = tuple(g["betas"])
        opt.load_state_dict({"state": state, "param_groups": groups})
    except Exception as exc:
        raise RunError(f"{path}: unreadable optimizer state ({type(exc).__name__}: {exc})") from None


def save_checkpoint(run_dir: Path, model: Transformer, opt: torch.optim.Optimizer, state: dict) -> Path:
    """Write checkpoint ``step_{step}`` atomically, point ``latest.json`` at it, prune old ones."""
    ckdir = run_dir / "checkpoints"
    ckdir.mkdir(parents=True, exist_ok=True)
    name = f"step_{state['step']:07d}"
    tmp = Path(tempfile.mkdtemp(dir=ckdir, prefix=f".{name}."))
    try:
        save_model(model, tmp / "model.safetensors")
        save_optimizer(opt, tmp / "optimizer.safetensors")
        write_json(tmp / "state.json", state)
        final = ckdir / name
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    write_json(run_dir / "latest.json", {"step": state["step"], "dir": f"checkpoints/{name}"})
    for old in sorted(p for p in ckdir.glob("step_*") if p.name != name)[:-(KEEP_CHECKPOINTS - 1) or None]:
        shutil.rmtree(old, ignore_errors=True)
    return ckdir / name


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint directory ``latest.json`` points to (or the newest complete one)."""
    run_dir = Path(run_dir)
    pointer = run_dir / "latest.json"
    if pointer.is_file():
        try:
            cand = run_dir / json.loads(pointer.read_text())["dir"]
            if (cand / "state.json").is_file():
                return cand
        except (OSError, ValueError, KeyError):
            pass
    done = sorted(p for p in (run_dir / "checkpoints").glob("step_*") if (p / "state.json").is_file())
    return done[-1] if done else None


def weights_path(path: str | os.PathLike) -> Path:
    """The weight file behind ``path``: a ``.safetensors``/``.npz`` file, a run directory (its
    latest checkpoint, or its final ``model.safetensors``) or a committed checkpoint directory."""
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        ck = latest_checkpoint(p)
        if ck is not None:
            return ck / "model.safetensors"
        if (p / "model.safetensors").is_file():
            return p / "model.safetensors"
        raise RunError(f"{p}: no checkpoint in this directory (no latest.json, checkpoints/ or model.safetensors)")
    raise RunError(f"{p}: no such checkpoint file or run directory")


def model_notes(model: Transformer) -> dict[str, str]:
    """The ``lengthgen.*`` notes a trained model carries (task, position scheme, trained digits)."""
    return {k[len(NOTE_PREFIX):]: v for k, v in model.annotations.notes.items() if k.startswith(NOTE_PREFIX)}


def load_trained(path: str | os.PathLike, device: str = "cpu") -> tuple[Transformer, dict[str, str], Path]:
    """A trained model, its notes (``positions``, ``task``, ``train_digits``) and its weight file."""
    wp = weights_path(path)
    try:
        model = load_model(wp, device=device)
    except WeightFileError as exc:
        raise RunError(str(exc)) from None
    notes = model_notes(model)
    if "positions" not in notes:
        raise RunError(f"{wp}: not a trained lengthgen model (no position scheme recorded in its metadata)")
    model.eval()
    return model, notes, wp
