"""Save and load models as safetensors or .npz (never pickle), with config and annotations.

The file holds every parameter under its TransformerLens name plus two metadata strings: the
:class:`~lengthgen.model.TransformerConfig` and the :class:`~lengthgen.model.Annotations`, as JSON.
Writes are atomic (a temporary file renamed into place), so a crash never leaves a half file.
Loading reproduces every tensor bit for bit.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from .model import Annotations, Transformer, TransformerConfig

FORMATS = (".safetensors", ".npz")
#: numpy has no bfloat16, so an .npz file cannot hold a bfloat16 model
NPZ_DTYPES = (torch.float16, torch.float32, torch.float64)


class WeightFileError(ValueError):
    """A weight file that is missing, unreadable or not a lengthgen model."""


def _format_of(path: Path) -> str:
    if path.suffix not in FORMATS:
        raise WeightFileError(f"{path}: unknown weight format {path.suffix!r}; use one of {FORMATS}")
    return path.suffix


def save_model(model: Transformer, path: str | os.PathLike) -> Path:
    """Write ``model`` to ``path`` (.safetensors or .npz). Raises :class:`WeightFileError` for a
    dtype the format cannot hold (bfloat16 in .npz)."""
    path = Path(path)
    fmt = _format_of(path)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if fmt == ".npz":
        unsupported = sorted({str(v.dtype).removeprefix("torch.") for v in tensors.values() if v.dtype not in NPZ_DTYPES})
        if unsupported:
            raise WeightFileError(
                f"{path}: .npz cannot hold {', '.join(unsupported)} tensors (numpy has no such dtype); "
                "save as .safetensors, or convert the model to float32 first"
            )
    meta = {"config": json.dumps(model.cfg.to_dict()), "annotations": json.dumps(asdict(model.annotations))}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=fmt)
    os.close(fd)
    try:
        if fmt == ".safetensors":
            from safetensors.torch import save_file

            save_file(tensors, tmp, metadata=meta)
        else:
            arrays = {k: v.numpy() for k, v in tensors.items()}
            arrays.update({f"__{k}__": np.array(v) for k, v in meta.items()})
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> Transformer:
    path = Path(path)
    fmt = _format_of(path)
    if not path.is_file():
        raise WeightFileError(f"{path}: no such weight file")
    try:
        if fmt == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as fh:
                meta = fh.metadata() or {}
                tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        else:
            with np.load(path, allow_pickle=False) as data:
                meta = {k[2:-2]: str(data[k]) for k in data.files if k.startswith("__")}
                tensors = {k: torch.from_numpy(data[k].copy()) for k in data.files if not k.startswith("__")}
        cfg = TransformerConfig(**json.loads(meta["config"]))
        annotations = Annotations(**json.loads(meta.get("annotations", "{}")))
    except WeightFileError:
        raise
    except Exception as exc:  # corrupt file, wrong format, missing metadata
        raise WeightFileError(f"{path}: not a readable lengthgen weight file ({type(exc).__name__}: {exc})") from None
    model = Transformer(cfg, annotations)
    result = model.load_state_dict(tensors, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise WeightFileError(
            f"{path}: parameters do not match the stored config (missing {result.missing_keys}, "
            f"unexpected {result.unexpected_keys})"
        )
    return model.to(device)
