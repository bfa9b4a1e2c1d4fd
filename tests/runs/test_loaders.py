"""A run's data: the data set it opens, its splits, and the loaders every process builds."""

import types

import pytest
import torch

from fbnas.errors import FbnasError, UsageError
from fbnas.runs import loaders
from fbnas.runs.dist import DistInfo
from fbnas.runs.loaders import (default_workers, eval_batches, load_run_data, open_dataset,
                                skipped_files, train_batches)
from tests.runs.conftest import CLASSES, TEST_PER_CLASS, TRAIN_PER_CLASS

CPU = torch.device("cpu")
N = TRAIN_PER_CLASS * len(CLASSES)


@pytest.fixture
def config(retrain_config):
    return retrain_config


def served(loader) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*loader)
    return torch.cat(xs), torch.cat(ys)


def test_splits_and_evaluation_loaders_cover_the_data_once(config):
    rd = load_run_data(config(), DistInfo(), CPU, resolution=8, num_classes=3)
    assert rd.classes == 3 and "decoded into memory at 8x8" in rd.data.how
    parts = [set(rd.splits[k].tolist()) for k in ("weights", "theta", "val")]
    assert [len(p) for p in parts] == [43, 11, 6]
    assert set.union(*parts) == set(range(N)) and sum(map(len, parts)) == N
    x, y = served(rd.val_loader)
    assert x.shape == (6, 3, 8, 8) and x.dtype == torch.float32
    assert y.tolist() == rd.data.train_labels[rd.splits["val"]].tolist()  # in order
    assert len(served(rd.test_loader)[1]) == TEST_PER_CLASS * len(CLASSES)
    limited = load_run_data(config("data.limit=30"), DistInfo(), CPU, 8, 3)
    assert sum(len(v) for v in limited.splits.values()) == 30


def test_each_process_scores_a_disjoint_share_of_the_held_out_images(config):
    cfg = config("data.eval_batch_size=2")
    one = load_run_data(cfg, DistInfo(), CPU, 8, 3)
    x, y = served(one.val_loader)
    shares = [served(load_run_data(cfg, DistInfo(rank=r, world_size=2), CPU, 8, 3).val_loader)
              for r in (0, 1)]
    assert [len(s[1]) for s in shares] == [3, 3]
    # the single process's order is the two shares interleaved
    assert torch.equal(torch.stack([shares[0][0], shares[1][0]], 1).flatten(0, 1), x)
    assert torch.equal(torch.stack([shares[0][1], shares[1][1]], 1).flatten(), y)
    # a process whose share is empty gets no loader
    empty = eval_batches(cfg, DistInfo(rank=5, world_size=6), one.data, "train",
                         torch.arange(3), one.common)
    assert empty is None


def test_train_batches_are_full_shuffled_and_repeatable_per_epoch(config):
    cfg = config()
    rd = load_run_data(cfg, DistInfo(), CPU, 8, 3)
    idx = rd.splits["weights"]
    ld = train_batches(cfg, rd.data, idx, seed=3, **rd.common)
    assert len(ld) == len(idx) // 8
    ld.set_epoch(0)
    first = list(ld)
    assert all(x.shape == (8, 3, 8, 8) for x, _ in first)
    ld.set_epoch(0)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, ld))
    ld.set_epoch(1)
    assert not torch.equal(torch.cat([y for _, y in first]), torch.cat([y for _, y in ld]))
    ld.set_epoch(0)
    order = ld.epoch_indices()  # a permutation of the part; the short tail is dropped
    assert sorted(order.tolist()) == idx.tolist()
    assert torch.cat([y for _, y in first]).tolist() == rd.data.train_labels[order[:40]].tolist()


def test_data_that_does_not_fit_the_network_is_refused_by_name(config):
    with pytest.raises(FbnasError, match=r"^the data is 16x16 but the network expects 8x8 "
                                         r"inputs; set data.resolution: 0"):
        load_run_data(config("data.resolution=16"), DistInfo(), CPU, 8, 3)
    with pytest.raises(FbnasError, match=r"^the data has 3 classes but the network's head "
                                         r"has 10$"):
        load_run_data(config(), DistInfo(), CPU, 8, 10)
    with pytest.raises(FbnasError, match=r"^the data's images have 3 channels but the network "
                                         r"expects 1-channel inputs"):
        load_run_data(config(), DistInfo(), CPU, 8, 3, in_channels=1)


def test_cifar_at_another_size_is_refused_before_reading(tmp_path, config):
    cfg = config("data.kind=cifar10", f"data.dir={tmp_path / 'nothing'}")
    with pytest.raises(UsageError, match="CIFAR-10 images are 32x32 but the run asks for "
                                         "8x8"):
        open_dataset(cfg, 8)


def test_a_folder_too_big_for_memory_is_streamed_with_the_same_labels(config):
    cfg = config("data.memory_mb=0", "data.workers=0")
    data = open_dataset(cfg, 8)
    assert data.streamed and "streamed at 8x8 by 0 worker process(es)" in data.how
    assert "above data.memory_mb 0" in data.how
    rd = load_run_data(cfg, DistInfo(), CPU, 8, 3)
    mem = load_run_data(config(), DistInfo(), CPU, 8, 3)
    assert torch.equal(rd.splits["val"], mem.splits["val"])
    assert served(rd.val_loader)[1].tolist() == served(mem.val_loader)[1].tolist()
    forced = open_dataset(config("data.loader=memory", "data.memory_mb=0"), 8)
    assert not forced.streamed and "(data.loader: memory)" in forced.how


def test_a_streamed_run_stops_keeping_freed_memory(config, monkeypatch):
    """Batches from worker processes fragment a heap that never shrinks (run.keep_freed_memory),
    so a run's memory grew with its data set: a streamed run gives the heap back to glibc's
    defaults, an in-memory one keeps it, and a run that asked for the defaults is left so."""
    calls = []
    monkeypatch.setattr(loaders, "keep_freed_memory", lambda keep=True: calls.append(keep))
    open_dataset(config("data.loader=memory"), 8)
    assert calls == []
    open_dataset(config("data.loader=stream", "data.workers=0"), 8)
    assert calls == [False]
    open_dataset(config("data.loader=stream", "data.workers=0", "run.keep_freed_memory=false"),
                 8)
    assert calls == [False]


def test_default_workers_share_the_cores_among_processes(monkeypatch):
    monkeypatch.setattr(loaders.os, "sched_getaffinity", lambda pid: set(range(16)),
                        raising=False)
    assert [default_workers(w) for w in (1, 2, 4, 16)] == [8, 7, 3, 1]
    monkeypatch.setattr(loaders.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert default_workers(2) == 1


def test_skipped_files_list_the_scan_then_the_loaders_once_each():
    data = types.SimpleNamespace(skipped=[("a.png", "empty")])
    lds = [types.SimpleNamespace(bad={"b.png": "truncated", "a.png": "empty"}),
           types.SimpleNamespace(), types.SimpleNamespace(bad={"b.png": "truncated",
                                                               "c.png": "not an image"})]
    assert skipped_files(data, lds) == [("a.png", "empty"), ("b.png", "truncated"),
                                        ("c.png", "not an image")]
