"""Figure: every attention head of the compiled Turing-Program simulator on a short trace.

Each panel is one head's attention pattern (query rows, key columns, teacher-forced on the
reference trace, the compiler's BOS first), titled with what the head does in program P
(:func:`head_title`, read from :meth:`rasp.weights.CompiledTransformer.describe`); layers and heads
are numbered from 1, as in the project's other figures. Regenerate with

    python -m rasp.turing.plot --out figures/turing_attention.png
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import torch

from lengthgen.cli import ArgumentParser, UsageError, run_cli
from lengthgen.plot import save_figure
from rasp.errors import RASPError
from rasp.turing.library import TASKS
from rasp.turing.machines import Vocab, build_trace, min_ngram, simulate, split_configs
from rasp.turing.transformer import transformer_program


#: what a head's select does, by the select's name (rasp/turing/program.py and rasp/turing/transformer.py, program P; rasp/lib.py, shift_by)
SELECT_ROLES = {
    "sep_or_bos": "position of the latest SEP (or BOS)",
    "halted_head": "position of the latest halted head",
    "before_last_sep": "position of the SEP before the latest",
    "same_ngram": "n-gram lookup: same n-gram, previous configuration",
    "at_match": "read-out: the new symbol at the matched key",
}
#: the values a shift head copies, in words
VALUE_WORDS = {"tokens": "token", "left_class": "left cell's class", "nc": "new symbol", "sep_flag": "token is SEP",
               "sep_or_bos_flag": "token is SEP or BOS", "last_sep": "latest SEP position"}
#: the longest trace the figure draws: every token is labelled on both axes
MAX_TOKENS = 120
_PART = re.compile(r"(?P<name>\S+) = Aggregate\((?P<select>[a-z_]+?)(?:_(?P<shift>\d+))?(?:\[\d+\])?:"
                   r".*, (?P<values>\w+), reduce=")


def head_title(text: str) -> str:
    """A readable title for one compiled head from its RASP text (``CompiledTransformer.describe``): what the
    head does, then the names of the s-ops it computes (the compiler's own ``aggregate_N`` names left out).
    Heads the compiler merged (same select, ``"; "``-separated) share one title."""
    parts = [m for m in (_PART.match(p.strip()) for p in text.split("; ")) if m]
    if not parts:
        return textwrap.shorten(text, 60)
    first = parts[0]
    if first["shift"] is not None and first["select"] == "shift":
        k = int(first["shift"])
        role = (f"copy from {k} position{'s' if k > 1 else ''} back: "
                + ", ".join(dict.fromkeys(VALUE_WORDS.get(m["values"], m["values"]) for m in parts)))
    else:
        role = SELECT_ROLES.get(first["select"], first["select"].replace("_", " "))
    names = [m["name"] for m in parts if not re.fullmatch(r"aggregate_\d+", m["name"])]
    return "\n".join(textwrap.wrap(role, 44)) + (f"\n(computes {', '.join(names)})" if names else "")


def draw(task: str, text: str, out: list[Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tm, tape = TASKS[task].build(text)
    vocab = Vocab.for_machine(tm)
    ref = build_trace(simulate(tm, tape, 1000), vocab)
    if len(ref) > MAX_TOKENS:
        raise RASPError(f"the {task} trace of {text!r} has {len(ref)} tokens; the figure labels every token and "
                        f"draws traces of at most {MAX_TOKENS}: use a shorter input")
    n = min_ngram(split_configs(ref, vocab))
    compiled = transformer_program(tm, n).to_transformer(len(ref))
    ct = compiled.compiled
    with torch.no_grad():
        _, acts = ct.model(torch.tensor(ct.encode(ref[:-1])), return_cache=True)
    labels = ["BOS*"] + [vocab.render(t).replace("|", "") for t in ref[:-1]]
    panels = [(layer, h, head) for layer, hs in enumerate(ct.heads) for h, head in enumerate(hs)]
    cols = 3
    rows = -(-len(panels) // cols)
    tick_size = max(4.0, min(9.0, 230 / len(labels)))  # every token labelled: 26 tokens -> 8.8 pt
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols + 1.0, 6.0 * rows + 0.6), squeeze=False,
                             constrained_layout=True)
    image = None
    for ax, (layer, h, head) in zip(axes.flat, panels):
        pattern = acts[f"blocks.{layer}.attn.hook_pattern"][0, h].numpy()
        image = ax.imshow(pattern, cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"layer {layer + 1}, head {h + 1}\n{head_title(head.text)}", fontsize=10)
        ticks = list(range(len(labels)))
        ax.set_xticks(ticks, labels, fontsize=tick_size, rotation=90)
        ax.set_yticks(ticks, labels, fontsize=tick_size)
        ax.set_xlabel("key (attended token)", fontsize=9)
        ax.set_ylabel("query (attending token)", fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.5, pad=0.01, aspect=30)
        bar.set_label("attention weight", fontsize=10)
    fig.suptitle(f"Compiled Turing-Program simulator on {task} {text!r}: every attention head\n"
                 f"n-gram order {n}, {len(ref)}-token trace, teacher-forced; BOS* = the compiler's BOS, "
                 f"[s q] = the head's cell (symbol s, state q)", fontsize=12)
    save_figure(fig, out)


PROG = "python -m rasp.turing.plot"


def main(argv: list[str] | None = None) -> int:
    def run() -> int:
        p = ArgumentParser(prog=PROG, description="Attention heads of the compiled Turing-Program simulator on one "
                           "short trace, each panel titled with what the head does in program P (docs/turing-programs.md).")
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
