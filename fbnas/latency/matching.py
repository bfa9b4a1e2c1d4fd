"""An architecture against a lookup table: whether the table fits it, and what it predicts.

A table's entries say something about an architecture only if the table profiled exactly its
layers: the same space, and at every block the same shapes, stride and an op it timed. The
functions here check the fit layer by layer with errors that name the first mismatch, and
read the per-layer latencies. Which table goes with a run or an architecture it wrote is the
run directory's business (fbnas.runs.rundir).
"""

from __future__ import annotations

from pathlib import Path

from fbnas.arch.definition import layer_rows, space_hash_of
from fbnas.errors import FbnasError, Warn, warn_stderr
from fbnas.io import file_hash


def warn_other_machine(lut, warn: Warn = warn_stderr) -> None:
    """Warn once when ``lut`` was measured on another CPU model than this machine's."""
    note = lut.other_machine()
    if note:
        warn(note)


def match_lut(defn: dict, lut, name: str = "the architecture") -> list[str]:
    """The ops of ``defn`` after checking every layer is the one ``lut`` profiled; else error."""
    where = f"lookup table {lut.path}" if lut.path else "the lookup table"
    h = space_hash_of(defn)
    if h and h != lut.space_hash:
        sp = defn["space"].get("name", "?")
        raise FbnasError(f"{name} is from space {sp} (hash {h}) but {where} was profiled for "
                         f"space {lut.data['space']['name']} (hash {lut.space_hash}); pass the "
                         f"table of space {sp} with --lut")
    layers = lut.data["layers"]
    blocks = defn["blocks"]
    if len(layers) != len(blocks):
        raise FbnasError(f"{name} has {len(blocks)} blocks but {where} has {len(layers)} "
                         "layers; pass the table of its space with --lut")
    rows = layer_rows(defn)
    stem = lut.entry(lut.data["fixed"]["stem"])
    st = defn["stem"]
    if (stem["c_in"], stem["c_out"], stem["stride"], stem["h"], stem["op"]) != (
            defn["input"]["channels"], st["channels"], st["stride"], defn["input"]["resolution"],
            f"stem_k{st['kernel']}"):
        raise FbnasError(f"the stem of {name} differs from the one in {where}; pass the table "
                         "of its space with --lut")
    ops = []
    for i, (row, layer) in enumerate(zip(rows[1:-1], layers)):
        mine = (row.c_in, row.c_out, row.stride, row.h)
        theirs = (layer["c_in"], layer["c_out"], layer["stride"], layer["h"])
        if mine != theirs:
            raise FbnasError(f"block {i} of {name} is {row.c_in}->{row.c_out} s{row.stride} at "
                             f"{row.h}x{row.h}, {where} layer {i} is {theirs[0]}->{theirs[1]} "
                             f"s{theirs[2]} at {theirs[3]}x{theirs[3]}; pass the table of its "
                             "space with --lut")
        if row.op not in layer["candidates"]:
            raise FbnasError(f"block {i} of {name} uses {row.op}, which {where} did not profile "
                             f"at that layer (has {', '.join(layer['candidates'])})")
        ops.append(row.op)
    head = lut.entry(lut.data["fixed"]["head"])
    hd = defn["head"]
    mine = f"head_{hd['channels']}x{hd['classes']}"
    if (head["c_in"], head["h"]) != (rows[-1].c_in, rows[-1].h):
        raise FbnasError(f"the head of {name} differs from the one in {where}; pass the table "
                         "of its space with --lut")
    if head["op"] != mine:
        # the blocks fit, only the head's width or classes differ (FBNet-A's 1504 channels)
        raise FbnasError(f"the head of {name} (1x1 conv to {hd['channels']} channels, "
                         f"{hd['classes']} classes) differs from the one in {where} "
                         f"({head['op']}), so the table cannot predict it")
    return ops


def row_latencies(defn: dict, lut) -> list[float]:
    """Table latency (us) of each row of :func:`layer_rows`, after :func:`match_lut`."""
    ops = match_lut(defn, lut, defn.get("name", "the architecture"))
    fixed = lut.data["fixed"]
    lats = [lut.entry(fixed["stem"])["median"]]
    lats += [lut.entry(layer["candidates"][op])["median"]
             for layer, op in zip(lut.data["layers"], ops)]
    lats.append(lut.entry(fixed["head"])["median"])
    return [float(x) for x in lats]
