"""Latency: lookup tables, how their entries are timed, and how far to trust them.

Step 1 of the chain (``fbnas profile``, ``calibrate``, ``latency``, ``show-lut``): the
runtimes a block is timed in (eager PyTorch, ONNX Runtime), the timing protocol, the table
file with its measurement record, the calibration and fidelity checks against whole networks,
and matching a table to an architecture. Builds on ``fbnas.arch`` only.
"""
