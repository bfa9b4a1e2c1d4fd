"""Device bundles: a lookup table's entries and calibration networks as ONNX files, to be
timed on the device a network will run on, without fbnas or torch there.

``fbnas profile --space S --bundle DIR`` writes, without timing anything:

* ``entries/``: every distinct table entry (each candidate at its layer's shape, the stem and
  the head: the entries ``fbnas profile`` times) as its own ONNX file, exported exactly as
  the onnxruntime runtime exports it (``fbnas.arch.export.onnx_program``, example batch
  ``EXAMPLE_BATCH``, dynamic batch);
* ``networks/``: the random whole networks ``fbnas calibrate`` would time
  (``fbnas.latency.fidelity.random_archs``), exported as ``fbnas export --format onnx``
  exports a network (output ``logits``, the model definition in the metadata);
* ``manifest.json``: the space (name, hash, definition), every entry's key, shape, file and
  SHA-256, every network's ops, file and SHA-256, opset, precision, batch, the timing
  protocol's settings and the fbnas version;
* ``run.py``: :mod:`fbnas.latency.device_runner`, which needs Python 3 with onnxruntime and
  numpy only.

With ``precision="int8"`` every file is quantized by ``fbnas.arch.quantize.quantize_int8``
(ONNX Runtime static QDQ quantization, per-channel weights): entries on random normal
activations of their input shape (the scales change no kernel choice, so no timing), whole
networks on real training images. The folder is written next to its destination and moved
into place in one rename. ``fbnas.latency.device`` reads the runner's results back.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import numpy as np
import torch

import fbnas
from fbnas.arch.export import EXAMPLE_BATCH, example_like, onnx_program, require_onnx
from fbnas.arch.model import Network
from fbnas.arch.space import SearchSpace
from fbnas.errors import FbnasError, brief
from fbnas.latency.device_runner import MAX_SEED
from fbnas.latency.fidelity import random_archs
from fbnas.latency.lut import profile_units, table_layout
from fbnas.latency.runtimes import (DEFAULT_BLOCK_TIME, GRAPH_OPTIMIZATION, INTER_OP_THREADS,
                                    PROVIDER)
from fbnas.progress import Progress

BUNDLE_SCHEMA = "fbnas.bundle/1"
MANIFEST_FILE = "manifest.json"
RUNNER_FILE = "run.py"
RUNNER_SOURCE = "device_runner.py"
README_FILE = "README.txt"
PRECISIONS = ("fp32", "int8")
#: random normal activations each entry is quantized on (their scales pick no kernel)
ENTRY_CALIBRATION_SAMPLES = 8
#: training images each whole network is quantized on, and how many go in one batch
NETWORK_CALIBRATION_IMAGES = 256
CALIBRATION_BATCH = 32
#: the protocol of ``fbnas profile`` (entries) and ``fbnas calibrate`` (networks with
#: re-timed entries), for the runner; its command line may change rounds, times and seed
PROTOCOL = {
    "rounds": 80, "network_rounds": 60, "block_time_s": DEFAULT_BLOCK_TIME, "warmup_calls": 3,
    "extra_time_s": 50.0, "extra_rounds": 100_000, "refine_every": 10, "tie_margin": 0.03,
    "rel_iqr": 0.10,
}
QUANTIZATION_NOTE = {
    "method": "ONNX Runtime static quantization to int8, QDQ format, per-channel weights "
              "(fbnas.arch.quantize.quantize_int8)",
    "entries": f"calibrated on {ENTRY_CALIBRATION_SAMPLES} random normal activations of each "
               "entry's input shape: the scales they give do not change which int8 kernels "
               "run, so the timings do not depend on them",
}


def networks_fit(networks: int) -> int:
    """How many of ``networks`` calibration networks fit the line, as ``profile --check``
    splits them: 2 of every 5, at most 20, at least 2."""
    return min(20, max(2, networks * 2 // 5))


class _Candidates:
    """A space's candidates per layer, in the order a table of it lists them: what
    :func:`fbnas.latency.fidelity.random_archs` draws from."""

    def __init__(self, space: SearchSpace):
        self._cands = [list(layer.candidates) for layer in space.layers]

    def layer_candidates(self) -> list[list[str]]:
        return [list(c) for c in self._cands]


def calibration_archs(space: SearchSpace, networks: int, fit: int, seed: int
                      ) -> list[list[str]]:
    """The random networks ``fbnas calibrate --networks N --fit F --seed S`` times."""
    return random_archs(_Candidates(space), networks, seed, spread=fit)


def runner_source() -> bytes:
    """The runner script shipped in the package (copied into a bundle as run.py)."""
    return (resources.files("fbnas.latency") / RUNNER_SOURCE).read_bytes()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _opset(model: bytes) -> int:
    import onnx

    proto = onnx.load_from_string(model)
    return max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def _quantizer():
    """fbnas.arch.quantize.quantize_int8, or a one-line error saying why it cannot run."""
    try:
        from fbnas.arch.quantize import quantize_int8
    except ImportError as e:
        raise FbnasError(f"--precision int8 cannot quantize here ({e}); write an fp32 bundle, "
                         "or install an fbnas with fbnas.arch.quantize") from None
    return quantize_int8


def _quantizer_settings() -> dict | None:
    """The settings fbnas.arch.quantize records in what it writes, if it names them."""
    try:
        from fbnas.arch.quantize import SETTINGS
    except ImportError:
        return None
    return dict(SETTINGS) if isinstance(SETTINGS, dict) else None


def _quantize(quantize, model: bytes, calibration: list[np.ndarray], what: str) -> bytes:
    try:
        out = quantize(model, calibration)
    except FbnasError:
        raise
    except Exception as e:  # ONNX Runtime's quantizer raises many exception types
        raise FbnasError(f"int8 quantization of {what} failed: "
                         f"{str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"
                         ) from None
    if not isinstance(out, (bytes, bytearray)) or not out:
        raise FbnasError(f"int8 quantization of {what} returned no model")
    return bytes(out)


def check_images(images: np.ndarray | None, space: SearchSpace) -> None:
    """Calibration images must be float32 N x C x R x R of the space's input."""
    if images is None:
        return
    want = (space.in_channels, space.resolution, space.resolution)
    if images.ndim != 4 or tuple(images.shape[1:]) != want or len(images) < 1:
        raise FbnasError(f"calibration images are {'x'.join(map(str, images.shape))}, space "
                         f"{space.name} takes N x {'x'.join(map(str, want))}; pass a --data-dir "
                         "of images of its input size")


def prepare_destination(out: Path, force: bool) -> Path:
    """Refuse an existing bundle (unless ``force``) or a file in the way, and make the staging
    folder beside ``out`` now, before any export, so that an unwritable place fails at once."""
    if out.exists() and not out.is_dir():
        raise FbnasError(f"--bundle {out} is a file; give a folder path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FbnasError(f"{out} already exists; pass --force to replace it")
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
        umask = os.umask(0)  # mkdtemp makes an owner-only folder; give the usual mode
        os.umask(umask)
        staging.chmod(0o777 & ~umask)
        return staging
    except OSError as e:
        raise FbnasError(f"cannot write {out}: folder {parent} does not accept new files "
                         f"({e.strerror}); pick another --bundle") from None


def _move_into_place(staging: Path, out: Path) -> None:
    old = None
    try:
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            out.replace(old / "bundle")
        staging.replace(out)
    except OSError as e:
        raise FbnasError(f"cannot write {out}: {e.strerror}") from None
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _readme(space: SearchSpace, precision: str, source: str | None) -> str:
    return (f"fbnas device bundle: space {space.name} (hash {space.hash}), {precision}\n\n"
            "On the device (Python 3 with onnxruntime and numpy; no torch, no fbnas):\n"
            "    python run.py --out results.json --threads 1\n"
            "    (--provider NAME picks another onnxruntime execution provider;\n"
            "     python run.py --help lists every option)\n\n"
            "Back where fbnas is installed:\n"
            f"    fbnas profile --space {source or space.name} --from-results results.json "
            "--out TABLE.json\n")


def _export(space: SearchSpace, batch: int, seed: int, task: tuple, calib_images,
            quantize) -> bytes:
    """The ONNX bytes of one bundle file: ``("entry", i, key)`` or ``("network", i, ops)``.

    Weights and quantization noise are seeded by (seed, kind, i), so a file does not depend
    on which process exports it or in what order."""
    kind, i, what = task
    stream = np.random.SeedSequence([seed, kind == "entry", i])
    torch.manual_seed(int(stream.generate_state(1)[0]))
    if kind == "entry":
        spec = table_layout(space, batch)[0][what]
        x = spec.input()
        model = onnx_program(spec.build(space), example_like(x)).model_proto.SerializeToString()
        if quantize is not None:
            rng = np.random.default_rng([seed, i])
            calib = [rng.standard_normal(tuple(x.shape)).astype(np.float32)
                     for _ in range(ENTRY_CALIBRATION_SAMPLES)]
            model = _quantize(quantize, model, calib, f"entry {what}")
        return model
    defn = space.definition(what, f"net{i}")
    net = Network(defn)
    program = onnx_program(net, torch.randn(net.input_shape(EXAMPLE_BATCH)), "logits")
    program.model.metadata_props["fbnas.definition"] = json.dumps(defn)
    model = program.model_proto.SerializeToString()
    if quantize is not None:
        model = _quantize(quantize, model, calib_images, f"network net{i}")
    return model


_WORKER: dict = {}


def _init_worker(raw: dict, batch: int, seed: int, calib_images, int8: bool) -> None:
    torch.set_num_threads(1)
    _WORKER.update(space=SearchSpace(raw), batch=batch, seed=seed, images=calib_images,
                   quantize=_quantizer() if int8 else None)


def _export_in_worker(task: tuple) -> bytes:
    w = _WORKER
    return _export(w["space"], w["batch"], w["seed"], task, w["images"], w["quantize"])


def write_bundle(space: SearchSpace, out: str | Path, precision: str = "fp32", batch: int = 1,
                 networks: int = 50, seed: int = 0, images: np.ndarray | None = None,
                 images_source: str | None = None, force: bool = False,
                 source: str | None = None, jobs: int = 1) -> dict:
    """Write the device bundle of ``space`` to the folder ``out`` and return its manifest.

    Nothing is timed, so ``jobs`` processes export (and quantize) the files in parallel;
    every file depends on the seed and its own index only, so the bundle is the same for any
    ``jobs``.

    ``networks`` random whole networks (``fbnas calibrate``'s selection, with
    :func:`networks_fit` of them spread from no skip to 80% skip) go with the entries. For
    ``precision="int8"``, ``images`` (float32 N x C x R x R, normalised as for training)
    calibrate the networks' quantization and are required.
    """
    if precision not in PRECISIONS:
        raise FbnasError(f"unknown precision {brief(precision)}; use one of "
                         f"{', '.join(PRECISIONS)}")
    if batch < 1:
        raise FbnasError("--batch must be at least 1")
    if networks < 5:
        raise FbnasError("--networks must be at least 5 (2 of every 5 fit the calibration, the "
                         "rest test it)")
    if not 0 <= seed <= MAX_SEED:
        # the manifest's seed seeds numpy on the device, which takes no negative seed
        raise FbnasError(f"--seed must be from 0 to {MAX_SEED} for a bundle, not {seed}")
    require_onnx()
    quantize = None
    if precision == "int8":
        if images is None:
            raise FbnasError("an int8 bundle quantizes its calibration networks on real images: "
                             "pass --data-dir DIR (CIFAR-10 python format)")
        check_images(images, space)
        quantize = _quantizer()
    out = Path(out)
    staging = prepare_destination(out, force)
    try:
        manifest = _write(space, staging, precision, batch, networks, seed, images,
                          images_source, quantize, source, jobs)
        _move_into_place(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _write(space: SearchSpace, folder: Path, precision: str, batch: int, networks: int,
           seed: int, images: np.ndarray | None, images_source: str | None, quantize,
           source: str | None, jobs: int) -> dict:
    """Export every file into ``folder`` (the staging folder) and write the manifest."""
    started = time.monotonic()
    layout = table_layout(space, batch)
    specs = layout[0]
    (folder / "entries").mkdir()
    (folder / "networks").mkdir()
    fit = networks_fit(networks)
    archs = calibration_archs(space, networks, fit, seed)
    calib_images = None
    if quantize is not None:
        calib_images = [np.ascontiguousarray(images[i:i + CALIBRATION_BATCH], dtype=np.float32)
                        for i in range(0, len(images), CALIBRATION_BATCH)]
    tasks = [("entry", i, key) for i, key in enumerate(specs)]
    tasks += [("network", i, ops) for i, ops in enumerate(archs)]
    models = _export_all(space, batch, seed, tasks, calib_images, quantize, jobs)
    entries = {}
    for i, (key, spec) in enumerate(specs.items()):
        entries[key] = {**spec.fields(), "input": list(spec.input().shape),
                        **_save(folder, f"entries/{i:03d}_{spec.op}.onnx", models["entry", i])}
    shape = [batch, space.in_channels, space.resolution, space.resolution]  # every network's
    nets = {}
    for i, ops in enumerate(archs):
        nets[f"net{i}"] = {"ops": list(ops), "fit": i < fit, "input": shape,
                           **_save(folder, f"networks/net{i}.onnx", models["network", i])}
    runner = runner_source()
    (folder / RUNNER_FILE).write_bytes(runner)
    (folder / README_FILE).write_text(_readme(space, precision, source))
    quantization = None
    if quantize is not None:
        quantization = {**QUANTIZATION_NOTE,
                        "networks": f"calibrated on {len(images)} training images"
                                    + (f" from {images_source}" if images_source else "")
                                    + ", normalised as for training",
                        "settings": _quantizer_settings()}
    manifest = _manifest(space, precision, batch, seed, layout, networks, fit, entries, nets,
                         runner, quantization, source, time.monotonic() - started)
    (folder / MANIFEST_FILE).write_bytes(manifest_text(manifest).encode())
    return manifest


def _export_all(space: SearchSpace, batch: int, seed: int, tasks: list[tuple], calib_images,
                quantize, jobs: int) -> dict[tuple[str, int], bytes]:
    """Every task's ONNX bytes by (kind, index): here for ``jobs`` <= 1, else in ``jobs``
    worker processes. Each file depends on its task and the seed alone (see ``_export``),
    so both ways give the same bytes."""
    progress = Progress(total=len(tasks), desc="exporting entries and networks")
    models: dict[tuple[str, int], bytes] = {}
    if jobs <= 1:
        for task in tasks:
            models[task[:2]] = _export(space, batch, seed, task, calib_images, quantize)
            progress.update()
    else:
        import concurrent.futures as cf
        import multiprocessing

        # spawned, not forked: a fork of a process that has run torch's OpenMP pool can hang
        with cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=_init_worker,
                                    initargs=(space.raw, batch, seed, calib_images,
                                              quantize is not None)) as pool:
            pending = {pool.submit(_export_in_worker, t): t for t in tasks}
            for done in cf.as_completed(pending):
                models[pending[done][:2]] = done.result()
                progress.update()
    progress.close()
    return models


def _save(folder: Path, rel: str, model: bytes) -> dict:
    """Write one exported file into the bundle; its manifest record (file, SHA-256, size,
    opset), from which the manifest's opsets and total size are summed."""
    (folder / rel).write_bytes(model)
    return {"file": rel, "sha256": sha256(model), "bytes": len(model), "opset": _opset(model)}


def _manifest(space: SearchSpace, precision: str, batch: int, seed: int, layout: tuple,
              networks: int, fit: int, entries: dict, nets: dict, runner: bytes,
              quantization: dict | None, source: str | None, seconds: float) -> dict:
    """The bundle's manifest: what the runner times and how, and everything needed to read
    its results back into a table (fbnas.latency.device). ``layout`` is the space's
    ``table_layout`` at ``batch``, the one the entries were exported from."""
    import onnx
    import onnxruntime
    import onnxscript

    files = [*entries.values(), *nets.values()]
    opsets = {f["opset"] for f in files}
    specs, layers, fixed = layout
    return {
        "schema": BUNDLE_SCHEMA,
        "fbnas": fbnas.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "space": {"name": space.name, "hash": space.hash, "source": source,
                  "definition": space.raw},
        "precision": precision,
        "dtype": "float32" if precision == "fp32" else "int8 (QDQ), float32 input and output",
        "batch": batch,
        "opset": max(opsets),
        "seed": seed,
        "export": {
            "exporter": "torch.onnx.export(dynamo=True), default optimisation, dynamic batch "
                        f"(example batch {EXAMPLE_BATCH}), fbnas.arch.export.onnx_program",
            "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__, "onnxruntime_here": onnxruntime.__version__,
            "opsets": sorted(opsets),
            "seconds": round(seconds, 1),
        },
        "quantization": quantization,
        "session": {"intra_op_threads": "run.py --threads (default 1)",
                    "inter_op_threads": INTER_OP_THREADS, "execution_mode": "ORT_SEQUENTIAL",
                    "graph_optimization_level": GRAPH_OPTIMIZATION,
                    "provider": f"run.py --provider (default {PROVIDER})"},
        "protocol": {**PROTOCOL, "seed": seed},
        "units": profile_units(specs),
        "fixed": fixed,
        "layers": layers,
        "entries": entries,
        "calibration": {"networks": networks, "fit": fit, "seed": seed,
                        "selection": "fbnas.latency.fidelity.random_archs: the first 'fit' "
                                     "networks with a skip share from none to 80%, the rest "
                                     "uniformly random"},
        "networks": nets,
        "runner": {"file": RUNNER_FILE, "sha256": sha256(runner)},
        "total_bytes": sum(f["bytes"] for f in files) + len(runner),
    }


def manifest_text(manifest: dict) -> str:
    """The manifest file's exact text (its SHA-256 is recomputed from a copy in results)."""
    return json.dumps(manifest, indent=1) + "\n"
