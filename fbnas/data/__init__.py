"""Data: datasets, image folders, splits and the batch loaders that serve them.

What a training run reads, independent of what it trains: CIFAR-10 and image folders, held
in memory or streamed from disk by worker processes, the seeded weights/theta/val split, and
the loaders' shuffle, sharding and augmentation. It imports only the shared top-level
modules, so the data can be read, checked and benchmarked without the trainer;
``fbnas.runs`` builds a run's splits and loaders on it.
"""
