"""Training runs: the training loop, run directories, checkpoints and launching.

What a search and a retrain share: a run's splits and batch loaders (over the datasets of
``fbnas.data``), the epoch loop with its schedule, named per-step figures and health checks,
the run directory (config, metrics, logs, checkpoints) and resume, and single- or
multi-process launch. Knows nothing of theta, the supernet, the latency budget or lookup
tables: a kind of run adds those by subclassing the trainer (the figures its steps report,
the parts of its checkpoint, the files of its run directory), as ``fbnas.search`` does.
Builds on ``fbnas.arch``, ``fbnas.latency`` and ``fbnas.data``.
"""
