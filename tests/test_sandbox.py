"""utils/sandbox.py: a parser run in a child process within a memory and a time limit gives back its arrays, its own
one-line reason, or a one-line error naming the limit it reached; the parent never hangs on it."""

from __future__ import annotations

import time

import numpy as np
import pytest

from flashnerd.utils.sandbox import BoundedRunError, run_bounded


def _arrays(n: int) -> dict[str, np.ndarray]:
    return {"ramp": np.arange(n, dtype=np.float64), "ids": np.arange(n, dtype=np.int64) * 3}


def _refuses(reason: str) -> dict[str, np.ndarray]:
    raise ValueError(reason)


def _spins() -> dict[str, np.ndarray]:
    while True:
        pass


def _hoards() -> dict[str, np.ndarray]:
    chunks = []
    while True:
        chunks.append(np.ones(2**24))  # 128 MiB at a time


def _blocks() -> dict[str, np.ndarray]:
    time.sleep(3600)
    return {}


def test_the_child_gives_back_its_arrays_or_its_reason():
    got = run_bounded(_arrays, (5,), cpu_seconds=30, wall_seconds=60)
    assert set(got) == {"ramp", "ids"} and np.array_equal(got["ramp"], np.arange(5.0))
    assert got["ids"].dtype == np.int64 and np.array_equal(got["ids"], np.arange(5) * 3)
    with pytest.raises(BoundedRunError, match="^no topic /x$") as err:
        run_bounded(_refuses, ("no topic /x\nsecond line",), cpu_seconds=30, wall_seconds=60)
    assert err.value.raised


@pytest.mark.parametrize("fn, limits, message", [
    (_spins, {"cpu_seconds": 1, "wall_seconds": 60}, "more than its 1 s of CPU time"),
    (_hoards, {"cpu_seconds": 60, "wall_seconds": 60, "memory_bytes": 2**30}, "more memory than the 1.0 GiB"),
    (_blocks, {"cpu_seconds": 60, "wall_seconds": 2}, "did not finish within 2 s"),
])
def test_a_child_past_its_limit_is_a_one_line_error(fn, limits, message):
    start = time.monotonic()
    with pytest.raises(BoundedRunError, match=message) as err:
        run_bounded(fn, (), **limits)
    assert not err.value.raised and len(str(err.value).splitlines()) == 1
    assert time.monotonic() - start < 30
