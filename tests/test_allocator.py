"""The allocator setting serves MB-sized tensors from the heap and keeps their memory after a free (glibc's own
accounting, `mallinfo2`, in a fresh process each), and `FLASHNERD_MALLOC=system` leaves glibc's defaults alone."""

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import ctypes, json, torch
from flashnerd.utils.allocator import retain_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = retain_freed_memory()
before = libc.mallinfo2()
t = torch.empty(4 * 1024 * 1024).fill_(1.0)  # 16 MB
during = libc.mallinfo2()
del t
after = libc.mallinfo2()
# bytes the tensor added to blocks mmap'd on their own (returned to the kernel on free), and the free bytes the heap
# keeps mapped after it is gone, each against the same counter before the tensor
print(json.dumps({"applied": applied, "mmapped": during.hblkhd - before.hblkhd,
                  "kept": after.fordblks - before.fordblks}))
"""


def _probe(malloc: str) -> dict:
    env = {**os.environ, "FLASHNERD_MALLOC": malloc, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_mallinfo2() -> bool:
    import ctypes

    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _has_mallinfo2(), reason="glibc >= 2.33")
def test_mb_sized_tensors_come_from_the_heap_and_stay_mapped_and_the_setting_can_be_refused():
    block = 16 * 1024 * 1024
    kept, system = _probe("retain"), _probe("system")
    assert kept["applied"] and not system["applied"]
    # glibc's default: the first MB-sized block is mmap'd on its own and unmapped when freed
    assert system["mmapped"] >= block and system["kept"] < block // 10
    # retained: served from the heap, and its 16 MB stay mapped for the next step's tensors (less what small
    # allocations since took of them)
    assert kept["mmapped"] < block // 10 and kept["kept"] > 0.9 * block
