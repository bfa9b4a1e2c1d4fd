import numpy as np
from PIL import Image

from fbnas.pictures import progress_chart, theta_heatmap, write_png


def test_heatmap_shades_cells_by_probability_and_writes_a_png(tmp_path):
    probs = [[0.9, 0.05, 0.05], [0.1, 0.1, 0.8]]
    names = [["k3_e1", "k5_e3", "skip"], ["k3_e1", "k5_e3", "skip"]]
    img = theta_heatmap(probs, names, "after epoch 1")
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    from fbnas.pictures import CELL_H, CELL_W, MARGIN_LEFT, MARGIN_TOP

    def cell(i, j):  # a pixel inside cell (i, j), away from text and outline
        return img[MARGIN_TOP + i * CELL_H + CELL_H - 4, MARGIN_LEFT + j * CELL_W + CELL_W - 6]

    # darker means more likely: layer 0 prefers column 0, layer 1 column 2
    assert cell(0, 0).sum() < cell(0, 1).sum()
    assert cell(1, 2).sum() < cell(1, 0).sum()
    path = tmp_path / "pics" / "theta.png"
    write_png(path, img)
    back = np.asarray(Image.open(path).convert("RGB"))
    assert back.shape == img.shape and np.array_equal(back, img)
    assert not list(path.parent.glob(".*.tmp"))  # written atomically, nothing left over


def test_heatmap_handles_layers_with_different_candidates():
    img = theta_heatmap([[0.5, 0.5], [1.0]], [["a", "b"], ["c"]])
    assert img.shape[1] > 3 * 50  # three columns: the union of the candidate lists


def test_progress_chart_draws_both_series():
    img = progress_chart([1, 2, 3], [10.0, 20.0, 30.0], [5.0, 4.0, 3.0])
    blue = (img == np.array([31, 119, 180], dtype=np.uint8)).all(axis=2).sum()
    orange = (img == np.array([230, 120, 20], dtype=np.uint8)).all(axis=2).sum()
    assert blue > 50 and orange > 50
    # a single epoch and missing accuracies still draw
    assert progress_chart([1], [None], [2.0]).ndim == 3
