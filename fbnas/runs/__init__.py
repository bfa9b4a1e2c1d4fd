"""Training runs: the training loop, run directories, checkpoints and launching.

What a search and a retrain share: a run's splits and batch loaders (over the datasets of
``fbnas.data``), the epoch loop with its schedule, statistics and health checks, the run
directory (config, metrics, logs, checkpoints) and resume, and single- or multi-process
launch. Knows nothing of theta or the supernet; ``fbnas.search`` subclasses its trainer.
Builds on ``fbnas.arch``, ``fbnas.latency`` and ``fbnas.data``.
"""
