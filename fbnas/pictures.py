"""Pictures of a search: softmax(theta) as a heatmap, and latency and accuracy over epochs.

Both are drawn with Pillow (which torchvision already depends on) into uint8 RGB arrays, so
the same picture goes to TensorBoard (``add_image``) and to a PNG in the run directory
without a plotting library. Files are written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from fbnas.io import atomic_write

CELL_W, CELL_H = 56, 18
MARGIN_LEFT, MARGIN_TOP = 56, 34
ENTROPY_W = 48  # the column right of the cells that prints each layer's entropy
WHITE, BLACK, GREY = (255, 255, 255), (0, 0, 0), (150, 150, 150)
BLUE, ORANGE = (31, 119, 180), (230, 120, 20)


def _font():
    return ImageFont.load_default()


def _cell_colour(p: float) -> tuple[int, int, int]:
    """White (p = 0) to dark blue (p = 1)."""
    p = min(max(p, 0.0), 1.0)
    return tuple(int(round(w + (b - w) * p)) for w, b in zip(WHITE, (8, 48, 107)))


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
                  title: str = "") -> np.ndarray:
    """Layers (rows) x candidates (columns) of softmax(theta) as an H x W x 3 uint8 image.

    Layers may have different candidate lists: the columns are the union, in first-seen
    order, and a candidate a layer lacks is drawn grey. Each layer's largest probability is
    printed in its cell and outlined. Right of each row, how decided the layer is: its
    entropy as a share of the uniform distribution's ("H 0.00" settled on one candidate,
    "H 1.00" undecided).
    """
    columns: list[str] = []
    for row in candidates:
        columns += [c for c in row if c not in columns]
    rows = len(probs)
    width = MARGIN_LEFT + CELL_W * max(1, len(columns)) + ENTROPY_W + 8
    height = MARGIN_TOP + CELL_H * max(1, rows) + 8
    img = Image.new("RGB", (width, height), WHITE)
    draw = ImageDraw.Draw(img)
    font = _font()
    if title:
        draw.text((4, 2), title, fill=BLACK, font=font)
    x_entropy = MARGIN_LEFT + CELL_W * max(1, len(columns)) + 6
    for j, name in enumerate(columns):
        draw.text((MARGIN_LEFT + j * CELL_W + 3, MARGIN_TOP - 14), name, fill=BLACK, font=font)
    draw.text((x_entropy, MARGIN_TOP - 14), "entropy", fill=BLACK, font=font)
    for i, (p, names) in enumerate(zip(probs, candidates)):
        y0 = MARGIN_TOP + i * CELL_H
        draw.text((4, y0 + 3), f"layer {i}", fill=BLACK, font=font)
        values = [float(v) for v in p]
        best = int(np.argmax(values)) if values else -1
        draw.text((x_entropy, y0 + 3), f"H {relative_entropy(values):.2f}", fill=BLACK,
                  font=font)
        for j, name in enumerate(columns):
            x0 = MARGIN_LEFT + j * CELL_W
            box = (x0, y0, x0 + CELL_W - 1, y0 + CELL_H - 1)
            if name not in names:
                draw.rectangle(box, fill=(220, 220, 220))
                continue
            k = list(names).index(name)
            v = values[k]
            draw.rectangle(box, fill=_cell_colour(v))
            if k == best:
                draw.rectangle(box, outline=ORANGE, width=2)
                draw.text((x0 + 4, y0 + 3), f"{v:.2f}", fill=WHITE if v > 0.5 else BLACK,
                          font=font)
    return np.asarray(img)


def progress_chart(epochs: Sequence[int], top1: Sequence[float | None],
                   latency_ms: Sequence[float | None], title: str = "",
                   latency_label: str = "found net latency ms",
                   top1_label: str = "supernet val top-1 %") -> np.ndarray:
    """Val top-1 (blue, left axis, %) and the found architecture's cost (orange, right axis)
    over epochs, as an H x W x 3 uint8 image."""
    w, h, left, right, top, bottom = 520, 260, 48, 56, 24, 30
    img = Image.new("RGB", (w, h), WHITE)
    draw = ImageDraw.Draw(img)
    font = _font()
    draw.text((4, 4), title or "search progress", fill=BLACK, font=font)
    x0, x1, y0, y1 = left, w - right, top, h - bottom
    draw.rectangle((x0, y0, x1, y1), outline=GREY)
    n = len(epochs)
    first, last = (epochs[0], epochs[-1]) if n else (0, 1)

    def x_of(e: float) -> float:
        return x0 + (x1 - x0) * ((e - first) / (last - first) if last > first else 0.5)

    def series(values, colour, lo, hi, side):
        pts = [(x_of(e), y1 - (y1 - y0) * ((v - lo) / (hi - lo) if hi > lo else 0.5))
               for e, v in zip(epochs, values) if v is not None]
        if len(pts) > 1:
            draw.line(pts, fill=colour, width=2)
        for px, py in pts:
            draw.ellipse((px - 2, py - 2, px + 2, py + 2), fill=colour)
        tx = 4 if side == "left" else x1 + 4
        draw.text((tx, y0), f"{hi:.3g}", fill=colour, font=font)
        draw.text((tx, y1 - 10), f"{lo:.3g}", fill=colour, font=font)

    accs = [v for v in top1 if v is not None]
    series(top1, BLUE, 0.0, max(100.0 if not accs else max(accs) * 1.1, 1e-6), "left")
    lats = [v for v in latency_ms if v is not None]
    if lats:
        lo, hi = min(lats), max(lats)
        pad = 0.1 * (hi - lo) or 0.05 * hi or 1.0
        series(latency_ms, ORANGE, max(0.0, lo - pad), hi + pad, "right")
    draw.text((x0, y1 + 4), f"epoch {first}", fill=BLACK, font=font)
    draw.text((x1 - 50, y1 + 4), f"epoch {last}", fill=BLACK, font=font)
    draw.text((x0 + 40, y1 + 16), top1_label, fill=BLUE, font=font)
    draw.text((x0 + 200, y1 + 16), latency_label, fill=ORANGE, font=font)
    return np.asarray(img)


def write_png(path: str | Path, image: np.ndarray) -> None:
    """Write an H x W x 3 uint8 array as a PNG, atomically."""
    atomic_write(path, lambda p: Image.fromarray(image).save(p, format="PNG"))
