"""Figure files: PNG and PDF written side by side, atomically, never over a user's file without ``--force``;
and the training facts (seconds, steps, ...) a figure's results carry beside each checkpoint."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .runs import RunError, check_writable, read_json


def outputs(out: str | Path) -> list[Path]:
    """The PNG and PDF written for ``out`` (its suffix is replaced)."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".pdf", ""):
        raise RunError(f"{out}: the output must end in .png or .pdf (both are written)")
    return [out.with_suffix(".png"), out.with_suffix(".pdf")]


def check_free(paths: list[Path], force: bool) -> None:
    """Before any work: refuse outputs that exist (without ``force``) or cannot be written."""
    taken = [str(p) for p in paths if p.exists()]
    if taken and not force:
        raise RunError(f"{', '.join(taken)} already exist(s); use --force to overwrite")
    for p in paths:
        check_writable(p)


def save_figure(fig: Any, paths: list[Path]) -> None:
    """Save atomically (temporary name, then rename) as every path's format; an unsupported format
    or a place that cannot be written is a :class:`RunError` (one line), and nothing is left behind."""
    import matplotlib.pyplot as plt

    try:
        supported = fig.canvas.get_supported_filetypes()
        for p in paths:
            if p.suffix.lstrip(".").lower() not in supported:
                raise RunError(f"{p}: cannot write a figure as {p.suffix or 'a file without extension'}; "
                               f"use .png or .pdf")
            check_writable(p)
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f".{p.stem}.tmp{p.suffix}")
            meta = {"Software": "lengthgen"} if p.suffix == ".png" else {"CreationDate": None}  # reproducible PDFs
            try:
                fig.savefig(tmp, dpi=150 if p.suffix == ".png" else None, metadata=meta)
                tmp.replace(p)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise RunError(f"cannot write {p}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def train_info(checkpoint: str) -> dict[str, Any]:
    """Training seconds / steps / parameters / packed fraction from the ``summary.json`` beside a
    checkpoint, if any."""
    p = Path(checkpoint)
    for cand in (p / "summary.json", p.parent / "summary.json"):
        if cand.is_file():
            s = read_json(cand)
            info = {k: s.get(k) for k in ("train_seconds", "steps", "params", "threads", "device")}
            return {**info, "pack": (s.get("config") or {}).get("pack", 0.0)}
    return {}


