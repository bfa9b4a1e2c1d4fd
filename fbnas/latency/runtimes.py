"""The runtimes a lookup table can be measured in, and what a timed block calls in each.

A table predicts latency only in the runtime it was measured in. Eager PyTorch at batch 1
spends a fixed per-module cost of the order of a hundred microseconds on every block, which
hides the candidates' differences (the cheap ones end up within a fraction of a percent of
each other); ONNX Runtime, which runs what ``fbnas export --format onnx`` writes, has far less
per-call overhead and shows them. So every table records its runtime, and calibration and
whole-network timing refuse a table of another runtime.

* ``eager``: the module itself in eval mode (fbnas.latency.timing adds ``torch.inference_mode()``).
* ``onnxruntime``: the module exported exactly as ``fbnas export --format onnx`` exports a
  network (``fbnas.arch.export.onnx_program``: torch's dynamo exporter with its default opset and graph
  optimisation, which folds BN into the convolutions, and a dynamic batch dimension), loaded
  into an ``InferenceSession`` on the CPU provider with explicit intra- and inter-op thread
  counts and full graph optimisation, and called with ``InferenceSession.run``.

fbnas.latency.timing's rounds and drift correction are shared by both: they only call the runners.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from fbnas.errors import FbnasError, brief

if TYPE_CHECKING:  # torch is imported where it is used, so the CLI can read RUNTIMES cheaply
    import torch
    from torch import nn

RUNTIMES = ("eager", "onnxruntime")
#: what new tables are measured in: the runtime exported networks are deployed with
DEFAULT_RUNTIME = "onnxruntime"
#: what a table that records no runtime was measured in (every table before runtimes existed)
UNRECORDED_RUNTIME = "eager"
#: seconds of back-to-back calls in one timed block (profile, calibrate, latency): long
#: enough that the timer's own cost vanishes, short enough that the machine's speed barely
#: drifts within a block. Kept here, beside the runtimes, so the CLI reads it without torch.
DEFAULT_BLOCK_TIME = 0.004
#: ONNX Runtime's threads for running independent nodes in parallel; with the sequential
#: execution mode used here it stays idle, and it is recorded so that nobody has to guess
INTER_OP_THREADS = 1
GRAPH_OPTIMIZATION = "ORT_ENABLE_ALL"
PROVIDER = "CPUExecutionProvider"

Runner = Callable[[], object]


def session(model: bytes, threads: int):
    """An ONNX Runtime session on the CPU with the thread counts and optimisation recorded."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = INTER_OP_THREADS
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION)
    options.log_severity_level = 3  # errors only: stdout and stderr stay the command's
    return ort.InferenceSession(model, options, providers=[PROVIDER])


class Runtime:
    """Turns (module, input) pairs into zero-argument calls for fbnas.latency.timing to time."""

    name = ""
    mode = ""

    def __init__(self, threads: int = 1):
        self.threads = threads

    def runner(self, module: nn.Module, x: torch.Tensor, key: str | None = None) -> Runner:
        """A call of ``module`` on ``x`` in this runtime. ``key``, when given, names what the
        module computes (a table entry key), so a runtime may reuse its work for that key."""
        raise NotImplementedError

    def runners(self, items: dict[str, tuple[nn.Module, torch.Tensor]], keyed: bool = False,
                desc: str = "preparing") -> dict[str, Runner]:
        """:meth:`runner` for every item; ``keyed``: the item keys are entry keys."""
        return {k: self.runner(m, x, k if keyed else None) for k, (m, x) in items.items()}

    def settings(self) -> dict:
        """What a table records under ``protocol.runtime_settings``."""
        return {"intra_op_threads": self.threads}


class Eager(Runtime):
    """The module itself, in eval mode."""

    name = "eager"
    mode = "eval+inference_mode"

    def runner(self, module, x, key=None):
        module.eval()
        return lambda: module(x)

    def settings(self) -> dict:
        import torch

        return {"torch": torch.__version__, **super().settings()}


class OnnxRuntime(Runtime):
    """The module exported by ``fbnas.arch.export.onnx_program``, run by an ONNX Runtime session.

    Sessions of entry keys are kept, so that a table's entries are exported once even when
    ``profile --check`` re-times them for the calibration.
    """

    name = "onnxruntime"
    mode = "exported in eval mode, InferenceSession.run"

    def __init__(self, threads: int = 1):
        from fbnas.arch.export import require_onnx

        require_onnx()
        super().__init__(threads)
        self._sessions: dict[str, object] = {}
        self.opsets: set[int] = set()
        self.export_seconds = 0.0

    def _session(self, module: nn.Module, x: torch.Tensor):
        from fbnas.arch.export import example_like, onnx_program

        started = time.monotonic()
        proto = onnx_program(module, example_like(x)).model_proto
        self.opsets.update(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
        sess = session(proto.SerializeToString(), self.threads)
        self.export_seconds += time.monotonic() - started
        return sess

    def runner(self, module, x, key=None):
        sess = self._sessions.get(key) if key is not None else None
        if sess is None:
            sess = self._session(module, x)
            if key is not None:
                self._sessions[key] = sess
        feeds = {sess.get_inputs()[0].name: x.detach().contiguous().numpy()}
        run = sess.run
        return lambda: run(None, feeds)

    def runners(self, items, keyed=False, desc="exporting to ONNX"):
        from fbnas.progress import Progress

        progress = Progress(total=len(items), desc=desc)
        out = {}
        for k, (m, x) in items.items():
            out[k] = self.runner(m, x, k if keyed else None)
            progress.update()
        progress.close()
        return out

    def settings(self) -> dict:
        import onnx
        import onnxruntime as ort
        import onnxscript
        import torch

        from fbnas.arch.export import EXAMPLE_BATCH

        out = {"onnxruntime": ort.__version__, "onnx": onnx.__version__,
               "onnxscript": onnxscript.__version__, "torch": torch.__version__,
               "exporter": "torch.onnx.export(dynamo=True), default optimisation, dynamic "
                           f"batch (example batch {EXAMPLE_BATCH})",
               "provider": PROVIDER, **super().settings(),
               "inter_op_threads": INTER_OP_THREADS, "execution_mode": "ORT_SEQUENTIAL",
               "graph_optimization_level": GRAPH_OPTIMIZATION,
               "call": "InferenceSession.run(None, {input: numpy array})",
               "export_seconds": round(self.export_seconds, 1)}
        if self.opsets:
            out["opset"] = max(self.opsets)
        return out


def make_runtime(runtime: str | Runtime, threads: int = 1) -> Runtime:
    """The runtime named ``runtime`` with ``threads`` intra-op threads; a Runtime passes
    through unchanged."""
    if isinstance(runtime, Runtime):
        return runtime
    if runtime == "eager":
        return Eager(threads)
    if runtime == "onnxruntime":
        return OnnxRuntime(threads)
    raise FbnasError(f"unknown runtime {brief(runtime)}; use one of {', '.join(RUNTIMES)}")
