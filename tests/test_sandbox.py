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


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_callers_script_without_a_main_guard_runs_once(tmp_path, how):
    """The child imports the function by name and runs nothing of the caller's script: a plain script (no
    `if __name__ == "__main__":`) or one piped to python loads a robot from its MJCF, and its top level runs once."""
    import subprocess
    import sys
    from pathlib import Path

    hound = Path(__file__).parent / "assets" / "hound" / "hound.yaml"
    script = ("print('top level ran')\nfrom flashnerd.robots import get_robot\n"
              f"print(get_robot({str(hound)!r}).contact_bodies['feet'])\n")
    (tmp_path / "scripts").mkdir()
    path = tmp_path / "scripts" / "plain.py"
    path.write_text(script)
    argv, stdin = ([sys.executable, str(path)], None) if how == "file" else ([sys.executable, "-"], script)
    work = tmp_path / "work"  # the folder it runs in: a yaml.py there is not what the child imports
    work.mkdir()
    if how == "file":  # (a script piped to python imports from its working folder itself)
        (work / "yaml.py").write_text(f"open({str(tmp_path / 'shadowed')!r}, 'w').close()\n")
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=300, cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("top level ran") == 1 and "FL_calf" in done.stdout
    assert not (tmp_path / "shadowed").exists()
