"""Which machine a measurement ran on, for the JSON of every benchmark.

Sessions of this project run on CPUs of several kinds (AVX2 only, AVX-512, AMX), whose matrix products differ by
several times; a timing means little without the machine it was taken on, and a file that gains runs over several
sessions (`--resume`) may hold timings from several machines.
"""

from __future__ import annotations

import os
import platform
from functools import lru_cache

import torch

# instruction sets that change how fast the models' matrix products run, as /proc/cpuinfo names them
_ISA_FLAGS = {"avx2": "avx2", "avx512f": "avx512", "avx512_bf16": "avx512-bf16", "amx_tile": "amx"}
NOT_RECORDED = "a machine not recorded"  # for results written before results named their machine


def describe_machine(device: str | torch.device = "cpu") -> str:
    """'Intel(R) Xeon(R) Processor, 2 cores (avx2, avx512, avx512-bf16, amx)' on a CPU; on CUDA the GPU's name and
    then the CPU (MuJoCo steps on the CPU whatever the device)."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(device)}; {cpu_description()}"
    return cpu_description()


def machines_of(results: list[dict]) -> list[str]:
    """The machines a set of results (dicts with a `machine` each, e.g. one per planned platform: a run continued
    with --resume may span sessions) were measured on, with `NOT_RECORDED` where some lack one; empty when none
    names one."""
    named = {r["machine"] for r in results if isinstance(r.get("machine"), str)}
    if named and any(not isinstance(r.get("machine"), str) for r in results):
        named.add(NOT_RECORDED)
    return sorted(named)


@lru_cache(maxsize=4)
def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, the cores this process may use and the instruction sets of `_ISA_FLAGS` it has."""
    name, flags = _cpuinfo(cpuinfo)
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    isa = [label for flag, label in _ISA_FLAGS.items() if flag in flags]
    return f"{name}, {_cores()} cores" + (f" ({', '.join(isa)})" if isa else "")


def _cores() -> int | str:
    """Cores this process may run on (its affinity, where the OS has one), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or "?"


def _cpuinfo(path: str) -> tuple[str, set[str]]:
    """The first processor's model name and flags from a /proc/cpuinfo file (empty where there is none, e.g.
    macOS)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return "", set()
    name, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = " ".join(value.split())
        elif key == "flags" and not flags:
            flags = set(value.split())
        if not line.strip() and name:  # the first processor's block ends
            break
    return name, flags
