"""Reports on one network of an architecture file, with the lookup table it records.

``fbnas summary`` and ``fbnas latency`` both start from an architecture file and, unless
told otherwise, the table the search that found the network used, found by the rules of
fbnas.latency.recorded even after the run directory moved.
"""

from __future__ import annotations

from pathlib import Path


def summary_text(arch_path: Path, name: str | None = None, lut_path: Path | None = None) -> str:
    """The network ``name`` of ``arch_path`` layer by layer: op, output shape, params, MACs
    and the latency of the table ``lut_path`` (default: the one the architecture records)."""
    from fbnas.arch.definition import select
    from fbnas.latency.reports import format_summary
    from fbnas.latency.recorded import recorded_lut

    _, defn = select(arch_path, name)
    return format_summary(defn, recorded_lut(defn, lut_path, arch_path=arch_path))


def latency_text(arch_path: Path, name: str | None = None, lut_path: Path | None = None,
                 runtime: str | None = None, threads: int | None = None,
                 batch: int | None = None, rounds: int = 60, block_time: float | None = None,
                 seed: int = 0) -> str:
    """The network ``name`` of ``arch_path`` timed whole on this machine against its table's
    prediction; for a table measured on another device that this machine does not match,
    the prediction alone (timing here would say nothing about the device)."""
    from fbnas.arch.definition import select
    from fbnas.latency.measure import latency_report
    from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME
    from fbnas.latency.recorded import recorded_lut

    name, defn = select(arch_path, name)
    lut = recorded_lut(defn, lut_path, arch_path=arch_path)
    if lut is not None:
        from fbnas.latency.device import not_here, prediction_report

        reason = not_here(lut)
        if reason is not None:
            return prediction_report(defn, lut, reason, batch=batch, runtime=runtime)
    return latency_report(defn, lut, threads=threads, batch=batch, rounds=rounds,
                          block_time=DEFAULT_BLOCK_TIME if block_time is None else block_time,
                          seed=seed, runtime=runtime)
