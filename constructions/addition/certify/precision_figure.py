"""``figures/precision.png``: the precision map of :mod:`constructions.addition.certify.precision` (from its JSON).

One column group per width d (a categorical axis), one slot per format: a marker at the largest
exact operand length measured (its shape names the first failure's cause) and, to its left, a bar
up to the largest length the margins certificate proves. The caption lives in docs/certificate.md.
"""
from __future__ import annotations

from pathlib import Path

REASON_MARKERS = {"score rounding": "v", "value rounding": "s", "FFN margin": "D", "combined": "X"}
ZERO_Y = 0.5  # where "no length" is drawn on the log axis (tick label "0")
# Okabe–Ito colour-blind-safe palette
COLORS = {"bfloat16": "#D55E00", "float16": "#E69F00", "float32": "#0072B2", "float64": "#009E73"}
SLOT = 0.2  # horizontal room of one format inside a column group


def _marker(entry: dict) -> str:
    if entry["first_failure"] is None:
        return "o"
    return REASON_MARKERS.get(entry["reason"].split(" + ")[0].split(" (")[0], "X")


def _short(n: int) -> str:
    if n < 100_000:
        return f"{n:,}"
    mant, exp = f"{float(n):.1e}".split("e")
    return f"~{mant}e{int(exp)}"


def draw(data: dict, path: Path) -> None:
    """Markers (measured) and bars (certified) per (d, format); the Theorem 5.1 bound as a dash per
    column, an arrow where it lies above the plotted range; the place of measurement as a footer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from .precision import environment_label

    results = data["results"]
    dtypes = list(dict.fromkeys(e["dtype"] for e in results))
    ds = sorted({e["d_model"] for e in results})
    bound = {e["d_model"]: e["n_max"] for e in results}
    cap = data["cap"]
    top = cap * 8
    plt.rcParams.update({"font.size": 12})
    fig, ax = plt.subplots(figsize=(11, 6), constrained_layout=True)
    for i, d in enumerate(ds):  # the bound: a dash per column, clipped with an arrow above the range
        if bound[d] < top:
            ax.plot([i - 0.45, i + 0.45], [bound[d]] * 2, color="black", ls="--", lw=1.3)
        else:
            ax.annotate("", (i, top / 1.05), xytext=(i, top / 3), arrowprops={"arrowstyle": "->", "color": "black", "lw": 1.3})
    ax.axhline(cap, color="grey", ls=":", lw=1.3)
    for j, dt in enumerate(dtypes):
        rows = sorted((e for e in results if e["dtype"] == dt), key=lambda e: e["d_model"])
        for e in rows:
            x = ds.index(e["d_model"]) + (j - (len(dtypes) - 1) / 2) * SLOT
            cert = e.get("largest_certified", 0)
            if cert > 0:
                ax.bar(x - SLOT / 4, cert - ZERO_Y / 1.6, bottom=ZERO_Y / 1.6, width=SLOT / 2.5, color=COLORS.get(dt),
                       alpha=0.35, edgecolor=COLORS.get(dt), hatch="///", lw=0.8)
            y = e["largest_exact"] if e["largest_exact"] > 0 else ZERO_Y
            ax.plot(x + SLOT / 4, y, _marker(e), color=COLORS.get(dt), ms=9, mec="black", mew=0.7, ls="", zorder=5)
    ax.set_yscale("log", base=2)
    ticks = [ZERO_Y] + [2**k for k in range(0, top.bit_length(), 2)]
    ax.set_yticks(ticks, ["0"] + [f"{t:,}" for t in ticks[1:]])
    ax.minorticks_off()
    ax.set_xticks(range(len(ds)), [f"{d}\n{_short(bound[d])}" for d in ds], fontsize=10)
    ax.set_xlim(-0.6, len(ds) - 0.4)
    ax.set_ylim(ZERO_Y / 1.6, top)
    ax.set_xlabel("embedding dimension d  (below: Theorem 5.1 bound n_max(d))")
    ax.set_ylabel("largest operand length N")
    ax.set_title("Precision map of the Theorem 5.1 construction", fontsize=13)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    fmt_handles = [Patch(facecolor=COLORS.get(dt), edgecolor="black", label=dt) for dt in dtypes]
    ref = [Line2D([], [], color="black", ls="--", lw=1.3, label="bound n_max(d) (arrow: above the plot)"),
           Line2D([], [], color="grey", ls=":", lw=1.3, label=f"search cap ({cap} digits)")]
    kind = [Patch(facecolor="white", edgecolor="black", hatch="///", label="certified N (bar)"),
            Line2D([], [], ls="", marker="o", color="white", mec="black", ms=9, label="measured: exact up to bound/cap")]
    used = {e["reason"].split(" + ")[0].split(" (")[0] for e in results if e["reason"]}
    kind += [Line2D([], [], ls="", marker=m, color="white", mec="black", ms=9, label=f"measured, breaks first: {r}")
             for r, m in REASON_MARKERS.items() if r in used]
    first = ax.legend(handles=fmt_handles + ref, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10,
                      title="format", title_fontsize=10)
    ax.add_artist(first)
    ax.legend(handles=kind, loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=10, title="marks", title_fontsize=10)
    fig.text(0.995, 0.995, environment_label(data.get("measured_on")), fontsize=8, color="dimgrey", ha="right", va="top")
    from lengthgen.plot import save_figure  # atomic, and reproducible PDFs (no creation date)

    path = Path(path)
    save_figure(fig, [path, path.with_suffix(".pdf")])
