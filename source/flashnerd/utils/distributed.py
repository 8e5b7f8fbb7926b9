"""torchrun awareness: one helper reads the launcher's environment, starts the process group, and names the device.

Every long job (`record`, `fit`, `train`) runs unchanged under `torchrun`: without its environment variables
(`WORLD_SIZE`, `RANK`, `LOCAL_RANK`) they run as a single process, as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    """This process's place among `world_size` processes (rank 0 alone writes files and logs)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_info() -> DistInfo:
    """The torchrun environment of this process (rank 0 of 1 without one)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    return DistInfo(int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")), world)


def init_distributed(device: str) -> tuple[DistInfo, str]:
    """Start the process group under torchrun (gloo on CPU, nccl on CUDA) and return (info, this rank's device).

    `cuda` becomes `cuda:<LOCAL_RANK>`; a no-op (returning `device` unchanged) outside torchrun.
    """
    info = dist_info()
    if not info.enabled:
        return info, device
    is_cuda = torch.device(device).type == "cuda"
    if is_cuda:
        if torch.cuda.device_count() <= info.local_rank:
            raise ValueError(f"LOCAL_RANK {info.local_rank} has no GPU ({torch.cuda.device_count()} visible); start "
                             "at most one process per GPU")
        device = f"cuda:{info.local_rank}"
        torch.cuda.set_device(info.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if is_cuda else "gloo", rank=info.rank, world_size=info.world_size)
    return info, device


def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_max_each(values: tuple[float, ...], device: str | torch.device = "cpu") -> tuple[float, ...]:
    """The largest of each of `values` over all ranks, in one exchange (the values themselves in a single process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return tuple(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)  # (V,)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(t.tolist())


def shutdown() -> None:
    """Tear the process group down at the end of a job."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
