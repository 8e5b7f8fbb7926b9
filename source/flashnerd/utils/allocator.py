"""Keep freed memory in the process instead of returning it to the system between steps (glibc `mallopt`).

A CPU step at thousands of worlds allocates and frees tensors of a few MB dozens of times. glibc's defaults hand
blocks of that size back to the kernel (mmap'd blocks on free, the heap's top above a trim threshold that follows the
largest block freed), so the next step touches fresh pages and pays a page fault per 4 KB: measured on the 2-core
CPU, one ANYmal-C step of the learned backend at 4,096 worlds spent more time in first-touch copies than in its
largest matrix product. Serving blocks below 32 MB from the heap and trimming it only above 1 GB keeps those pages
mapped (the process's resident size stays at its peak, which it reaches anyway on the next step).

`FLASHNERD_MALLOC=system` leaves the allocator as it is. With jemalloc or tcmalloc preloaded the settings reach
glibc's malloc, which then serves nothing, and have no effect.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 * 1024 * 1024  # bytes: blocks below this come from the heap (glibc's largest allowed value)
TRIM_THRESHOLD = 1024 * 1024 * 1024  # bytes: free memory at the heap's top kept before any is returned
_done: bool | None = None


def retain_freed_memory() -> bool:
    """Apply the settings above once per process on Linux with glibc; True when they are in effect. Any other
    platform or allocator (or `FLASHNERD_MALLOC=system`) is left alone and returns False."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux") or os.environ.get("FLASHNERD_MALLOC", "") == "system":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (glibc only: musl has neither it nor these mallopt parameters)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
