"""``figures/precision.png``: the precision map of :mod:`constructions.addition.certify.precision` (from its JSON)."""
from __future__ import annotations

from pathlib import Path

REASON_MARKERS = {"score rounding": "v", "value rounding": "s", "FFN margin": "D", "combined": "X"}
ZERO_Y = 0.5  # where "no length is exact" is drawn on the log axis (tick label "0")
COLORS = {"bfloat16": "#d62728", "float16": "#ff7f0e", "float32": "#1f77b4", "float64": "#2ca02c"}


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
    """Largest exact operand length vs d, one line per format (solid: measured, marker = first
    failure's reason; dotted: largest length the margins certificate proves in that format)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    results = data["results"]
    dtypes = list(dict.fromkeys(e["dtype"] for e in results))
    ds = sorted({e["d_model"] for e in results})
    plt.rcParams.update({"font.size": 12})
    fig, ax = plt.subplots(figsize=(11, 5.8), constrained_layout=True)
    bound = {e["d_model"]: e["n_max"] for e in results}
    at = {d: i for i, d in enumerate(ds)}  # categorical x axis: d from 23 to 512 stays readable
    ax.plot(range(len(ds)), [bound[d] for d in ds], "k--", lw=1.3, label="Theorem 5.1 bound n_max(d)")
    cap = data["cap"]
    ax.axhline(cap, color="grey", ls=":", lw=1.3, label=f"search cap ({cap} digits)")
    width = 0.12
    for j, dt in enumerate(dtypes):
        rows = sorted((e for e in results if e["dtype"] == dt), key=lambda e: e["d_model"])
        xs = [at[e["d_model"]] + (j - (len(dtypes) - 1) / 2) * width for e in rows]
        ys = [e["largest_exact"] if e["largest_exact"] > 0 else ZERO_Y for e in rows]
        ax.plot(xs, ys, "-", color=COLORS.get(dt, None), lw=1.8, alpha=0.8)
        for x, y, e in zip(xs, ys, rows):
            ax.plot(x, y, _marker(e), color=COLORS.get(dt, None), ms=8, mec="black", mew=0.6)
        if all("largest_certified" in e for e in rows):
            yc = [e["largest_certified"] if e["largest_certified"] > 0 else ZERO_Y for e in rows]
            ax.plot(xs, yc, ls="", color="black", marker="_", ms=13, mew=2.2, zorder=5)
            for x, y, e in zip(xs, yc, rows):  # name the format where a wide format's certificate falls short
                if dt in ("float32", "float64") and e["largest_certified"] < e["largest_exact"]:
                    ax.annotate(f"{dt} certified: N = {e['largest_certified']}", (x, y), xytext=(-8, 50 + 70 * (x > len(ds) - 1.5)),
                                textcoords="offset points", ha="right", fontsize=9, color=COLORS.get(dt),
                                arrowprops={"arrowstyle": "->", "color": COLORS.get(dt), "lw": 1})
    ax.set_yscale("log", base=2)
    top = cap * 4
    ticks = [ZERO_Y] + [2**k for k in range(0, top.bit_length(), 2)]
    ax.set_yticks(ticks, ["0"] + [f"{t:,}" for t in ticks[1:]])
    ax.minorticks_off()
    ax.set_xticks(range(len(ds)), [f"{d}\n{_short(bound[d])}" for d in ds], fontsize=10)
    ax.set_xlabel("embedding dimension d  (below: Theorem 5.1 bound n_max(d))")
    ax.set_ylabel("largest operand length N (exact / certified)")
    ax.set_title("Theorem 5.1 construction: where floating point breaks it", fontsize=13)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_ylim(ZERO_Y / 1.6, top)
    fmt_handles = [Line2D([], [], color=COLORS.get(dt), lw=2.5, label=dt) for dt in dtypes]
    reason_handles = [Line2D([], [], ls="", marker="_", color="black", ms=13, mew=2.2,
                             label="certified N (margins PASS)"),
                      Line2D([], [], ls="", marker="o", color="white", mec="black", ms=8, label="measured: exact up to bound/cap")]
    used = {e["reason"].split(" + ")[0].split(" (")[0] for e in results if e["reason"]}
    reason_handles += [Line2D([], [], ls="", marker=m, color="white", mec="black", ms=8, label=f"measured, breaks first: {r}")
                       for r, m in REASON_MARKERS.items() if r in used]
    ref = [h for h in ax.get_legend_handles_labels()[0]]
    first = ax.legend(handles=fmt_handles + ref, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10,
                      title="format", title_fontsize=10)
    ax.add_artist(first)
    ax.legend(handles=reason_handles, loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=10, title="marker",
              title_fontsize=10)
    from lengthgen.plot import save_figure  # atomic, and reproducible PDFs (no creation date)

    path = Path(path)
    save_figure(fig, [path, path.with_suffix(".pdf")])
