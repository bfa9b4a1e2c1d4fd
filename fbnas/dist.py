"""Process-group plumbing for runs under torchrun; a no-op in a single process."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def ranks_agree(module: torch.nn.Module, info: DistInfo) -> bool:
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


def sync_buffers(module: torch.nn.Module, info: DistInfo) -> None:
    """Copy rank 0's buffers (BN running statistics) to every rank.

    DDP broadcasts buffers at the start of each forward, so after an epoch's last step every
    rank's statistics differ by that one batch; evaluation and checkpoints use rank 0's.
    """
    if info.enabled:
        for b in module.buffers():
            dist.broadcast(b, 0)
