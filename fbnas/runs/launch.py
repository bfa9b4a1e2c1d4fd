"""Starting a training run: process group, device, run directory, logging, then the trainer.

The order matters to the user: the run directory is checked first (a bad ``--out`` fails
before any data is read), the trainer sets up next (space, table, data, model, a resumed
checkpoint), and only when that succeeded is the run directory created and its files
written, so a run refused for bad input leaves no folder behind. One process at a time may
write a run directory (fbnas.runs.rundir.RunLock). Under torchrun rank 0 alone touches the
file system, and its error, if any, stops every rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from fbnas.config import Config
from fbnas.errors import FbnasError
from fbnas.machine import keep_freed_memory
from fbnas.runs.checkpoint import load_checkpoint
from fbnas.runs.dist import DistInfo, init_from_env, peer_failed, run_on_main, shutdown
from fbnas.runs.logs import run_log
from fbnas.runs.rundir import (RunLock, RunPaths, check_own_checkpoint, check_run_dir,
                               start_run_dir)
from fbnas.runs.trainer import Trainer


def pick_device(name: str, info: DistInfo) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise FbnasError("--device cuda was asked for but no CUDA device is available; "
                             "use --device cpu")
        have = torch.cuda.device_count()
        if info.local_rank >= have:
            # each process trains on GPU LOCAL_RANK; NCCL cannot share one GPU between two
            raise FbnasError(f"process {info.rank} has no GPU of its own: this machine has {have} "
                             f"CUDA device{'s' if have != 1 else ''} and the run started "
                             f"{info.world_size} processes; use --nproc {have} or --device cpu")
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def anchor_data_paths(cfg: Config) -> None:
    """Make ``data.dir`` and ``data.classes`` absolute where they exist, as the run saves
    them (a missing one stays as typed, for the error that names it).

    Why: a run directory resumes from any working directory. Saved as typed (say
    ``../data``), a resume from elsewhere would read another folder or none; saved absolute,
    a resume on another machine whose data lies elsewhere is refused naming the missing folder
    and ``--data-dir``, and the image count check catches a different data set."""
    for key in ("dir", "classes"):
        typed = getattr(cfg.data, key)
        if typed and Path(typed).expanduser().exists():
            setattr(cfg.data, key, str(Path(typed).expanduser().absolute()))


def launch(trainer_cls: type[Trainer], cfg: Config, out: str | Path, resume: bool, force: bool,
           stop_after: int | None, echo: Callable[[str], None] | None = None) -> dict:
    """Prepare the process group, the device and the run directory, then run ``trainer_cls``.

    The run's lines go to the "fbnas" logger (see fbnas.runs.logs), to RUN_DIR/train.log and, when
    given, to ``echo``.
    """
    out = Path(out)
    lock = None
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    if cfg.run.keep_freed_memory:
        keep_freed_memory()
    info = init_from_env("cuda" if cfg.run.device == "cuda" or
                         (cfg.run.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        with run_log(echo if info.is_main else None) as log:
            device = pick_device(cfg.run.device, info)
            if device.type == "cuda":
                torch.cuda.set_device(device)
            collectives = device if device.type == "cuda" else torch.device("cpu")
            # the lock first: a run that holds the folder is "in use", not "not empty"
            lock = run_on_main(lambda: RunLock(RunPaths(out)), info, collectives)
            paths = run_on_main(lambda: check_run_dir(out, resume, force), info,
                                collectives) or RunPaths(out)
            if cfg.data.download:
                from fbnas.data.cifar import download_cifar10

                run_on_main(lambda: download_cifar10(cfg.data.dir), info, collectives)
            anchor_data_paths(cfg)
            ckpt = load_checkpoint(paths.last, trainer_cls.kind) if resume else None
            if ckpt is not None:
                check_own_checkpoint(paths, ckpt)
            trainer = trainer_cls(cfg, paths, info, device, ckpt)

            def start() -> None:
                lock.started = True
                start_run_dir(paths, fresh=not resume, own_files=trainer.own_files)
                log.open(paths.log)
                trainer.write_run_files()

            run_on_main(start, info, collectives)
            result = trainer.run(stop_after=stop_after)
            result["rank"] = info.rank
            return result
    except RuntimeError as e:
        if info.enabled and peer_failed(e):
            raise FbnasError(f"process {info.rank} stops: another process of this run failed "
                             "(its message is above)") from None
        raise
    finally:
        if lock is not None:
            lock.release()
        shutdown(info)
