"""The allocator setting serves MB-sized tensors from the heap and keeps their memory after a free (glibc's own
accounting, `mallinfo2`, in a fresh process each), and `FLASHNERD_MALLOC=system` leaves glibc's defaults alone."""

import json
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
t = torch.empty(4 * 1024 * 1024).fill_(1.0)  # 16 MB
mmapped = libc.mallinfo2().hblkhd  # bytes in blocks mmap'd on their own (returned to the kernel on free)
del t
kept = libc.mallinfo2().fordblks  # free bytes the heap keeps mapped
print(json.dumps({"applied": applied, "mmapped": mmapped, "kept": kept}))
"""


def _probe(malloc: str) -> dict:
    env = {"FLASHNERD_MALLOC": malloc, "OMP_NUM_THREADS": "1", "PATH": ""}
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
    assert system["mmapped"] >= block and system["kept"] < block
    # retained: served from the heap, and its 16 MB stay mapped for the next step's tensors
    assert kept["mmapped"] < block and kept["kept"] >= block
