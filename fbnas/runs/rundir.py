"""The run directory: where each file of a training run lives, and the files that make it
self-contained.

A run directory holds everything needed to resume a run, sample from it and read its history
without the files it was started from: ``config.yaml`` (the resolved config),
``metrics.jsonl`` (one JSON line per finished epoch, the figures of the epoch line),
``train.log``, ``tensorboard/``, ``pictures/`` and ``checkpoints/last.pt``, plus the files a
kind of run keeps for itself (a search's copy of its lookup table: fbnas.search.table), and
``run_id``, the run's identity, which every checkpoint it writes records too: a resume refuses
a ``last.pt`` of another run (:func:`check_own_checkpoint`).

The folder is checked before a run sets up (so a bad ``--out`` fails at once) but created only
after the set-up succeeded, so that a run refused for bad input leaves nothing behind.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from fbnas.errors import FbnasError
from fbnas.io import atomic_write, check_writable
from fbnas.runs.checkpoint import LAST, load_checkpoint


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

    @property
    def run_id(self) -> Path:
        return self.root / "run_id"


def new_run_id() -> str:
    """A fresh run's identity: 16 random hex digits, unique among any runs one user keeps."""
    return secrets.token_hex(8)


def write_run_id(paths: RunPaths, run_id: str) -> None:
    """RUN_DIR/run_id: the identity a resume compares its checkpoint's with."""
    atomic_write(paths.run_id, lambda p: p.write_text(run_id + "\n"))


def check_own_checkpoint(paths: RunPaths, ckpt: dict) -> None:
    """Refuse to resume from a ``last.pt`` that another run wrote, before anything is
    written: a checkpoint of another run on the same table (another seed), copied over this
    run's, resumed silently as that run, rewriting config.yaml and metrics.jsonl and mixing
    both in train.log. A run folder from before run ids (no RUN_DIR/run_id) resumes
    unchecked, and takes an id from then on."""
    try:
        mine = paths.run_id.read_text(errors="replace").strip()
    except FileNotFoundError:
        return
    except OSError as e:
        raise FbnasError(f"cannot read {paths.run_id}: {e.strerror}") from None
    theirs = ckpt.get("run_id")
    if theirs == mine:
        return
    seeds = _seed_of(ckpt.get("config")), _seed_of(_saved_config(paths))
    seed = (f" (seed {seeds[0]}, this run's {seeds[1]})"
            if None not in seeds and seeds[0] != seeds[1] else "")
    whose = f"run {theirs[:32]}" if isinstance(theirs, str) else "a run without an id"
    raise FbnasError(f"cannot resume: {paths.last} is not this run's checkpoint: it was "
                     f"written by {whose}{seed}, and {paths.root} holds run {mine[:32]}; put "
                     "back this run's checkpoint, or start over with --force")


def _saved_config(paths: RunPaths) -> dict | None:
    """The config.yaml a run wrote, or None where it is missing or unreadable."""
    from fbnas.io import load_yaml

    try:
        return load_yaml(paths.config, "run config") if paths.config.is_file() else None
    except FbnasError:
        return None


def _seed_of(config) -> object:
    run = config.get("run") if isinstance(config, dict) else None
    return run.get("seed") if isinstance(run, dict) else None


def check_run_dir(out: str | Path, resume: bool, force: bool) -> RunPaths:
    """Refuse to mix two runs in one folder unless the user asked to resume or overwrite, and
    refuse a folder that cannot be written; changes nothing on disk."""
    out = Path(out)
    paths = RunPaths(out)
    try:
        out.exists()
    except OSError as e:  # a name longer than the file system allows, for one
        raise FbnasError(f"cannot use {out} as the run directory: {e.strerror}; pick another "
                         "--out") from None
    if out.exists() and not out.is_dir():
        raise FbnasError(f"run directory {out} is a file; pick another --out")
    if resume:
        started = out.is_dir() and any(p.name != RunLock.NAME for p in out.iterdir())
        if not paths.last.is_file() and started:
            raise FbnasError(f"nothing to resume: {paths.last} does not exist (the run stopped "
                             "before its first checkpoint); start it over with --force")
        if not paths.last.is_file():
            raise FbnasError(f"nothing to resume: {paths.last} does not exist; start the run "
                             "without --resume")
    elif out.is_dir() and any(p.name != RunLock.NAME for p in out.iterdir()) and not force:
        raise FbnasError(f"run directory {out} is not empty; pass --resume to continue the "
                         "run in it or --force to start over")
    # a file the run writes first: its nearest existing folder must accept new files
    check_writable(paths.config)
    return paths


class RunLock:
    """The one writer of a run directory: an exclusive ``flock`` on RUN_DIR/.lock, held by
    the process that runs (rank 0 under torchrun) until it ends.

    Two runs started together on one ``--out`` both passed the "not empty" check and then
    wrote the same files: one result was lost and metrics.jsonl held every epoch twice; a
    ``--resume`` beside a live run did the same. The kernel drops the lock when its process
    dies, however it dies, so a killed run never leaves the folder locked. The folder is made
    to hold the lock; if the run then fails before it starts, the folders it made go again.
    """

    NAME = ".lock"

    def __init__(self, paths: RunPaths):
        import fcntl

        # the folders this lock makes (the run directory and any missing parents), innermost first
        self.paths, self.made = paths, []
        folder = paths.root
        try:
            while not folder.exists() and folder != folder.parent:
                self.made.append(folder)
                folder = folder.parent
            paths.root.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(paths.root / self.NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            self._remove_made()  # the parents made before the name was refused
            raise FbnasError(f"cannot use {paths.root} as the run directory: "
                             f"{e.strerror or e}; pick another --out") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise FbnasError(f"run directory {paths.root} is in use by another fbnas process "
                             f"(pid {holder}); wait for it to end, or pick another --out")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        self.started = False

    def _remove_made(self) -> None:
        """Remove the folders this lock made, innermost first, while they are empty."""
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENAMETOOLONG):  # never made
                    continue
                break  # not empty: someone else put something there

    def release(self) -> None:
        """Unlock; remove the folder if this lock made it and the run never started."""
        if self.fd is None:
            return
        if self.made and not self.started:
            (self.paths.root / self.NAME).unlink(missing_ok=True)
            self._remove_made()
        os.close(self.fd)  # closing the descriptor drops the flock
        self.fd = None


def remove_stale_temporaries(paths: RunPaths) -> int:
    """Delete the temporary files of atomic writes that a killed run left (``.NAME.*.tmp``):
    under the run's lock nothing else can be writing them. Returns how many went."""
    gone = 0
    for folder in (paths.root, paths.checkpoints, paths.pictures):
        if folder.is_dir():
            for p in folder.glob(".*.tmp"):
                if p.is_file():
                    p.unlink(missing_ok=True)
                    gone += 1
    return gone


def start_run_dir(paths: RunPaths, fresh: bool, own_files: tuple[str, ...] = ()) -> None:
    """Create the folder; for a fresh run, remove what an earlier run (--force) left in it,
    the files every run writes and ``own_files`` (names in the folder that the kind of run
    keeps); for a resumed one, what a killed run left half-written."""
    if fresh:
        for p in (paths.checkpoints, paths.tensorboard, paths.pictures):
            shutil.rmtree(p, ignore_errors=True)
        for p in (paths.config, paths.log, paths.metrics, paths.run_id,
                  *(paths.root / n for n in own_files)):
            p.unlink(missing_ok=True)
    remove_stale_temporaries(paths)
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FbnasError(f"cannot use {paths.root} as the run directory: {e.strerror or e}; "
                         "pick another --out") from None


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

    return from_saved(load_checkpoint(RunPaths(Path(out)).last)["config"],
                      resuming=True).to_dict()
