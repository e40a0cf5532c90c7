"""Attention maps of the Theorem 5.1 construction and of a trained model, side by side.

Conventions of the authors' attention plots (docs/training.md, "Figures"): probabilities averaged over n-digit test additions (teacher-forced,
coupled start s = 2 so every sample has the same positions), final EOS row/column dropped, query
rows on the y-axis and key columns on the x-axis, one colour scale 0–1 (``YlOrBr_r``), values below
0.01 masked in black, plus a zoom on the rows of ``=`` and the answer digits (the paper's magnified
panel). The trained heads are matched to the construction's heads automatically: cosine similarity
of the averaged maps on the answer rows (the only rows the loss sees), best one-to-one assignment.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

MASK_BELOW = 0.01
CMAP = "YlOrBr_r"


@dataclass
class HeadMatch:
    """Construction head ``head`` ↔ trained (``layer``, ``trained_head``), with similarities."""

    head: int
    layer: int
    trained_head: int
    answer_similarity: float
    full_similarity: float

    def describe(self, names: tuple[str, ...]) -> str:
        return (f"construction {names[self.head]} <-> trained layer {self.layer + 1} head {self.trained_head + 1}: "
                f"cosine similarity {self.answer_similarity:.3f} on the answer rows, {self.full_similarity:.3f} on all rows")


def answer_rows(n: int) -> slice:
    """Rows of ``=`` and c_0..c_n in a map without the final EOS (query indices 2n+2 .. 3n+3)."""
    return slice(2 * n + 2, 3 * n + 4)


def cosine(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x.ravel(), y.ravel()
    denom = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(x @ y / denom) if denom > 0 else 0.0


def match_heads(construction: np.ndarray, trained: np.ndarray, n: int) -> list[HeadMatch]:
    """Best one-to-one assignment of construction heads ``[H, T, T]`` to trained heads
    ``[L, H', T, T]`` by summed answer-row cosine similarity (exhaustive; models are tiny)."""
    rows = answer_rows(n)
    cands = [(l, h) for l in range(trained.shape[0]) for h in range(trained.shape[1])]
    H = construction.shape[0]
    if len(cands) < H:
        raise ValueError(f"the trained model has {len(cands)} heads; the construction needs {H} to match")
    sim = np.array([[cosine(construction[i, rows], trained[l, h, rows]) for (l, h) in cands] for i in range(H)])
    best = max(itertools.permutations(range(len(cands)), H), key=lambda p: sum(sim[i, j] for i, j in enumerate(p)))
    return [HeadMatch(i, cands[j][0], cands[j][1], float(sim[i, j]), cosine(construction[i], trained[cands[j]]))
            for i, j in enumerate(best)]


def role_labels(n: int) -> list[str]:
    """Axis labels of an n-digit sequence without the final EOS: ``$ a_{n-1}..a_0 + b.. = c_0..c_n``."""
    a = [rf"$a_{{{i}}}$" for i in range(n - 1, -1, -1)]
    b = [rf"$b_{{{i}}}$" for i in range(n - 1, -1, -1)]
    c = [rf"$c_{{{i}}}$" for i in range(n + 1)]
    return ["BOS", *a, "+", *b, "=", *c]


ANNOTATE_MAX = 64   # columns up to which the cells of a zoom are large enough to print their weights


def readable_ticks(labels: list[str], most: int = 48) -> tuple[list[int], list[str]]:
    """Tick positions and labels: every token up to ``most`` tokens; beyond, every k-th one plus the
    tokens that are not digits (BOS, +, =), so long probes stay legible."""
    if len(labels) <= most:
        return list(range(len(labels))), labels
    step = -(-len(labels) // (most // 2))
    keep = [i for i, t in enumerate(labels) if i % step == 0 or not t.startswith("$")]
    return keep, [labels[i] for i in keep]


def heatmap(ax, att: np.ndarray, xlabels: list[str], ylabels: list[str], title: str, annotate: bool, fontsize: float,
            most_rows: int = 48):
    """One attention map in the style of every attention figure here: rows are queries, columns keys,
    one 0–1 colour scale, weights below ``MASK_BELOW`` in black, the weights ≥ 0.1 written in the cells
    when ``annotate`` and the cells are large enough to hold them (at most ``ANNOTATE_MAX`` columns);
    at most about ``most_rows`` row labels (a short panel gets fewer). Returns the image (for a colour bar)."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap(CMAP).with_extremes(bad="black")
    masked = np.ma.masked_less(att, MASK_BELOW)
    im = ax.imshow(masked, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="equal")
    ax.set_xticks(*readable_ticks(xlabels), fontsize=fontsize)
    ax.set_yticks(*readable_ticks(ylabels, most_rows), fontsize=fontsize)
    ax.tick_params(length=2, pad=1.5)
    ax.set_title(title, fontsize=fontsize + 2.5, pad=5)
    if annotate and len(xlabels) <= ANNOTATE_MAX:
        for (r, c), v in np.ndenumerate(att):
            if v >= 0.1:
                ax.text(c, r, "1" if v >= 0.995 else f"{v:.2f}"[1:], ha="center", va="center",
                        fontsize=fontsize - 1.5, color="black" if v > 0.45 else "white")
    return im


def attention_figure(construction: np.ndarray, trained: np.ndarray, n: int, matches: list[HeadMatch],
                     head_names: tuple[str, ...], title: str):
    """Figure: per construction head, full maps (construction | matched trained head) and zooms
    on the answer rows, under a one-line ``title`` (the rest belongs in the caption). ``construction``
    is ``[H, T, T]``, ``trained`` ``[L, H', T, T]`` (EOS kept). Axes are placed in inches so every
    panel keeps square cells and nothing overlaps."""
    import matplotlib.pyplot as plt

    T = 3 * n + 4  # without the final EOS
    labels = role_labels(n)
    rows = answer_rows(n)
    zoom_frac = (rows.stop - rows.start) / T
    fs = 9.0
    P, Z = 6.2, 6.2 * zoom_frac  # panel width = full-map height; zoom height
    left, gap_x, cbar_w, right = 0.75, 0.95, 0.22, 1.05
    top, head_title, gap_mid, gap_end = 0.75, 0.6, 0.95, 0.55
    block = head_title + P + gap_mid + Z + gap_end
    W = left + 2 * P + gap_x + 0.35 + cbar_w + right
    Hgt = top + len(matches) * block
    fig = plt.figure(figsize=(W, Hgt))

    def axes(x: float, y_top: float, w: float, h: float):
        return fig.add_axes((x / W, 1 - (y_top + h) / Hgt, w / W, h / Hgt))

    im = None
    for k, m in enumerate(matches):
        y0 = top + k * block + head_title
        maps = [(construction[m.head], "construction", "construction"),
                (trained[m.layer, m.trained_head], f"trained layer {m.layer + 1}, head {m.trained_head + 1} "
                 f"(cosine {m.answer_similarity:.2f})", "trained")]
        for col, (att, who, short) in enumerate(maps):
            att = att[:T, :T]
            x = left + col * (P + gap_x)
            ax = axes(x, y0, P, P)
            im = heatmap(ax, att, labels, labels, f"{head_names[m.head]} — {who}", False, fs)
            ax.set_xlabel("key", fontsize=fs + 1, labelpad=1)
            ax.set_ylabel("query", fontsize=fs + 1, labelpad=4)
            zx = axes(x, y0 + P + gap_mid, P, Z)
            heatmap(zx, att[rows], labels, labels[rows], f"zoom on the answer rows ({short})", True, fs,
                    most_rows=max(6, int(48 * zoom_frac)))       # as many labels per inch as the full map
            zx.set_xlabel("key", fontsize=fs + 1, labelpad=1)
            zx.set_ylabel("query", fontsize=fs + 1, labelpad=4)
    cax = axes(left + 2 * P + gap_x + 0.35, top + head_title, cbar_w, P)
    cb = fig.colorbar(im, cax=cax)
    cb.set_label(f"mean attention probability (black: < {MASK_BELOW})", fontsize=fs + 1.5)
    cb.ax.tick_params(labelsize=fs)
    fig.suptitle(title, fontsize=fs + 4, y=1 - 0.2 / Hgt, va="top")
    return fig
