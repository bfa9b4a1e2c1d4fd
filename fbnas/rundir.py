"""The run directory: where each file of a training run lives, and the files that make it
self-contained.

A run directory holds everything needed to resume a run, sample from it and read its history
without the files it was started from: ``config.yaml`` (the resolved config), ``lut.json`` (a
byte copy of the lookup table a search ran with, calibration included, so re-profiling or
calibrating the original later changes nothing for the run), ``metrics.jsonl`` (one JSON line
per finished epoch, the figures of the epoch line), ``train.log``, ``tensorboard/``,
``pictures/`` and ``checkpoints/last.pt``.

The folder is checked before a run sets up (so a bad ``--out`` fails at once) but created only
after the set-up succeeded, so that a run refused for bad input leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fbnas.checkpoint import LAST, load_checkpoint
from fbnas.errors import FbnasError
from fbnas.io import atomic_write, check_writable, file_hash

#: the name of the lookup table's copy in a run directory
TABLE_COPY = "lut.json"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def lut(self) -> Path:
        return self.root / TABLE_COPY

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def pictures(self) -> Path:
        return self.root / "pictures"

    @property
    def checkpoints(self) -> Path:
        return self.root / LAST.parent

    @property
    def last(self) -> Path:
        return self.root / LAST


def check_run_dir(out: str | Path, resume: bool, force: bool) -> RunPaths:
    """Refuse to mix two runs in one folder unless the user asked to resume or overwrite, and
    refuse a folder that cannot be written; changes nothing on disk."""
    out = Path(out)
    paths = RunPaths(out)
    if out.exists() and not out.is_dir():
        raise FbnasError(f"run directory {out} is a file; pick another --out")
    if resume:
        if not paths.last.is_file():
            raise FbnasError(f"nothing to resume: {paths.last} does not exist")
    elif out.is_dir() and any(out.iterdir()) and not force:
        raise FbnasError(f"run directory {out} is not empty; pass --resume to continue the "
                         "run in it or --force to start over")
    # a file the run writes first: its nearest existing folder must accept new files
    check_writable(paths.config)
    return paths


def start_run_dir(paths: RunPaths, fresh: bool) -> None:
    """Create the folder; for a fresh run, remove what an earlier run (--force) left in it."""
    if fresh:
        for p in (paths.checkpoints, paths.tensorboard):
            shutil.rmtree(p, ignore_errors=True)
        for p in (paths.config, paths.log, paths.metrics, paths.lut):
            p.unlink(missing_ok=True)
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FbnasError(f"cannot use {paths.root} as the run directory: {e.strerror or e}; "
                         "pick another --out") from None


def copy_table(src: Path, paths: RunPaths, expected_hash: str) -> None:
    """Keep the run's lookup table as RUN_DIR/lut.json, byte for byte."""
    if src.resolve() == paths.lut.resolve():
        return
    atomic_write(paths.lut, lambda p: shutil.copyfile(src, p))
    if file_hash(paths.lut) != expected_hash:
        paths.lut.unlink(missing_ok=True)
        raise FbnasError(f"lookup table {src} changed while the run started; start again")


def write_metrics(paths: RunPaths, history: list[dict]) -> None:
    """RUN_DIR/metrics.jsonl as the checkpoint's history says: on a resume this drops lines of
    epochs after the checkpoint's, and fills in those of a run directory that had none."""
    text = "".join(json.dumps(r) + "\n" for r in history)
    atomic_write(paths.metrics, lambda p: p.write_text(text))


def append_metrics(paths: RunPaths, record: dict) -> None:
    """Add one finished epoch's line to RUN_DIR/metrics.jsonl (one write of a whole line)."""
    try:
        with open(paths.metrics, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise FbnasError(f"cannot write {paths.metrics}: {e.strerror}") from None


def resume_config(out: str | Path) -> dict:
    """The config a run in ``out`` was started with (to continue it with the same settings)."""
    from fbnas.config import from_saved

    return from_saved(load_checkpoint(RunPaths(Path(out)).last)["config"]).to_dict()
