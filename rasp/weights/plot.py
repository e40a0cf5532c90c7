"""Figure: every attention head of the compiled Turing-Program simulator on a short trace.

Each panel is one head's attention pattern (query rows, key columns, teacher-forced on the
reference trace, the compiler's BOS first), titled with the RASP operation it implements
(from :meth:`rasp.weights.CompiledTransformer.describe`). Regenerate with

    python -m rasp.weights.plot --out figures/turing_attention.png
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import torch

from lengthgen.cli import ArgumentParser, UsageError, run_cli
from lengthgen.plot import save_figure
from rasp.errors import RASPError
from rasp.library import TASKS
from rasp.machines import Vocab, build_trace, min_ngram, simulate, split_configs
from rasp.weights.turing import transformer_program


def draw(task: str, text: str, out: list[Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tm, tape = TASKS[task].build(text)
    vocab = Vocab.for_machine(tm)
    ref = build_trace(simulate(tm, tape, 1000), vocab)
    n = min_ngram(split_configs(ref, vocab))
    compiled = transformer_program(tm, n).to_transformer(len(ref))
    ct = compiled.compiled
    with torch.no_grad():
        _, acts = ct.model(torch.tensor(ct.encode(ref[:-1])), return_cache=True)
    labels = ["BOS*"] + [vocab.render(t).replace("|", "") for t in ref[:-1]]
    panels = [(layer, h, head) for layer, hs in enumerate(ct.heads) for h, head in enumerate(hs)]
    cols = 3
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 5.4 * rows), squeeze=False)
    for ax, (layer, h, head) in zip(axes.flat, panels):
        pattern = acts[f"blocks.{layer}.attn.hook_pattern"][0, h].numpy()
        ax.imshow(pattern, cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"layer {layer} head {h}\n" + "\n".join(textwrap.wrap(head.text, 48)), fontsize=7)
        ticks = range(0, len(labels), max(1, len(labels) // 12))
        ax.set_xticks(list(ticks), [labels[i] for i in ticks], fontsize=5, rotation=90)
        ax.set_yticks(list(ticks), [labels[i] for i in ticks], fontsize=5)
        ax.set_xlabel("key", fontsize=6)
        ax.set_ylabel("query", fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"Compiled Turing-Program simulator: {task} {text!r}, n-gram order {n}, "
                 f"{len(ref)}-token trace (teacher-forced); * = the compiler's BOS", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    save_figure(fig, out)


PROG = "python -m rasp.weights.plot"


def main(argv: list[str] | None = None) -> int:
    def run() -> int:
        p = ArgumentParser(prog=PROG, description="Attention heads of the compiled Turing-Program simulator on one "
                           "short trace, each panel titled with the RASP select it implements (docs/turing-programs.md).")
        p.add_argument("--task", default="addition", choices=sorted(TASKS), help="library machine (default addition)")
        p.add_argument("--input", default="58+67", help="the machine's input (default 58+67)")
        p.add_argument("--out", nargs="+", type=Path, default=[Path("figures/turing_attention.png")],
                       help="figure path(s); .png and .pdf (default figures/turing_attention.png)")
        args = p.parse_args(argv)
        try:
            draw(args.task, args.input, args.out)
        except RASPError as exc:  # a bad input, a machine that does not halt, a program that does not compile
            raise UsageError(str(exc)) from None
        return 0

    return run_cli(PROG, run)


if __name__ == "__main__":
    raise SystemExit(main())
