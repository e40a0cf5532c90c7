"""Exact match against operand length: the measurement and the figure (paper's Figure 1 style).

One curve per label. A label given to several checkpoints (``--checkpoint coupled=A --checkpoint
coupled=B ...``, e.g. the seeds of one recipe) is one curve: the mean exact match over those
checkpoints, with a band from the lowest to the highest, each checkpoint's own numbers kept in the
results (``seeds``). Only lengths that every checkpoint of a label can be evaluated at are drawn.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .data import parse_digit_range
from .evaluate import DEFAULT_SEED, evaluate, load_for_eval
from .figure_files import check_free, outputs, save_figure, train_info
from .runs import RunError

#: (colour, marker, line style) for the 1st, 2nd, ... trained model: Okabe–Ito colour-blind-safe colours
#: (yellow left out: too pale on white; sky blue left out: too close to blue), then grey and brown; no
#: colour, marker or dash pattern used twice, so the lines stay apart in grey print too
MODEL_STYLES = [
    ("#0072B2", "o", "-"), ("#D55E00", "s", (0, (6, 2))), ("#009E73", "D", "-."), ("#E69F00", "v", ":"),
    ("#CC79A7", "p", (0, (3, 1, 1, 1, 1, 1))), ("#666666", "P", (0, (8, 2, 2, 2))), ("#8C564B", "X", (0, (1, 3))),
]
#: the construction: thin black line with open stars, drawn beneath the trained models (which often lie
#: on it at 100 %), so it never hides them
CONSTRUCTION_STYLE = ("#000000", "*", (0, (2, 2)))
DODGE = 0.09        # horizontal offset between neighbouring models' markers (lengths are integers)
EVERY_TICK = 30     # lengths spanning up to this many digits get a tick each; wider spans about a dozen
BAND_ALPHA = 0.22   # opacity of a seed group's min-max band
FIG_WIDTH = 12.5    # inches
LEGEND_FONT = 10.5  # points
LEGEND_ROW = 0.27   # inches per legend row


def parse_models(specs: list[str]) -> list[tuple[str | None, str]]:
    """``LABEL=PATH`` or ``PATH`` options as ``(label, path)`` pairs (label: the directory's name)."""
    models = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = Path(spec).name, spec
        if not label or not path:
            raise RunError(f"bad --checkpoint {spec!r}; write LABEL=PATH or PATH")
        models.append((label, path))
    return models


def measure_one(checkpoint: str, digits: list[int], samples: int, seed: int, progress: bool
                ) -> tuple[str, dict[str, Any]]:
    """The checkpoint's name and its entry: results on the ``digits`` its position table holds."""
    from . import task_batches

    model, desc = load_for_eval(checkpoint, max(digits))
    table = model.cfg.n_ctx if model.cfg.positional == "learned" else 1
    limit = task_batches.table_digits(desc["task"], desc["positions"], table)
    usable = [n for n in digits if limit is None or n <= limit]
    rows = evaluate(model, desc["positions"], usable, samples, task=desc["task"], seed=seed, progress=progress,
                    what=checkpoint)
    return desc["name"], {"checkpoint": checkpoint, "task": desc["task"], "positions": desc["positions"],
                          "kind": desc["kind"], "train_digits": desc["train_digits"], "results": rows,
                          "params": sum(p.numel() for p in model.parameters()), **train_info(checkpoint)}


def _check_group(label: str, seeds: list[dict[str, Any]]) -> None:
    """The checkpoints of one label must be one recipe's: the same task, positions and trained lengths."""
    for what in ("task", "positions", "train_digits"):
        if len({str(s[what]) for s in seeds}) > 1:
            raise RunError(f"the checkpoints labelled {label!r} differ in {what.replace('_', ' ')} "
                           f"({', '.join(sorted({str(s[what]) for s in seeds}))}); give them different labels")


def seed_group(label: str, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry for several checkpoints of one label: per length (those all of them reach) the mean
    exact match and token accuracy, the lowest and highest exact match, and each checkpoint's."""
    _check_group(label, seeds)
    common = set.intersection(*({r["n"] for r in s["results"]} for s in seeds))
    rows = []
    for n in sorted(common):
        at = [next(r for r in s["results"] if r["n"] == n) for s in seeds]
        em = [r["exact_match"] for r in at]
        rows.append({"n": n, "exact_match": sum(em) / len(em), "exact_match_min": min(em),
                     "exact_match_max": max(em), "exact_match_per_seed": em,
                     "token_accuracy": sum(r["token_accuracy"] for r in at) / len(at), "samples": at[0]["samples"]})
    first = seeds[0]
    return {"checkpoints": [s["checkpoint"] for s in seeds], "task": first["task"], "positions": first["positions"],
            "kind": first["kind"], "train_digits": first["train_digits"], "results": rows, "seeds": seeds}


def measure(models: list[tuple[str | None, str]], digits: list[int], samples: int, seed: int = DEFAULT_SEED,
            progress: bool = True) -> dict[str, Any]:
    """Evaluate each ``(label, checkpoint)`` on the ``digits`` its position table holds (a label of
    ``None`` takes the name the checkpoint carries); checkpoints sharing a label form one
    :func:`seed_group`."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for label, ck in models:
        name, entry = measure_one(ck, digits, samples, seed, progress)
        grouped.setdefault(label or name, []).append(entry)
        _check_group(label or name, grouped[label or name])          # refuse a mixed group at once
    return {label: (runs[0] if len(runs) == 1 else seed_group(label, runs)) for label, runs in grouped.items()}


def _many(all_n: list[int]) -> bool:
    return max(all_n) - min(all_n) + 1 > EVERY_TICK


def _ticks(ax: Any, all_n: list[int]) -> None:
    if not _many(all_n):
        ax.set_xticks(all_n)
        return
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True, min_n_ticks=5))


def length_figure(entries: dict[str, Any], title: str, zoom_from: float = 90.0):
    """Exact match vs operand length, one line per model, trained range shaded (paper's Figure 1 style);
    the right panel repeats the plot for ``zoom_from``..100 % so the models near 100 % can be told apart.
    A seed group is its mean line with a min–max band of the same colour."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(FIG_WIDTH, 5.6), gridspec_kw={"width_ratios": [3, 2]})
    spans = sorted({parse_digit_range(e["train_digits"]) for e in entries.values() if e.get("train_digits")})
    all_n = sorted({r["n"] for e in entries.values() for r in e["results"]})
    many = _many(all_n)
    dodge = 0.0 if many else DODGE
    for ax, (y_lo, y_hi) in zip(axes, [(-3, 104), (zoom_from, 100.4)]):
        for i, (lo, hi) in enumerate(spans):
            ax.axvspan(lo - 0.5, hi + 0.5, color="0.88", zorder=0, label="trained lengths" if i == 0 else None)
        trained = [label for label, e in entries.items() if e.get("kind") != "construction"]
        for label, e in entries.items():
            xs = [r["n"] for r in e["results"]]
            ys = [100 * r["exact_match"] for r in e["results"]]
            if e.get("kind") == "construction":
                color, marker, ls = CONSTRUCTION_STYLE
                ax.plot(xs, ys, marker=marker, color=color, label=label, lw=1.2, ms=8 if many else 10, ls=ls,
                        mfc="none", mec=color, mew=0.9, zorder=2)
                continue
            i = trained.index(label)
            color, marker, ls = MODEL_STYLES[i % len(MODEL_STYLES)]
            dx = (i - (len(trained) - 1) / 2) * dodge
            if "seeds" in e:
                label = f"{label} (mean of {len(e['seeds'])} seeds; band: range)"
                ax.fill_between([x + dx for x in xs], [100 * r["exact_match_min"] for r in e["results"]],
                                [100 * r["exact_match_max"] for r in e["results"]], color=color, alpha=BAND_ALPHA,
                                lw=0, zorder=2.5 + i)
            ax.plot([x + dx for x in xs], ys, marker=marker, color=color, label=label, lw=1.8, ms=5 if many else 6.5,
                    ls=ls, mec="black", mew=0.6, zorder=3 + i)
        _ticks(ax, all_n)
        ax.set_xlim(min(all_n) - 0.6, max(all_n) + 0.6)
        ax.set_ylim(y_lo, y_hi)
        ax.set_xlabel("operand length n (digits)", fontsize=12)
        ax.tick_params(labelsize=10.5)
        ax.grid(alpha=0.3, zorder=1)
    axes[0].set_ylabel("exact match (%)", fontsize=12)
    fig.suptitle(title, fontsize=13)
    axes[0].set_title("all lengths", fontsize=11)
    axes[1].set_title(f"zoom on {zoom_from:g}–100 %", fontsize=11)
    handles, labels = axes[0].get_legend_handles_labels()
    ncol = legend_columns(labels)
    rows = -(-len(labels) // ncol)
    legend_height = LEGEND_ROW * rows + 0.2  # inches below the axes
    fig.set_size_inches(FIG_WIDTH, 5.0 + legend_height)
    fig.legend(handles, labels, fontsize=LEGEND_FONT, loc="lower center", ncol=ncol, frameon=False)
    fig.tight_layout(rect=(0, legend_height / (5.0 + legend_height), 1, 1))
    return fig


def legend_columns(labels: list[str], width: float = FIG_WIDTH) -> int:
    """The most legend columns (at most 4) whose labels fit side by side in ``width`` inches, filled
    column by column as matplotlib does: each column as wide as its longest label (about
    0.52 em per character, measured on this figure's font) plus its line sample and spacing."""
    if not labels:
        return 1
    for ncol in (4, 3, 2):
        rows = -(-len(labels) // ncol)
        columns = [labels[i:i + rows] for i in range(0, len(labels), rows)]
        inches = sum(max(map(len, c)) * 0.52 * LEGEND_FONT / 72 + 0.7 for c in columns)
        if inches <= 0.96 * width:
            return ncol
    return 1


def length_command(models: list[tuple[str | None, str]], digits: list[int], samples: int, out: str | Path,
                   force: bool, seed: int = DEFAULT_SEED, progress: bool = True, log=print) -> dict[str, Any]:
    """Measure, print one line per model, and write the figure (PNG and PDF)."""
    paths = outputs(out)
    check_free(paths, force)
    entries = measure(models, digits, samples, seed, progress)
    width = max(map(len, entries)) + 1
    for label, e in entries.items():
        log(f"{label:<{width}} " + " ".join(f"{r['n']}:{100 * r['exact_match']:.1f}" for r in e["results"]))
    fig = length_figure(entries, f"Addition: exact match vs operand length ({samples} test additions per length)")
    save_figure(fig, paths)
    log(f"wrote {', '.join(map(str, paths))}")
    return {"samples": samples, "seed": seed, "models": entries}
