"""Architectures as data: sampling from theta, the model definition file, build_model.

An architecture file is JSON holding many named architectures, like FBNet's model
definition dictionary::

    {"schema": "fbnas.arch/1", "architectures": {"NAME": {<model definition>, ...}}}

Each entry is a model definition that :class:`fbnas.model.Network` builds (input, stem,
blocks, head) plus where it came from: the space, the checkpoint and lookup table (with
hashes), the per-layer theta probabilities and the predicted latency, FLOPs and params.
"""

from __future__ import annotations

import copy
import math
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

import fbnas
from fbnas.errors import FbnasError
from fbnas.io import CHECKPOINT_FORMAT, file_hash, load_torch, read_json, write_json
from fbnas.space import SearchSpace

SCHEMA = "fbnas.arch/1"
CORE_KEYS = ("input", "stem", "blocks", "head")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

Warn = Callable[[str], None]


def warn_stderr(msg: str) -> None:
    """Default warning sink: one line on stderr, so stdout stays the result."""
    print(f"warning: {msg}", file=sys.stderr, flush=True)


def warn_other_machine(lut, warn: Warn = warn_stderr) -> None:
    """Warn once when ``lut`` was measured on another CPU model than this machine's."""
    note = lut.other_machine()
    if note:
        warn(note)


# --------------------------------------------------------------------------- checkpoints


def resolve_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(checkpoint file, run folder) for a run folder or a checkpoint file."""
    path = Path(path)
    if path.is_dir():
        ckpt = path / "checkpoints" / "last.pt"
        if not ckpt.is_file():
            raise FbnasError(f"{path} holds no checkpoints/last.pt; give a run folder written "
                             "by fbnas train or a checkpoint file")
        return ckpt, path
    if not path.exists():
        raise FbnasError(f"{path} does not exist; give a run folder or a checkpoint file")
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return path, run_dir


@dataclass
class SearchCheckpoint:
    """A search checkpoint reduced to what sampling needs."""

    path: Path
    run_dir: Path
    space: SearchSpace
    probs: list[np.ndarray]
    epoch: int
    lut_path: str | None
    lut_hash: str | None
    hash: str

    @property
    def run_name(self) -> str:
        return safe_name(self.run_dir.resolve().name or "arch")


def load_search_checkpoint(path: str | Path) -> SearchCheckpoint:
    """Load a search checkpoint (a run folder or file) and check its theta against its space."""
    import torch

    ckpt_path, run_dir = resolve_checkpoint(path)
    ck = load_torch(ckpt_path)
    where = f"checkpoint {ckpt_path}"
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        got = ck.get("format") if isinstance(ck, dict) else type(ck).__name__
        raise FbnasError(f"{where} is not an fbnas checkpoint (format {got!r}, want "
                         f"{CHECKPOINT_FORMAT!r})")
    if ck.get("kind") != "search":
        raise FbnasError(f"{where} is a {ck.get('kind')!r} checkpoint, not a search checkpoint; "
                         "sample from the run folder of fbnas train")
    for key in ("space", "theta"):
        if key not in ck:
            raise FbnasError(f"{where} lacks '{key}' (truncated or from an older fbnas?)")
    if not isinstance(ck["space"], dict):
        raise FbnasError(f"{where}: 'space' must be the space mapping")
    try:
        space = SearchSpace.from_dict(ck["space"])
    except FbnasError as e:
        raise FbnasError(f"{where} holds an invalid space: {e}") from None
    if ck.get("space_hash") not in (None, space.hash):
        raise FbnasError(f"{where}: its space hashes to {space.hash}, but it records "
                         f"{ck['space_hash']}; it was written by an incompatible fbnas")
    theta = ck["theta"]
    if not isinstance(theta, (list, tuple)) or len(theta) != len(space.layers):
        n = len(theta) if isinstance(theta, (list, tuple)) else type(theta).__name__
        raise FbnasError(f"{where}: theta has {n} layers, space {space.name} has "
                         f"{len(space.layers)}")
    probs = []
    for layer, t in zip(space.layers, theta):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() != len(layer.candidates):
            raise FbnasError(f"{where}: theta of layer {layer.index} must be a 1-D tensor of "
                             f"{len(layer.candidates)} values (one per candidate)")
        v = t.detach().double().numpy()
        if not np.all(np.isfinite(v)):
            raise FbnasError(f"{where}: theta of layer {layer.index} is not finite (the search "
                             "diverged); sample from an earlier checkpoint")
        e = np.exp(v - v.max())
        probs.append(e / e.sum())
    epoch = ck.get("epoch")
    return SearchCheckpoint(
        path=ckpt_path, run_dir=run_dir, space=space, probs=probs,
        epoch=int(epoch) if isinstance(epoch, int) else -1,
        lut_path=ck.get("lut_path") if isinstance(ck.get("lut_path"), str) else None,
        lut_hash=ck.get("lut_hash") if isinstance(ck.get("lut_hash"), str) else None,
        hash=file_hash(ckpt_path))


def resolve_lut(ck: SearchCheckpoint, lut_path: str | Path | None = None,
                warn: Warn = warn_stderr):
    """The table to predict with: ``lut_path`` or the search's own, checked against the space.

    A missing table is an error (predictions are part of every definition). A table whose
    hash differs from the search's only warns: ``fbnas calibrate`` adds a calibration in
    place, which changes the hash but not the entries the search trained against.
    """
    from fbnas.lut import load_lut

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


# --------------------------------------------------------------------------- sampling


def safe_name(text: str) -> str:
    """``text`` with characters outside [A-Za-z0-9_.-] replaced, usable as a default name."""
    s = re.sub(r"[^A-Za-z0-9_.\-]", "_", text).lstrip("_.-")
    return s or "arch"


def check_name(name: str) -> str:
    """Raise FbnasError unless ``name`` is a usable architecture name."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise FbnasError(f"architecture name {name!r} must start with a letter or digit and "
                         "hold only letters, digits, '_', '.' and '-'")
    return name


def hard_ops(space: SearchSpace, probs: list[np.ndarray]) -> list[str]:
    """Each layer's most probable candidate (the first one on ties)."""
    return [layer.candidates[int(np.argmax(p))] for layer, p in zip(space.layers, probs)]


def draw_ops(space: SearchSpace, probs: list[np.ndarray], num: int,
             seed: int) -> list[list[str]]:
    """``num`` architectures, each layer drawn from softmax(theta); draw i depends on seed only."""
    rng = np.random.default_rng(seed)
    return [[layer.candidates[int(rng.choice(len(p), p=p))]
             for layer, p in zip(space.layers, probs)] for _ in range(num)]


def log_probability(space: SearchSpace, probs: list[np.ndarray], ops: list[str]) -> float:
    """log P(ops) under the independent per-layer softmax(theta)."""
    return float(sum(math.log(max(float(p[layer.candidates.index(op)]), 1e-300))
                     for layer, p, op in zip(space.layers, probs, ops)))


def make_entry(ck: SearchCheckpoint, lut, ops: list[str], name: str, sampling: dict) -> dict:
    """The architecture file entry of ``ops``: model definition plus provenance and predictions."""
    space = ck.space
    defn = space.definition(ops, name)
    for block, layer in zip(defn["blocks"], space.layers):
        block["stage"] = layer.stage
    cal = lut.calibration is not None
    env = lut.data["environment"]
    logp = log_probability(space, ck.probs, ops)
    return {
        "name": name,
        "space": {"name": space.name, "hash": space.hash},
        **{k: defn[k] for k in CORE_KEYS},
        "predicted": {
            "latency_us": round(lut.predict(ops), 3),
            "calibrated": cal,
            "table_sum_us": round(lut.raw_sum(ops), 3),
            "flops": int(lut.raw_sum(ops, "flops")),
            "params": int(lut.raw_sum(ops, "params")),
            "batch": lut.batch,
            "threads": lut.threads,
            "cpu": env.get("cpu"),
        },
        "sampling": sampling,
        "probability": float(math.exp(logp)),
        "log_probability": round(logp, 6),
        "theta_softmax": [{op: round(float(x), 6) for op, x in zip(layer.candidates, p)}
                          for layer, p in zip(space.layers, ck.probs)],
        "source": {
            "checkpoint": str(ck.path),
            "checkpoint_hash": ck.hash,
            "epoch": ck.epoch,
            "lut": str(lut.path) if lut.path else None,
            "lut_hash": file_hash(lut.path) if lut.path else None,
            "search_lut_hash": ck.lut_hash,
        },
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fbnas": fbnas.__version__,
    }


def sample_architectures(ck: SearchCheckpoint, lut, hard: bool, num: int = 1, seed: int = 0,
                         name: str | None = None) -> list[dict]:
    """Entries for the hard architecture or ``num`` distinct draws, fastest predicted first."""
    if hard:
        base = check_name(name) if name else f"{ck.run_name}_hard"
        return [make_entry(ck, lut, hard_ops(ck.space, ck.probs), base, {"method": "argmax"})]
    if num < 1:
        raise FbnasError("--num must be at least 1")
    draws = draw_ops(ck.space, ck.probs, num, seed)
    first: dict[tuple[str, ...], int] = {}
    for i, ops in enumerate(draws):
        first.setdefault(tuple(ops), i)
    entries = []
    for ops, i in first.items():
        if name:
            nm = check_name(name) if num == 1 else f"{check_name(name)}_{i}"
        else:
            nm = f"{ck.run_name}_seed{seed}_{i}"
        times = sum(1 for d in draws if tuple(d) == ops)
        entries.append(make_entry(ck, lut, list(ops), nm,
                                  {"method": "softmax", "seed": seed, "draw": i,
                                   "times_drawn": times, "draws": num}))
    entries.sort(key=lambda e: e["predicted"]["latency_us"])
    return entries


# --------------------------------------------------------------------------- the file


def _check_file_dict(data: Any, where: str) -> dict:
    if not isinstance(data, dict):
        raise FbnasError(f"{where} must hold a JSON object at the top level")
    if data.get("schema") != SCHEMA:
        raise FbnasError(f"{where} has schema {data.get('schema')!r}; this fbnas reads "
                         f"{SCHEMA!r} architecture files")
    archs = data.get("architectures")
    if not isinstance(archs, dict) or not archs:
        raise FbnasError(f"{where} has no 'architectures' object (truncated or hand-edited?)")
    for nm, d in archs.items():
        if not isinstance(d, dict):
            raise FbnasError(f"{where}: architecture {nm!r} is not an object")
    return data


def read_arch_file(path: str | Path) -> dict:
    """Read an architecture file: ``{"schema", "architectures": {name: definition}}``.

    A file holding one bare model definition (with 'blocks' at the top) is accepted too and
    returned wrapped, so hand-written definitions work everywhere a file does.
    """
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
    from fbnas.model import validate_definition

    if isinstance(source, dict):
        if "architectures" in source:
            data = _check_file_dict(source, "architecture dict")
            where = "the architecture dict"
        elif "blocks" in source:
            nm = source.get("name") if isinstance(source.get("name"), str) else "arch"
            if name is not None and name != nm:
                raise FbnasError(f"the definition is named {nm!r}, not {name!r}")
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
        raise FbnasError(f"{where} has no architecture {name!r}; it holds: {', '.join(archs)}")
    defn = copy.deepcopy(archs[name])
    defn["name"] = name
    try:
        validate_definition(defn)
    except FbnasError as e:
        raise FbnasError(f"architecture {name} in {where}: {e}") from None
    return name, defn


def build_model(path_or_definition: str | Path | dict, name: str | None = None,
                dropout: float = 0.0):
    """The :class:`fbnas.model.Network` of an architecture file, file dict or definition."""
    from fbnas.model import Network

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
    sp = defn.get("space")
    return sp.get("hash") if isinstance(sp, dict) and isinstance(sp.get("hash"), str) else None


# --------------------------------------------------------------------------- shapes and the LUT


def _out(size: int, stride: int) -> int:
    return (size - 1) // stride + 1


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
    h = _out(r, st["stride"])
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
        h = _out(h, b["stride"])
        prev_stage, prev_c = stage, b["c_out"]
    hd = defn["head"]
    rows.append(Row("head", "", f"conv1x1 {hd['channels']}, fc {hd['classes']}",
                    defn["blocks"][-1]["c_out"], hd["channels"], 1, h))
    return rows


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
    if (head["c_in"], head["h"], head["op"]) != (rows[-1].c_in, rows[-1].h,
                                                 f"head_{hd['channels']}x{hd['classes']}"):
        raise FbnasError(f"the head of {name} differs from the one in {where}; pass the table "
                         "of its space with --lut")
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


def recorded_lut(defn: dict, lut_path: str | Path | None, warn: Warn = warn_stderr):
    """The table given by ``lut_path``, else the one the entry records if it still exists."""
    from fbnas.lut import load_lut

    if lut_path is not None:
        return load_lut(lut_path)
    src = defn.get("source")
    rec = src.get("lut") if isinstance(src, dict) else None
    if not isinstance(rec, str):
        return None
    if not Path(rec).is_file():
        warn(f"the architecture's lookup table {rec} does not exist here; pass --lut PATH "
             "for predictions")
        return None
    return load_lut(rec)


# --------------------------------------------------------------------------- text


def table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    """Plain aligned columns; ``right`` holds the indexes of right-aligned columns."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def fmt(r):
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        return "  ".join(cells).rstrip()

    return "\n".join([fmt(headers), *(fmt(r) for r in rows)])


def human(n: float) -> str:
    """12345 -> '12.3k', 1.2e6 -> '1.20M'."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def format_entry(entry: dict, lut=None) -> str:
    """An architecture as a per-stage table: op, channels, stride, input size, p(op), latency."""
    rows = layer_rows(entry)
    lats = row_latencies(entry, lut) if lut is not None else None
    theta = entry.get("theta_softmax") if isinstance(entry.get("theta_softmax"), list) else None
    out = []
    for i, r in enumerate(rows):
        p = ""
        if theta and 0 < i < len(rows) - 1 and i - 1 < len(theta):
            p = f"{theta[i - 1].get(r.op, 0.0):.2f}"
        out.append([r.stage, r.label, r.op,
                    f"{r.c_in}->{r.c_out}", str(r.stride), f"{r.h}x{r.h}", p,
                    f"{lats[i]:.1f}" if lats else "-"])
    sp = entry.get("space") if isinstance(entry.get("space"), dict) else {}
    head = (f"architecture {entry.get('name')} (space {sp.get('name', '?')}, "
            f"{len(entry['blocks'])} blocks)")
    body = table(["stage", "layer", "op", "channels", "stride", "input", "p(op)", "table us"],
                 out, right={4, 6, 7})
    lines = [head, body]
    pred = entry.get("predicted")
    if isinstance(pred, dict) and "latency_us" in pred:
        how = (f"calibrated; table sum {pred['table_sum_us']:.1f} us" if pred.get("calibrated")
               else "uncalibrated table sum")
        lines.append(f"predicted latency {pred['latency_us']:.1f} us ({how}, batch "
                     f"{pred.get('batch')}), {human(pred['flops'])} FLOPs, "
                     f"{human(pred['params'])} params")
    return "\n".join(lines)


def stage_ops(entry: dict) -> str:
    """The ops of an entry grouped by stage: 'k3_e1 | k5_e1 skip | k3_e3'."""
    groups: list[list[str]] = []
    for r in layer_rows(entry)[1:-1]:
        if r.stage != "" or not groups:
            groups.append([])
        groups[-1].append(r.op)
    return " | ".join(" ".join(g) for g in groups)


def format_ranked(entries: list[dict], num: int, seed: int) -> str:
    """Sampled architectures ranked by predicted latency."""
    rows = []
    for rank, e in enumerate(entries, 1):
        pr = e["predicted"]
        rows.append([str(rank), e["name"], f"{pr['latency_us']:.1f}", human(pr["flops"]),
                     human(pr["params"]), f"{e['probability']:.2e}",
                     str(e["sampling"].get("times_drawn", 1)), stage_ops(e)])
    head = (f"{num} draw(s) from softmax(theta) with seed {seed}: {len(entries)} distinct, "
            "fastest predicted first")
    return head + "\n" + table(["rank", "name", "latency us", "FLOPs", "params", "p(theta)",
                                "drawn", "ops by stage"], rows, right={0, 2, 3, 4, 5, 6})


# --------------------------------------------------------------------------- measure, summarise


def measure_latency(defn: dict, threads: int, batch: int, rounds: int = 60,
                    block_time: float = 0.004, seed: int = 0, lut=None,
                    ops: list[str] | None = None, runtime: str = "eager"
                    ) -> tuple[dict, float | None]:
    """Whole-network latency (median/IQR/min in us) in ``runtime`` with the profiling protocol.

    For ``onnxruntime`` the network is exported as ``fbnas export --format onnx`` exports it.
    With ``lut`` and the architecture's ``ops``, the table entries it uses are re-timed in the
    same rounds (which also lets the drift correction work); the second value is then their
    summed re-timed latency, in us, else None.
    """
    import torch

    from fbnas.lut import arch_entries, entry_runners, profile_units
    from fbnas.model import Network
    from fbnas.runtimes import make_runtime
    from fbnas.timing import measure_rounds, set_threads

    set_threads(threads)
    rt = make_runtime(runtime, threads)
    torch.manual_seed(seed)
    model = Network(defn).eval()
    items = rt.runners({"network": (model, torch.randn(model.input_shape(batch)))},
                       desc="preparing the network")
    uses = []
    units = [["network"]]
    if lut is not None:
        space = lut.space()
        specs = arch_entries(space, ops, batch)
        uses = [spec.key for spec in specs]
        distinct = {spec.key: spec for spec in specs}
        items.update(entry_runners(rt, space, distinct))
        units += profile_units(distinct)
    timings = measure_rounds(items, threads, units=units, rounds=rounds, block_time=block_time,
                             seed=seed, desc="latency")
    stats = timings.summaries()
    retimed = sum(stats[key]["median"] for key in uses) if uses else None
    return stats["network"], retimed


def latency_report(defn: dict, lut=None, threads: int | None = None, batch: int | None = None,
                   rounds: int = 60, block_time: float = 0.004, seed: int = 0,
                   runtime: str | None = None, warn: Warn = warn_stderr) -> str:
    """Measure ``defn`` and compare with ``lut``'s prediction; threads, batch and runtime
    default to the table's (the runtime to onnxruntime without a table).

    The error is (predicted - measured) / measured. A table profiled at another batch or in
    another runtime is refused: its entries say nothing about either. The table's entries
    used by ``defn`` are re-timed alongside it, which tells how fast the machine runs now
    compared with when the table was profiled, and gives the prediction at today's speed.
    """
    from fbnas.runtimes import DEFAULT_RUNTIME

    name = defn.get("name", "the architecture")
    ops = match_lut(defn, lut, name) if lut is not None else None
    if lut is not None:
        runtime = lut.check_runtime(runtime)
        if batch is not None and batch != lut.batch:
            raise FbnasError(f"lookup table {lut.path} was profiled at batch {lut.batch}, not "
                             f"{batch}; drop --batch or profile a table with --batch {batch}")
        if threads is not None and threads != lut.threads:
            warn(f"lookup table {lut.path} was profiled with {lut.threads} thread(s), "
                 f"measuring with {threads}")
        warn_other_machine(lut, warn)
    runtime = runtime or DEFAULT_RUNTIME
    batch = batch or (lut.batch if lut is not None else 1)
    threads = threads or (lut.threads if lut is not None else 1)
    m, retimed = measure_latency(defn, threads, batch, rounds=rounds, block_time=block_time,
                                 seed=seed, lut=lut, ops=ops, runtime=runtime)
    lines = [f"architecture {name}: batch {batch}, {threads} thread(s), runtime {runtime}",
             f"measured  {m['median']:10.1f} us  (IQR {m['iqr']:.1f} us, min {m['min']:.1f} us, "
             f"{m['runs']} timed blocks)"]
    if lut is None:
        lines.append("no lookup table: pass --lut PATH to compare with a prediction")
        return "\n".join(lines)

    def err(x: float) -> str:
        return f"error {100 * (x - m['median']) / m['median']:+.1f}%"

    pred = lut.predict(ops)
    raw = lut.raw_sum(ops)
    how = "calibrated" if lut.calibration else "table sum, uncalibrated"
    lines.append(f"predicted {pred:10.1f} us  ({how}, {lut.path})  {err(pred)}")
    if lut.calibration:
        lines.append(f"table sum {raw:10.1f} us  {err(raw)}")
    speed = retimed / raw
    lines.append(f"now       {pred * speed:10.1f} us  (the prediction at this run's speed: the "
                 f"architecture's table entries, re-timed alongside it, took {speed:.3f}x "
                 f"their stored times)  {err(pred * speed)}")
    return "\n".join(lines)


@dataclass
class LayerStat:
    """What :func:`layer_stats` gathers for one row."""

    row: Row
    out_shape: tuple[int, ...]
    params: int
    flops: int


def layer_stats(defn: dict, batch: int = 1) -> list[LayerStat]:
    """Per stem/block/head: output shape (forward hooks), params and FLOPs of one forward."""
    import torch

    from fbnas.lut import count_cost
    from fbnas.model import Network

    model = Network(defn).eval()
    modules = [model.stem, *model.blocks, model.head]
    seen: dict[int, tuple[torch.Tensor, tuple[int, ...]]] = {}
    hooks = [m.register_forward_hook(
        lambda mod, args, out, i=i: seen.__setitem__(i, (args[0].clone(), tuple(out.shape))))
        for i, m in enumerate(modules)]
    try:
        with torch.inference_mode():
            model(torch.randn(model.input_shape(batch)))
    finally:
        for h in hooks:
            h.remove()
    stats = []
    for i, (row, m) in enumerate(zip(layer_rows(defn), modules)):
        x, shape = seen[i]
        flops, params = count_cost(m, x)
        stats.append(LayerStat(row, shape, params, flops))
    return stats


def format_summary(defn: dict, lut=None) -> str:
    """The per-layer summary table, with table latencies when ``lut`` is given."""
    batch = lut.batch if lut is not None else 1
    stats = layer_stats(defn, batch)
    lats = row_latencies(defn, lut) if lut is not None else None
    total_lat = sum(lats) if lats else 0.0
    rows = []
    for i, s in enumerate(stats):
        lat = f"{lats[i]:.1f}" if lats else "-"
        share = f"{100 * lats[i] / total_lat:.0f}%" if lats else "-"
        rows.append([s.row.label, s.row.op, "x".join(map(str, s.out_shape)), f"{s.params:,}",
                     human(s.flops), lat, share])
    tp = sum(s.params for s in stats)
    tf = sum(s.flops for s in stats)
    rows.append(["total", "", "", f"{tp:,}", human(tf), f"{total_lat:.1f}" if lats else "-",
                 "100%" if lats else "-"])
    sp = defn.get("space") if isinstance(defn.get("space"), dict) else {}
    inp = defn["input"]
    shape = f"{batch}x{inp['channels']}x{inp['resolution']}x{inp['resolution']}"
    lines = [f"architecture {defn.get('name')} (space {sp.get('name', '?')}), input {shape}",
             table(["layer", "op", "output", "params", "FLOPs", "table us", "share"], rows,
                   right={3, 4, 5, 6})]
    if lut is not None:
        ops = match_lut(defn, lut, defn.get("name", "the architecture"))
        cal = lut.calibration
        pred = lut.predict(ops)
        how = "calibrated" if cal else "uncalibrated: table sum"
        lines.append(f"predicted latency {pred:.1f} us ({how}) by {lut.path}, batch {lut.batch}, "
                     f"{lut.threads} thread(s)")
    else:
        lines.append("no lookup table: pass --lut PATH for per-layer latencies")
    return "\n".join(lines)
