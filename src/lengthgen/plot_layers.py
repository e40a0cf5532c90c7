"""Attention maps of a multi-layer construction and a trained model, every layer and head.

``lengthgen.plot attention`` draws this figure when the reference model has more than one layer or
the task is not addition (for a 1-layer addition reference it draws the paired maps of
:mod:`lengthgen.plot_attention`). One row per layer: first the reference's working heads (those
its ``head_roles`` note names; all heads when it names none), then every head of the trained
model. The colour scale, palette and black mask below 0.01 are those of
:mod:`lengthgen.plot_attention`, so the figures read alike (docs/training.md, "Figures").

Titles say what a head reads. For the reference that is its declared role; for a trained head it
is read off the maps: at each answer row (the query ``=`` or ``c_i``, which predicts ``c_{i+1}``;
``=`` counts as i = −1) the key with the most attention, named either absolutely (``b_0``, ``BOS``)
or relative to the query (``a_{i+1}``), whichever names more rows the same way (on a tie, the
relative name: a head that reads ``a_{i+1}`` falls back to ``BOS`` where a has no such digit). Each trained head
also names the reference head whose answer rows are closest (cosine similarity).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .plot_attention import MASK_BELOW, heatmap, cosine

_DIGIT = re.compile(r"^([a-z])(\d+)$")


@dataclass
class HeadMap:
    """One panel: the map ``[T, T]`` of (``layer``, ``head``) and what the head reads."""

    layer: int
    head: int
    pattern: np.ndarray
    reads: str
    closest: str = ""


def token_roles(task_name: str, n: int) -> list[str]:
    """Plain role names of an n-digit example without its final ``$``: ``BOS``, the operand digits
    (``a4``.. ``a0``, then ``b``..), the operator, ``=``, and the answer ``c0``..; answer digit
    ``c_i`` has the significance of ``a_i`` (the coupled layout, docs/training.md)."""
    from .task_batches import second_operand_digits

    m = second_operand_digits(task_name)
    if task_name == "addition":
        op, answer = "+", n + 1
    elif task_name.startswith("multiplication"):
        op, answer = "*", n + m
    else:
        raise ValueError(f"attention maps are drawn for addition and multiplication models, not {task_name}")
    return (["BOS", *(f"a{j}" for j in range(n - 1, -1, -1)), op, *(f"b{j}" for j in range(m - 1, -1, -1)), "=",
             *(f"c{i}" for i in range(answer))])


def tick_label(role: str) -> str:
    """``a4`` -> ``$a_{4}$`` (mathtext); other roles unchanged."""
    hit = _DIGIT.match(role)
    return rf"${hit[1]}_{{{hit[2]}}}$" if hit else role


def relative(role: str, i: int) -> str:
    """A digit role named relative to the query index i (``a5`` at i = 4 -> ``a_{i+1}``)."""
    hit = _DIGIT.match(role)
    if not hit:
        return role
    d = int(hit[2]) - i
    return f"{hit[1]}_{{i{'+' if d > 0 else '-'}{abs(d)}}}" if d else f"{hit[1]}_i"


def absolute(role: str) -> str:
    hit = _DIGIT.match(role)
    return f"{hit[1]}_{hit[2]}" if hit else role


def math_text(role: str) -> str:
    """A role for a title: ``a_{i+1}`` or ``b_0`` as mathtext, anything else with ``$`` escaped."""
    if re.fullmatch(r"[a-z]_(\{[^}]*\}|\w)", role):
        return f"${role}$"
    return role.replace("$", r"\$")


def describe_head(pattern: np.ndarray, roles: list[str]) -> str:
    """What a head reads on the answer rows: the key with the most attention, named in the way
    (absolute or relative to the query; relative on a tie) that fits the most rows, and in how
    many rows it wins."""
    first = roles.index("=")
    rows = range(first, len(roles))
    abs_names, rel_names = Counter(), Counter()
    for r in rows:
        key = roles[int(np.argmax(pattern[r, : r + 1]))]
        i = -1 if roles[r] == "=" else int(roles[r][1:])
        abs_names[absolute(key)] += 1
        rel_names[relative(key, i)] += 1
    (a_name, a_count), (r_name, r_count) = abs_names.most_common(1)[0], rel_names.most_common(1)[0]
    name, count = (a_name, a_count) if a_count > r_count else (r_name, r_count)  # a tie: the relative name
    return f"reads {math_text(name)} ({count}/{len(rows)} answer rows)"


def closest_reference(trained: np.ndarray, reference: list[HeadMap], answer: slice) -> str:
    """``~ ref L2 'reads b_0' (cos 0.93)`` for the reference head nearest on the answer rows."""
    sims = [cosine(trained[answer], ref.pattern[answer]) for ref in reference]
    best = int(np.argmax(sims))
    ref = reference[best]
    return f"closest: construction L{ref.layer + 1} H{ref.head + 1} (cos {sims[best]:.2f})"


def layer_maps(reference: np.ndarray, roles_of: dict[tuple[int, int], str] | None, trained: np.ndarray,
               roles: list[str]) -> tuple[list[HeadMap], list[HeadMap]]:
    """Panels of the reference ``[L, H, T, T]`` (working heads only) and of the trained model."""
    T = len(roles)
    answer = slice(roles.index("="), T)
    keys = sorted(roles_of) if roles_of else [(l, h) for l in range(reference.shape[0]) for h in range(reference.shape[1])]
    ref = [HeadMap(l, h, reference[l, h, :T, :T], f"reads {math_text(roles_of[(l, h)])}" if roles_of else
                   describe_head(reference[l, h, :T, :T], roles)) for (l, h) in keys]
    tr = []
    for l in range(trained.shape[0]):
        for h in range(trained.shape[1]):
            p = trained[l, h, :T, :T]
            tr.append(HeadMap(l, h, p, describe_head(p, roles), closest_reference(p, ref, answer)))
    return ref, tr


def panel_lines(rows: list[tuple[str, list[HeadMap]]], cols: int) -> list[tuple[str, list[HeadMap]]]:
    """The rows broken into lines of at most ``cols`` panels (a row's later lines titled "(continued)")."""
    lines = []
    for title, maps in rows:
        for start in range(0, len(maps), cols):
            lines.append((title if start == 0 else f"{title} (continued)", maps[start:start + cols]))
    return lines


def grid_columns(ref_widths: list[int], trained_widths: list[int]) -> int:
    """Panels per line: as many as the trained model has heads, so its rows are full, and at least half
    the widest reference row (which then takes two lines), so no line is mostly empty."""
    widest = max(ref_widths + trained_widths)
    return max(max(trained_widths, default=widest), -(-widest // 2))


def layers_figure(ref: list[HeadMap], trained: list[HeadMap], roles: list[str], ref_name: str, title: str,
                  idle_layers: list[int]):
    """One row per layer of the reference, then per layer of the trained model; square panels with
    the values written in the cells (>= 0.1), one colour bar beside the panels, as tall as the grid.
    ``idle_layers``: reference layers without working heads (named in the title, not drawn)."""
    import matplotlib.pyplot as plt

    ref_rows = [(f"{ref_name}, layer {l + 1}", [m for m in ref if m.layer == l]) for l in sorted({m.layer for m in ref})]
    tr_rows = [(f"trained, layer {l + 1}", [m for m in trained if m.layer == l]) for l in sorted({m.layer for m in trained})]
    cols = grid_columns([len(m) for _, m in ref_rows], [len(m) for _, m in tr_rows])
    rows = panel_lines(ref_rows + tr_rows, cols)
    labels = [tick_label(r) for r in roles]
    fs, P = 7.0, 3.3
    left, gap_x, top, label_h, title_h, gap_y, cbar, cbar_gap = 0.9, 0.75, 1.0, 0.3, 0.55, 0.75, 0.2, 0.35
    block = label_h + title_h + P + gap_y
    W = left + cols * (P + gap_x) - gap_x + cbar_gap + cbar + 0.9
    H = top + len(rows) * block + 0.2
    fig = plt.figure(figsize=(W, H))

    def axes(x: float, y_top: float, w: float, h: float):
        return fig.add_axes((x / W, 1 - (y_top + h) / H, w / W, h / H))

    im = None
    for k, (row_title, maps) in enumerate(rows):
        y = top + k * block
        if row_title:
            fig.text(left / W, 1 - (y + 0.05) / H, row_title, fontsize=fs + 4, fontweight="bold", va="top")
        for c, m in enumerate(maps):
            ax = axes(left + c * (P + gap_x), y + label_h + title_h, P, P)
            head_title = f"L{m.layer + 1} H{m.head + 1}: {m.reads}" + (f"\n{m.closest}" if m.closest else "")
            im = heatmap(ax, m.pattern, labels, labels, head_title, True, fs)
            ax.tick_params(axis="x", labelrotation=90)
            ax.axhline(roles.index("=") - 0.5, color="#0072B2", lw=0.9)  # rows below predict the answer
    grid_top, grid_bottom = top + label_h + title_h, top + (len(rows) - 1) * block + label_h + title_h + P
    cax = axes(left + cols * (P + gap_x) - gap_x + cbar_gap, grid_top, cbar, grid_bottom - grid_top)
    cb = fig.colorbar(im, cax=cax)
    cb.set_label(f"attention probability (black: < {MASK_BELOW})", fontsize=fs + 3)
    cb.ax.tick_params(labelsize=fs + 2)
    idle = ", ".join(str(l + 1) for l in idle_layers)
    note = (f"; {ref_name} layer {idle} has no attention" if len(idle_layers) == 1 else
            f"; {ref_name} layers {idle} have no attention" if idle_layers else "")
    fig.suptitle(f"{title.replace('$', chr(92) + '$')}\nQueries are rows, keys are columns; rows from '=' down (below the blue line) predict "
                 f"the answer: '=' predicts c0, c_i predicts c_(i+1){note}", fontsize=fs + 4, y=1 - 0.15 / H, va="top")
    return fig
