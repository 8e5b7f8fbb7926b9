"""Run a parser of a file from someone else in a child process with a memory and a time limit.

A third-party parser of a rich format (a ROS 2 bag's MCAP chunks and SQLite databases, an MJCF that MuJoCo expands)
has more ways to be made to allocate without bound or to compute without end than a reader can check beforehand. So
the parse runs in a child interpreter: its address space is capped (`RLIMIT_AS`, at most `MAX_READ_FRACTION` of the
free memory beside a fixed allowance for the interpreter), its CPU time is capped (`RLIMIT_CPU`), its standard input
is empty, and the parent stops waiting after a wall-clock limit (a FIFO or a lock would block without using CPU).
The child is a fresh `python -c` that imports the function by its module and name: it runs nothing of the caller's
own script (multiprocessing's spawn re-runs an unguarded script's top level in the child, and fails on a script read
from stdin). The arguments go as JSON, and the child hands back numbers only, as an `.npz` read without pickle, so
nothing it does reaches the parent but arrays; a `ValueError` it raises (a parser's one-line reason) comes back as
its message, and whatever else ends it is a one-line `BoundedRunError`.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np

from flashnerd.utils.host_memory import MAX_READ_FRACTION, available_host_bytes

INTERPRETER_BYTES = 1 << 30  # address space of the child's interpreter, numpy and the parser's modules (~0.4 GiB)
# the working folder leaves the child's path first thing (`python -c` puts it in front: a numpy.py or yaml.py beside
# a downloaded robot would be imported); the modules' own folders come through PYTHONPATH
_LAUNCH = ("import sys; sys.path[:] = [p for p in sys.path if p]; from flashnerd.utils.sandbox import child_main; "
           "child_main(sys.argv[1])")
STDERR_TAIL = 1 << 16  # bytes of the child's stderr read back for a crash's message


class BoundedRunError(ValueError):
    """A bounded run that ended without a result: the ValueError the function raised (`raised`: its message as it
    is), or the limit it reached or the crash that ended it."""

    def __init__(self, message: str, raised: bool = False) -> None:
        super().__init__(message)
        self.raised = raised


def child_main(folder: str) -> None:
    """In the child: read the call from `folder`, set the limits, run it, write its arrays or its error there."""
    out = Path(folder)
    call = json.loads((out / "call.json").read_text())
    memory_bytes, cpu_seconds = call["memory_bytes"], call["cpu_seconds"]
    try:
        # the function's modules (mujoco, pandas) load before the caps: the budget is the parse's, not theirs
        fn = getattr(importlib.import_module(call["module"]), call["name"])
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        arrays = fn(*call["args"])
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
    """`fn(*args)` (a module-level function returning numeric arrays by name; `args` plain JSON values) run in a
    child interpreter with at most `memory_bytes` of address space (default: `MAX_READ_FRACTION` of the free memory
    plus `INTERPRETER_BYTES`), `cpu_seconds` of CPU and `wall_seconds` of waiting; its arrays, or a one-line
    `BoundedRunError` saying which limit it reached or what it raised."""
    if memory_bytes is None:
        memory_bytes = INTERPRETER_BYTES + int(MAX_READ_FRACTION * available_host_bytes())
    if "." in fn.__qualname__ or fn.__module__ == "__main__":
        raise TypeError(f"run_bounded runs module-level functions of importable modules, not {fn.__qualname__}")
    # the child finds the modules the parent does (a test folder, a source tree on PYTHONPATH) in the same order;
    # two malloc arenas, as each arena reserves 64 MiB of the capped address space
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.exists(p)),
           "MALLOC_ARENA_MAX": "2"}
    with tempfile.TemporaryDirectory(prefix="flashnerd_bounded_") as folder:
        (Path(folder) / "call.json").write_text(json.dumps({
            "module": fn.__module__, "name": fn.__qualname__, "args": list(args), "memory_bytes": int(memory_bytes),
            "cpu_seconds": int(cpu_seconds)}))
        with open(Path(folder) / "stderr.txt", "wb") as stderr:
            child = subprocess.Popen([sys.executable, "-c", _LAUNCH, folder], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=stderr, env=env)
            try:
                child.wait(wall_seconds)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                if child.poll() is None:  # past the wall-clock limit, or the parent was interrupted
                    child.kill()
                    child.wait()
        if timed_out:
            raise BoundedRunError(f"it did not finish within {wall_seconds:.0f} s")
        raised, error, result = (Path(folder) / name for name in ("raised.txt", "error.txt", "result.npz"))
        if raised.is_file():
            raise BoundedRunError(raised.read_text()[:1000], raised=True)
        if error.is_file():
            raise BoundedRunError(error.read_text()[:400])
        if child.returncode == -signal.SIGXCPU:
            raise BoundedRunError(f"it used more than its {cpu_seconds} s of CPU time")
        if child.returncode == -signal.SIGKILL:
            raise BoundedRunError(f"it was killed: past its {cpu_seconds} s of CPU time, or out of memory")
        if child.returncode != 0 or not result.is_file():
            with open(Path(folder) / "stderr.txt", "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - STDERR_TAIL))
                tail = " ".join(f.read().decode(errors="replace").split()[-30:])[-300:]
            raise BoundedRunError(f"it ended with exit code {child.returncode} and no result"
                                  + (f" ({tail})" if tail else ""))
        with np.load(result, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
