"""Measuring a built network: whole-network latency, and per-layer shapes, params and MACs.

Latency is measured with the profiling protocol of :mod:`fbnas.latency.timing` (explicit threads,
warm-up, drift-corrected rounds of short timed blocks) in the runtime the lookup table was
profiled in, so that measured and predicted latency are comparable; the table's entries the
architecture uses are re-timed in the same rounds, which tells how fast the machine runs now
compared with when the table was profiled.
"""

from __future__ import annotations

from dataclasses import dataclass

from fbnas.arch.definition import Row, layer_rows
from fbnas.errors import FbnasError, Warn, warn_stderr
from fbnas.latency.matching import match_lut, warn_other_machine
from fbnas.latency.runtimes import DEFAULT_BLOCK_TIME


def measure_latency(defn: dict, threads: int, batch: int, rounds: int = 60,
                    block_time: float = DEFAULT_BLOCK_TIME, seed: int = 0, lut=None,
                    ops: list[str] | None = None, runtime: str = "eager"
                    ) -> tuple[dict, float | None]:
    """Whole-network latency (median/IQR/min in us) in ``runtime`` with the profiling protocol.

    For ``onnxruntime`` the network is exported as ``fbnas export --format onnx`` exports it.
    With ``lut`` and the architecture's ``ops``, the table entries it uses are re-timed in the
    same rounds (which also lets the drift correction work); the second value is then their
    summed re-timed latency, in us, else None.
    """
    import torch

    from fbnas.arch.model import Network
    from fbnas.latency.lut import arch_entries, entry_runners, profile_units
    from fbnas.latency.runtimes import make_runtime
    from fbnas.latency.timing import measure_rounds, set_threads

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
                   rounds: int = 60, block_time: float = DEFAULT_BLOCK_TIME, seed: int = 0,
                   runtime: str | None = None, warn: Warn = warn_stderr) -> str:
    """Measure ``defn`` and compare with ``lut``'s prediction; threads, batch and runtime
    default to the table's (the runtime to onnxruntime without a table).

    The error is (predicted - measured) / measured. A table profiled at another batch or in
    another runtime is refused: its entries say nothing about either. The table's entries
    used by ``defn`` are re-timed alongside it, which tells how fast the machine runs now
    compared with when the table was profiled, and gives the prediction at today's speed.
    """
    from fbnas.latency.runtimes import DEFAULT_RUNTIME

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
    macs: int  # multiply-adds (see fbnas.latency.lut.count_cost)


def layer_stats(defn: dict, batch: int = 1) -> list[LayerStat]:
    """Per stem/block/head: output shape (forward hooks), params and multiply-adds (MACs) of
    one forward."""
    import torch

    from fbnas.arch.model import Network
    from fbnas.latency.lut import count_cost

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
        macs, params = count_cost(m, x)
        stats.append(LayerStat(row, shape, params, macs))
    return stats
