"""Pictures of a search: softmax(theta) as a heatmap, and accuracy and latency over epochs.

Both are matplotlib figures, so the same figure goes to TensorBoard (``add_figure``) and to
a PNG in the run directory, with real axes, ticks and a colour scale. Each figure is a
``matplotlib.figure.Figure`` on its own Agg canvas rather than a pyplot figure: nothing
needs a display or picks a GUI backend, nothing changes pyplot's global state for the code
around it, and a figure is freed once dropped instead of piling up in pyplot's registry
over a long run. PNGs are written atomically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from fbnas.io import atomic_write

DPI = 100
SUPERNET, FOUND, COST, BUDGET = "#1f77b4", "#2ca02c", "#e6781e", "#d62728"
ARGMAX = "#e6781e"  # the outline of each layer's most probable candidate
MISSING = "#d9d9d9"  # a candidate the layer does not have


def _figure(width: float, height: float) -> Figure:
    """A figure (size in inches) on an Agg canvas, laid out by the constrained layout
    engine so that labels, colour bar and legend never overlap whatever the size."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def relative_entropy(p: Sequence[float]) -> float:
    """Entropy of a distribution divided by that of the uniform one over as many values: 0
    when one value holds all the probability, 1 when all are equal (0 for a single value)."""
    v = np.clip(np.asarray(p, dtype=float), 0.0, None)
    if v.size < 2 or v.sum() <= 0:
        return 0.0
    v = v / v.sum()
    nz = v[v > 0]
    return float(max(0.0, -(nz * np.log(nz)).sum() / np.log(v.size)))


def theta_heatmap(probs: Sequence[Sequence[float]], candidates: Sequence[Sequence[str]],
                  title: str = "") -> Figure:
    """Layers (rows) x candidates (columns) of softmax(theta), with a colour scale from 0 to 1.

    Layers may have different candidate lists: the columns are the union, in first-seen
    order, and a candidate a layer lacks is a grey cell. Each layer's most probable
    candidate is outlined and its probability printed in the cell, since that is the
    operation ``fbnas sample --hard`` picks. Right of each row, how decided the layer is:
    its entropy as a share of a uniform layer's (0.00 settled on one candidate, 1.00
    undecided), which a colour alone does not tell once probabilities spread over many
    candidates.
    """
    columns: list[str] = []
    for row in candidates:
        columns += [c for c in row if c not in columns]
    rows = len(probs)
    grid = np.ma.masked_all((max(1, rows), max(1, len(columns))))
    best: list[tuple[int, float]] = []  # per layer: the argmax column and its probability
    for i, (p, names) in enumerate(zip(probs, candidates)):
        cells = [(columns.index(name), float(v)) for name, v in zip(names, p)]
        for j, v in cells:
            grid[i, j] = v
        best.append(max(cells, key=lambda c: c[1]) if cells else (-1, 0.0))

    fig = _figure(2.2 + 0.78 * max(1, len(columns)), 1.5 + 0.3 * max(1, rows))
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["Blues"].with_extremes(bad=MISSING)
    image = ax.imshow(grid, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
    ax.set_xticks(range(len(columns)), columns, fontsize=8)
    ax.xaxis.tick_top()
    ax.tick_params(axis="x", length=0, pad=3)
    ax.set_yticks(range(rows), [f"layer {i}" for i in range(rows)], fontsize=8)
    ax.tick_params(axis="y", length=0)
    # thin white lines between the cells
    ax.set_xticks(np.arange(-0.5, max(1, len(columns))), minor=True)
    ax.set_yticks(np.arange(-0.5, max(1, rows)), minor=True)
    ax.tick_params(which="minor", length=0)
    ax.grid(which="minor", color="white", linewidth=1)
    for spine in ax.spines.values():
        spine.set_visible(False)
    for i, (j, v) in enumerate(best):
        if j < 0:
            continue
        ax.add_patch(Rectangle((j - 0.46, i - 0.44), 0.92, 0.88, fill=False,
                               edgecolor=ARGMAX, linewidth=1.8, gid="argmax"))
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                color="white" if v > 0.5 else "black")
    entropy = ax.secondary_yaxis("right")
    entropy.set_yticks(range(rows), [f"{relative_entropy(p):.2f}" for p in probs],
                       fontsize=8)
    entropy.tick_params(length=0)
    entropy.spines["right"].set_visible(False)
    ax.annotate("entropy", xy=(1, 1), xycoords="axes fraction", xytext=(3, 3),
                textcoords="offset points", ha="left", va="bottom", fontsize=8)
    note = "outlined: each layer's argmax; entropy: relative to a uniform layer (0 decided, " \
           "1 undecided)"
    if any(np.ma.getmaskarray(grid)[:rows].ravel()):
        note += "; grey: not a candidate of the layer"
    ax.set_xlabel(note, fontsize=7, color="#555555")
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, aspect=max(10, 2.5 * rows),
                       ticks=np.linspace(0.0, 1.0, 6))
    bar.set_label("softmax(theta)", fontsize=9)
    bar.ax.tick_params(labelsize=8)
    if title:
        ax.set_title(title, fontsize=10, pad=6)
    return fig


def _values(seq: Sequence[float | None] | None) -> np.ndarray:
    """A series with None as NaN, which matplotlib leaves as a gap in the line."""
    return np.array([math.nan if v is None else float(v) for v in (seq or [])], dtype=float)


def progress_chart(epochs: Sequence[int], top1: Sequence[float | None],
                   latency: Sequence[float | None], title: str = "",
                   latency_label: str = "found net latency (ms)",
                   top1_label: str = "supernet val top-1 (%)",
                   found_top1: Sequence[float | None] | None = None,
                   found_top1_label: str = "found net val top-1 (%)",
                   budget: float | None = None, budget_unit: str = "") -> Figure:
    """Val top-1 (left axis, %) and the found network's cost (right axis, in the unit of
    ``latency_label``) over the epochs.

    ``top1`` is the supernet's score, ``found_top1`` (optional) the found network's on the
    same split; ``budget`` (optional, in the cost's unit, ``budget_unit`` for its legend
    entry) is drawn as a dashed line, so a run searching under a latency budget shows how
    close the found network sits to it.
    None marks a value an epoch did not record: it leaves a gap, and a series with no value
    at all is left out.
    """
    x = np.asarray(list(epochs), dtype=float)
    fig = _figure(7.5, 4.2)
    ax = fig.add_subplot()
    right = ax.twinx()
    handles = []
    accs = []
    dot = 4 if x.size <= 30 else 1.5  # markers, still showing a lone value between gaps
    for values, colour, marker, label in ((top1, SUPERNET, "o", top1_label),
                                          (found_top1, FOUND, "s", found_top1_label)):
        y = _values(values)
        if y.size and not np.isnan(y).all():
            handles += ax.plot(x, y, color=colour, marker=marker, markersize=dot, linewidth=1.8,
                               label=label)
            accs.append(float(np.nanmax(y)))
    cost = _values(latency)
    if cost.size and not np.isnan(cost).all():
        handles += right.plot(x, cost, color=COST, marker="^", markersize=dot, linewidth=1.8,
                              label=latency_label)
    if budget is not None:
        handles.append(right.axhline(budget, color=BUDGET, linestyle="--", linewidth=1.2,
                                     label=f"budget {budget:g} {budget_unit}".rstrip()))
    right.margins(y=0.15)
    ax.set_ylim(0.0, min(100.0, max(accs) * 1.15) if accs and max(accs) > 0 else 100.0)

    ax.set_xlabel("epoch", fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if x.size and x.min() == x.max():  # one epoch: a little room either side of its point
        ax.set_xlim(x.min() - 0.5, x.max() + 0.5)
    ax.set_ylabel("val top-1 (%)", fontsize=9)
    right.set_ylabel(latency_label, fontsize=9, color=COST)
    right.tick_params(axis="y", colors=COST, labelsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(True, color="#e0e0e0", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_title(title or "search progress", fontsize=10)
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
                   fontsize=8, frameon=False)
    return fig


def write_png(path: str | Path, figure: Figure) -> None:
    """Write a figure as a PNG, atomically."""
    atomic_write(path, lambda p: figure.savefig(p, format="png", dpi=DPI))
