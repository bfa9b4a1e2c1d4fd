"""Lookup tables measured on another device: a bundle runner's results turned into a table.

``fbnas profile --space S --from-results results.json --out TABLE`` reads what a bundle's
``run.py`` (fbnas.latency.device_runner) wrote on the device and writes a regular table
(schema ``fbnas.lut/2``): the device record and execution provider in ``environment`` and
``protocol``, every entry's multiply-adds and parameters counted here as ``fbnas profile``
counts them, and a calibration fitted on the bundle's networks with the fidelity report
``fbnas calibrate`` stores. ``show-lut``, ``train``, ``sample`` and ``latency`` use it like any
other table.

Results are checked before anything is written, each failure one line naming what differs:
the schema; the manifest they carry against the SHA-256 the runner computed from the
bundle's manifest file; the space (hash, entry keys and shapes, layers) against the one named
here; the files the runner verified against the manifest's hashes; the calibration networks
against ``fbnas calibrate``'s selection; every entry and network timed; and every summary
against the timed blocks it came from (recomputed here with fbnas.latency.timing, so the
table holds exactly the statistics ``fbnas profile`` computes).

A machine other than the device cannot time against such a table: :func:`not_here` says why,
and :func:`prediction_report` prints what the table predicts instead.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
from pathlib import Path
from typing import Any

import numpy as np

from fbnas.arch.space import SearchSpace
from fbnas.errors import FbnasError, brief
from fbnas.io import read_json
from fbnas.latency.bundle import BUNDLE_SCHEMA, PRECISIONS, calibration_archs, manifest_text
from fbnas.latency.device_runner import MAX_BLOCK_TIME, MAX_ROUNDS, MAX_SEED, MAX_THREADS
from fbnas.latency.fidelity import FidelityReport
from fbnas.latency.lut import LUT, MAX_ENTRY_US, SCHEMA, count_cost, device_record, table_layout
from fbnas.latency.matching import match_lut
from fbnas.latency.runtimes import PROVIDER
from fbnas.latency.timing import DRIFT_NEIGHBOURS, Timings
from fbnas.latency.timing import protocol as timing_protocol
from fbnas.machine import cpu_difference, cpu_identity, cpu_model

RESULTS_SCHEMA = "fbnas.device-results/1"
#: summary fields the runner computes and this module recomputes from the blocks
_SUMMARY_FIELDS = ("median", "iqr", "min", "raw_median")
_REL_TOL = 1e-9


_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer",
               float: "a number"}


class _Results:
    """A results file being checked; every complaint names the file and the fix."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.data = read_json(path, "device results")

    def error(self, msg: str, fix: str = "run the bundle's run.py again") -> FbnasError:
        return FbnasError(f"device results {self.path}: {msg}; {fix}")

    def get(self, *keys: str, kind: type | tuple = dict) -> Any:
        value: Any = self.data
        for i, key in enumerate(keys):
            if not isinstance(value, dict) or key not in value:
                raise self.error(f"'{'.'.join(keys[:i + 1])}' is missing (truncated or edited?)")
            value = value[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kinds):
            want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            raise self.error(f"'{'.'.join(keys)}' is {shown}, not {want} (truncated or "
                             "edited?)")
        return value

    def number(self, *keys: str, lo: float, hi: float = math.inf, integer: bool = False,
               optional: bool = False) -> Any:
        """The number at ``keys``: an integer if ``integer``, finite, within [lo, hi]; None
        when ``optional`` and absent (or null)."""
        parent = self.get(*keys[:-1]) if len(keys) > 1 else self.data
        if optional and parent.get(keys[-1]) is None:
            return None
        value = self.get(*keys, kind=int if integer else (int, float))
        if not (math.isfinite(value) and lo <= value <= hi):
            where = ".".join(keys)
            span = f"at least {lo:g}" if hi == math.inf else f"from {lo:g} to {hi:g}"
            what = "an integer" if integer else "a number"
            raise self.error(f"'{where}' is {brief(value)}, not {what} {span} (edited?)")
        return value

    def text(self, *keys: str, optional: bool = False) -> str | None:
        parent = self.get(*keys[:-1]) if len(keys) > 1 else self.data
        if optional and parent.get(keys[-1]) is None:
            return None
        value = self.get(*keys, kind=str)
        if not value.strip() and not optional:
            raise self.error(f"'{'.'.join(keys)}' is empty (edited?)")
        return value


#: the largest time one call of a timed block may take, in seconds: what a table entry holds
#: at most (fbnas.latency.lut.MAX_ENTRY_US)
_MAX_CALL_S = MAX_ENTRY_US / 1e6


def _check_records(res: _Results) -> None:
    """Type and range of every field of the device record, the protocol and the bundle's
    protocol that the table copies or computes with."""
    for field in ("cpu", "machine", "system", "provider", "onnxruntime"):
        res.text("device", field)
    for field in ("python", "release", "platform", "numpy", "onnxruntime_build",
                  "execution_mode", "graph_optimization_level", "call", "timer"):
        res.text("device", field, optional=True)
    res.number("device", "intra_op_threads", lo=1, hi=MAX_THREADS, integer=True)
    for field in ("inter_op_threads", "logical_cpus", "usable_cpus", "physical_cores"):
        res.number("device", field, lo=1, hi=MAX_THREADS, integer=True, optional=True)
    for field in ("provider_options", "provider_options_requested"):
        if res.get("device").get(field) is not None:
            res.get("device", field, kind=dict)
    if res.get("device").get("cpu_id") is not None:  # newer runners record it
        for key in res.get("device", "cpu_id", kind=dict):
            if key != "isa":
                res.text("device", "cpu_id", key)
            elif not all(isinstance(f, str) for f in res.get("device", "cpu_id", "isa", kind=list)):
                raise res.error("'device.cpu_id.isa' holds a non-text flag (edited?)")
    for field in ("available_providers", "session_providers"):
        if res.get("device").get(field) is not None:
            res.get("device", field, kind=list)
    res.text("created")
    res.number("protocol", "rounds", lo=1, hi=MAX_ROUNDS, integer=True)
    res.number("protocol", "network_rounds", lo=2, hi=MAX_ROUNDS, integer=True)
    res.number("protocol", "block_time_s", lo=0.0001, hi=MAX_BLOCK_TIME)
    res.number("protocol", "warmup_calls", lo=0, integer=True)
    res.number("protocol", "extra_time_s", lo=0)
    res.number("protocol", "extra_rounds_run", lo=0, integer=True, optional=True)
    res.number("protocol", "seed", lo=0, hi=MAX_SEED, integer=True)
    res.number("protocol", "drift_neighbours", lo=1, integer=True, optional=True)
    for field in ("profile_seconds", "calibration_seconds", "wall_seconds"):
        res.number("protocol", field, lo=0, optional=True)
    for field in ("tie_margin", "rel_iqr"):
        res.number("manifest", "protocol", field, lo=0, hi=1)
    res.text("manifest", "created", optional=True)
    res.text("manifest", "fbnas", optional=True)
    res.number("manifest", "opset", lo=1, integer=True, optional=True)
    if res.get("manifest").get("export") is not None:
        res.get("manifest", "export", kind=dict)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-12)


def _timings(res: _Results, phase: str):
    """fbnas.latency.timing.Timings of one phase's recorded blocks."""
    rec = res.get("blocks", phase)

    def whole(v: Any, lo: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo

    try:
        keys, calls = rec["keys"], rec["calls"]
        item, rounds, visits, seconds = rec["item"], rec["round"], rec["visit"], rec["seconds"]
        ok = all(isinstance(k, str) for k in keys) and isinstance(calls, dict) \
            and all(whole(v, 1) for v in calls.values()) \
            and all(whole(v, 0) for part in (item, rounds, visits) for v in part) \
            and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in seconds)
    except (KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise res.error(f"the timed blocks of '{phase}' are malformed (edited?)")
    n = len(item)
    if not (len(rounds) == len(visits) == len(seconds) == n) or n == 0 \
            or max(item) >= len(keys) \
            or not all(math.isfinite(s) and s > 0 for s in seconds) \
            or sorted(calls) != sorted(keys):
        raise res.error(f"the timed blocks of '{phase}' are malformed (edited?)")
    slowest = max(seconds)
    if slowest > _MAX_CALL_S:
        raise res.error(f"a timed block of '{phase}' took {slowest:.3g} s per call, above "
                        f"{_MAX_CALL_S:g} s: not a measurement (edited?)")
    seconds = [float(t) for t in seconds]
    timed = set(item)
    for i, key in enumerate(keys):
        if i not in timed:
            raise res.error(f"{key} has no timed block in '{phase}' (incomplete run?)")
    return Timings(keys=keys, calls=calls, block_keys=[keys[i] for i in item],
                   block_rounds=rounds, block_times=seconds, block_visits=visits)


def _check_summaries(res: _Results, section: str, summaries: dict, recomputed: dict,
                     keys: list[str]) -> None:
    """Every key summarised, and each summary what its blocks give."""
    for key in keys:
        if key not in summaries:
            what = "network" if section == "networks" else "entry"
            raise res.error(f"'{section}' lacks {what} {key} (incomplete run?)")
        mine, theirs = recomputed[key], summaries[key]
        if not isinstance(theirs, dict):
            raise res.error(f"'{section}.{key}' is not an object (edited?)")
        for field in _SUMMARY_FIELDS:
            value = theirs.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not _close(float(value), mine[field]):
                raise res.error(f"{section} {key}: its {field} {brief(value)} us does not "
                                f"follow from its timed blocks ({mine[field]:.6g} us): the file "
                                "was edited or written by another runner")


def read_results(space: SearchSpace, path: str | Path) -> dict:
    """Check a runner's results against ``space`` and the bundle's manifest (see the module
    docstring) and return what the table needs: the manifest, the device record, the
    protocol, per-entry summaries, the networks' summaries and halves, and the re-timed
    entries."""
    res = _Results(path)
    manifest = _checked_manifest(res)
    specs, layers, fixed = _checked_layout(res, space)
    nets = res.get("manifest", "networks")
    _check_files(res, res.get("manifest", "entries"), nets)
    archs, fit, net_keys = _checked_networks(res, space, nets)
    profile, stats, again, halves = _checked_timings(res, list(specs), net_keys)
    device = res.get("device")  # every field checked by _check_records
    return {"manifest": manifest, "device": device, "protocol": res.get("protocol"),
            "created": res.data.get("created"), "layers": layers, "fixed": fixed,
            "specs": specs, "entries": stats, "networks": again, "halves": halves,
            "archs": archs, "fit": fit, "net_keys": net_keys, "profile_rounds":
            profile.rounds_run}


def _checked_manifest(res: _Results) -> dict:
    """The bundle manifest the results carry, once the results are a runner's (schema,
    records) and the manifest is the very one their run read (its SHA-256) of a schema this
    fbnas reads."""
    if not isinstance(res.data, dict) or res.data.get("schema") != RESULTS_SCHEMA:
        got = res.data.get("schema") if isinstance(res.data, dict) else None
        raise res.error(f"schema is {brief(got)}, not {RESULTS_SCHEMA!r}: not the output of a "
                        "bundle's run.py", "pass the file run.py --out wrote")
    _check_records(res)
    manifest = res.get("manifest")
    want_sha = res.get("manifest_sha256", kind=str)
    if hashlib.sha256(manifest_text(manifest).encode()).hexdigest() != want_sha:
        raise res.error("the manifest it carries differs from the bundle's manifest.json it was "
                        "timed with (sha256 " + want_sha[:12] + "...)")
    if manifest.get("schema") != BUNDLE_SCHEMA:
        raise res.error(f"its bundle is of schema {brief(manifest.get('schema'))}, this fbnas "
                        f"reads {BUNDLE_SCHEMA!r}", "write the bundle again with this fbnas")
    return manifest


def _checked_layout(res: _Results, space: SearchSpace) -> tuple[dict, list, dict]:
    """``table_layout`` of ``space`` at the bundle's batch, once the bundle is of ``space``
    (its hash) and lists exactly its entries, layers and fixed parts: a table from results
    of another space would price the wrong networks."""
    sp = res.get("manifest", "space")
    if sp.get("hash") != space.hash:
        raise res.error(f"they were measured for space {sp.get('name')} (hash {sp.get('hash')}), "
                        f"not for {space.name} (hash {space.hash})",
                        f"pass --space {sp.get('name')}, or bundle space {space.name}")
    batch = res.get("manifest", "batch", kind=int)
    precision = res.get("manifest", "precision", kind=str)
    if precision not in PRECISIONS or batch < 1:
        raise res.error(f"the bundle's precision {brief(precision)} or batch {brief(batch)} is "
                        "not one fbnas writes", "write the bundle again")
    specs, layers, fixed = table_layout(space, batch)
    entries = res.get("manifest", "entries")
    for key, spec in specs.items():
        if key not in entries:
            raise res.error(f"the bundle lacks entry {key} of space {space.name}",
                            "write the bundle again")
        e = entries[key]
        mine = {**spec.fields(), "input": [spec.batch, spec.c_in, spec.h, spec.w]}
        theirs = {k: e.get(k) for k in mine} if isinstance(e, dict) else None
        if theirs != mine:
            raise res.error(f"entry {key} of the bundle is {theirs}, space {space.name} has "
                            f"{mine}", "write the bundle again")
    extra = sorted(set(entries) - set(specs))
    if extra:
        raise res.error(f"the bundle has entry {extra[0]}, which space {space.name} lacks",
                        "write the bundle again")
    if res.get("manifest", "layers", kind=list) != layers \
            or res.get("manifest", "fixed") != fixed:
        raise res.error(f"the bundle's layers differ from space {space.name}'s",
                        "write the bundle again")
    return specs, layers, fixed


def _check_files(res: _Results, entries: dict, nets: dict) -> None:
    """The runner checked every file the manifest lists, and each had the manifest's SHA-256:
    timings of other files than the bundle's describe other models."""
    files = res.get("files")
    listed = {item["file"]: item["sha256"] for item in [*entries.values(), *nets.values()]
              if isinstance(item, dict) and "file" in item and "sha256" in item}
    runner = res.get("manifest", "runner")
    listed[runner.get("file")] = runner.get("sha256")
    for rel, sha in listed.items():
        if rel not in files:
            raise res.error(f"the runner did not check {rel} (incomplete run?)")
        if files[rel] != sha:
            raise res.error(f"{rel} was timed with sha256 {str(files[rel])[:12]}..., the "
                            f"manifest lists {str(sha)[:12]}...",
                            "copy the bundle to the device again and re-run run.py")
    if len(files) != len(listed):
        raise res.error("it lists files the manifest does not (edited?)")


def _checked_networks(res: _Results, space: SearchSpace, nets: dict
                      ) -> tuple[list[list[str]], int, list[str]]:
    """(the calibration networks' ops, how many fit the line, their keys), once the bundle's
    networks are exactly those ``fbnas calibrate`` draws for its seed: the calibration
    stored in the table must be one ``fbnas calibrate`` could have fitted."""
    cal = res.get("manifest", "calibration")
    n, fit, seed = (cal.get(k) for k in ("networks", "fit", "seed"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, fit, seed)) \
            or not 0 <= seed <= MAX_SEED or n > 100_000:
        raise res.error("the bundle's calibration section is malformed",
                        "write the bundle again")
    if not 2 <= fit < n:
        raise res.error(f"the bundle's calibration fits {fit} of {n} networks",
                        "write the bundle again")
    archs = calibration_archs(space, n, fit, seed)
    net_keys = [f"net{i}" for i in range(n)]
    if sorted(nets) != sorted(net_keys):
        raise res.error(f"the bundle holds networks {', '.join(sorted(nets)[:3])}..., not "
                        f"net0..net{n - 1}", "write the bundle again")
    for key, ops in zip(net_keys, archs):
        if not isinstance(nets[key], dict) or nets[key].get("ops") != ops:
            raise res.error(f"network {key} of the bundle is not the one fbnas calibrate draws "
                            f"for seed {seed}", "write the bundle again")
    return archs, fit, net_keys


def _checked_timings(res: _Results, keys: list[str], net_keys: list[str]):
    """(the entries' Timings, their summaries, the networks-and-entries summaries, each
    network's median in even and odd rounds), recomputed from the recorded blocks and checked
    against the summaries the runner wrote, so that a table holds only what its blocks
    support."""
    profile = _timings(res, "entries")
    calibration = _timings(res, "networks_and_entries")
    if sorted(profile.keys) != sorted(keys):
        raise res.error("its entry timings do not cover the bundle's entries (incomplete run?)")
    if sorted(calibration.keys) != sorted(keys + net_keys):
        raise res.error("its network timings do not cover the bundle's networks and entries "
                        "(incomplete run?)")
    stats = profile.summaries()
    _check_summaries(res, "entries", res.get("entries"), stats, keys)
    again = calibration.summaries()
    _check_summaries(res, "networks", res.get("networks"), again, net_keys)
    _check_summaries(res, "retimed", res.get("retimed"), again, keys)
    corrected = calibration.corrected()
    halves = {k: tuple(float(np.median(calibration.blocks(k, p, corrected))) * 1e6
                       for p in (0, 1)) for k in net_keys}
    for k, (a, b) in halves.items():
        if not (math.isfinite(a) and math.isfinite(b)):
            raise res.error(f"network {k} lacks blocks in even or odd rounds (use --rounds 2 or "
                            "more)")
    return profile, stats, again, halves


def device_table(space: SearchSpace, path: str | Path, source: str | None = None):
    """(the lookup table as a dict, the calibration's FidelityReport, a warning or None) for
    a runner's results for ``space``: the table is calibrated on the bundle's networks unless
    that calibration is unusable (see :func:`calibration_problem`), which the warning says."""
    r = read_results(space, path)
    m, dev = r["manifest"], r["device"]
    entries = {}
    for key, spec in r["specs"].items():
        macs, params = count_cost(spec.build(space), spec.input())
        entries[key] = {**spec.fields(), **r["entries"][key], "macs": macs, "params": params}
    data = {
        "schema": SCHEMA,
        "space": {"name": space.name, "hash": space.hash,
                  "source": source if source is not None else m["space"].get("source"),
                  "definition": space.raw},
        "environment": {
            "fbnas": m.get("fbnas"), "python": dev.get("python"), "cpu": dev["cpu"],
            "machine": dev["machine"], "system": dev["system"],
            "logical_cpus": dev.get("logical_cpus"), "threads": int(dev["intra_op_threads"]),
            "device": "cpu" if dev["provider"] == PROVIDER else dev["provider"],
            "measured_on": "the device, by the bundle's run.py (no fbnas, no torch there)",
            "device_record": dev,
            **({"cpu_id": dev["cpu_id"]} if "cpu_id" in dev else {}),
        },
        "protocol": _table_protocol(r, path),
        "created": r["created"],
        "entries": entries,
        "fixed": r["fixed"],
        "layers": r["layers"],
    }
    try:
        json.dumps(data, allow_nan=False, default=str)  # the table is written as strict JSON
    except ValueError:
        raise FbnasError(f"device results {path}: a number the table would copy is infinite or "
                         "not a number (edited?); run the bundle's run.py again") from None
    try:
        lut = LUT(data)
    except FbnasError as e:  # the checks above should leave nothing for the table's own
        raise FbnasError(f"device results {path}: the table made from them is unusable "
                         f"({e}); run the bundle's run.py again") from None
    report = _fidelity_report(lut, r)
    problem = calibration_problem(lut, report.a, report.b)
    if problem is not None:
        return data, report, (f"{problem}; the table is written without a calibration (re-run "
                              "run.py with more --rounds, or bundle more --networks)")
    data["calibration"] = report.calibration()
    return data, report, None


def _table_protocol(r: dict, path: str | Path) -> dict:
    """The table's ``protocol`` block for results ``r`` (from :func:`read_results`) read from
    ``path``: how the device timed the entries, in the fields a table profiled here has, plus
    the bundle they came from, so that a reader of the table can tell the two apart."""
    m, dev, prot = r["manifest"], r["device"], r["protocol"]
    int8 = m["precision"] == "int8"
    timed = timing_protocol(int(prot.get("rounds", 0)), float(prot.get("block_time_s", 0)),
                            int(prot.get("warmup_calls", 0)))
    export = m.get("export", {})
    return {
        "batch": int(m["batch"]), "dtype": "int8" if int8 else "float32",
        "precision": m["precision"], "memory_format": "contiguous", "unit": "us",
        "mode": "exported in eval mode" + (", quantized to int8 (QDQ)" if int8 else "")
                + ", InferenceSession.run",
        "runtime": "onnxruntime",
        "runtime_settings": {
            "onnxruntime": dev["onnxruntime"], "onnx": export.get("onnx"),
            "onnxscript": export.get("onnxscript"), "torch": export.get("torch"),
            "exporter": export.get("exporter"), "provider": dev["provider"],
            "provider_options": dev.get("provider_options"),
            "intra_op_threads": int(dev["intra_op_threads"]),
            "inter_op_threads": dev.get("inter_op_threads"),
            "execution_mode": dev.get("execution_mode"),
            "graph_optimization_level": dev.get("graph_optimization_level"),
            "call": dev.get("call"), "export_seconds": export.get("seconds"),
            "opset": m.get("opset"), "quantization": m.get("quantization"),
        },
        **timed,
        "timer": dev.get("timer", timed["timer"]),
        "drift_correction": f"each block divided by the median slowdown of the "
                            f"{2 * int(prot.get('drift_neighbours', DRIFT_NEIGHBOURS))} "
                            "blocks around it (the runner's numpy port of fbnas's)",
        "units": "the candidates of one layer shape; the stem and the head",
        "extra_rounds": {"max_seconds": prot.get("extra_time_s"),
                         "run": r["profile_rounds"] - int(prot.get("rounds", 0)),
                         "for": "non-skip candidates within "
                                f"{100 * m['protocol']['tie_margin']:g}% and 3 standard "
                                "errors of their layer's fastest, and entries whose IQR "
                                f"exceeds {100 * m['protocol']['rel_iqr']:g}% of their "
                                "median"},
        "seed": prot.get("seed"),
        "profile_seconds": prot.get("profile_seconds"),
        "bundle": {"manifest_sha256": hashlib.sha256(manifest_text(m).encode()).hexdigest(),
                   "created": m.get("created"), "results": str(path),
                   "network_rounds": prot.get("network_rounds"),
                   "calibration_seconds": prot.get("calibration_seconds"),
                   "runner_wall_seconds": prot.get("wall_seconds")},
    }


def _fidelity_report(lut: LUT, r: dict) -> FidelityReport:
    """The calibration's FidelityReport from the networks the device timed (results ``r``
    from :func:`read_results`), fitted and scored as ``fbnas calibrate`` fits and scores
    networks timed here."""
    archs, keys = r["archs"], r["net_keys"]
    report = FidelityReport(
        lut=lut, archs=archs, fit=r["fit"],
        measured=np.array([r["networks"][k]["median"] for k in keys]),
        pass_a=np.array([r["halves"][k][0] for k in keys]),
        pass_b=np.array([r["halves"][k][1] for k in keys]),
        raw=np.array([lut.raw_sum(ops) for ops in archs]),
        retimed=np.array([_retimed_sum(lut, ops, r["networks"]) for ops in archs]),
        macs=np.array([lut.raw_sum(ops, "macs") for ops in archs]))
    report.compute()
    return report


def calibration_problem(lut, a: float, b: float) -> str | None:
    """Why ``measured = a * table sum + b`` cannot calibrate ``lut`` (a line from a few noisy
    networks can slope below zero, or predict no time for the fastest network), else None."""
    if not (math.isfinite(a) and math.isfinite(b)) or a <= 0:
        return f"the calibration fitted on the bundle's networks has a slope of {a:.4g}"
    fastest = lut.fastest_sum()
    if a * fastest + b <= 0:
        return (f"the calibration fitted on the bundle's networks ({a:.4g} * table sum + "
                f"{b:.4g} us) predicts {a * fastest + b:.4g} us for the fastest network")
    return None


def _retimed_sum(lut, ops: list[str], stats: dict) -> float:
    """Stem + chosen ops + head from the entries re-timed alongside the networks."""
    fixed = lut.data["fixed"]
    keys = [fixed["stem"], fixed["head"]]
    keys += [layer["candidates"][op] for layer, op in zip(lut.data["layers"], ops)]
    return float(sum(stats[k]["median"] for k in keys))


# ----------------------------------------------------------------------------- latency

def not_here(lut) -> str | None:
    """Why this machine cannot time networks against ``lut``, a table measured on a device by
    a bundle's runner; None when it can (an fp32 table measured with the CPU provider on a
    machine of this CPU model, architecture and OS) or when ``lut`` is a table of this
    machine's own profile."""
    rec = device_record(lut)
    if rec is None:
        return None
    if lut.data["protocol"].get("precision", "fp32") != "fp32":
        return ("this table's entries are int8 (QDQ) models and fbnas latency times the "
                "float32 export")
    if rec.get("provider") != PROVIDER:
        return (f"this table was measured with {rec.get('provider')} and fbnas latency times "
                f"with {PROVIDER} only")
    theirs = (rec.get("cpu"), rec.get("machine"), rec.get("system"))
    mine = (cpu_model(), platform.machine(), platform.system())
    if theirs != mine:
        return (f"this table was measured on another device by its bundle's run.py "
                f"({theirs[0]}, {theirs[1]}, {theirs[2]}; this machine is {mine[0]}, {mine[1]}, "
                f"{mine[2]})")
    diff = cpu_difference(rec["cpu_id"], cpu_identity()) if "cpu_id" in rec else None
    if diff:
        return (f"this table was measured on another device of this machine's CPU name by its "
                f"bundle's run.py ({theirs[0]}: {diff})")
    return None


def prediction_report(defn: dict, lut, reason: str, batch: int | None = None,
                      runtime: str | None = None) -> str:
    """What ``fbnas latency`` prints for a device table it cannot time against: the table's
    prediction, and why nothing was measured."""
    name = defn.get("name", "the architecture")
    ops = match_lut(defn, lut, name)
    lut.check_runtime(runtime)
    if batch is not None and batch != lut.batch:
        raise FbnasError(f"lookup table {lut.path} was profiled at batch {lut.batch}, not "
                         f"{batch}; drop --batch or bundle a table with --batch {batch}")
    rec = device_record(lut) or {}
    prot = lut.data["protocol"]
    pred, raw = lut.predict(ops), lut.raw_sum(ops)
    how = "calibrated" if lut.calibration else "table sum, uncalibrated"
    lines = [f"architecture {name}: batch {lut.batch}, {lut.threads} thread(s), runtime "
             f"onnxruntime {rec.get('onnxruntime', '?')} {prot.get('precision', 'fp32')}, "
             f"{rec.get('provider', '?')} on {rec.get('cpu', '?')}",
             f"predicted {pred:10.1f} us  ({how}, {lut.path})"]
    if lut.calibration:
        lines.append(f"table sum {raw:10.1f} us")
    lines.append(f"not measured: {reason}, so fbnas cannot time against it here; the "
                 "prediction above is all there is")
    return "\n".join(lines)
