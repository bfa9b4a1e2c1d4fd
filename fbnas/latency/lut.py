"""Latency lookup tables: profiling every candidate at every layer, the file, validation.

Next to its latency every entry carries its compute in multiply-adds (``macs``) and its
parameter count, the units the NAS literature reports (the FBNet paper's "FLOPs" are
multiply-adds). Tables of the previous schema, which stored torch's FLOPs (2 per
multiply-add), are read and converted by :func:`upgrade`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fbnas.arch.model import Head, Stem
from fbnas.arch.ops import build_op
from fbnas.arch.space import Layer, SearchSpace
from fbnas.errors import FbnasError, brief, capped
from fbnas.io import read_json, refuse_overwrite, write_json
from fbnas.latency.runtimes import (DEFAULT_BLOCK_TIME, RUNTIMES, UNRECORDED_RUNTIME, Runner,
                                    Runtime, make_runtime)
from fbnas.latency.timing import environment, measure_rounds, protocol, set_threads
from fbnas.machine import cpu_difference, cpu_identity, cpu_model, describe_cpu

SCHEMA = "fbnas.lut/2"
#: the schema before entries counted multiply-adds; :func:`upgrade` converts it on load
PREVIOUS_SCHEMA = "fbnas.lut/1"
METRICS = ("latency", "macs", "params")


@dataclass(frozen=True)
class EntrySpec:
    """What one LUT entry times: a module at one input shape."""

    key: str
    kind: str  # "op", "stem" or "head"
    op: str
    c_in: int
    c_out: int
    stride: int
    h: int
    w: int
    batch: int

    def build(self, space: SearchSpace) -> nn.Module:
        if self.kind == "stem":
            return Stem(self.c_in, self.c_out, space.stem_kernel, self.stride)
        if self.kind == "head":
            return Head(self.c_in, space.head_channels, space.num_classes)
        return build_op(self.op, self.c_in, self.c_out, self.stride)

    def input(self) -> torch.Tensor:
        """A random input of the entry's shape."""
        return torch.randn(self.batch, self.c_in, self.h, self.w)

    def fields(self) -> dict:
        return {"kind": self.kind, "op": self.op, "c_in": self.c_in, "c_out": self.c_out,
                "stride": self.stride, "h": self.h, "w": self.w, "batch": self.batch}


def op_key(op: str, c_in: int, c_out: int, stride: int, h: int, w: int, batch: int) -> str:
    return f"{op}/{c_in}-{c_out}/s{stride}/{h}x{w}/b{batch}"


def layer_entries(layer: Layer, batch: int) -> dict[str, EntrySpec]:
    """Candidate op -> entry spec for one searchable layer."""
    return {op: EntrySpec(op_key(op, layer.c_in, layer.c_out, layer.stride, layer.h, layer.w,
                                 batch), "op", op, layer.c_in, layer.c_out, layer.stride,
                          layer.h, layer.w, batch)
            for op in layer.candidates}


def fixed_entries(space: SearchSpace, batch: int) -> dict[str, EntrySpec]:
    """The stem and head: not searched, but part of every network's latency."""
    r = space.resolution
    fh, fw = space.final_hw
    return {
        "stem": EntrySpec(op_key(f"stem_k{space.stem_kernel}", space.in_channels,
                                 space.stem_channels, space.stem_stride, r, r, batch),
                          "stem", f"stem_k{space.stem_kernel}", space.in_channels,
                          space.stem_channels, space.stem_stride, r, r, batch),
        "head": EntrySpec(op_key(f"head_{space.head_channels}x{space.num_classes}",
                                 space.final_channels, space.head_channels, 1, fh, fw, batch),
                          "head", f"head_{space.head_channels}x{space.num_classes}",
                          space.final_channels, space.head_channels, 1, fh, fw, batch),
    }


def arch_entries(space: SearchSpace, ops: list[str], batch: int) -> list[EntrySpec]:
    """The entries whose sum is the table's latency of an architecture: the stem, the head
    and each layer's chosen op."""
    return [*fixed_entries(space, batch).values(),
            *(layer_entries(layer, batch)[op] for layer, op in zip(space.layers, ops))]


def table_layout(space: SearchSpace, batch: int) -> tuple[dict[str, EntrySpec], list[dict],
                                                           dict[str, str]]:
    """(every distinct entry by key, the table's ``layers`` rows, its ``fixed`` keys): what
    ``fbnas profile`` times and writes for ``space`` at ``batch``, in its order."""
    specs: dict[str, EntrySpec] = {}
    layers = []
    for layer in space.layers:
        cand = layer_entries(layer, batch)
        for spec in cand.values():
            specs.setdefault(spec.key, spec)
        layers.append({"index": layer.index, "stage": layer.stage, "c_in": layer.c_in,
                       "c_out": layer.c_out, "stride": layer.stride, "h": layer.h, "w": layer.w,
                       "candidates": {op: s.key for op, s in cand.items()}})
    fixed = fixed_entries(space, batch)
    for spec in fixed.values():
        specs.setdefault(spec.key, spec)
    return specs, layers, {name: spec.key for name, spec in fixed.items()}


def count_cost(module: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(multiply-adds, parameters) of one forward pass of ``module`` on ``x``.

    Multiply-adds (MACs) are what papers compare networks by, FBNet's "FLOPs" included.
    They come from torch's own flop counter, which counts every convolution and matrix
    product (the classifier) at exactly 2 FLOPs per multiply-add and nothing else (batch
    norm, activations, pooling and residual additions are free), so half its count is the
    exact number of multiply-adds: for a KxK convolution with G groups, C_in -> C_out on an
    H_out x W_out output, N * H_out * W_out * C_out * (C_in / G) * K * K.
    """
    module.eval()
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        module(x)
    return int(counter.get_total_flops()) // 2, sum(p.numel() for p in module.parameters())


def entry_runners(runtime: Runtime, space: SearchSpace, specs: dict[str, EntrySpec]
                  ) -> dict[str, Runner]:
    """A runner per entry: its module built fresh at its shape, run in ``runtime`` (which
    exports each entry key once)."""
    return runtime.runners({key: (spec.build(space), spec.input()) for key, spec in specs.items()},
                           keyed=True, desc="preparing entries")


def profile_units(specs: dict[str, EntrySpec]) -> list[list[str]]:
    """Entries timed back to back in every round: the candidates of one shape together, so
    that their differences are measured moments apart; the stem and the head together."""
    units: dict[tuple, list[str]] = {}
    for key, spec in specs.items():
        group = ("fixed",) if spec.kind != "op" else (spec.c_in, spec.c_out, spec.stride,
                                                       spec.h, spec.w, spec.batch)
        units.setdefault(group, []).append(key)
    return list(units.values())


def contenders(units: list[list[str]], specs: dict[str, EntrySpec], stats: dict[str, dict],
               margin: float, rel_iqr: float, z: float = 3.0) -> list[list[str]]:
    """What deserves more rounds: per unit, the non-skip candidates whose gap to the fastest
    one is below both ``margin`` (relative) and ``z`` standard errors of the difference (their
    order, not yet settled, decides which op is the layer's cheapest), and any entry whose
    IQR exceeds ``rel_iqr`` of its median."""

    def se(k: str) -> float:  # standard error of a median, from the IQR of normal noise
        return 1.2533 * stats[k]["iqr"] / 1.349 / math.sqrt(stats[k]["runs"])

    todo = []
    for unit in units:
        ops = [k for k in unit if specs[k].kind == "op" and specs[k].op != "skip"]
        close = set()
        if len(ops) > 1:
            best = min(ops, key=lambda k: stats[k]["median"])
            m = stats[best]["median"]
            close = {k for k in ops if stats[k]["median"] - m
                     <= min(margin * m, z * math.hypot(se(k), se(best)))}
        if len(close) < 2:
            close = set()  # a settled winner needs no more rounds
        noisy = {k for k in unit if stats[k]["iqr"] > rel_iqr * stats[k]["median"]}
        if close or noisy:
            todo.append([k for k in unit if k in close or k in noisy])
    return todo


def profile_space(space: SearchSpace, threads: int = 1, batch: int = 1, rounds: int = 80,
                  block_time: float = DEFAULT_BLOCK_TIME, rel_iqr: float = 0.10, tie_margin: float = 0.03,
                  extra_time: float = 50.0, extra_rounds: int = 100_000, seed: int = 0,
                  source: str | None = None, runtime: str | Runtime = "eager") -> dict:
    """Time every distinct (op, shape) of ``space`` in ``runtime`` and return the LUT as a dict.

    The library defaults to ``eager``, which exports nothing, for callers that only need a
    table's layout (tests, supernet benchmarks); ``fbnas profile`` defaults to the deployment
    runtime, ``onnxruntime``.
    """
    if batch < 1:
        raise FbnasError("--batch must be at least 1")
    if threads < 1:
        raise FbnasError("--threads must be at least 1")
    set_threads(threads)
    rt = make_runtime(runtime, threads)
    torch.manual_seed(seed)
    specs, layers, fixed = table_layout(space, batch)
    built = {key: (spec.build(space), spec.input()) for key, spec in specs.items()}
    costs = {key: count_cost(module, x) for key, (module, x) in built.items()}
    fns = rt.runners(built, keyed=True, desc="preparing entries")

    started = time.monotonic()
    warmup = 3
    units = profile_units(specs)
    timings = measure_rounds(
        fns, threads, units=units, rounds=rounds, block_time=block_time, warmup=warmup,
        refine=lambda stats: contenders(units, specs, stats, tie_margin, rel_iqr),
        extra_rounds=extra_rounds, extra_time=extra_time, seed=seed, desc="profile")
    elapsed = time.monotonic() - started
    stats = timings.summaries()

    entries = {}
    for key, spec in specs.items():
        macs, params = costs[key]
        entries[key] = {**spec.fields(), **stats[key], "macs": macs, "params": params}
    return {
        "schema": SCHEMA,
        "space": {"name": space.name, "hash": space.hash, "source": source,
                  "definition": space.raw},
        "environment": environment(threads),
        "protocol": {
            "batch": batch, "dtype": "float32", "memory_format": "contiguous",
            "unit": "us", "mode": rt.mode, "runtime": rt.name,
            "runtime_settings": rt.settings(),
            **protocol(rounds, block_time, warmup),
            "units": "the candidates of one layer shape; the stem and the head",
            "extra_rounds": {"max_seconds": extra_time, "run": timings.rounds_run - rounds,
                             "for": f"non-skip candidates within {100 * tie_margin:g}% and 3 "
                                    f"standard errors of their layer's fastest, and entries "
                                    f"whose IQR exceeds {100 * rel_iqr:g}% of their median"},
            "seed": seed,
            "profile_seconds": round(elapsed, 1),
        },
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "entries": entries,
        "fixed": fixed,
        "layers": layers,
    }


#: the largest time an entry may hold, in microseconds (1000 s): beyond any block's latency
MAX_ENTRY_US = 1e9


def _fastest_sum(d: dict) -> float:
    """Stem + head + each layer's fastest candidate, from table data ``d``'s medians."""
    entries = d["entries"]
    return (sum(min(entries[k]["median"] for k in layer["candidates"].values())
                for layer in d["layers"])
            + sum(entries[k]["median"] for k in d["fixed"].values()))


def _positive(value: Any, allow_zero: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and (value >= 0 if allow_zero else value > 0)


def _count(value: Any, low: int = 1) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= low


#: the fields a table's sections must hold: (field, check, what the check wants)
_TEXT = (lambda v: isinstance(v, str), "a string")
_POSITIVE = (_count, "a positive integer")
_INDEX = (lambda v: _count(v, 0), "an integer >= 0")
_OBJECT = (lambda v: isinstance(v, dict), "an object")
_NUMBER = (lambda v: _positive(v, allow_zero=True), "a finite number >= 0")
_REQUIRED = {
    "space": {"name": _TEXT, "hash": _TEXT, "definition": _OBJECT},
    "environment": {"threads": _POSITIVE},
    "protocol": {"batch": _POSITIVE},
    "entry": {"kind": _TEXT, "op": _TEXT, "c_in": _POSITIVE, "c_out": _POSITIVE,
              "stride": _POSITIVE, "h": _POSITIVE, "w": _POSITIVE, "batch": _POSITIVE},
    "layer": {"index": _INDEX, "c_in": _POSITIVE, "c_out": _POSITIVE, "stride": _POSITIVE,
              "h": _POSITIVE, "w": _POSITIVE, "candidates": _OBJECT},
}
_OPTIONAL = {"environment": {"cpu": _TEXT, "machine": _TEXT},
            "protocol": {"dtype": _TEXT, "runtime": _TEXT, "runtime_settings": _OBJECT,
                         "profile_seconds": _NUMBER}}


def upgrade(data: Any, where: str = "lookup table") -> Any:
    """``data`` in the current schema when it is a table of the previous one, else as it is.

    Schema ``fbnas.lut/1`` stored each entry's ``flops``: torch's flop counter, which counts
    exactly 2 per multiply-add of every convolution and matrix product and nothing else (see
    :func:`count_cost`), so ``macs = flops / 2`` is exact and loses nothing. Only the schema
    and that field change, the field keeping its place in the entry; timings, metadata and
    the calibration stay as they were (a line fitted to MACs is the one fitted to FLOPs, so a
    stored fidelity report, whose key still says ``flops_calibrated_test``, holds as well).
    ``data`` itself is not modified. A count that counter cannot have written (odd, negative
    or not an integer) is refused rather than halved.
    """
    if not isinstance(data, dict) or data.get("schema") != PREVIOUS_SCHEMA \
            or not isinstance(data.get("entries"), dict):
        return data  # the current schema, or something validation refuses with its reason
    entries = {}
    for key, e in data["entries"].items():
        if isinstance(e, dict):
            flops = e.get("flops")
            if not _count(flops, 0) or flops % 2:
                raise FbnasError(f"{where}: entry {key} has a bad flops: {brief(flops)} (a "
                                 f"{PREVIOUS_SCHEMA} table holds torch's FLOP counts, an even "
                                 "integer: 2 per multiply-add); re-run fbnas profile")
            e = {("macs" if k == "flops" else k): (v // 2 if k == "flops" else v)
                 for k, v in e.items()}
        entries[key] = e
    return {**data, "schema": SCHEMA, "entries": entries}


class LUT:
    """A loaded, validated lookup table (a table of the previous schema is upgraded first)."""

    def __init__(self, data: dict, path: str | Path | None = None):
        self.path = Path(path) if path else None
        self.data = upgrade(data, self._where())
        self._validate()

    def _where(self) -> str:
        return f"lookup table {self.path}" if self.path else "lookup table"

    def _err(self, msg: str) -> FbnasError:
        return FbnasError(f"{self._where()}: {msg}")

    def _validate(self) -> None:
        d = self.data
        if not isinstance(d, dict):
            raise self._err("top level must be a JSON object")
        if d.get("schema") != SCHEMA:
            raise self._err(f"schema is {brief(d.get('schema'))}, this fbnas reads {SCHEMA!r} (and "
                            f"{PREVIOUS_SCHEMA!r}); re-run fbnas profile")
        for key in ("space", "environment", "protocol", "entries", "layers", "fixed"):
            if key not in d:
                raise self._err(f"missing the '{key}' section (truncated or hand-edited?)")
        for key in ("space", "environment", "protocol"):
            self._check_fields(d[key], key, key)
        if not isinstance(d.get("created", ""), str):
            raise self._err("'created' must be a string (a date)")
        entries = d["entries"]
        if not isinstance(entries, dict) or not isinstance(d["layers"], list) \
                or not isinstance(d["fixed"], dict):
            raise self._err("'entries' and 'fixed' must be objects and 'layers' a list")
        for key, e in entries.items():
            self._check_fields(e, "entry", f"entry {key}")
            for field in ("median", "iqr", "min", "runs", "macs", "params"):
                ok = _positive(e.get(field), allow_zero=field not in ("median", "min", "runs"))
                if not ok:
                    raise self._err(f"entry {key} has a bad {field}: {brief(e.get(field))} "
                                    "(want a finite positive number)")
            for field in ("median", "iqr", "min"):
                if e[field] > MAX_ENTRY_US:  # sums of such entries overflow to inf
                    raise self._err(f"entry {key} has a {field} of {e[field]:.3g} us, above "
                                    f"{MAX_ENTRY_US:.0e} us (1000 s): not a measurement; re-run "
                                    "fbnas profile")
        for li, layer in enumerate(d["layers"]):
            cands = layer.get("candidates") if isinstance(layer, dict) else None
            if not isinstance(cands, dict) or not cands:
                raise self._err(f"layer {li} has no candidates")
            self._check_fields(layer, "layer", f"layer {li}")
            for op, key in cands.items():
                if key not in entries:
                    raise self._err(f"layer {li} candidate {op} points at missing entry {key}")
        for name in ("stem", "head"):
            if d["fixed"].get(name) not in entries:
                raise self._err(f"the {name} entry is missing")
        runtime = d["protocol"].get("runtime", UNRECORDED_RUNTIME)
        if runtime not in RUNTIMES:
            raise self._err(f"was measured with runtime {brief(runtime)}, which this fbnas does "
                            f"not know ({', '.join(RUNTIMES)}); re-run fbnas profile")
        cal = d.get("calibration")
        if cal is not None:
            if not (isinstance(cal, dict) and _positive(cal.get("a"), False)
                    and isinstance(cal.get("b"), (int, float)) and math.isfinite(cal["b"])):
                raise self._err("calibration must hold a positive 'a' and a finite 'b'")
            fastest = _fastest_sum(d)
            if cal["a"] * fastest + cal["b"] <= 0:
                raise self._err(f"its calibration ({cal['a']:.4g} * table sum + {cal['b']:.4g} "
                                f"us) predicts {cal['a'] * fastest + cal['b']:.4g} us for the "
                                "fastest network; re-run fbnas calibrate")
        try:
            self._space = SearchSpace.from_dict(d["space"]["definition"])
        except FbnasError as e:
            raise self._err(f"its space definition is invalid: {e}") from None

    def _check_fields(self, value: Any, kind: str, where: str) -> None:
        """Refuse a section (or entry, or layer) lacking a field, or holding a wrong type."""
        if not isinstance(value, dict):
            raise self._err(f"{where} must be an object, got {type(value).__name__}")
        for field, (ok, want) in _REQUIRED.get(kind, {}).items():
            if field not in value:
                raise self._err(f"{where} lacks '{field}' (truncated or hand-edited?); re-run "
                                "fbnas profile")
            if not ok(value[field]):
                raise self._err(f"{where}.{field} must be {want}, got {brief(value[field])}")
        for field, (ok, want) in _OPTIONAL.get(kind, {}).items():
            if field in value and not ok(value[field]):
                raise self._err(f"{where}.{field} must be {want}, got {brief(value[field])}")

    @property
    def space_hash(self) -> str:
        return self.data["space"]["hash"]

    @property
    def batch(self) -> int:
        return int(self.data["protocol"]["batch"])

    @property
    def threads(self) -> int:
        return int(self.data["environment"]["threads"])

    @property
    def runtime(self) -> str:
        """What the entries were timed in; tables that record none were timed eagerly."""
        return self.data["protocol"].get("runtime", UNRECORDED_RUNTIME)

    def check_runtime(self, runtime: str | None) -> str:
        """The runtime to time against this table: ``runtime`` if given, else the table's own.

        A table's entries are comparable only with timings in the runtime they were taken
        in, so another runtime is refused.
        """
        if runtime is None or runtime == self.runtime:
            return self.runtime
        raise self._err(f"was measured with runtime {self.runtime}, not {runtime}; pass "
                        f"--runtime {self.runtime}, or profile a table with --runtime {runtime}")

    def other_machine(self) -> str | None:
        """A warning when the table may be from another CPU than this machine's: another
        model name; the same name with another family, model or instruction sets; or the same
        name and nothing recorded to tell the two apart (tables before ``cpu_id``), since a
        virtual machine can name a whole family of CPUs alike (fbnas/machine.py)."""
        env = self.data["environment"]
        theirs, mine = env.get("cpu"), cpu_model()
        if not theirs:
            return None
        where = f"lookup table {self.path}" if self.path else "the lookup table"
        measured = f"{where} was measured on {theirs} ({env.get('threads', '?')} thread(s))"
        if theirs != mine:
            return f"{measured}, this machine is {mine}: its latencies are from another machine"
        here = cpu_identity()
        if isinstance(env.get("cpu_id"), dict):  # what another form would mean is unknown
            diff = cpu_difference(env["cpu_id"], here)
            return None if diff is None else (
                f"{measured}, a CPU of this machine's name but not this one ({diff}): its "
                "latencies are from another machine")
        if not here:
            return None
        return (f"{measured}, as this machine's CPU is named, but records no family, model or "
                "instruction sets to tell the two apart: its latencies may be from another "
                "machine; profile a table here (fbnas profile) to be sure")

    def runtime_text(self) -> str:
        """'onnxruntime 1.32.0 (opset 20, ORT_ENABLE_ALL)' or 'eager (torch 2.14.1)'."""
        s = self.data["protocol"].get("runtime_settings", {})
        if self.runtime == "onnxruntime":
            details = [f"opset {s['opset']}" if "opset" in s else "",
                       s.get("graph_optimization_level", "")]
            inner = ", ".join(d for d in details if d)
            return f"onnxruntime {s.get('onnxruntime', '?')}" + (f" ({inner})" if inner else "")
        return f"eager (torch {s.get('torch', self.data['environment'].get('torch', '?'))})"

    @property
    def calibration(self) -> tuple[float, float] | None:
        cal = self.data.get("calibration")
        return (float(cal["a"]), float(cal["b"])) if cal else None

    def space(self) -> SearchSpace:
        """The space the table was profiled for, rebuilt from the copy stored in the table."""
        return self._space

    def check_space(self, space: SearchSpace) -> None:
        """Refuse a table profiled for a different space, or one missing any layer x candidate."""
        if self.space_hash != space.hash:
            raise self._err(f"was profiled for space {self.data['space']['name']} "
                            f"(hash {self.space_hash}), not for {space.name} (hash {space.hash}); "
                            f"profile it with: fbnas profile --space {space.name}")
        layers = self.data["layers"]
        if len(layers) != len(space.layers):
            raise self._err(f"has {len(layers)} layers, space {space.name} has "
                            f"{len(space.layers)}")
        for layer, row in zip(space.layers, layers):
            missing = [op for op in layer.candidates if op not in row["candidates"]]
            if missing:
                raise self._err(f"layer {layer.index} lacks candidate(s) {', '.join(missing)}")

    def entry(self, key: str) -> dict:
        return self.data["entries"][key]

    def cost(self, key: str, metric: str = "latency") -> float:
        if metric not in METRICS:
            raise FbnasError(f"unknown cost metric {brief(metric)}; use one of "
                             f"{', '.join(METRICS)}")
        e = self.entry(key)
        return float(e["median"] if metric == "latency" else e[metric])

    def layer_costs(self, metric: str = "latency") -> list[list[float]]:
        """Per layer, the cost of each candidate (in the layer's candidate order)."""
        return [[self.cost(key, metric) for key in layer["candidates"].values()]
                for layer in self.data["layers"]]

    def layer_candidates(self) -> list[list[str]]:
        return [list(layer["candidates"]) for layer in self.data["layers"]]

    def fastest_sum(self) -> float:
        """The table sum (uncalibrated) of the space's fastest network, in microseconds."""
        return _fastest_sum(self.data)

    def fixed_cost(self, metric: str = "latency") -> float:
        return sum(self.cost(k, metric) for k in self.data["fixed"].values())

    def raw_sum(self, ops: list[str], metric: str = "latency") -> float:
        """Stem + chosen ops + head, straight from the table."""
        total = self.fixed_cost(metric)
        for layer, op in zip(self.data["layers"], ops):
            if op not in layer["candidates"]:
                raise FbnasError(f"op {brief(op)} is not a candidate of layer {layer['index']}")
            total += self.cost(layer["candidates"][op], metric)
        return total

    def predict(self, ops: list[str]) -> float:
        """Predicted whole-network latency in microseconds (calibrated when possible)."""
        total = self.raw_sum(ops)
        cal = self.calibration
        return cal[0] * total + cal[1] if cal else total

    def summary(self) -> str:
        d = self.data
        env, prot = d["environment"], d["protocol"]
        entries = d["entries"]
        meds = [e["median"] for e in entries.values()]
        rel = sorted(e["iqr"] / e["median"] for e in entries.values())
        recorded = env.get("cpu_id")  # the name alone can be a whole family (fbnas/machine.py)
        identity = f"{describe_cpu(recorded)}; " if isinstance(recorded, dict) else ""
        lines = [
            f"lookup table for space {d['space']['name']} (hash {self.space_hash}), "
            f"{len(d['layers'])} layers, {len(entries)} distinct entries",
            f"measured {d.get('created', '?')} on {env.get('cpu', '?')} ({identity}"
            f"{env.get('machine', '?')}), {env['threads']} thread(s), {self.runtime_text()}, "
            f"batch {prot['batch']}, {prot.get('dtype', '?')}",
            f"entry medians {min(meds):.1f} .. {max(meds):.1f} us; median IQR/median "
            f"{100 * rel[len(rel) // 2]:.1f}%",
        ]
        if "profile_seconds" in prot:
            export = prot.get("runtime_settings", {}).get("export_seconds")
            export = export if _positive(export, allow_zero=True) else None
            lines.append(f"profiling took {prot['profile_seconds']:.0f} s" + (
                f" after {export:.0f} s exporting to ONNX" if export is not None else ""))
        cands = self.layer_candidates()
        costs = self.layer_costs()
        lines.append(f"{'layer':>5} {'shape':>22}  fastest non-skip  runner-up          "
                     f"slowest        (us)")
        for row, names, c in zip(d["layers"], cands, costs):
            fast = fastest_non_skip(names, c)
            slow = max(range(len(c)), key=c.__getitem__)
            others = [i for i, n in enumerate(names) if n != "skip" and i != fast]
            second = min(others, key=c.__getitem__) if others else None
            runner_up = (f"{names[second]:<10}{100 * (c[second] / c[fast] - 1):+6.1f}%"
                         if second is not None else "-")
            shape = f"{row['c_in']}->{row['c_out']} s{row['stride']} {row['h']}x{row['w']}"
            lines.append(f"{row['index']:>5} {shape:>22}  {names[fast]:<10}{c[fast]:7.1f}  "
                         f"{runner_up:<17}  {names[slow]:<8}{c[slow]:7.1f}")
        fixed = self.fixed_cost()
        lo = fixed + sum(min(c) for c in costs)
        hi = fixed + sum(max(c) for c in costs)
        lines.append(f"network latency by the table: {lo / 1000:.3f} .. {hi / 1000:.3f} ms "
                     f"(stem + head {fixed:.1f} us)")
        cal = d.get("calibration")
        if cal:
            lines.append(f"calibration: measured ~= {cal['a']:.4f} * table sum + {cal['b']:.1f} us "
                         f"(fitted on {cal.get('networks_fit', '?')} networks)")
        else:
            lines.append("no calibration yet (fbnas calibrate LUT)")
        return "\n".join(lines)


def fastest_non_skip(names: list[str], costs: list[float]) -> int:
    """Index of the cheapest candidate other than skip (skip itself if it is the only one)."""
    idx = [i for i, n in enumerate(names) if n != "skip"] or list(range(len(names)))
    return min(idx, key=costs.__getitem__)


def load_lut(path: str | Path, space: SearchSpace | None = None) -> LUT:
    """Load and validate a table; with ``space``, also check it was profiled for that space."""
    lut = LUT(read_json(path, "lookup table"), path)
    if space is not None:
        lut.check_space(space)
    return lut


def device_record(lut: LUT) -> dict | None:
    """The device record of a table measured by a bundle's runner, else None. It sits with
    the table, not with the bundle's reader (fbnas.latency.device), because calibration asks
    it too, and the reader builds on calibration."""
    rec = lut.data["environment"].get("device_record")
    return rec if isinstance(rec, dict) and "bundle" in lut.data["protocol"] else None


def save_lut(data: dict, path: str | Path, force: bool = False) -> None:
    refuse_overwrite(path, force)
    LUT(data)  # never write a table that would not load
    write_json(path, data)


def show_table(path: str | Path, space_name: str | None = None) -> str:
    """``fbnas show-lut``: load and validate the table ``path`` (against the space
    ``space_name`` when given), warn when it was timed on another CPU model, and return its
    summary."""
    from fbnas.arch.space import load_space
    from fbnas.latency.matching import warn_other_machine

    space = load_space(space_name) if space_name else None
    lut = load_lut(path, space)
    warn_other_machine(lut)
    # the names a table records (space, CPU, machine) are printed as they are: one of
    # megabytes would make the summary unreadable
    return "\n".join(capped(line) for line in lut.summary().splitlines())
