"""An architecture against a lookup table: which table predicts it, and whether it fits.

A table's entries say something about an architecture only if the table profiled exactly its
layers: the same space, and at every block the same shapes, stride and an op it timed. The
functions here find the table that goes with a search or an architecture, check the fit layer
by layer with errors that name the first mismatch, and read the per-layer latencies.
"""

from __future__ import annotations

from pathlib import Path

from fbnas.checkpoint import SearchCheckpoint
from fbnas.definition import layer_rows, space_hash_of
from fbnas.errors import FbnasError, Warn, warn_stderr
from fbnas.io import file_hash


def warn_other_machine(lut, warn: Warn = warn_stderr) -> None:
    """Warn once when ``lut`` was measured on another CPU model than this machine's."""
    note = lut.other_machine()
    if note:
        warn(note)


def run_table(run_dir: Path, lut_hash: str | None) -> Path | None:
    """The copy of its lookup table a run directory keeps (RUN_DIR/lut.json), if it holds the
    table recorded by ``lut_hash``."""
    from fbnas.rundir import TABLE_COPY

    copy = Path(run_dir) / TABLE_COPY
    if copy.is_file() and (lut_hash is None or file_hash(copy) == lut_hash):
        return copy
    return None


def resolve_lut(ck: SearchCheckpoint, lut_path: str | Path | None = None,
                warn: Warn = warn_stderr):
    """The table to predict with: ``lut_path``, else the search's own (the run directory's
    copy; for a run directory without one, the table at the path it records), checked
    against the space.

    A missing table is an error (predictions are part of every definition). A recorded table
    whose hash differs from the search's only warns: ``fbnas calibrate`` adds a calibration
    in place, which changes the hash but not the entries the search trained against.
    """
    from fbnas.lut import load_lut

    if lut_path is None:
        lut_path = run_table(ck.run_dir, ck.lut_hash)
    if lut_path is None:
        if not ck.lut_path:
            raise FbnasError(f"checkpoint {ck.path} does not record its lookup table; "
                             "pass --lut PATH")
        if not Path(ck.lut_path).is_file():
            raise FbnasError(f"the search's lookup table {ck.lut_path} does not exist (paths "
                             "are relative to where fbnas train ran); pass --lut PATH")
        lut_path = ck.lut_path
    lut = load_lut(lut_path)
    lut.check_space(ck.space)
    warn_other_machine(lut, warn)
    h = file_hash(lut_path)
    if ck.lut_hash and h != ck.lut_hash:
        warn(f"lookup table {lut_path} (hash {h}) is not the file the search used (hash "
             f"{ck.lut_hash}); it was re-profiled or calibrated since, predictions use it as "
             "it is now")
    return lut


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


def recorded_lut(defn: dict, lut_path: str | Path | None, warn: Warn = warn_stderr,
                 arch_path: str | Path | None = None):
    """The table given by ``lut_path``, else the one the entry records if it still exists,
    else the run's copy next to the architecture file ``arch_path`` (RUN_DIR/arch.json and
    RUN_DIR/lut.json, wherever the run directory has moved) if it is the recorded table."""
    from fbnas.lut import load_lut

    if lut_path is not None:
        return load_lut(lut_path)
    src = defn.get("source")
    rec = src.get("lut") if isinstance(src, dict) else None
    if not isinstance(rec, str):
        return None
    if not Path(rec).is_file() and arch_path is not None:
        h = src.get("lut_hash")
        copy = run_table(Path(arch_path).parent, h) if isinstance(h, str) else None
        if copy is not None:
            return load_lut(copy)
    if not Path(rec).is_file():
        warn(f"the architecture's lookup table {rec} does not exist here; pass --lut PATH "
             "for predictions")
        return None
    return load_lut(rec)
