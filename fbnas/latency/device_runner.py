"""Time a device bundle's ONNX files on the device itself: the bundle's run.py.

``fbnas profile --space S --bundle DIR`` copies this file into DIR as ``run.py``. It needs
Python 3.8+ with ``onnxruntime`` and ``numpy`` only (no torch, no fbnas), so it runs on the
machine a network will be deployed on:

    python DIR/run.py --out results.json [--threads N] [--provider NAME] [--rounds N]

It checks every file of the bundle against the SHA-256 in ``manifest.json``, then times the
table entries with the protocol of ``fbnas profile`` and the calibration networks together
with re-timed entries as ``fbnas calibrate`` does:

* warm-up calls, then one probe that sets each item's calls per block (``--block-time``);
  every block (and the probe) starts with max(calls // 100, 2) untimed calls, as
  ``torch.utils.benchmark.Timer.timeit`` does for ``fbnas profile``;
* rounds that visit the units (the candidates of one layer shape, or one network) in random
  order and time every item of a unit back to back, in random order, as one short block;
* every block divided by the machine's local speed (the median slowdown of the blocks
  around it, :func:`drift_correct`), then per item the median and IQR of the corrected
  blocks, the fastest raw block and the raw median;
* after the regular rounds of the entries, up to ``--extra-time`` seconds of further rounds
  for candidates whose order against their layer's fastest is not yet settled and for noisy
  entries.

Progress goes to stderr. The results (summaries, every timed block, the manifest and the
device: CPU model, cores, OS, machine, onnxruntime version, execution provider and its
options, threads) are written atomically to ``--out``; ``fbnas profile --space S
--from-results results.json --out TABLE`` turns them into a lookup table.

This file must not import fbnas or torch: it is copied alone onto the device.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

BUNDLE_SCHEMA = "fbnas.bundle/1"
RESULTS_SCHEMA = "fbnas.device-results/1"
DEFAULT_PROVIDER = "CPUExecutionProvider"
INTER_OP_THREADS = 1
GRAPH_OPTIMIZATION = "ORT_ENABLE_ALL"
#: bounds of what the command line and a manifest may ask for (fbnas checks results with them)
MAX_THREADS = 4096
MAX_BLOCK_TIME = 10.0
MIN_BLOCK_TIME = 0.0001
#: seconds of extra rounds: a week is beyond any use
MAX_EXTRA_TIME = 7 * 24 * 3600.0
MAX_ROUNDS = 10 ** 6
MAX_SEED = 2 ** 63 - 2  # the networks are seeded with seed + 1


class RunnerError(Exception):
    """A problem with the bundle, the arguments or the device, printed as one line."""


# ----------------------------------------------------------------------------- statistics
# numpy is imported inside the functions, so that a missing numpy is one error line too.

def drift_correct(items, times, visits=None, neighbours=4, iterations=3):
    """Block times divided by the machine's local speed factor around each block.

    ``items`` is the item index of each block and ``times`` its time, in the order the
    blocks ran; ``visits`` numbers runs of consecutive blocks that share one correction (the
    items of a unit timed back to back); by default every block is its own visit. Model: log
    time = item level + drift(t) + noise. In turn, the item levels are the medians of the
    drift-free log times, and the drift of a visit is the median of (log time - item level)
    over the ``neighbours`` blocks before the visit and the ``neighbours`` after it (none
    there: 0); the drift is centred on its median, so corrected times keep the run's typical
    speed.
    """
    import numpy as np

    item = np.asarray(items)
    log_time = np.log(np.asarray(times, dtype=np.float64))
    count = log_time.size
    if count < 3 or np.unique(item).size < 2:
        return np.exp(log_time)
    visit = np.arange(count) if visits is None else np.asarray(visits)
    first = np.flatnonzero(np.concatenate(([True], visit[1:] != visit[:-1])))
    last = np.concatenate((first[1:], [count])) - 1  # inclusive
    step = np.arange(1, neighbours + 1)
    before = first[:, None] - step[None, :]
    after = last[:, None] + step[None, :]
    around = np.concatenate((before, after), axis=1)
    inside = (around >= 0) & (around < count)
    around = np.where(inside, around, 0)
    span = last - first + 1
    members = [np.flatnonzero(item == i) for i in np.unique(item)]
    drift = np.zeros(count)
    for _ in range(iterations):
        free = log_time - drift
        level = np.empty(count)
        for sel in members:
            level[sel] = np.median(free[sel])
        off = (log_time - level)[around]
        off[~inside] = np.nan
        per_visit = np.zeros(first.size)
        seen = inside.any(axis=1)
        if seen.any():
            per_visit[seen] = np.nanmedian(off[seen], axis=1)
        drift = np.repeat(per_visit, span)
        drift = drift - np.median(drift)
    return np.exp(log_time - drift)


class Blocks:
    """Every timed block in the order it ran: item index, round, visit, seconds per call."""

    def __init__(self, keys, calls):
        self.keys = list(keys)
        self.calls = dict(calls)
        self.item, self.round, self.visit, self.seconds = [], [], [], []

    def add(self, index, rnd, visit, seconds):
        self.item.append(index)
        self.round.append(rnd)
        self.visit.append(visit)
        self.seconds.append(seconds)

    @property
    def rounds_run(self):
        return max(self.round) + 1 if self.round else 0

    def corrected(self):
        return drift_correct(self.item, self.seconds, self.visit)

    def summaries(self, halves=()):
        """Per item (us): median and IQR of the corrected blocks, fastest and median raw
        block, block count; for the items in ``halves`` also the medians of the corrected
        blocks of the even and of the odd rounds (two independent timings)."""
        import numpy as np

        corrected = self.corrected() * 1e6
        raw = np.asarray(self.seconds, dtype=np.float64) * 1e6
        item = np.asarray(self.item)
        parity = np.asarray(self.round) % 2
        out = {}
        for i, key in enumerate(self.keys):
            sel = item == i
            c, r = corrected[sel], raw[sel]
            if not c.size:
                continue
            q1, med, q3 = np.percentile(c, [25, 50, 75])
            out[key] = {"median": float(med), "iqr": float(q3 - q1), "min": float(r.min()),
                        "runs": int(c.size), "calls_per_run": self.calls[key],
                        "raw_median": float(np.median(r))}
            if key in halves:
                for name, p in (("median_even_rounds", 0), ("median_odd_rounds", 1)):
                    part = corrected[sel & (parity == p)]
                    out[key][name] = float(np.median(part)) if part.size else None
        return out

    def record(self):
        return {"keys": self.keys, "calls": self.calls, "item": self.item, "round": self.round,
                "visit": self.visit, "seconds": self.seconds}


def contenders(units, entries, stats, margin, rel_iqr, z=3.0):
    """Units worth more rounds: per unit the non-skip candidates whose gap to the fastest is
    under both ``margin`` (relative) and ``z`` standard errors of the difference (if two or
    more are), and the entries whose IQR exceeds ``rel_iqr`` of their median."""

    def se(key):  # standard error of a median, from the IQR of normal noise
        return 1.2533 * stats[key]["iqr"] / 1.349 / math.sqrt(stats[key]["runs"])

    todo = []
    for unit in units:
        ops = [k for k in unit if entries[k]["kind"] == "op" and entries[k]["op"] != "skip"]
        close = set()
        if len(ops) > 1:
            best = min(ops, key=lambda k: stats[k]["median"])
            m = stats[best]["median"]
            close = {k for k in ops if stats[k]["median"] - m
                     <= min(margin * m, z * math.hypot(se(k), se(best)))}
        if len(close) < 2:
            close = set()
        noisy = {k for k in unit if stats[k]["iqr"] > rel_iqr * stats[k]["median"]}
        if close or noisy:
            todo.append([k for k in unit if k in close or k in noisy])
    return todo


# ----------------------------------------------------------------------------- progress

class Progress:
    """Plain progress lines on stderr, at most one every ``interval`` seconds."""

    def __init__(self, total, desc, interval=5.0):
        self.total, self.done, self.desc = total, 0, desc
        self.start = self.last = time.monotonic()
        self.interval = interval

    def add(self, n):
        self.total += n

    def update(self, n=1):
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.interval or self.done == self.total:
            self.last = now
            elapsed = now - self.start
            left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
            note("%s: %d/%d, %.0f s elapsed, about %.0f s left"
                 % (self.desc, self.done, self.total, elapsed, left))


def note(text):
    print(text, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- timing

def time_block(run, feeds, calls):
    """Seconds per call of ``calls`` back-to-back calls, after max(calls // 100, 2) untimed
    ones, with the garbage collector off: what torch.utils.benchmark.Timer.timeit, which
    fbnas profile times with, does. (Without those calls a block of a network that takes
    half the block time would count its first, cold-cache call at full weight.)"""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(max(calls // 100, 2)):
            run(None, feeds)
        start = time.perf_counter()
        for _ in range(calls):
            run(None, feeds)
        return (time.perf_counter() - start) / calls
    finally:
        if enabled:
            gc.enable()


def measure_rounds(calls_of, keys, units, rounds, block_time, warmup, seed, desc,
                   refine=None, extra_rounds=0, extra_time=None, refine_every=10):
    """Time every item once per round, unit by unit; then, for up to ``extra_rounds`` rounds
    and ``extra_time`` seconds, only the units ``refine`` picks from the current summaries
    (asked again every ``refine_every`` rounds)."""
    rng = random.Random(seed)
    calls = {}
    for k in keys:
        run, feeds = calls_of[k]
        for _ in range(warmup):
            run(None, feeds)
        probe = time_block(run, feeds, max(1, warmup))
        calls[k] = max(1, int(round(block_time / max(probe, 1e-9))))
    blocks = Blocks(keys, calls)
    index = {k: i for i, k in enumerate(keys)}
    progress = Progress(len(keys) * rounds, desc)

    def one_round(r, todo):
        order = todo[:]
        rng.shuffle(order)
        for unit in order:
            unit = unit[:]
            rng.shuffle(unit)
            visit = blocks.visit[-1] + 1 if blocks.visit else 0
            for k in unit:
                run, feeds = calls_of[k]
                blocks.add(index[k], r, visit, time_block(run, feeds, calls[k]))
                progress.update()

    for r in range(rounds):
        one_round(r, units)
    started = time.monotonic()
    todo = []
    for r in range(rounds, rounds + extra_rounds):
        if extra_time is not None and time.monotonic() - started >= extra_time:
            break
        if (r - rounds) % max(1, refine_every) == 0:
            todo = [u for u in refine(blocks.summaries()) if u] if refine is not None else []
        if not todo:
            break
        progress.add(sum(len(u) for u in todo))
        one_round(r, todo)
    return blocks


# ----------------------------------------------------------------------------- the device

#: the instruction sets that choose a kernel library's code paths, as fbnas/machine.py lists
#: them (this file cannot import it; a test keeps the two equal)
ISA_FLAGS = ("avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16",
             "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimddp", "sve", "sve2", "i8mm",
             "bf16")
#: /proc/cpuinfo fields that, with the instruction sets, identify a CPU model (x86, then ARM)
_ID_FIELDS = {"vendor_id": "vendor", "cpu family": "family", "model": "model",
              "stepping": "stepping", "CPU implementer": "implementer", "CPU part": "part"}


def cpu_fields():
    """/proc/cpuinfo's fields for its first processor ({} where there is no such file), read
    as fbnas reads them (fbnas/machine.py)."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_identity():
    """What tells a CPU from another of the same name (a virtual machine may name a whole
    family alike), as fbnas records it for its own tables: vendor, family, model and
    stepping (ARM: implementer and part) and the instruction sets of ISA_FLAGS it has."""
    cpu = cpu_fields()
    ident = {name: cpu[field] for field, name in _ID_FIELDS.items() if cpu.get(field)}
    flags = set((cpu.get("flags") or cpu.get("Features") or "").split())
    if flags:
        ident["isa"] = [f for f in ISA_FLAGS if f in flags]
    return ident


def cpu_model():
    """The CPU's model name: /proc/cpuinfo's 'model name' (as fbnas records it), else what
    the system reports."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for field in ("model name", "Hardware", "Processor", "cpu model", "cpu"):
        for line in lines:
            if line.split(":", 1)[0].strip() == field and ":" in line:
                value = line.split(":", 1)[1].strip()
                if value:
                    return value
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                 capture_output=True, text=True, timeout=5).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or "unknown"


def physical_cores():
    """Distinct (physical id, core id) pairs of /proc/cpuinfo; None where it does not say."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None
    cores = set()
    for block in text.split("\n\n"):
        fields = dict((a.strip(), b.strip()) for a, _, b in
                      (line.partition(":") for line in block.splitlines()))
        if "core id" in fields:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    return len(cores) or None


def device_record(ort, np, session, provider, provider_options, threads):
    usable = None
    if hasattr(os, "sched_getaffinity"):
        usable = len(os.sched_getaffinity(0))
    return {
        "cpu": cpu_model(),
        "cpu_id": cpu_identity(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "physical_cores": physical_cores(),
        "machine": platform.machine(),
        "system": platform.system(),
        "release": platform.release(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": ort.__version__,
        "onnxruntime_build": ort.get_device(),
        "available_providers": list(ort.get_available_providers()),
        "provider": provider,
        "provider_options_requested": provider_options,
        "provider_options": session.get_provider_options(),
        "session_providers": list(session.get_providers()),
        "intra_op_threads": threads,
        "inter_op_threads": INTER_OP_THREADS,
        "execution_mode": "ORT_SEQUENTIAL",
        "graph_optimization_level": GRAPH_OPTIMIZATION,
        "call": "InferenceSession.run(None, {input: numpy array})",
        "timer": "time.perf_counter around one block of calls after max(calls // 100, 2) "
                 "untimed ones, garbage collector off (as torch.utils.benchmark.Timer.timeit)",
    }


# ----------------------------------------------------------------------------- the bundle

def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def shown(value, limit=80, quote=True):
    """repr of a value for an error (the string itself for a name, ``quote`` False), cut to
    about ``limit`` characters with its length (as fbnas.errors.brief: an edited manifest can
    hold a string of megabytes)."""
    if isinstance(value, str) and len(value) > limit:
        return "%s... (%d characters)" % ((repr if quote else str)(value[:limit - 10]),
                                          len(value))
    text = repr(value) if quote or not isinstance(value, str) else value
    return text if len(text) <= limit else "%s... (%d characters)" % (text[:limit - 3], len(text))


class KeyTwice(ValueError):
    def __init__(self, key):
        ValueError.__init__(self, key)
        self.key = key


def unique_keys(pairs):
    """A JSON object as a dict, refusing a key given twice, which ``json`` would read
    silently with its last value (fbnas reads its own JSON the same way: fbnas.io)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise KeyTwice(key)
        out[key] = value
    return out


def read_manifest(bundle):
    path = os.path.join(bundle, "manifest.json")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise RunnerError("cannot read %s (%s): run this script from its bundle folder, or "
                          "pass --bundle DIR" % (path, e.strerror))
    try:
        manifest = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
    except KeyTwice as e:
        raise RunnerError("%s gives the key %s twice in one object (edited?); copy the bundle "
                          "again" % (path, shown(e.key)))
    except (UnicodeDecodeError, ValueError):
        raise RunnerError("%s is not valid JSON (truncated or corrupted?); copy the bundle "
                          "again" % path)
    if not isinstance(manifest, dict) or manifest.get("schema") != BUNDLE_SCHEMA:
        raise RunnerError("%s is not a bundle manifest of schema %s; write the bundle again "
                          "with fbnas profile --bundle" % (path, BUNDLE_SCHEMA))
    check_manifest(manifest, path)
    return manifest, hashlib.sha256(raw).hexdigest()


#: what this runner reads from a manifest: section -> fields
_PROTOCOL_FIELDS = ("rounds", "network_rounds", "block_time_s", "warmup_calls", "extra_time_s",
                    "extra_rounds", "refine_every", "tie_margin", "rel_iqr", "seed")
_ITEM_FIELDS = ("file", "sha256", "input")
_ONE = {"entries": "entry", "networks": "network"}
#: protocol field -> (lowest, highest, integer?)
_PROTOCOL_RANGES = (
    ("rounds", 2, MAX_ROUNDS, True), ("network_rounds", 2, MAX_ROUNDS, True),
    ("block_time_s", MIN_BLOCK_TIME, MAX_BLOCK_TIME, False), ("warmup_calls", 0, 10 ** 6, True),
    ("extra_time_s", 0, MAX_EXTRA_TIME, False), ("extra_rounds", 0, 10 ** 9, True),
    ("refine_every", 1, 10 ** 9, True), ("tie_margin", 0, 1, False), ("rel_iqr", 0, 1, False),
    ("seed", 0, MAX_SEED, True),
)


def check_manifest(manifest, path):
    """Refuse a manifest lacking what the runner reads, naming the first missing field."""

    def missing(where):
        return RunnerError("%s lacks %s (truncated or edited?); copy the bundle again"
                           % (path, where))

    for section in ("space", "protocol", "entries", "networks", "units", "runner",
                    "precision", "batch"):
        if section not in manifest:
            raise missing("'%s'" % section)
    for section in ("space", "protocol", "runner"):
        if not isinstance(manifest[section], dict):
            raise missing("a '%s' object" % section)
    if not isinstance(manifest["space"].get("name"), str):
        raise missing("space.name")
    for field in _PROTOCOL_FIELDS:
        if field not in manifest["protocol"]:
            raise missing("protocol.%s" % field)
    for what in ("entries", "networks"):
        if not isinstance(manifest[what], dict) or not manifest[what]:
            raise missing("any %s" % what)
        for key, item in manifest[what].items():
            for field in _ITEM_FIELDS + (("kind", "op") if what == "entries" else ()):
                if not isinstance(item, dict) or field not in item:
                    raise missing("%s %s's '%s'" % (what[:-1] if what == "networks" else
                                                    "entry", key, field))
    # the protocol's numbers, of the types and in the ranges the command line allows
    for field, lo, hi, integer in _PROTOCOL_RANGES:
        value = manifest["protocol"][field]
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) \
                or not (math.isfinite(value) and lo <= value <= hi):
            raise RunnerError("%s: protocol.%s is %s, not %s from %g to %g (edited?); copy the "
                              "bundle again" % (path, field, shown(value),
                                                "an integer" if integer else "a number", lo, hi))
    batch = manifest["batch"]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1 \
            or not isinstance(manifest["precision"], str):
        raise RunnerError("%s: its batch %s or precision %s is not one fbnas writes (edited?); "
                          "copy the bundle again"
                          % (path, shown(batch), shown(manifest["precision"])))
    for what in ("entries", "networks"):
        for key, item in manifest[what].items():
            shape = item["input"]
            if not isinstance(item["file"], str) or not isinstance(item["sha256"], str) \
                    or not isinstance(shape, list) or not shape or len(shape) > 8 \
                    or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 2 ** 16
                               for d in shape):
                raise RunnerError("%s: %s %s has a malformed file, sha256 or input shape "
                                  "(edited?); copy the bundle again"
                                  % (path, _ONE[what], shown(key, quote=False)))
            if os.path.isabs(item["file"]) or ".." in item["file"].replace("\\", "/").split("/"):
                raise RunnerError("%s: %s %s names the file %s outside the bundle (edited?); "
                                  "copy the bundle again"
                                  % (path, _ONE[what], shown(key, quote=False), shown(item["file"])))
    if not isinstance(manifest["units"], list) or \
            not all(isinstance(u, list) and all(isinstance(k, str) for k in u)
                    for u in manifest["units"]):
        raise RunnerError("%s: its units are malformed (edited?); copy the bundle again" % path)
    units = [k for u in manifest["units"] for k in u]
    if sorted(units) != sorted(manifest["entries"]):
        raise RunnerError("%s: its units do not hold every entry exactly once (edited?); "
                          "copy the bundle again" % path)
    for field in ("file", "sha256"):
        if field not in manifest["runner"]:
            raise missing("runner.%s" % field)


def bundle_files(manifest):
    """Relative path -> expected SHA-256 of every file the manifest lists."""
    files = {}
    for what in ("entries", "networks"):
        for item in manifest[what].values():
            files[item["file"]] = item["sha256"]
    files[manifest["runner"]["file"]] = manifest["runner"]["sha256"]
    return files


def verify(bundle, manifest):
    files = bundle_files(manifest)
    progress = Progress(len(files), "checking files")
    for rel, want in sorted(files.items()):
        path = os.path.join(bundle, rel)
        if not os.path.isfile(path):
            raise RunnerError("%s is missing from the bundle; copy the whole folder again"
                              % rel)
        got = sha256_of(path)
        if got != want:
            raise RunnerError("%s does not match the manifest (sha256 %s..., expected %s...): "
                              "the copy is damaged or was changed; copy the bundle again"
                              % (rel, got[:12], want[:12]))
        progress.update()
    return files


def session_options(ort, threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = INTER_OP_THREADS
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION)
    options.log_severity_level = 3  # errors only
    return options


def check_input(session, item, key):
    """Refuse, before anything is timed, an item whose manifest input shape is not the one
    its ONNX file takes (an edited manifest: its own hash is not checked, only the files'
    are), which onnxruntime would stop on mid-timing with a traceback. A dimension the file
    leaves symbolic takes any size."""
    inputs = session.get_inputs()
    want = item["input"]
    if len(inputs) != 1:
        raise RunnerError("%s's ONNX file %s takes %d inputs, not the one a bundle file "
                          "takes; copy the bundle again" % (key, item["file"], len(inputs)))
    takes = list(inputs[0].shape)
    if len(takes) != len(want) or any(isinstance(t, int) and t != w
                                      for t, w in zip(takes, want)):
        raise RunnerError("manifest.json gives %s the input %s but its ONNX file %s takes %s "
                          "(manifest edited?); copy the bundle again"
                          % (key, "x".join(map(str, want)), item["file"],
                             "x".join(str(t) if isinstance(t, int) else "?" for t in takes)))


def load_sessions(ort, np, bundle, items, threads, provider, provider_options, seed, desc):
    """key -> (InferenceSession.run, feeds) for every item, each fed random normal input
    of its recorded shape."""
    rng = np.random.default_rng(seed)
    options = session_options(ort, threads)
    out, first = {}, None
    progress = Progress(len(items), desc)
    for key, item in items.items():
        path = os.path.join(bundle, item["file"])
        try:
            sess = ort.InferenceSession(path, options,
                                        providers=[(provider, provider_options)])
        except Exception as e:  # onnxruntime raises several exception types
            raise RunnerError("onnxruntime cannot load %s with %s: %s"
                              % (item["file"], provider, str(e).splitlines()[0][:200]))
        check_input(sess, item, key)
        x = rng.standard_normal(item["input"]).astype(np.float32)
        out[key] = (sess.run, {sess.get_inputs()[0].name: x})
        first = first or sess
        progress.update()
    return out, first


# ----------------------------------------------------------------------------- main

def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(
        prog="run.py", description="Time this bundle's lookup-table entries and calibration "
        "networks on this device (needs Python 3 with onnxruntime and numpy).")
    p.add_argument("--out", required=True, help="Results file to write (JSON).")
    p.add_argument("--threads", type=int, default=1,
                   help="Intra-op threads of every session (default 1; recorded).")
    p.add_argument("--provider", default=DEFAULT_PROVIDER,
                   help="onnxruntime execution provider (default %s)." % DEFAULT_PROVIDER)
    p.add_argument("--provider-option", action="append", default=[], metavar="KEY=VALUE",
                   help="An option of the provider (repeatable; recorded).")
    p.add_argument("--rounds", type=int, default=None,
                   help="Rounds of each phase (default: the manifest's, 80 for the entries "
                   "and 60 for the networks with re-timed entries).")
    p.add_argument("--extra-time", type=float, default=None,
                   help="Seconds of extra rounds for unsettled candidates (default: the "
                   "manifest's, 50).")
    p.add_argument("--block-time", type=float, default=None,
                   help="Seconds per timed block of calls (default: the manifest's, 0.004).")
    p.add_argument("--seed", type=int, default=None,
                   help="Seed of the round order and the inputs (default: the manifest's).")
    p.add_argument("--bundle", default=here,
                   help="The bundle folder (default: this script's folder).")
    p.add_argument("--force", action="store_true", help="Overwrite an existing --out.")
    return p.parse_args(argv)


def check_args(args, protocol):
    """Refuse an argument out of its range (numbers finite), before anything is timed."""
    if not 1 <= args.threads <= MAX_THREADS:
        raise RunnerError("--threads must be from 1 to %d, not %d" % (MAX_THREADS, args.threads))
    if args.rounds is not None and not 2 <= args.rounds <= MAX_ROUNDS:
        raise RunnerError("--rounds must be from 2 to %d (even and odd rounds are two timings), "
                          "not %d" % (MAX_ROUNDS, args.rounds))
    if args.extra_time is not None and not 0 <= args.extra_time <= MAX_EXTRA_TIME:
        raise RunnerError("--extra-time must be a number of seconds from 0 to %g, not %s"
                          % (MAX_EXTRA_TIME, args.extra_time))
    if args.block_time is not None and not MIN_BLOCK_TIME <= args.block_time <= MAX_BLOCK_TIME:
        raise RunnerError("--block-time must be a number of seconds from %g to %g, not %s"
                          % (MIN_BLOCK_TIME, MAX_BLOCK_TIME, args.block_time))
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise RunnerError("--seed must be from 0 to %d, not %d" % (MAX_SEED, args.seed))
    options = {}
    for text in args.provider_option:
        key, eq, value = text.partition("=")
        if not eq or not key:
            raise RunnerError("--provider-option %r must be KEY=VALUE" % text)
        options[key] = value
    rounds = args.rounds or protocol["rounds"]
    return {
        "rounds": rounds,
        "network_rounds": args.rounds or protocol["network_rounds"],
        "block_time_s": args.block_time if args.block_time is not None
        else protocol["block_time_s"],
        "extra_time_s": args.extra_time if args.extra_time is not None
        else protocol["extra_time_s"],
        "seed": args.seed if args.seed is not None else protocol["seed"],
    }, options


def check_out(path, force):
    """Refuse an existing --out without --force, and a folder that takes no new file, before
    minutes of timing."""
    if os.path.isdir(path):
        raise RunnerError("--out %s is a folder; give a file path" % path)
    if os.path.exists(path) and not force:
        raise RunnerError("%s already exists; pass --force to overwrite it" % path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise RunnerError("cannot write %s: folder %s does not exist" % (path, folder))
    try:
        fd, probe = tempfile.mkstemp(prefix=".run-write-test.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise RunnerError("cannot write %s: %s; pick another --out" % (path, e.strerror))


def write_atomic(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as e:
        raise RunnerError("cannot write %s: %s" % (path, e.strerror))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def import_runtime():
    """(numpy, onnxruntime), imported when the runner runs rather than with it, so that
    --help and a bad command line answer on a device that lacks them."""
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        raise RunnerError("this runner needs the numpy and onnxruntime packages (%s); "
                          "install them with: python -m pip install onnxruntime numpy" % e)
    return np, ort


def run(argv=None):
    args = parse_args(argv)
    np, ort = import_runtime()
    bundle = os.path.abspath(args.bundle)
    manifest, manifest_sha = read_manifest(bundle)
    settings, provider_options = check_args(args, manifest["protocol"])
    available = list(ort.get_available_providers())
    if args.provider not in available:
        raise RunnerError("onnxruntime %s here has no execution provider %s; available: %s"
                          % (ort.__version__, args.provider, ", ".join(available)))
    check_out(args.out, args.force)
    started = time.monotonic()
    files = verify(bundle, manifest)
    note("bundle of space %s (%s, batch %d): %d entries, %d networks, files match the manifest"
         % (manifest["space"]["name"], manifest["precision"], manifest["batch"],
            len(manifest["entries"]), len(manifest["networks"])))
    device, timed = time_bundle(ort, np, bundle, manifest, settings, provider_options, args)
    results = {
        "schema": RESULTS_SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "manifest_sha256": manifest_sha,
        "manifest": manifest,
        "files": files,
        "device": device,
    }
    results.update(timing_results(manifest, settings, started, *timed))
    try:  # strict JSON: a parser refuses Infinity and NaN, which nothing here should write
        text = json.dumps(results, indent=1, allow_nan=False) + "\n"
    except ValueError:
        raise RunnerError("a timing came out infinite or not a number; run again, and report "
                          "it if it repeats")
    write_atomic(args.out, text)
    meds = [e["median"] for e in results["entries"].values()]
    print("timed %d entries (%.1f .. %.1f us) and %d networks on %s with %s, %d thread(s), "
          "in %.0f s" % (len(meds), min(meds), max(meds), len(manifest["networks"]),
                         device["cpu"], args.provider, args.threads,
                         time.monotonic() - started))
    print("wrote %s; import it where fbnas is installed with: fbnas profile --space %s "
          "--from-results %s --out TABLE"
          % (args.out, manifest["space"].get("source") or manifest["space"]["name"],
             os.path.basename(args.out)))


def time_bundle(ort, np, bundle, manifest, settings, provider_options, args):
    """(the device record, (the entries' Blocks, the networks-and-entries Blocks, seconds of
    each)): the entries timed as fbnas profile times them, then the networks in shared rounds
    with the entries re-timed, as fbnas calibrate times them."""
    protocol = manifest["protocol"]
    entries, networks = manifest["entries"], manifest["networks"]
    seed = settings["seed"]
    entry_calls, first = load_sessions(ort, np, bundle, entries, args.threads, args.provider,
                                       provider_options, seed, "loading entries")
    network_calls, _ = load_sessions(ort, np, bundle, networks, args.threads, args.provider,
                                     provider_options, seed + 1, "loading networks")
    device = device_record(ort, np, first, args.provider, provider_options, args.threads)
    note("timing on %s, %s, %d thread(s)" % (device["cpu"], args.provider, args.threads))

    units = [list(u) for u in manifest["units"]]
    warmup = protocol["warmup_calls"]
    t0 = time.monotonic()
    profile = measure_rounds(
        entry_calls, list(entries), units, settings["rounds"], settings["block_time_s"],
        warmup, seed, "entries",
        refine=lambda stats: contenders(units, entries, stats, protocol["tie_margin"],
                                        protocol["rel_iqr"]),
        extra_rounds=protocol["extra_rounds"], extra_time=settings["extra_time_s"],
        refine_every=protocol["refine_every"])
    profile_seconds = time.monotonic() - t0

    t0 = time.monotonic()
    both = dict(network_calls)
    both.update(entry_calls)
    net_keys = list(networks)
    calibration = measure_rounds(
        both, net_keys + list(entries), [[k] for k in net_keys] + units,
        max(2, settings["network_rounds"]), settings["block_time_s"], warmup, seed,
        "networks and entries")
    calibration_seconds = time.monotonic() - t0
    return device, (profile, calibration, profile_seconds, calibration_seconds)


def timing_results(manifest, settings, started, profile, calibration, profile_seconds,
                   calibration_seconds):
    """The results' protocol, summaries and blocks: every figure fbnas recomputes from the
    blocks when it reads the results back (fbnas.latency.device)."""
    entries, net_keys = manifest["entries"], list(manifest["networks"])
    stats = calibration.summaries(halves=set(net_keys))
    return {
        "protocol": {
            "rounds": settings["rounds"], "network_rounds": max(2, settings["network_rounds"]),
            "block_time_s": settings["block_time_s"],
            "warmup_calls": manifest["protocol"]["warmup_calls"],
            "extra_time_s": settings["extra_time_s"],
            "extra_rounds_run": profile.rounds_run - settings["rounds"],
            "seed": settings["seed"], "drift_neighbours": 4,
            "profile_seconds": round(profile_seconds, 1),
            "calibration_seconds": round(calibration_seconds, 1),
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "entries": profile.summaries(),
        "networks": {k: stats[k] for k in net_keys},
        "retimed": {k: stats[k] for k in entries},
        "blocks": {"entries": profile.record(), "networks_and_entries": calibration.record()},
    }


def main(argv=None):
    try:
        run(argv)
    except RunnerError as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
