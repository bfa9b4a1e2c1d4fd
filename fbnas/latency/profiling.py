"""The three ways ``fbnas profile`` gets a lookup table, one function each.

``profile_here`` times every entry on this machine (and may calibrate on whole networks);
``bundle_for_device`` times nothing and writes a folder to time on another device;
``table_from_results`` turns what that folder's run.py measured there into a table;
``check_mode`` refuses a command line that mixes them. The modes share only the space and
the table file, so one function with three branches read as three commands tangled
together. Lines for the user go to ``echo``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from fbnas.arch.space import SearchSpace, load_space
from fbnas.errors import UsageError

Echo = Callable[[str], None]


def check_mode(given: dict[str, str], out: Path | None, bundle: Path | None, precision: str,
               data_dir: str | None, from_results: Path | None, check: int) -> None:
    """Refuse, before any work, a ``fbnas profile`` command line that mixes the modes:
    ``given`` maps the options the user typed (by parameter name) to their flags, and an
    option of another mode than the one chosen is named in the error. Each mode's own
    requirements (a table to write, enough networks to check) are checked here too."""

    def refuse(names, why):
        bad = [given[n] for n in names if n in given]
        if bad:
            raise UsageError(f"{bad[0]} does not apply {why}; drop it")

    timing = ("runtime", "threads", "rounds", "extra_time", "block_time", "check_n")
    if bundle is not None and from_results is not None:
        raise UsageError("--bundle writes a folder for the device and --from-results reads its "
                         "results back; pick one")
    if bundle is not None:
        refuse(timing, "to --bundle (the device's run.py times the bundle and takes --threads, "
                       "--rounds, --extra-time, --block-time there)")
        if out is not None:
            raise UsageError("--bundle writes a folder, not a table; drop --out (the table "
                             "comes from --from-results later)")
        if data_dir is not None and precision != "int8":
            raise UsageError("--data-dir calibrates int8 quantization; add --precision int8 or "
                             "drop it")
        return
    refuse(("precision", "networks", "data_dir", "jobs"), "without --bundle")
    if from_results is not None:
        refuse(timing + ("batch", "seed"), "to --from-results (the results hold the device's "
                                           "timings and the bundle's settings)")
        if out is None:
            raise UsageError("--from-results needs --out TABLE, the lookup table to write")
        return
    if out is None:
        raise UsageError("give --out TABLE (or --bundle DIR to time on another device)")
    if 0 < check < 5:
        raise UsageError("--check needs at least 5 networks (2 of every 5 fit, the rest test)")


def profile_here(space_name: str, out: Path, runtime: str, threads: int = 1, batch: int = 1,
                 rounds: int = 80, extra_time: float = 50.0, block_time: float | None = None,
                 check: int = 0, seed: int = 0, force: bool = False,
                 echo: Echo = print) -> dict:
    """Time the space ``space_name`` into the table ``out`` in ``runtime`` and return its
    data; with ``check`` networks, also calibrate it on that many random whole networks
    (2 of every 5, at most 20, fit it) timed by the same runtime. ``out`` is checked before
    the minutes of timing, and a busy machine is warned about before them."""
    from fbnas.errors import warn_stderr
    from fbnas.io import check_writable, refuse_overwrite
    from fbnas.latency.lut import LUT, profile_space, save_lut
    from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME, make_runtime
    from fbnas.machine import busy_warning

    block_time = DEFAULT_BLOCK_TIME if block_time is None else block_time
    space = load_space(space_name)
    refuse_overwrite(out, force)
    check_writable(out)  # before minutes of profiling, not after
    busy = busy_warning(threads, "profiling")
    if busy:  # other processes' threads inflate every timing, and not evenly
        warn_stderr(f"{busy}; a table timed now is not to be trusted")
    rt = make_runtime(runtime, threads)  # shared with the check, which re-times the entries
    data = profile_space(space, threads=threads, batch=batch, rounds=rounds,
                         extra_time=extra_time, block_time=block_time, seed=seed,
                         source=str(space_name), runtime=rt)
    if check:
        from fbnas.latency.fidelity import calibrate_lut

        # 2 of every 5 networks fit the calibration (20 of 50), the rest score it
        fit = min(20, max(2, check * 2 // 5))
        report = calibrate_lut(LUT(data), networks=check, fit=fit, seed=seed,
                               block_time=block_time, runtime=rt)
        echo(report.text())
        data["calibration"] = report.calibration()
    save_lut(data, out, force=force)
    echo(LUT(data, out).summary())
    echo(f"wrote {out}")
    return data


def default_jobs() -> int:
    """Processes that export a bundle: the cores this process may use, at most 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return min(8, cores or os.cpu_count() or 1)


def bundle_for_device(space: SearchSpace, out: Path, source: str, precision: str = "fp32",
                      batch: int = 1, networks: int = 50, seed: int = 0,
                      images: np.ndarray | None = None, images_source: str | None = None,
                      jobs: int = 0, force: bool = False, echo: Echo = print) -> dict:
    """Write the folder ``out`` that times ``space`` on another device (every entry and
    ``networks`` calibration networks as ONNX files, its manifest and run.py) and say what
    to do with it; return the manifest. ``source`` is how the user named the space (the
    next command repeats it); ``images`` calibrate int8 networks (``images_source`` says
    where they came from); ``jobs`` 0 takes ``default_jobs()``."""
    from fbnas.latency.bundle import write_bundle

    manifest = write_bundle(space, out, precision=precision, batch=batch, networks=networks,
                            seed=seed, images=images, images_source=images_source,
                            force=force, source=source, jobs=jobs or default_jobs())
    cal = manifest["calibration"]
    echo(f"bundle for space {space.name} (hash {space.hash}): "
         f"{len(manifest['entries'])} entries, {cal['networks']} calibration networks "
         f"({cal['fit']} fit), {precision}, batch {batch}, opset {manifest['opset']}, "
         f"{manifest['total_bytes'] / 1e6:.1f} MB, exported in "
         f"{manifest['export']['seconds']:.0f} s")
    echo(f"wrote {out}")
    echo("next: copy it to the device and run there (Python 3 with onnxruntime and "
         f"numpy): python {out}/run.py --out results.json --threads 1")
    echo(f"then here: fbnas profile --space {source} --from-results results.json "
         "--out TABLE.json")
    return manifest


def table_from_results(space_name: str, results: Path, out: Path, force: bool = False,
                       echo: Echo = print) -> dict:
    """Make the table ``out`` from the ``results`` a bundle's run.py wrote on the device,
    calibrated on the bundle's networks as timed there, and return its data. A calibration
    the results cannot support is warned about, not refused: the timings still stand."""
    from fbnas.io import check_writable, refuse_overwrite
    from fbnas.latency.device import device_table
    from fbnas.latency.lut import LUT, save_lut

    space = load_space(space_name)
    refuse_overwrite(out, force)
    check_writable(out)
    data, report, problem = device_table(space, results, source=str(space_name))
    echo(report.text())
    if problem is not None:
        from fbnas.errors import warn_stderr

        warn_stderr(problem)
    save_lut(data, out, force=force)
    echo(LUT(data, out).summary())
    echo(f"wrote {out}")
    return data
