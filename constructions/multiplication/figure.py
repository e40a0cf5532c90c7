"""Attention maps of the N×2 multiplication construction, one panel per layer and head, on one
example: ``python -m constructions.multiplication.figure [--a 653 --b 49] [--output PATH] [--force]``
(default figures/attention_multiplication.png; a .pdf beside it when --pdf is given; an existing file
is replaced only with --force)."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lengthgen.cli import ArgumentParser, UsageError, run_cli

PROG = "python -m constructions.multiplication.figure"
DEFAULT_OUTPUT = Path("figures/attention_multiplication.png")


def role_labels(n: int) -> list[str]:
    """``$ a_{N-1}..a_0 * b_1 b_0 = c_0..c_{N+1}`` (the final ``$`` is not a query)."""
    return (["$"] + [f"a{j}" for j in range(n - 1, -1, -1)] + ["*", "b1", "b0", "="]
            + [f"c{i}" for i in range(n + 2)])


def attention_maps(a: str, b: int) -> tuple[list[tuple[str, np.ndarray]], list[str]]:
    """(title, pattern) for every head that does something, and the axis labels."""
    import torch

    from .heads import HEADS
    from .model import build_model, instance

    inst = instance(a, b)
    model, _ = build_model(n_digits=inst.n, dtype="float64")
    _, acts = model(torch.tensor(inst.tokens[None, :-1]), torch.tensor(inst.pos_ids[None, :-1]), return_cache=True)
    maps = []
    for (layer, head), (reads, _) in sorted(HEADS.items()):
        pattern = acts[f"blocks.{layer}.attn.hook_pattern"][0, head].numpy()
        maps.append((f"layer {layer + 1}, head {head}\nreads {reads}", pattern))
    return maps, role_labels(inst.n)


def draw(a: str, b: int, paths: list[Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lengthgen.plot import save_figure
    from lengthgen.plot_attention import heatmap

    maps, labels = attention_maps(a, b)
    cols = 4
    rows = -(-len(maps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.7 * cols, 4.1 * rows), layout="constrained")
    for ax, (title, pattern) in zip(axes.flat, maps):
        im = heatmap(ax, pattern, labels, labels, title, True, 7)
        ax.tick_params(axis="x", labelrotation=90)
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
        ax.axhline(labels.index("=") - 0.5, color="tab:blue", lw=0.8)  # rows below predict the answer
    for ax in list(axes.flat)[len(maps):]:
        ax.axis("off")
    fig.colorbar(im, ax=axes, shrink=0.6, pad=0.01, label="attention weight (black: < 0.01)")
    fig.suptitle(f"N×2 multiplication with coupled positions: attention on ${a}*{b:02d}= (layer 3 has no attention)\n"
                 "rows below the blue line predict the answer ('=' predicts c0, c_i predicts c_{i+1}); each row sums to 1",
                 fontsize=11)
    save_figure(fig, paths)


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("--a", default="653", help="first operand (default 653)")
    p.add_argument("--b", type=int, default=49, help="second operand, 0..99 (default 49)")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"PNG path (default {DEFAULT_OUTPUT})")
    p.add_argument("--pdf", action="store_true", help="also write a PDF beside the PNG")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    args: argparse.Namespace = p.parse_args(argv)
    if not args.a.isdigit() or len(args.a) > 12:
        raise UsageError("--a must be 1 to 12 decimal digits (the figure shows every token)")
    if not 0 <= args.b <= 99:
        raise UsageError(f"--b must be in 0..99, got {args.b}")
    paths = [args.output] + ([args.output.with_suffix(".pdf")] if args.pdf else [])
    from lengthgen.plot import check_free

    check_free(paths, args.force)
    draw(args.a, args.b, paths)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
