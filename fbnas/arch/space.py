"""Search spaces: a YAML description resolved to per-layer (C_in, C_out, stride, H, W)."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from fbnas.arch.limits import (MAX_CHANNELS, MAX_CLASSES, MAX_KERNEL, MAX_LAYERS, MAX_RESOLUTION,
                               at_most, check_map, check_weights)
from fbnas.arch.ops import SUPPORTED_STRIDES, check_op_fits, op_width, out_size
from fbnas.errors import FbnasError, brief
from fbnas.io import load_yaml
from fbnas.resources import bundled, names_a_file


@dataclass(frozen=True)
class Layer:
    """One searchable layer: its position, shapes and candidate ops."""

    index: int
    stage: int
    c_in: int
    c_out: int
    stride: int
    h: int
    w: int
    candidates: tuple[str, ...]

    @property
    def out_hw(self) -> tuple[int, int]:
        return out_size(self.h, self.stride), out_size(self.w, self.stride)

    @property
    def transition(self) -> bool:
        """A new stride or width: no identity path here (a ``skip`` is a projection, a block
        has no residual); elsewhere a ``skip`` is the identity."""
        return self.stride != 1 or self.c_in != self.c_out


def _pos_int(value: Any, field: str, limit: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FbnasError(f"space field {field} must be a positive integer, got {brief(value)}")
    return value if limit is None else at_most(value, limit, f"space field {field}")


def _mapping(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise FbnasError(f"space field {field} must be a mapping, got {type(value).__name__}")
    return value


def _no_unknown(d: dict, allowed: set[str], field: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise FbnasError(
            f"space field {field} has unknown key(s) {', '.join(extra)}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )


def _add_stage(layers: list[Layer], si: int, st, cands: list, c: int, h: int, w: int
               ) -> tuple[int, int, int]:
    """Check stage ``si`` (``stages[si]``) and append its layers to ``layers``, which enter
    with ``c`` channels on an ``h`` x ``w`` map; return the channels and map size it leaves.
    Every candidate is checked at every layer's shape, so that a space that loads builds
    every network it holds."""
    field = f"stages[{si}]"
    st = _mapping(st, field)
    _no_unknown(st, {"channels", "blocks", "stride", "candidates"}, field)
    c_out = _pos_int(st.get("channels"), f"{field}.channels", MAX_CHANNELS)
    blocks = _pos_int(st.get("blocks"), f"{field}.blocks")
    if len(layers) + blocks > MAX_LAYERS:
        raise FbnasError(f"space field {field}.blocks: the space would have "
                         f"{len(layers) + blocks} searchable layers, above fbnas's "
                         f"limit of {MAX_LAYERS}")
    first_stride = _pos_int(st.get("stride", 1), f"{field}.stride")
    if first_stride not in SUPPORTED_STRIDES:
        raise FbnasError(f"space field {field}.stride must be one of {SUPPORTED_STRIDES}, "
                         f"got {first_stride}")
    stage_cands = st.get("candidates", cands)
    if not isinstance(stage_cands, list) or not stage_cands:
        raise FbnasError(f"space field {field}.candidates must be a non-empty list")
    for b in range(blocks):
        stride = first_stride if b == 0 else 1
        if stride > 1 and min(h, w) < 2:
            raise FbnasError(
                f"space field {field}.stride: the feature map is already {h}x{w}, so "
                f"another stride-2 layer collapses it; raise input.resolution or "
                "lower a stride"
            )
        for op in stage_cands:
            try:
                check_op_fits(op, c, c_out, stride)
                check_map(op_width(op, c, c_out), h, w, f"op {brief(op)}")
            except FbnasError as e:
                raise FbnasError(f"space field {field}.candidates: {e}") from None
        layers.append(Layer(len(layers), si, c, c_out, stride, h, w, tuple(stage_cands)))
        h, w = out_size(h, stride), out_size(w, stride)
        c = c_out
    return c, h, w


class SearchSpace:
    """A validated search space. Build with :func:`load_space` or :meth:`from_dict`."""

    def __init__(self, raw: dict):
        self.raw = copy.deepcopy(raw)
        d = _mapping(raw, "<root>")
        _no_unknown(d, {"name", "description", "input", "stem", "stages", "candidates", "head"},
                    "<root>")
        for key in ("name", "input", "stem", "stages", "candidates", "head"):
            if key not in d:
                raise FbnasError(f"space is missing the required field '{key}'")
        if not isinstance(d["name"], str) or not d["name"]:
            raise FbnasError("space field name must be a non-empty string")
        self.name: str = d["name"]
        self._read_input(d["input"])
        self._read_stem(d["stem"])
        self._read_head(d["head"])

        cands = d["candidates"]
        if not isinstance(cands, list) or not cands:
            raise FbnasError("space field candidates must be a non-empty list of op names")
        if len(set(cands)) != len(cands):
            raise FbnasError("space field candidates lists an op twice")

        stages = d["stages"]
        if not isinstance(stages, list) or not stages:
            raise FbnasError("space field stages must be a non-empty list")

        check_weights(self.in_channels * self.stem_channels * self.stem_kernel ** 2,
                      "space field stem")
        h = w = out_size(self.resolution, self.stem_stride)
        check_map(self.stem_channels, h, w, "space field stem")
        c = self.stem_channels
        layers: list[Layer] = []
        for si, st in enumerate(stages):
            c, h, w = _add_stage(layers, si, st, cands, c, h, w)
        self.layers: tuple[Layer, ...] = tuple(layers)
        self.final_channels = c
        self.final_hw = (h, w)

    def _read_input(self, value) -> None:
        """``input``: the image's channels and resolution, within fbnas's limits."""
        inp = _mapping(value, "input")
        _no_unknown(inp, {"channels", "resolution"}, "input")
        self.in_channels = _pos_int(inp.get("channels"), "input.channels", MAX_CHANNELS)
        self.resolution = _pos_int(inp.get("resolution"), "input.resolution", MAX_RESOLUTION)

    def _read_stem(self, value) -> None:
        """``stem``: channels, an odd kernel (the output size assumes padding K // 2) and a
        stride the ops support."""
        stem = _mapping(value, "stem")
        _no_unknown(stem, {"channels", "kernel", "stride"}, "stem")
        self.stem_channels = _pos_int(stem.get("channels"), "stem.channels", MAX_CHANNELS)
        self.stem_kernel = _pos_int(stem.get("kernel", 3), "stem.kernel", MAX_KERNEL)
        if self.stem_kernel % 2 == 0:
            raise FbnasError(f"space field stem.kernel must be odd (the output size assumes "
                             f"padding K // 2), got {self.stem_kernel}")
        self.stem_stride = _pos_int(stem.get("stride", 1), "stem.stride")
        if self.stem_stride not in SUPPORTED_STRIDES:
            raise FbnasError(f"space field stem.stride must be one of {SUPPORTED_STRIDES}, "
                             f"got {self.stem_stride}")

    def _read_head(self, value) -> None:
        """``head``: channels and classes, whose classifier's weights stay within limits."""
        head = _mapping(value, "head")
        _no_unknown(head, {"channels", "classes"}, "head")
        self.head_channels = _pos_int(head.get("channels"), "head.channels", MAX_CHANNELS)
        self.num_classes = _pos_int(head.get("classes"), "head.classes", MAX_CLASSES)
        check_weights(self.head_channels * self.num_classes, "space field head")

    @classmethod
    def from_dict(cls, raw: dict) -> "SearchSpace":
        return cls(raw)

    def resolved(self) -> dict:
        """Everything that decides shapes and candidates; the basis of :attr:`hash`."""
        return {
            "input": [self.in_channels, self.resolution],
            "stem": [self.stem_channels, self.stem_kernel, self.stem_stride],
            "layers": [[l.c_in, l.c_out, l.stride, l.h, l.w, list(l.candidates)]
                       for l in self.layers],
            "head": [self.head_channels, self.num_classes],
        }

    @property
    def hash(self) -> str:
        blob = json.dumps(self.resolved(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def stem_hw(self) -> tuple[int, int]:
        r = out_size(self.resolution, self.stem_stride)
        return r, r

    def definition(self, ops: list[str], name: str = "arch") -> dict:
        """The model definition (plain data) of one architecture: one op per layer."""
        if len(ops) != len(self.layers):
            raise FbnasError(f"space {self.name} has {len(self.layers)} searchable layers, "
                             f"got {len(ops)} ops")
        blocks = []
        for layer, op in zip(self.layers, ops):
            if op not in layer.candidates:
                raise FbnasError(f"op {brief(op)} is not a candidate of layer {layer.index} "
                                 f"(candidates: {', '.join(layer.candidates)})")
            blocks.append({"op": op, "c_in": layer.c_in, "c_out": layer.c_out,
                           "stride": layer.stride})
        return {
            "name": name,
            "input": {"channels": self.in_channels, "resolution": self.resolution},
            "stem": {"channels": self.stem_channels, "kernel": self.stem_kernel,
                     "stride": self.stem_stride},
            "blocks": blocks,
            "head": {"channels": self.head_channels, "classes": self.num_classes},
        }

    def summary(self) -> str:
        lines = [f"space {self.name}: input {self.in_channels}x{self.resolution}x{self.resolution}, "
                 f"{len(self.layers)} searchable layers, hash {self.hash}"]
        for l in self.layers:
            lines.append(f"  layer {l.index:2d} stage {l.stage} {l.c_in:4d}->{l.c_out:<4d} "
                         f"s{l.stride} {l.h}x{l.w}  [{len(l.candidates)} candidates]")
        return "\n".join(lines)


def bundled_spaces() -> dict[str, Any]:
    """Names of the spaces that ship in fbnas/spaces, mapped to their files."""
    return bundled("spaces")


def load_space(name_or_path: str | Path) -> SearchSpace:
    """Load a bundled space by name (e.g. ``fbnet_cifar``) or a space YAML file by path."""
    if names_a_file(name_or_path):
        source = Path(name_or_path)
        if not source.is_file():
            raise FbnasError(f"space file {source} does not exist")
    else:
        spaces = bundled_spaces()
        if str(name_or_path) not in spaces:
            raise FbnasError(f"unknown space {brief(str(name_or_path))}: give a YAML file path or "
                             f"one of {', '.join(spaces) or '(none found)'}")
        source = spaces[str(name_or_path)]
    raw = load_yaml(source, "space file")
    if not isinstance(raw, dict):
        raise FbnasError(f"space file {source} must hold a mapping at the top level")
    return SearchSpace(raw)
