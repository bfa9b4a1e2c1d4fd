"""The architecture file: named model definitions as JSON, read, written and checked.

An architecture file holds many named architectures, like FBNet's model definition
dictionary::

    {"schema": "fbnas.arch/1", "architectures": {"NAME": {<model definition>, ...}}}

Each entry is a model definition that :class:`fbnas.arch.model.Network` builds (input, stem,
blocks, head) plus where it came from: the space, the checkpoint and lookup table (with
hashes), the per-layer theta probabilities and the predicted latency, multiply-adds (``macs``;
files written before counts were MACs hold ``flops``, 2 per multiply-add) and params. A file
holding one bare definition is read as a file of one architecture, so hand-written
definitions work everywhere. The package ships published networks as such files
(``fbnas/archs/``, e.g. FBNet-C of the ``fbnet_imagenet`` space), which every command taking
an architecture file also finds by bare name (``fbnas summary fbnet_c``). This module also
walks a definition layer by layer (:func:`layer_rows`) and compares two of them
(:func:`structure_difference`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fbnas.arch.ops import out_size
from fbnas.errors import FbnasError, brief
from fbnas.io import parse_json, read_json, write_json
from fbnas.resources import JSON_SUFFIXES, bundled, names_a_file

SCHEMA = "fbnas.arch/1"
CORE_KEYS = ("input", "stem", "blocks", "head")


def _check_file_dict(data: Any, where: str) -> dict:
    if not isinstance(data, dict):
        raise FbnasError(f"{where} must hold a JSON object at the top level")
    if data.get("schema") != SCHEMA:
        raise FbnasError(f"{where} has schema {brief(data.get('schema'))}; this fbnas reads "
                         f"{SCHEMA!r} architecture files")
    archs = data.get("architectures")
    if not isinstance(archs, dict) or not archs:
        raise FbnasError(f"{where} has no 'architectures' object (truncated or hand-edited?)")
    for nm, d in archs.items():
        if not isinstance(d, dict):
            raise FbnasError(f"{where}: architecture {brief(nm)} is not an object")
    return data


def bundled_archs() -> dict[str, Any]:
    """Names of the architecture files that ship in fbnas/archs, mapped to their files."""
    return bundled("archs", JSON_SUFFIXES)


def read_arch_file(path: str | Path) -> dict:
    """Read an architecture file: ``{"schema", "architectures": {name: definition}}``.

    A file holding one bare model definition (with 'blocks' at the top) is accepted too and
    returned wrapped, so hand-written definitions work everywhere a file does. A bare name
    that is no file here (no folder, no ``.json``) names a bundled architecture file.
    """
    if not names_a_file(path, suffixes=JSON_SUFFIXES):
        archs = bundled_archs()
        if str(path) not in archs:
            raise FbnasError(f"architecture file {path} does not exist, and no bundled "
                             f"architecture has that name ({', '.join(archs) or 'none'})")
        data = parse_json(archs[str(path)].read_text(encoding="utf-8"),
                          f"bundled architecture file {path}")
    else:
        data = read_json(path, "architecture file")
    if isinstance(data, dict) and "architectures" not in data and "blocks" in data:
        nm = data.get("name") if isinstance(data.get("name"), str) else Path(path).stem
        return {"schema": SCHEMA, "architectures": {nm: data}}
    return _check_file_dict(data, f"architecture file {path}")


def add_architectures(path: str | Path, entries: list[dict], force: bool = False) -> None:
    """Add ``entries`` to the file at ``path`` (created if absent), atomically.

    Names already present are refused (all of them listed) unless ``force``.
    """
    path = Path(path)
    if path.exists():
        data = read_json(path, "architecture file")
        if not (isinstance(data, dict) and "architectures" in data):
            raise FbnasError(f"{path} exists and is not an fbnas architecture file; choose "
                             "another --out")
        _check_file_dict(data, f"architecture file {path}")
    else:
        data = {"schema": SCHEMA, "architectures": {}}
    taken = [e["name"] for e in entries if e["name"] in data["architectures"]]
    if taken and not force:
        raise FbnasError(f"{path} already holds architecture(s) {', '.join(taken)}; pass "
                         "--name NEW or --force to replace")
    for e in entries:
        data["architectures"][e["name"]] = e
    write_json(path, data)


def select(source: str | Path | dict, name: str | None = None) -> tuple[str, dict]:
    """(name, validated definition) from a path, a file dict or a single definition dict."""
    from fbnas.arch.model import validate_definition

    if isinstance(source, dict):
        if "architectures" in source:
            data = _check_file_dict(source, "architecture dict")
            where = "the architecture dict"
        elif "blocks" in source:
            nm = source.get("name") if isinstance(source.get("name"), str) else "arch"
            if name is not None and name != nm:
                raise FbnasError(f"the definition is named {brief(nm)}, not {brief(name)}")
            data = {"architectures": {nm: source}}
            where = "the definition"
        else:
            raise FbnasError("expected a model definition (with 'blocks') or an architecture "
                             "file dict (with 'architectures')")
    elif isinstance(source, (str, Path)):
        data = read_arch_file(source)
        where = str(source)
    else:
        raise FbnasError(f"expected a path or a dict, got {type(source).__name__}")
    archs = data["architectures"]
    if name is None:
        if len(archs) != 1:
            raise FbnasError(f"{where} holds {len(archs)} architectures; pick one by name "
                             f"(--name): {', '.join(archs)}")
        name = next(iter(archs))
    elif name not in archs:
        raise FbnasError(f"{where} has no architecture {brief(name)}; it holds: {', '.join(archs)}")
    defn = copy.deepcopy(archs[name])
    defn["name"] = name
    try:
        validate_definition(defn)
    except FbnasError as e:
        raise FbnasError(f"architecture {name} in {where}: {e}") from None
    return name, defn


def build_model(path_or_definition: str | Path | dict, name: str | None = None,
                dropout: float = 0.0):
    """The :class:`fbnas.arch.model.Network` of an architecture file, file dict or definition."""
    from fbnas.arch.model import Network

    _, defn = select(path_or_definition, name)
    return Network(defn, dropout=dropout)


def structure(defn: dict) -> dict:
    """The parts of a definition that decide the network (weights fit iff these are equal)."""
    return {
        "input": [defn["input"]["channels"], defn["input"]["resolution"]],
        "stem": [defn["stem"]["channels"], defn["stem"]["kernel"], defn["stem"]["stride"]],
        "blocks": [[b["op"], b["c_in"], b["c_out"], b["stride"]] for b in defn["blocks"]],
        "head": [defn["head"]["channels"], defn["head"]["classes"]],
    }


def structure_difference(a: dict, b: dict) -> str | None:
    """First structural difference of two definitions in words, or None when they match."""
    sa, sb = structure(a), structure(b)
    if len(sa["blocks"]) != len(sb["blocks"]):
        return f"{len(sa['blocks'])} blocks vs {len(sb['blocks'])}"
    for i, (x, y) in enumerate(zip(sa["blocks"], sb["blocks"])):
        if x != y:
            return (f"block {i} is {x[0]} {x[1]}->{x[2]} s{x[3]} vs {y[0]} {y[1]}->{y[2]} "
                    f"s{y[3]}")
    for key in ("input", "stem", "head"):
        if sa[key] != sb[key]:
            return f"{key} is {sa[key]} vs {sb[key]}"
    return None


def space_hash_of(defn: dict) -> str | None:
    """The hash of the space a definition records it came from, if any."""
    sp = defn.get("space")
    return sp.get("hash") if isinstance(sp, dict) and isinstance(sp.get("hash"), str) else None


@dataclass(frozen=True)
class Row:
    """One layer of a network in table order: stem, blocks, head."""

    label: str
    stage: str
    op: str
    c_in: int
    c_out: int
    stride: int
    h: int  # input height (square inputs)


def layer_rows(defn: dict) -> list[Row]:
    """Stem, each block and head with their input resolution."""
    r = defn["input"]["resolution"]
    st = defn["stem"]
    rows = [Row("stem", "", f"conv k{st['kernel']}", defn["input"]["channels"], st["channels"],
                st["stride"], r)]
    h = out_size(r, st["stride"])
    prev_stage, prev_c = None, st["channels"]
    auto = -1
    for i, b in enumerate(defn["blocks"]):
        if isinstance(b.get("stage"), int):
            stage = b["stage"]
        else:
            # Hand-written definitions carry no stage; a new width or a stride starts one.
            if b["c_out"] != prev_c or b["stride"] != 1 or auto < 0:
                auto += 1
            stage = auto
        shown = str(stage) if stage != prev_stage else ""
        rows.append(Row(f"{i}", shown, b["op"], b["c_in"], b["c_out"], b["stride"], h))
        h = out_size(h, b["stride"])
        prev_stage, prev_c = stage, b["c_out"]
    hd = defn["head"]
    rows.append(Row("head", "", f"conv1x1 {hd['channels']}, fc {hd['classes']}",
                    defn["blocks"][-1]["c_out"], hd["channels"], 1, h))
    return rows
