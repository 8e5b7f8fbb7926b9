"""Free host memory, and the rule every reader of a file from other people applies before it reads: a file whose
declared contents (arrays, decompressed entries, resampled rows) would take more than `MAX_READ_FRACTION` of it is
refused in one line, since a few bytes on disk can declare terabytes."""

from __future__ import annotations

import os

MAX_READ_FRACTION = 0.8  # refuse a file whose contents would take more than this share of free memory


def available_host_bytes() -> int:
    """Memory this process can still allocate on the host (MemAvailable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def available_bytes(device) -> int:
    """Memory this process can still allocate on `device` (a torch device or its name): MemAvailable on the host,
    free memory on a GPU."""
    if str(device).startswith("cuda"):
        import torch  # for a GPU only: the sandbox's child imports this module, and stays without torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    return available_host_bytes()


def fits_in_memory(nbytes: float) -> bool:
    """Whether `nbytes` of what a file declares may be read (at most `MAX_READ_FRACTION` of the free memory)."""
    return nbytes <= MAX_READ_FRACTION * available_host_bytes()
