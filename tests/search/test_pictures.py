from types import SimpleNamespace

import matplotlib.image
import numpy as np
import pytest
import torch
from matplotlib.colorbar import Colorbar
from matplotlib.figure import Figure

from fbnas.search.pictures import progress_chart, relative_entropy, theta_heatmap, write_png

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def argmax_cells(fig):
    """(row, column) of each outlined cell of a heatmap, top to bottom."""
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if p.get_gid() == "argmax"]
    return sorted((round(b.get_y() + b.get_height() / 2), round(b.get_x() + b.get_width() / 2))
                  for b in boxes)


def texts(ax):
    return [t.get_text() for t in ax.texts]


def test_heatmap_has_a_colour_scale_marks_each_argmax_and_writes_a_png(tmp_path):
    probs = [[0.9, 0.05, 0.05], [0.1, 0.1, 0.8]]
    names = [["k3_e1", "k5_e3", "skip"], ["k3_e1", "k5_e3", "skip"]]
    fig = theta_heatmap(probs, names, "after epoch 1")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_title() == "after epoch 1"
    assert [t.get_text() for t in ax.get_xticklabels()] == names[0]
    # the cells are the probabilities, on a colour scale from 0 to 1 named softmax(theta)
    image = ax.images[0]
    assert np.allclose(image.get_array(), probs)
    assert image.get_clim() == (0.0, 1.0)
    bar = image.colorbar
    assert isinstance(bar, Colorbar) and bar.ax in fig.axes
    assert bar.ax.get_ylabel() == "softmax(theta)"
    # darker means more likely
    shade = [sum(image.to_rgba(v)[:3]) for v in (0.05, 0.9)]
    assert shade[1] < shade[0]
    # each layer's argmax is outlined, its probability written in the cell
    assert argmax_cells(fig) == [(0, 0), (1, 2)]
    assert {"0.90", "0.80"} <= set(texts(ax))
    # how decided each layer is, right of its row
    right = [t.get_text() for t in ax.child_axes[0].get_yticklabels()]
    assert right == [f"{relative_entropy(p):.2f}" for p in probs]
    path = tmp_path / "pics" / "theta.png"
    write_png(path, fig)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    back = matplotlib.image.imread(path)
    width, height = fig.get_size_inches() * fig.dpi
    assert back.shape[:2] == (round(height), round(width))
    assert not list(path.parent.glob(".*.tmp"))  # written atomically, nothing left over


def test_heatmap_handles_layers_with_different_candidates():
    fig = theta_heatmap([[0.3, 0.7], [1.0]], [["a", "b"], ["c"]])
    ax = fig.axes[0]
    # the columns are the union of the candidate lists, in first-seen order
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    grid = ax.images[0].get_array()
    assert np.ma.getmaskarray(grid).tolist() == [[False, False, True], [True, True, False]]
    assert argmax_cells(fig) == [(0, 1), (1, 2)]
    assert "grey" in ax.get_xlabel()  # the note says what a grey cell means


@pytest.mark.parametrize("rows", [4, 22])
def test_heatmap_sizes_to_the_space(rows):
    names = ["k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6",
             "skip"]
    probs = [np.roll(np.linspace(0.2, 0.01, 9) / np.linspace(0.2, 0.01, 9).sum(), i)
             for i in range(rows)]
    fig = theta_heatmap(probs, [names] * rows, "t")
    assert argmax_cells(fig) == [(i, i % 9) for i in range(rows)]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        f"layer {i}" for i in range(rows)]
    assert 0.22 < fig.get_size_inches()[1] / (rows + 5) < 0.45  # about a line per layer


def test_progress_chart_has_real_axes_and_the_budget():
    fig = progress_chart([1, 2, 3], [10.0, 20.0, 30.0], [0.5, 0.4, 0.3], "search tiny",
                         "found net latency (ms)", found_top1=[8.0, None, 25.0],
                         budget=0.35, budget_unit="ms")
    fig.canvas.draw()
    ax, right = fig.axes
    assert ax.get_title() == "search tiny"
    assert ax.get_xlabel() == "epoch" and right.get_ylabel() == "found net latency (ms)"
    # ticks on both axes: whole epochs below, % left, the cost right
    xticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert xticks and all(float(t).is_integer() for t in xticks)
    assert len(ax.get_yticks()) > 2 and len(right.get_yticks()) > 2
    assert ax.xaxis.get_gridlines()[0].get_visible()
    lines = {line.get_label(): line for line in ax.lines + right.lines}
    assert list(lines["supernet val top-1 (%)"].get_ydata()) == [10.0, 20.0, 30.0]
    found = lines["found net val top-1 (%)"].get_ydata()
    assert found[0] == 8.0 and np.isnan(found[1])  # a missing value is a gap
    assert list(lines["found net latency (ms)"].get_ydata()) == [0.5, 0.4, 0.3]
    budget = lines["budget 0.35 ms"]
    assert budget.get_linestyle() == "--" and list(budget.get_ydata()) == [0.35, 0.35]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["supernet val top-1 (%)", "found net val top-1 (%)",
                      "found net latency (ms)", "budget 0.35 ms"]


def test_progress_chart_with_one_epoch_and_missing_values(tmp_path):
    fig = progress_chart([1], [None], [2.0])
    fig.canvas.draw()
    ax, right = fig.axes
    assert [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]] == [1]
    labels = [line.get_label() for line in ax.lines + right.lines]
    assert labels == ["found net latency (ms)"]  # a series without any value is left out
    assert not [line for line in right.lines if line.get_linestyle() == "--"]  # no budget
    write_png(tmp_path / "progress.png", fig)
    assert (tmp_path / "progress.png").read_bytes()[:8] == PNG_SIGNATURE
    assert progress_chart([], [], []).axes  # before the first epoch: empty axes


def test_search_draws_to_png_files_and_tensorboard(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from fbnas.search.run import Search

    writer = SummaryWriter(str(tmp_path / "tb"))
    figures, lines = [], {}

    def add_figure(tag, fig, step, **kwargs):
        figures.append((tag, step, fig.axes[0].get_title()))
        lines.update({line.get_label(): list(line.get_ydata()) for ax in fig.axes
                      for line in ax.lines})
        SummaryWriter.add_figure(writer, tag, fig, step, **kwargs)

    writer.add_figure = add_figure
    history = [{"epoch": 1, "val_top1": 11.0, "cost_argmax": 520.0, "found_cost": 480.0,
                "budget_ms": 0.5, "found_val_top1": 9.0},
               {"epoch": 2, "val_top1": 17.0, "cost_argmax": 470.0, "found_cost": 460.0,
                "budget_ms": 0.5, "found_val_top1": 15.0}]
    run = SimpleNamespace(
        net=SimpleNamespace(layers=[SimpleNamespace(candidates=("k3_e1", "skip"))] * 3),
        history=history, cfg=SimpleNamespace(search=SimpleNamespace(cost="latency")),
        space=SimpleNamespace(name="tiny"), paths=SimpleNamespace(pictures=tmp_path / "pics"),
        writer=writer)
    Search._draw(run, 1, [torch.tensor([0.6, 0.4])] * 3)
    writer.close()
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == [
        "progress.png", "theta_epoch002.png"]
    assert figures == [("theta_heatmap", 2, "softmax(theta) after epoch 2"),
                       ("progress", 2, "search tiny")]
    # the cost in ms, the budget from the records, both top-1 scores
    assert lines["found net latency (ms)"] == [0.48, 0.46]
    assert lines["budget 0.5 ms"] == [0.5, 0.5]
    assert lines["found net val top-1 (%)"] == [9.0, 15.0]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
