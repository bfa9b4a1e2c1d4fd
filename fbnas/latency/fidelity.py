"""How well a lookup table predicts whole networks, and the calibration that corrects it.

Random architectures are built from the table's space and timed in the table's runtime
(fbnas.latency.runtimes: for ``onnxruntime`` each network is exported as ``fbnas export`` exports it)
with the profile's protocol (fbnas.latency.timing), in shared rounds together with re-timed table
entries; the even and the odd rounds are two independent timings of the same networks.
Reported, against the noise floor of those two timings: the raw table sum, the calibrated
table (measured ~= a * sum + b, fitted by least squares on the first ``fit`` networks, scored
on the rest) and multiply-adds (MACs) fitted the same way. The report keeps that last row
under the key ``flops_calibrated_test``, its name in every stored calibration: a line fitted
to MACs predicts exactly what one fitted to FLOPs (2 per MAC) does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fbnas.arch.model import Network
from fbnas.errors import FbnasError
from fbnas.io import check_writable, write_json
from fbnas.latency.lut import (LUT, arch_entries, device_record, entry_runners, fixed_entries,
                               layer_entries, load_lut, profile_units)
from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME, Runtime, make_runtime
from fbnas.latency.timing import measure_rounds, set_threads


def errors(pred: np.ndarray, meas: np.ndarray) -> dict:
    """Signed bias, MAPE and share within +-10% (percent), and Kendall tau of pred vs meas.

    scipy is imported here, not with the module: the device bundle and its reader import this
    module for the calibration's networks and report, and need no statistics to do so."""
    from scipy.stats import kendalltau

    rel = (pred - meas) / meas
    tau = kendalltau(pred, meas).statistic if len(pred) > 1 else float("nan")
    return {"bias_pct": float(100 * rel.mean()), "mape_pct": float(100 * np.abs(rel).mean()),
            "within10_pct": float(100 * (np.abs(rel) <= 0.10).mean()), "kendall_tau": float(tau),
            "n": int(len(pred))}


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """y ~= a * x + b, least squares on relative errors (the figures reported are relative)."""
    a, b = np.polyfit(x, y, 1, w=1 / y)
    return float(a), float(b)


@dataclass
class FidelityReport:
    lut: LUT
    archs: list[list[str]]
    fit: int
    measured: np.ndarray  # all rounds pooled, us
    pass_a: np.ndarray
    pass_b: np.ndarray
    raw: np.ndarray  # stored table sums, us
    retimed: np.ndarray  # sums of entries re-timed in this run, us
    macs: np.ndarray  # multiply-adds of each network, by the table
    a: float = 0.0
    b: float = 0.0
    proportional: bool = False  # the line was refused for a scale alone (see compute)
    figures: dict = field(default_factory=dict)

    def compute(self) -> None:
        f, t = slice(0, self.fit), slice(self.fit, None)
        self.a, self.b = fit_line(self.raw[f], self.measured[f])
        fastest = self.lut.fastest_sum()
        self.proportional = self.a <= 0 or self.a * fastest + self.b <= 0
        if self.proportional:
            # a few noisy networks can tilt the line so far that it predicts no time at all
            # for the space's fastest network, which a table must not store: fit a scale alone
            r = self.raw[f] / self.measured[f]
            self.a, self.b = float(r.sum() / (r * r).sum()), 0.0
        ma, mb = fit_line(self.macs[f], self.measured[f])
        self.figures = {
            "noise_floor": errors(self.pass_b[t], self.pass_a[t]),
            "raw_table_all": errors(self.raw, self.measured),
            "retimed_table_all": errors(self.retimed, self.measured),
            "raw_table_test": errors(self.raw[t], self.measured[t]),
            "calibrated_table_test": errors(self.a * self.raw[t] + self.b, self.measured[t]),
            "flops_calibrated_test": errors(ma * self.macs[t] + mb, self.measured[t]),
        }

    def calibration(self) -> dict:
        """The block stored under ``calibration`` in the table."""
        return {"a": self.a, "b": self.b, "form": "measured_us = a * table_sum_us + b",
                **({"fit": "scale only: the line predicted <= 0 us for the fastest network"}
                   if self.proportional else {}),
                "networks_fit": self.fit, "networks_test": len(self.archs) - self.fit,
                "runtime": self.lut.runtime,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "report": self.figures}

    def text(self) -> str:
        rows = [
            ("noise floor, test (B vs A)", "noise_floor"),
            ("table sum, all networks", "raw_table_all"),
            ("table re-timed now, all", "retimed_table_all"),
            ("table sum, test networks", "raw_table_test"),
            ("calibrated table, test", "calibrated_table_test"),
            ("MACs (fitted), test", "flops_calibrated_test"),
        ]
        n = len(self.archs)
        lo, hi = self.measured.min() / 1000, self.measured.max() / 1000
        out = [f"fidelity on {n} random networks ({self.fit} fit, {n - self.fit} test) in "
               f"{self.lut.runtime}, measured {lo:.2f} .. {hi:.2f} ms",
               f"{'predictor':<32}{'bias%':>8}{'MAPE%':>8}{'<=10%':>8}{'tau':>8}"]
        for label, key in rows:
            e = self.figures[key]
            out.append(f"{label:<32}{e['bias_pct']:8.1f}{e['mape_pct']:8.1f}"
                       f"{e['within10_pct']:8.0f}{e['kendall_tau']:8.3f}")
        out.append(f"calibration: measured ~= {self.a:.4f} * table sum + {self.b:.1f} us")
        return "\n".join(out)


def random_archs(lut: LUT, n: int, seed: int, spread: int = 0) -> list[list[str]]:
    """``n`` random architectures: the first ``spread`` of them with a share of ``skip``
    layers that runs evenly from none to 80% (from full networks to the skip-heavy ones a
    search often ends with), the rest with every layer's op drawn uniformly."""
    rng = random.Random(seed)
    archs = []
    for i in range(n):
        if i < spread:
            p_skip = 0.8 * i / max(1, spread - 1)
            archs.append([("skip" if "skip" in c and rng.random() < p_skip
                           else rng.choice([o for o in c if o != "skip"] or c))
                          for c in lut.layer_candidates()])
        else:
            archs.append([rng.choice(c) for c in lut.layer_candidates()])
    return archs


def calibrate_lut(lut: LUT, networks: int = 50, fit: int = 20, seed: int = 0,
                  rounds: int = 60, block_time: float = DEFAULT_BLOCK_TIME,
                  runtime: str | Runtime | None = None) -> FidelityReport:
    """Time ``networks`` random networks and the table's entries; fit and score a calibration.

    The first ``fit`` networks, which fit the calibration, have skip shares from none to
    80% (see ``random_archs``); the others, which score it, are uniformly random.

    Networks (each a unit of its own) and entries (units as in the profile) share ``rounds``
    rounds (see fbnas.latency.timing); the even and the odd rounds give two independent timings of
    every network, whose disagreement is the noise floor.

    ``runtime`` (default: the table's) must be the table's runtime; a Runtime object may be
    passed to reuse the entries it has already prepared (``profile --check``).
    """
    space = lut.space()
    threads, batch = lut.threads, lut.batch
    rt = make_runtime(runtime or lut.runtime, threads)
    lut.check_runtime(rt.name)
    set_threads(threads)
    torch.manual_seed(seed)
    # the fit networks span the latencies a search visits, so that the fitted intercept is
    # pinned down; the test networks are uniformly random
    archs = random_archs(lut, networks, seed, spread=fit)

    nets = {f"net{i}": Network(space.definition(ops)) for i, ops in enumerate(archs)}
    items = rt.runners({k: (net, torch.randn(net.input_shape(batch))) for k, net in nets.items()},
                       desc="preparing networks")
    specs = {s.key: s for s in fixed_entries(space, batch).values()}
    for layer in space.layers:
        specs.update({s.key: s for s in layer_entries(layer, batch).values()})
    items.update(entry_runners(rt, space, specs))
    units = [[f"net{i}"] for i in range(networks)] + profile_units(specs)
    timings = measure_rounds(items, threads, units=units, rounds=max(2, rounds),
                             block_time=block_time, seed=seed, desc="networks and entries")
    stats = timings.summaries()
    corrected = timings.corrected()

    def half(key, parity):
        return float(np.median(timings.blocks(key, parity, corrected))) * 1e6

    keys = [f"net{i}" for i in range(networks)]
    pass_a = np.array([half(k, 0) for k in keys])
    pass_b = np.array([half(k, 1) for k in keys])
    measured = np.array([stats[k]["median"] for k in keys])
    retimed_sum = np.array([sum(stats[s.key]["median"] for s in arch_entries(space, ops, batch))
                            for ops in archs])
    report = FidelityReport(
        lut=lut, archs=archs, fit=fit, measured=measured, pass_a=pass_a, pass_b=pass_b,
        raw=np.array([lut.raw_sum(ops) for ops in archs]), retimed=retimed_sum,
        macs=np.array([lut.raw_sum(ops, "macs") for ops in archs]))
    report.compute()
    return report


def calibrate_table_file(path: str | Path, networks: int = 50, fit: int = 20, seed: int = 0,
                         rounds: int = 60, block_time: float = DEFAULT_BLOCK_TIME,
                         runtime: str | None = None, dry_run: bool = False, force: bool = False,
                         echo: Callable[[str], None] = print) -> FidelityReport:
    """``fbnas calibrate``: time random whole networks against the table file ``path``,
    report its fidelity to ``echo`` and, unless ``dry_run``, store the calibration in the
    file. Refused before any timing: a table measured on a device by a bundle's run.py
    (this machine's timings would not be the device's), a calibration already there
    without ``force`` or ``dry_run``, ``fit`` not below ``networks``, a file that cannot be
    written."""
    lut = load_lut(path)
    if device_record(lut) is not None:
        raise FbnasError(f"{path} was measured on a device by a bundle's run.py and is "
                         "calibrated on the bundle's networks there; fbnas calibrate would time "
                         "them on this machine instead. To recalibrate, re-run run.py on the "
                         "device (more --rounds) and import again with fbnas profile "
                         "--from-results")
    runtime = lut.check_runtime(runtime)
    if lut.calibration and not (force or dry_run):
        raise FbnasError(f"{path} already has a calibration; pass --force to replace it "
                         "or --dry-run to only report")
    if fit >= networks:
        raise FbnasError(f"--fit ({fit}) must be smaller than --networks ({networks})")
    if not dry_run:
        check_writable(path, "LUT (or --dry-run)")
    report = calibrate_lut(lut, networks=networks, fit=fit, seed=seed, rounds=rounds,
                           block_time=block_time, runtime=runtime)
    echo(report.text())
    if not dry_run:
        lut.data["calibration"] = report.calibration()
        write_json(path, lut.data)
        echo(f"stored the calibration in {path}")
    return report
