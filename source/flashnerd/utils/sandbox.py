"""Run a parser of a file from someone else in a child process with a memory and a time limit.

A third-party parser of a rich format (a ROS 2 bag's MCAP chunks and SQLite databases, YAML with aliases) has more
ways to be made to allocate without bound or to compute without end than a reader can check beforehand. So the
parse runs in a spawned child: its address space is capped (`RLIMIT_AS`, at most `MAX_READ_FRACTION` of the free
memory beside a fixed allowance for the interpreter), its CPU time is capped (`RLIMIT_CPU`), and the parent stops
waiting after a wall-clock limit (a FIFO or a lock would block without using CPU). The child hands back numbers only,
as an `.npz` read without pickle, so nothing it does reaches the parent but arrays; a `ValueError` it raises (a
parser's one-line reason) comes back as its message, and whatever else ends it is a one-line `BoundedRunError`.
"""

from __future__ import annotations

import multiprocessing
import resource
import signal
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np

from flashnerd.utils.host_memory import MAX_READ_FRACTION, available_host_bytes

INTERPRETER_BYTES = 1 << 30  # address space of the child's interpreter, numpy and the parser's modules (~0.4 GiB)


class BoundedRunError(ValueError):
    """A bounded run that ended without a result: the ValueError the function raised (`raised`: its message as it
    is), or the limit it reached or the crash that ended it."""

    def __init__(self, message: str, raised: bool = False) -> None:
        super().__init__(message)
        self.raised = raised


def _child(fn: Callable[..., dict[str, np.ndarray]], args: tuple, folder: str, memory_bytes: int,
           cpu_seconds: int) -> None:
    """In the child: set the limits, run `fn(*args)`, write its arrays or its error to `folder`."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    out = Path(folder)
    try:
        arrays = fn(*args)
        np.savez(out / "result.npz", **arrays)
    except ValueError as err:  # the parser's own one-line reason
        (out / "raised.txt").write_text(str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)
    except MemoryError:
        (out / "error.txt").write_text(f"it needs more memory than the {memory_bytes / 2**30:.1f} GiB allowed")
    except BaseException as err:  # noqa: BLE001  whatever a parser of a hostile file raises ends as one line
        last = traceback.extract_tb(err.__traceback__)[-1:]
        where = f" in {Path(last[0].filename).name}:{last[0].lineno}" if last else ""
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
        (out / "error.txt").write_text(f"{type(err).__name__}{where}: {first}")


def run_bounded(fn: Callable[..., dict[str, np.ndarray]], args: tuple, cpu_seconds: int, wall_seconds: float,
                memory_bytes: int | None = None) -> dict[str, np.ndarray]:
    """`fn(*args)` (a module-level function returning numeric arrays by name) run in a spawned child with at most
    `memory_bytes` of address space (default: `MAX_READ_FRACTION` of the free memory plus `INTERPRETER_BYTES`),
    `cpu_seconds` of CPU and `wall_seconds` of waiting; its arrays, or a one-line `BoundedRunError` saying which
    limit it reached or what it raised."""
    if memory_bytes is None:
        memory_bytes = INTERPRETER_BYTES + int(MAX_READ_FRACTION * available_host_bytes())
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or locks of the parent's
    with tempfile.TemporaryDirectory(prefix="flashnerd_bounded_") as folder:
        child = ctx.Process(target=_child, args=(fn, args, folder, memory_bytes, int(cpu_seconds)), daemon=True)
        child.start()
        try:
            child.join(wall_seconds)
        finally:
            timed_out = child.is_alive()  # past the wall-clock limit, or the parent was interrupted
            if timed_out:
                child.kill()
                child.join()
        if timed_out:
            raise BoundedRunError(f"it did not finish within {wall_seconds:.0f} s")
        raised, error, result = (Path(folder) / name for name in ("raised.txt", "error.txt", "result.npz"))
        if raised.is_file():
            raise BoundedRunError(raised.read_text()[:1000], raised=True)
        if error.is_file():
            raise BoundedRunError(error.read_text()[:400])
        if child.exitcode == -signal.SIGXCPU:
            raise BoundedRunError(f"it used more than its {cpu_seconds} s of CPU time")
        if child.exitcode == -signal.SIGKILL:
            raise BoundedRunError(f"it was killed: past its {cpu_seconds} s of CPU time, or out of memory")
        if child.exitcode != 0 or not result.is_file():
            raise BoundedRunError(f"it ended with exit code {child.exitcode} and no result")
        with np.load(result, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
