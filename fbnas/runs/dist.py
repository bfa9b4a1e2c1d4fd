"""Process-group plumbing for runs under torchrun; a no-op in a single process.

Every collective here must be reached by all ranks in the same order, so callers use them
only at points every rank passes: the same plan items, epoch ends, the run's start and end.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from fbnas.errors import FbnasError, UsageError

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_rank() -> int:
    """This process's rank as torchrun announces it (0 outside torchrun)."""
    return int(os.environ.get("RANK", "0"))


def init_from_env(device_type: str) -> DistInfo:
    """Join the process group torchrun describes in the environment (gloo on CPU, nccl on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few floats over all ranks."""
    if not info.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def sync_buffers(module: nn.Module, info: DistInfo) -> None:
    """Make the buffers of ``module`` equal on all ranks: floats averaged, counters rank 0's.

    Each rank's BN running statistics follow its own shard of the data (and, in hard mode,
    its own choice of ops, which also makes the batch counters differ); averaging them at an
    epoch end gives every rank the same buffers for evaluation and the checkpoint, estimated
    from all ranks' images rather than rank 0's alone.
    """
    if not info.enabled:
        return
    buffers = list(module.buffers())
    floats = [b for b in buffers if b.is_floating_point()]
    counters = [b for b in buffers if not b.is_floating_point()]
    for group, average in ((floats, True), (counters, False)):
        if not group:
            continue
        flat = torch.cat([b.detach().reshape(-1).double() for b in group])
        if average:
            dist.all_reduce(flat)
            flat /= info.world_size
        else:
            dist.broadcast(flat, src=0)
        offset = 0
        with torch.no_grad():
            for b in group:
                b.copy_(flat[offset:offset + b.numel()].view_as(b))
                offset += b.numel()


def align_grad_strides(module: nn.Module) -> int:
    """Have each gradient of ``module``'s parameters arrive with its parameter's strides
    where the two differ only in dimensions of size 1; return how many parameters it hooked.

    Why: in channels_last a 1x1 conv weight (O, I, 1, 1) has strides (I, 1, I, I), but
    gradients computed through a flattened view of it (the 1x1 convs that train as matrix
    products, BN folded into a conv) come back as (I, 1, 1, 1): the same memory in the same
    order. DistributedDataParallel compares strides exactly, copies every such gradient
    into its bucket, and prints a torch warning of five lines at each process's first step.
    Restriding the gradient is free (a view of the same storage) and changes no value."""
    count = 0
    for p in module.parameters():
        if p.requires_grad and any(s == 1 for s in p.shape):
            p.register_hook(functools.partial(_like_parameter, p.shape, p.stride()))
            count += 1
    return count


def _like_parameter(shape: torch.Size, strides: tuple[int, ...],
                    grad: torch.Tensor) -> torch.Tensor:
    if grad.stride() == strides or grad.shape != shape or any(
            n != 1 and a != b for n, a, b in zip(shape, grad.stride(), strides)):
        return grad  # already alike, or laid out otherwise: left to DDP
    return grad.as_strided(shape, strides, grad.storage_offset())


def run_on_main(fn: Callable[[], T], info: DistInfo, device: torch.device) -> T | None:
    """Run ``fn`` on rank 0 only; if it raises FbnasError, every rank raises the same error.

    Used for work that touches the file system (checking and clearing the run directory), so
    that ranks neither race each other nor wait forever for a rank 0 that gave up.
    """
    if not info.enabled:
        return fn()
    result, message, code = None, b"", 0
    if info.is_main:
        try:
            result = fn()
        except FbnasError as e:
            message, code = str(e).encode(), e.exit_code
    header = torch.tensor([len(message), code], dtype=torch.int64, device=device)
    dist.broadcast(header, src=0)
    if int(header[0]) == 0:
        return result
    data = torch.zeros(int(header[0]), dtype=torch.uint8, device=device)
    if info.is_main:
        data.copy_(torch.frombuffer(bytearray(message), dtype=torch.uint8))
    dist.broadcast(data, src=0)
    err = FbnasError(bytes(data.cpu().tolist()).decode())
    err.exit_code = int(header[1])
    err.on_every_rank = True
    raise err


def peer_failed(error: BaseException) -> bool:
    """Whether a collective failed because another rank went away (it has its own message)."""
    text = str(error)
    return isinstance(error, dist.DistError) or "closed by peer" in text \
        or "reset by peer" in text


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    """Leave the process group (at the end of a run, also after an error)."""
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def exit_without_teardown(code: int = 0) -> None:
    """End this process now with ``code``, its output flushed, skipping the interpreter's
    teardown: threads that torch's launcher and distributed runtime leave behind can abort
    that teardown (SIGABRT, "terminate called without an active exception") and turn a run
    that finished into a failure. Only for a process whose files are all written and closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def leave_if_child() -> None:
    """End a torchrun child process here once its run has finished and said so: its
    checkpoints are written atomically, the log and TensorBoard flushed and its process
    group left, so all that remains is the teardown ``exit_without_teardown`` skips."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        exit_without_teardown(0)


def relaunch(command: str, options: list[tuple[str, object]], nproc: int,
             threads: int | None = None) -> int:
    """Run ``fbnas command`` again with ``options`` as ``nproc`` torchrun processes on this
    machine (see :func:`launch`). ``options`` are (flag, value) in the command's order:
    True for a flag given, a tuple for a repeated option, None, False or () for one not
    given."""
    if "WORLD_SIZE" in os.environ:
        raise UsageError("--nproc starts torchrun itself; inside torchrun leave it out")
    args = [command]
    for flag, value in options:
        if value is None or value is False or value == ():
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, tuple):
            for v in value:
                args += [flag, str(v)]
        else:
            args += [flag, str(value)]
    return launch(nproc, args, threads)


def launch(nproc: int, fbnas_args: list[str], threads: int | None = None) -> int:
    """Run ``python -m fbnas <fbnas_args>`` as ``nproc`` processes on this machine, as torchrun.

    Uses torchrun's own launcher as ``torchrun --standalone`` does (a free local port)
    and returns the exit code of the first process that failed, or 0. The processes report
    their own errors, so the launcher's failure logging is kept quiet.
    """
    import logging
    import uuid

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    # torchrun defaults each process to 1 thread and warns about it; say so explicitly
    os.environ.setdefault("OMP_NUM_THREADS", str(threads or 1))
    # what torchrun --standalone sets up: a rendezvous on a free local port
    args = parse_args(["--nnodes", "1", "--nproc_per_node", str(nproc), "--rdzv_backend", "c10d",
                       "--rdzv_endpoint", "localhost:0", "--rdzv_id", uuid.uuid4().hex,
                       "-m", "fbnas", *fbnas_args])
    config, cmd, cmd_args = config_from_args(args)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        elastic_launch(config, cmd)(*cmd_args)
    except ChildFailedError as e:
        _, failure = e.get_first_failure()
        return failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode
    except SignalException as e:
        return 128 + int(e.sigval)
    return 0


def ranks_agree(module: nn.Module, info: DistInfo) -> bool:
    """Whether every rank holds bit-identical parameters and buffers (a digest per rank)."""
    if not info.enabled:
        return True
    import hashlib

    h = hashlib.sha256()
    for t in list(module.parameters()) + list(module.buffers()):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    digests = [None] * info.world_size
    dist.all_gather_object(digests, h.hexdigest())
    return len(set(digests)) == 1
