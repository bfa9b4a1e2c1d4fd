"""Training runs: data, the training loop, run directories, checkpoints and launching.

What a search and a retrain share: datasets and their splits and batches, the epoch loop
with its schedule, statistics and health checks, the run directory (config, metrics, logs,
checkpoints) and resume, and single- or multi-process launch. Knows nothing of theta or the
supernet; ``fbnas.search`` subclasses its trainer. Builds on ``fbnas.arch`` and
``fbnas.latency``.
"""
