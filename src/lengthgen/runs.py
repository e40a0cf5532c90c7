"""Run directories and checkpoints, the registry of named checkpoints, and the shared CLI parser.

A run directory ``runs/NAME`` holds::

    run.json                       the training configuration (written once, atomically)
    checkpoints/step_0001500/      model.safetensors (lengthgen.weights), optimizer.safetensors,
                                   state.json (step, numpy RNG state, log, elapsed seconds)
    latest.json                    {"step": 1500, "dir": "checkpoints/step_0001500"}
    model.safetensors, summary.json   the final weights and numbers, once training has finished

Every file is written to a temporary name and renamed into place; a checkpoint directory is filled
under a temporary name and renamed as a whole, then ``latest.json`` is switched to it. A crash at
any point therefore leaves the previous checkpoint loadable. A committed checkpoint (e.g.
``checkpoints/addition_coupled_1l2h/``) is just ``model.safetensors`` + ``run.json`` + ``summary.json``;
:func:`write_checkpoint` writes that format for any model (a hand-built construction included).

Named checkpoints: a package may register a model under a name in the entry-point group
``lengthgen.checkpoints`` (pyproject ``[project.entry-points."lengthgen.checkpoints"]``). The entry
point is a callable ``(max_digits: int, device: str) -> Transformer`` returning a model that carries
the ``lengthgen.*`` notes of :func:`checkpoint_notes`. This library never imports such a package by
name; :func:`load_checkpoint` finds it through the installed metadata only.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import torch

from .cli import ArgumentParser as OneLineParser, UsageError, fail  # noqa: F401  (re-exported for train/evaluate/plot)
from .model import Transformer
from .weights import WeightFileError, load_model, save_model

NOTE_PREFIX = "lengthgen."
KEEP_CHECKPOINTS = 2
CHECKPOINT_GROUP = "lengthgen.checkpoints"


class RunError(ValueError, UsageError):
    """A run directory or checkpoint that cannot be used as asked (message is user-facing)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | os.PathLike) -> None:
    """Raise :class:`RunError` unless ``path`` could be written: an existing file must be writable;
    otherwise the nearest existing folder above it must be a writable folder."""
    path = Path(path)
    if path.is_dir():
        raise RunError(f"{path} is a folder; give a file name")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise RunError(f"cannot write {path}: permission denied")
        return
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise RunError(f"cannot write {path}: {parent} is not a writable folder")


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


def checkpoint_notes(*, task: str, positions: str, train_digits: str | None = None, name: str | None = None,
                     kind: str = "trained") -> dict[str, str]:
    """The ``lengthgen.*`` notes that make a weight file self-describing: the task, the position
    scheme its inputs need, the trained operand lengths (none for a construction), a display name
    and its kind (``trained`` or ``construction``)."""
    notes = {"task": task, "positions": positions, "train_digits": train_digits, "name": name, "kind": kind}
    return {NOTE_PREFIX + k: v for k, v in notes.items() if v is not None}


HEAD_ROLES = "head_roles"  # note: JSON {"LAYER.HEAD": what the head reads} (0-based), for multi-layer constructions


def head_roles_note(roles: dict[tuple[int, int], str]) -> dict[str, str]:
    """The note that names what each (layer, head) of a construction reads (``lengthgen.plot
    attention`` titles its panels with it; heads without a role are drawn as idle)."""
    return {NOTE_PREFIX + HEAD_ROLES: json.dumps({f"{layer}.{head}": text for (layer, head), text in sorted(roles.items())})}


def head_roles(model: Transformer) -> dict[tuple[int, int], str] | None:
    """The roles of :func:`head_roles_note` carried by ``model``, or ``None``."""
    text = model_notes(model).get(HEAD_ROLES)
    if text is None:
        return None
    return {tuple(int(i) for i in key.split(".")): role for key, role in json.loads(text).items()}  # type: ignore[misc]


def with_notes(model: Transformer, notes: dict[str, str]) -> Transformer:
    """``model`` with ``notes`` added to its annotations (the model itself is shared, not copied)."""
    model.annotations = replace(model.annotations, notes={**model.annotations.notes, **notes})
    return model


def command_line() -> list[str]:
    """The command that made a run, as ``python -m MODULE ARGS`` when run as a module: ``run.json``
    records it without the absolute path of the machine it ran on."""
    main = sys.modules.get("__main__")
    module = getattr(getattr(main, "__spec__", None), "name", None)
    head = ["python", "-m", module.removesuffix(".__main__")] if module else ["python", Path(sys.argv[0]).name]
    return head + sys.argv[1:]


def write_checkpoint(directory: str | os.PathLike, model: Transformer, run: dict[str, Any],
                     summary: dict[str, Any] | None = None, force: bool = False) -> Path:
    """Write ``model`` as a checkpoint directory in the training-run format: ``model.safetensors``
    (which must carry the notes of :func:`checkpoint_notes`), ``run.json`` (``run``: how the model
    was made) and ``summary.json`` (``summary`` plus the parameter count). An existing directory is
    replaced only with ``force`` and only if it is a checkpoint directory."""
    out = Path(directory)
    if "positions" not in model_notes(model):
        raise RunError("the model carries no lengthgen.positions note; add checkpoint_notes(...) first")
    if out.exists():
        if not force:
            raise RunError(f"{out} already exists; use --force to replace it")
        if not out.is_dir() or not (out / "model.safetensors").is_file():
            raise RunError(f"{out} exists and is not a checkpoint directory; refusing to replace it")
    try:
        save_model(model, out / "model.safetensors")
        write_json(out / "run.json", {**run, "argv": command_line(), "torch": torch.__version__})
        write_json(out / "summary.json", {**(summary or {}), "params": sum(p.numel() for p in model.parameters())})
    except OSError as exc:
        raise RunError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None
    return out


def registered_checkpoints() -> dict[str, EntryPoint]:
    """Named checkpoints registered by installed packages (entry-point group ``lengthgen.checkpoints``)."""
    return {ep.name: ep for ep in entry_points(group=CHECKPOINT_GROUP)}


def load_checkpoint(spec: str | os.PathLike, max_digits: int, device: str = "cpu"
                    ) -> tuple[Transformer, dict[str, str], str]:
    """A model, its notes and where it came from, for a checkpoint path or a registered name.

    A path that exists always wins; otherwise ``spec`` is looked up among
    :func:`registered_checkpoints`, whose callable receives ``max_digits`` (the longest operands
    the caller will give it) and ``device``."""
    if Path(spec).exists():
        return load_trained(spec, device=device)
    registry = registered_checkpoints()
    if str(spec) not in registry:
        known = f"registered names: {', '.join(sorted(registry))}" if registry else (
            "no names are registered; install the package (pip install -e .) to register 'construction', "
            "or export one: python -m constructions.addition export DIR")
        raise RunError(f"{spec}: no such checkpoint file or run directory, and no registered checkpoint of that name "
                       f"({known})")
    try:
        factory = registry[str(spec)].load()
        model = factory(max_digits=max_digits, device=device)
    except (ImportError, AttributeError) as exc:
        raise RunError(f"registered checkpoint {spec!r} cannot be loaded ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        raise RunError(f"registered checkpoint {spec!r}: {exc}") from None
    notes = model_notes(model)
    if "positions" not in notes:
        raise RunError(f"registered checkpoint {spec!r} returned a model without lengthgen.* notes")
    return model.eval(), notes, f"{spec} (entry point {registry[str(spec)].value})"


def load_trained(path: str | os.PathLike, device: str = "cpu") -> tuple[Transformer, dict[str, str], Path]:
    """A saved model, its notes (``positions``, ``task``, ``train_digits``, ...) and its weight file."""
    wp = weights_path(path)
    try:
        model = load_model(wp, device=device)
    except WeightFileError as exc:
        raise RunError(str(exc)) from None
    notes = model_notes(model)
    if "positions" not in notes:
        raise RunError(f"{wp}: not a lengthgen checkpoint (no position scheme recorded in its metadata)")
    model.eval()
    return model, notes, wp
