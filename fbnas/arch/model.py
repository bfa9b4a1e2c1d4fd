"""Fixed networks built from a model definition: plain data, never source code."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fbnas.arch.folded_bn import fold_pays
from fbnas.arch.limits import (MAX_CHANNELS, MAX_CLASSES, MAX_KERNEL, MAX_LAYERS, MAX_RESOLUTION,
                               at_most, check_map, check_weights)
from fbnas.arch.ops import build_op, check_op_fits, conv_bn, op_width, out_size
from fbnas.errors import FbnasError, brief


def _field_int(d: Any, key: str, where: str, limit: int = MAX_CHANNELS) -> int:
    if not isinstance(d, dict) or key not in d:
        raise FbnasError(f"model definition: {where} is missing '{key}'")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise FbnasError(f"model definition: {where}.{key} must be a positive integer, got "
                         f"{brief(v)}")
    return at_most(v, limit, f"model definition: {where}.{key}")


def validate_definition(defn: Any) -> None:
    """Raise FbnasError with the offending field if ``defn`` cannot be built."""
    if not isinstance(defn, dict):
        raise FbnasError("model definition must be a mapping")
    for key in ("input", "stem", "blocks", "head"):
        if key not in defn:
            raise FbnasError(f"model definition is missing '{key}'")
    c_img = _field_int(defn["input"], "channels", "input")
    h = _field_int(defn["input"], "resolution", "input", MAX_RESOLUTION)
    c = _field_int(defn["stem"], "channels", "stem")
    k = _field_int(defn["stem"], "kernel", "stem", MAX_KERNEL)
    if k % 2 == 0:
        raise FbnasError(f"model definition: stem.kernel must be odd (the output size assumes "
                         f"padding K // 2), got {k}")
    h = out_size(h, _field_int(defn["stem"], "stride", "stem"))
    check_weights(c_img * c * k * k, "model definition: stem")
    check_map(c, h, h, "model definition: stem")
    blocks = defn["blocks"]
    if not isinstance(blocks, list) or not blocks:
        raise FbnasError("model definition: blocks must be a non-empty list")
    at_most(len(blocks), MAX_LAYERS, "model definition: the number of blocks")
    for i, b in enumerate(blocks):
        where = f"blocks[{i}]"
        c_in = _field_int(b, "c_in", where)
        c_out = _field_int(b, "c_out", where)
        stride = _field_int(b, "stride", where)
        if c_in != c:
            raise FbnasError(f"model definition: {where}.c_in is {c_in} but the previous layer "
                             f"outputs {c} channels")
        if "op" not in b:
            raise FbnasError(f"model definition: {where} is missing 'op'")
        try:
            check_op_fits(b["op"], c_in, c_out, stride)
            check_map(op_width(b["op"], c_in, c_out), h, h, f"op {brief(b['op'])}")
        except FbnasError as e:
            raise FbnasError(f"model definition: {where}: {e}") from None
        c, h = c_out, out_size(h, stride)
    hc = _field_int(defn["head"], "channels", "head")
    classes = _field_int(defn["head"], "classes", "head", MAX_CLASSES)
    check_weights(hc * classes, "model definition: head")


class Stem(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int):
        super().__init__(*conv_bn(c_in, c_out, kernel, stride))


class Head(nn.Module):
    """1x1 conv + BN + ReLU, global average pool, fully connected classifier."""

    def __init__(self, c_in: int, channels: int, classes: int, dropout: float = 0.0):
        super().__init__()
        self.conv = conv_bn(c_in, channels, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        # In training, pool as a sum and a division: mean's own arithmetic, bit for bit, but
        # its gradient is a broadcast view in the input's memory format. AdaptiveAvgPool2d's
        # gradient is written NCHW, and on a channels_last network the ReLU backward after it
        # then mixes formats, several times slower (bench/bench_pointwise.py).
        # Evaluation and export keep the pooling op, which ONNX Runtime runs as one kernel.
        x = x.sum((2, 3)).div(x.shape[2] * x.shape[3]) if self.training else self.pool(x).flatten(1)
        return self.fc(self.dropout(x))


class Network(nn.Module):
    """Stem, one op per block, head: the network a model definition describes."""

    def __init__(self, defn: dict, dropout: float = 0.0):
        super().__init__()
        validate_definition(defn)
        self.definition = defn
        st = defn["stem"]
        self.stem = Stem(defn["input"]["channels"], st["channels"], st["kernel"], st["stride"])
        self.blocks = nn.Sequential(*[build_op(b["op"], b["c_in"], b["c_out"], b["stride"])
                                      for b in defn["blocks"]])
        hd = defn["head"]
        self.head = Head(defn["blocks"][-1]["c_out"], hd["channels"], hd["classes"], dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))

    def zero_init_residual(self) -> None:
        """Start every residual block as the identity (its last BN scale zero), for training
        from scratch: with unit scales the gradient grows through the residual blocks toward
        the input (norm 34 at initialisation on an all-k3_e3 fbnet_cifar network, 4.3
        with zero scales), and the first epoch's cross-entropy climbs above chance."""
        for block in self.blocks:
            init = getattr(block, "zero_init_residual", None)
            if init is not None:
                init()

    def fold_batch_norm(self, on: bool = True, everywhere: bool = False) -> int:
        """Have training steps fold the expansion BN of each block where that pays
        (:func:`fbnas.arch.folded_bn.fold_pays`; ``everywhere``: every block) into its 1x1
        conv: the same function up to float rounding, fewer passes over the block's widest
        tensor; evaluation, export and saved weights are unchanged. Returns the number of
        blocks that fold."""
        blocks = [m for m in self.modules() if hasattr(m, "fold_bn")]
        folded = 0
        for m in blocks:
            m.fold_bn = on and (everywhere or fold_pays(*m.expansion_shape()))
            folded += m.fold_bn
        return folded

    def input_shape(self, batch: int = 1) -> tuple[int, int, int, int]:
        i = self.definition["input"]
        return (batch, i["channels"], i["resolution"], i["resolution"])
