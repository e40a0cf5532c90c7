"""lengthgen.plot: the figure commands write valid images from tiny models and any checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from constructions.addition.export import export
from constructions.multiplication.export import export as export_multiplication
from lengthgen.plot import main
from lengthgen.plot_attention import answer_rows, match_heads, role_labels
from lengthgen.plot_layers import describe_head, token_roles
from lengthgen.train import TrainConfig, train

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("plot")
    out = {}
    for scheme in ("coupled", "nope"):
        cfg = TrainConfig(positions=scheme, d_model=32, d_mlp=64, batch_size=32, train_digits="1-3", max_digits=6,
                          steps=15, checkpoint_every=1000)
        assert train(cfg, root / scheme, progress=False) == 0
        out[scheme] = root / scheme
    cfg = TrainConfig(d_model=32, d_mlp=64, batch_size=32, train_digits="1-3", max_digits=6, steps=15,
                      checkpoint_every=1000, seed=1, data_seed=1)          # a second seed of "coupled"
    assert train(cfg, root / "coupled_seed1", progress=False) == 0
    out["coupled_seed1"] = root / "coupled_seed1"
    out["construction"] = export(root / "construction", n_digits=8)
    cfg = TrainConfig(task="multiplication_nx2", layers=2, heads=2, d_model=32, d_mlp=64, batch_size=32,
                      train_digits="1-3", max_digits=5, steps=10, checkpoint_every=1000)
    assert train(cfg, root / "mul", progress=False) == 0
    out["mul"] = root / "mul"
    out["mul_construction"] = export_multiplication(root / "mul_construction", n_digits=5)
    return out


def assert_images(png: Path) -> None:
    import matplotlib.image as mpimg

    assert png.read_bytes()[:8] == PNG_MAGIC
    img = mpimg.imread(png)
    assert img.ndim == 3 and min(img.shape[:2]) > 300
    assert img[..., :3].std() > 0.05  # not a blank canvas
    assert png.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"


def test_attention_figure_from_a_tiny_model(runs, tmp_path, capsys):
    out = tmp_path / "att.png"
    assert main(["attention", "--construction", str(runs["construction"]), "--checkpoint", str(runs["coupled"]), "--digits", "4",
                 "--samples", "30", "--out", str(out), "--no-progress"]) == 0
    assert_images(out)
    printed = capsys.readouterr().out
    assert printed.count("cosine similarity") == 2 and "head 1: addition without carry <-> trained layer 1" in printed
    before = out.read_bytes()
    assert main(["attention", "--construction", str(runs["construction"]), "--checkpoint", str(runs["coupled"]),
                 "--digits", "4", "--samples", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exist" in err[0]
    assert out.read_bytes() == before


def test_length_figure_and_results(runs, tmp_path, capsys):
    out, res = tmp_path / "len.png", tmp_path / "res.json"
    assert main(["length", "--checkpoint", f"coupled={runs['coupled']}", "--checkpoint", f"nope={runs['nope']}",
                 "--construction", str(runs["construction"]), "--digits", "1-8", "--samples", "20", "--out", str(out),
                 "--results", str(res), "--no-progress"]) == 0
    assert_images(out)
    data = json.loads(res.read_text())["models"]
    assert [r["n"] for r in data["coupled"]["results"]] == list(range(1, 7))  # the table holds 6 digits
    assert [r["n"] for r in data["nope"]["results"]] == list(range(1, 9))  # NoPE: no table
    assert all(r["exact_match"] == 1.0 for r in data["Theorem 5.1 construction"]["results"])
    assert data["coupled"]["steps"] == 15 and data["Theorem 5.1 construction"]["kind"] == "construction"


def test_a_seed_group_is_the_mean_and_range_of_its_checkpoints_on_the_lengths_all_reach():
    from lengthgen.plot_length import length_figure, seed_group

    def seed(ck: str, ems: dict[int, float]) -> dict:
        return {"checkpoint": ck, "task": "addition", "positions": "coupled", "kind": "trained", "train_digits": "1-3",
                "results": [{"n": n, "exact_match": e, "token_accuracy": e, "samples": 10} for n, e in ems.items()]}

    group = seed_group("g", [seed("a", {1: 1.0, 2: 0.5, 3: 0.2}), seed("b", {1: 0.9, 2: 0.7}),
                             seed("c", {1: 0.8, 2: 0.6, 3: 0.9})])      # "b"'s table stops at 2 digits
    assert group["checkpoints"] == ["a", "b", "c"] and len(group["seeds"]) == 3
    assert [r["n"] for r in group["results"]] == [1, 2]
    one, two = group["results"]
    assert one["exact_match"] == pytest.approx(0.9) and two["exact_match"] == pytest.approx(0.6)
    assert (one["exact_match_min"], one["exact_match_max"]) == (0.8, 1.0)
    assert (two["exact_match_min"], two["exact_match_max"]) == (0.5, 0.7)
    assert two["exact_match_per_seed"] == [0.5, 0.7, 0.6]
    fig = length_figure({"g": group}, "t")
    ax = fig.axes[0]
    (line,) = [x for x in ax.get_lines() if x.get_label().startswith("g")]
    assert "mean of 3 seeds" in line.get_label()
    assert list(line.get_ydata()) == pytest.approx([90.0, 60.0])
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(50.0) and ys.max() == pytest.approx(100.0)


def test_checkpoints_given_one_label_keep_their_own_numbers(runs, tmp_path):
    import lengthgen.plot_length as plot_length

    alone = {k: plot_length.measure([(k, str(runs[k]))], [1, 2], 20, progress=False)[k]["results"]
             for k in ("coupled", "coupled_seed1")}
    res = tmp_path / "seeds.json"
    assert main(["length", "--checkpoint", f"tiny={runs['coupled']}", "--checkpoint", f"tiny={runs['coupled_seed1']}",
                 "--digits", "1-2", "--samples", "20", "--out", str(tmp_path / "s.png"), "--results", str(res),
                 "--no-progress"]) == 0
    assert_images(tmp_path / "s.png")
    group = json.loads(res.read_text())["models"]["tiny"]
    assert group["checkpoints"] == [str(runs["coupled"]), str(runs["coupled_seed1"])]
    assert [s["results"] for s in group["seeds"]] == [alone["coupled"], alone["coupled_seed1"]]


def test_a_seed_group_of_different_recipes_is_refused(runs, tmp_path, capsys):
    assert main(["length", "--checkpoint", f"x={runs['coupled']}", "--checkpoint", f"x={runs['nope']}",
                 "--digits", "1-2", "--samples", "4", "--out", str(tmp_path / "x.png"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "labelled 'x' differ in positions" in err[0] and "different labels" in err[0]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("digits, top", [("1-40", 40), ("1-10,15-100:5", 100)])
def test_a_wide_span_of_lengths_gets_a_dozen_ticks_not_one_each(runs, tmp_path, monkeypatch, digits, top):
    """However many lengths are measured (40, or 28 spread to 100), a span past 30 digits is labelled
    with about a dozen integer ticks, so the labels of 1..10 do not run into each other."""
    import lengthgen.plot_length as plot_length

    figures = []
    monkeypatch.setattr(plot_length, "save_figure", lambda fig, paths: figures.append(fig))
    assert main(["length", "--checkpoint", f"nope={runs['nope']}", "--digits", digits, "--samples", "2",
                 "--out", str(tmp_path / "n.png"), "--no-progress"]) == 0
    ticks = [t for t in figures[0].axes[0].get_xticks() if 1 <= t <= top]
    assert 5 <= len(ticks) <= 13 and all(float(t).is_integer() for t in ticks)


def test_bad_plot_input(runs, tmp_path, capsys):
    def err_line() -> str:
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in err[0], err
        return err[0]

    cons = str(runs["construction"])
    assert main(["attention", "--construction", cons, "--checkpoint", str(tmp_path / "none"),
                 "--out", str(tmp_path / "a.png")]) == 2
    assert "no such checkpoint" in err_line()
    assert main(["attention", "--construction", cons, "--checkpoint", str(runs["coupled"]), "--digits", "7",
                 "--out", str(tmp_path / "a.png")]) == 2
    assert "position table" in err_line()
    assert main(["length", "--out", str(tmp_path / "l.png")]) == 2
    assert "nothing to plot" in err_line()
    assert main(["length", "--construction", cons, "--out", str(tmp_path / "l.txt")]) == 2
    assert ".png or .pdf" in err_line()
    assert main(["scatter"]) == 2
    assert "invalid choice" in err_line()
    assert not list(tmp_path.iterdir())


def test_head_matching_recovers_a_permutation():
    rng = np.random.default_rng(0)
    n, T = 4, 3 * 4 + 5
    cons = rng.random((2, T, T))
    trained = np.stack([cons[1] + 0.05 * rng.random((T, T)), cons[0]])[None]  # heads swapped, one noisy
    m = match_heads(cons, trained, n)
    assert [(x.head, x.layer, x.trained_head) for x in m] == [(0, 0, 1), (1, 0, 0)]
    assert m[0].answer_similarity == pytest.approx(1.0) and 0.95 < m[1].answer_similarity < 1.0
    with pytest.raises(ValueError):
        match_heads(cons, trained[:, :1], n)


def test_labels_and_answer_rows():
    labels = role_labels(3)
    assert len(labels) == 3 * 3 + 4 and labels[0] == "BOS" and labels[4] == "+" and labels[8] == "="
    rows = answer_rows(3)
    assert labels[rows] == ["=", "$c_{0}$", "$c_{1}$", "$c_{2}$", "$c_{3}$"]


def test_layered_attention_figure_of_the_multiplication_construction(runs, tmp_path, capsys):
    out = tmp_path / "mul.png"
    assert main(["attention", "--construction", str(runs["mul_construction"]), "--checkpoint", str(runs["mul"]),
                 "--digits", "3", "--samples", "1", "--out", str(out), "--no-progress"]) == 0
    assert_images(out)
    printed = capsys.readouterr().out.splitlines()
    heads = [line for line in printed if line.startswith("trained layer")]
    assert len(heads) == 4 and all("reads" in h and "closest: construction L" in h for h in heads)
    assert main(["attention", "--construction", str(runs["construction"]), "--checkpoint", str(runs["mul"]),
                 "--digits", "3", "--out", str(tmp_path / "mixed.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "multiplication_nx2 model" in err[0] and "addition model" in err[0]


def test_head_description_names_keys_relative_to_the_query_or_absolutely():
    assert token_roles("multiplication_nx2", 2) == ["BOS", "a1", "a0", "*", "b1", "b0", "=", "c0", "c1", "c2", "c3"]
    roles = token_roles("multiplication_nx2", 4)
    T, eq = len(roles), roles.index("=")
    shifted, fixed = np.zeros((T, T)), np.zeros((T, T))
    for r in range(eq, T):
        i = -1 if roles[r] == "=" else int(roles[r][1:])
        shifted[r, roles.index(f"a{i + 1}") if f"a{i + 1}" in roles else 0] = 1.0  # beyond a: BOS
        fixed[r, roles.index("b0")] = 1.0
    assert describe_head(shifted, roles) == "reads $a_{i+1}$ (4/7 answer rows)"
    assert describe_head(fixed, roles) == "reads $b_0$ (7/7 answer rows)"
    short = token_roles("multiplication_nx2", 3)  # a_{i+1} in 3 rows, BOS (no such digit) in 3: a tie
    tie = np.zeros((len(short), len(short)))
    for r in range(short.index("="), len(short)):
        i = -1 if short[r] == "=" else int(short[r][1:])
        tie[r, short.index(f"a{i + 1}") if f"a{i + 1}" in short else 0] = 1.0
    assert describe_head(tie, short) == "reads $a_{i+1}$ (3/6 answer rows)"


def test_turing_figure_is_readable(monkeypatch, tmp_path):
    """rasp.turing.plot: layers and heads from 1, titles in words (no RASP code), every token labelled
    on both axes, and a colour scale."""
    from rasp.turing import plot as turing_plot

    figures = []
    monkeypatch.setattr(turing_plot, "save_figure", lambda fig, paths: figures.append(fig))
    assert turing_plot.main(["--input", "58+67", "--out", str(tmp_path / "t.png")]) == 0
    (fig,) = figures
    panels = [ax for ax in fig.axes if ax.get_title()]
    titles = [ax.get_title() for ax in panels]
    assert titles[0].startswith("layer 1, head 1\n") and not any("layer 0" in t or "head 0" in t for t in titles)
    assert not any("Aggregate" in t or "==" in t or "reduce=" in t for t in titles), titles
    assert "n-gram lookup" in " ".join(titles) and "(computes out0)" in titles[-1]
    tokens = 1 + 4 * 4  # BOS* and the trace without its EOS: 4 configurations of 3 cells + SEP/BOS each
    for ax in panels:
        assert len([t for t in ax.get_xticklabels() if t.get_text()]) == tokens
        assert len([t for t in ax.get_yticklabels() if t.get_text()]) == tokens
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight"]
    assert len(bars) == 1


def test_layered_figure_has_no_mostly_empty_line_and_its_colour_bar_beside_the_panels(runs, tmp_path, monkeypatch):
    """The construction's 6-head layer wraps onto two lines rather than widening every line to 6
    panels; the colour bar sits just right of the widest line and spans the grid."""
    import lengthgen.plot

    figures = []
    monkeypatch.setattr(lengthgen.plot, "save_figure", lambda fig, paths: figures.append(fig))
    assert main(["attention", "--construction", str(runs["mul_construction"]), "--checkpoint", str(runs["mul"]),
                 "--digits", "3", "--samples", "1", "--out", str(tmp_path / "m.png"), "--no-progress"]) == 0
    (fig,) = figures
    width_in = fig.get_size_inches()[0]
    bar = next(ax for ax in fig.axes if ax.get_ylabel().startswith("attention probability"))
    panels = [ax for ax in fig.axes if ax is not bar]
    lines: dict[float, int] = {}
    for ax in panels:
        top = round(ax.get_position().y1, 4)
        lines[top] = lines.get(top, 0) + 1
    assert len(panels) == 2 + 6 + 2 + 2  # construction layers 1-2 (layer 3 has no attention), trained 2 x 2
    assert max(lines.values()) == 3 and min(lines.values()) >= 2, lines  # 2 + 3 + 3 + 2 + 2
    gap_in = (bar.get_position().x0 - max(ax.get_position().x1 for ax in panels)) * width_in
    assert 0 < gap_in < 0.5
    assert bar.get_position().y1 == pytest.approx(max(ax.get_position().y1 for ax in panels))
    assert bar.get_position().y0 == pytest.approx(min(ax.get_position().y0 for ax in panels))


def test_length_figure_keeps_every_model_visible_and_distinct(runs, tmp_path, monkeypatch):
    """The construction is drawn beneath the trained models (which often lie on it at 100 %), with open
    markers; every model has its own colour (no two blues), marker and dash pattern."""
    import colorsys

    import lengthgen.plot_length
    from matplotlib.colors import to_rgb

    figures = []
    monkeypatch.setattr(lengthgen.plot_length, "save_figure", lambda fig, paths: figures.append(fig))
    checkpoints = [f"m{i}={runs['coupled' if i % 2 else 'nope']}" for i in range(7)]  # as many as there are styles
    argv = ["length", "--construction", str(runs["construction"]), "--digits", "1-2", "--samples", "4",
            "--out", str(tmp_path / "len.png"), "--no-progress"]
    for spec in checkpoints:
        argv += ["--checkpoint", spec]
    assert main(argv) == 0
    ax = figures[0].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    construction = lines.pop("Theorem 5.1 construction")
    assert len(lines) == 7 and all(construction.get_zorder() < line.get_zorder() for line in lines.values())
    assert construction.get_markerfacecolor() == "none"
    styles = [(line.get_color(), line.get_marker(), str(line._dash_pattern)) for line in lines.values()]
    for k in range(3):
        assert len({s[k] for s in styles}) == 7, [s[k] for s in styles]
    blues = [c for c, _, _ in styles if 0.5 < colorsys.rgb_to_hsv(*to_rgb(c))[0] < 0.7
             and colorsys.rgb_to_hsv(*to_rgb(c))[1] > 0.3]
    assert blues == ["#0072B2"], blues


def test_long_probes_get_every_kth_digit_label_and_every_marker():
    from lengthgen.plot_attention import readable_ticks, role_labels

    short = role_labels(6)
    assert readable_ticks(short) == (list(range(len(short))), short)
    labels = role_labels(40)  # 123 tokens
    keep, shown = readable_ticks(labels)
    assert len(shown) <= 48 and shown == [labels[i] for i in keep]
    assert {"BOS", "+", "="} <= set(shown) and keep == sorted(keep)


@pytest.mark.parametrize("n, annotated", [(6, True), (40, False)])
def test_the_zoom_of_a_long_probe_keeps_its_row_labels_apart_and_its_cells_unwritten(n, annotated):
    """A 40-digit probe's zoom (42 rows in about 2 inches) gets as many row labels per inch as the full
    map, and its cells are too small for the weights to be printed in them; a 6-digit one keeps both."""
    from lengthgen.plot_attention import HeadMatch, attention_figure

    T = 3 * n + 5
    att = np.full((2, T, T), 0.5)
    fig = attention_figure(att, att[None], n, [HeadMatch(0, 0, 0, 1.0, 1.0), HeadMatch(1, 0, 1, 1.0, 1.0)],
                           ("h1", "h2"), "t")
    zooms = [ax for ax in fig.axes if ax.get_title().startswith("zoom")]
    rows = answer_rows(n)
    for ax in zooms:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        height_in = ax.get_position().height * fig.get_size_inches()[1]
        assert len(labels) / height_in <= 48 / 6.2 + 1e-9 or len(labels) <= 6, (len(labels), height_in)
        assert (len(labels) == rows.stop - rows.start) == annotated
        assert bool(ax.texts) == annotated


def test_legend_columns_keep_long_labels_inside_the_figure():
    """Labels filled column by column: short ones in four columns; three long seed-group labels
    stacked in one column would not fit beside each other, so fewer columns are used."""
    from lengthgen.plot_length import legend_columns

    assert legend_columns(["trained lengths", "construction", "APE", "NoPE", "a", "b"]) == 4
    long = "coupled-sink, six problems per row (mean of 3 seeds; band: range)"
    assert legend_columns(["trained lengths", "construction", long, long, long, "plain APE", "NoPE"]) == 2
    assert legend_columns([long * 2, long * 2]) == 1
