"""scripts/gpu_check.sh runs end to end with --dry-run (tiny sizes on the CPU) and prints one JSON."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from flashnerd.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 14 CLI processes, 3-4 min on a 2-core CPU: `.ci/run` runs it after the default suite
def test_gpu_check_dry_run(tmp_path):
    """Every measurement of the GPU script runs for real at tiny sizes on the CPU and lands in its summary."""
    env = {**os.environ, "OUT_DIR": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["device"] == "cpu" and result["failed"] == []
    assert set(result["env_steps_per_s"]) == {"mujoco", "mjwarp", "nerd", "flashnerd"}
    assert all(v > 0 for v in result["env_steps_per_s"].values())
    assert set(result["ppo_seconds_per_iteration"]) == {"mjwarp", "nerd", "flashnerd"}
    collect = result["ppo_collect_seconds_per_iteration"]
    assert all(0 < collect[d] < t for d, t in result["ppo_seconds_per_iteration"].items())
    shac = result["shac_env_steps_per_s"]
    assert set(shac) == {"flashnerd:shac"} and shac["flashnerd:shac"] > 0
    assert set(result["rough_env_steps_per_s"]) == {"mujoco", "mjwarp", "flashnerd"}
    assert all(v > 0 for v in result["rough_env_steps_per_s"].values())
    assert set(result["env_steps_per_s_cpu"]) == {"mujoco", "flashnerd"} and result["coupled"]["coupled_vs_mujoco"] > 0
    assert result["model_ratio"]["64"] > 0
    assert set(result["plan_median_ms"]) == {"mjwarp", "flashnerd"}
    assert all(v > 0 for v in result["plan_median_ms"].values()) and result["plan_ratio"]["mjwarp"] == 1.0
    assert (tmp_path / "gpu_check.json").is_file()


def test_gpu_check_without_mujoco_warp_lists_a_failed_measurement_and_runs_the_rest(tmp_path):
    """Without mujoco_warp nothing asks for mjwarp and planning is timed against MuJoCo; a bench that fails does not
    stop the others: it is listed under `failed`, its figures are null, a stale file is not read, the exit is 1; and
    every command line the script runs parses with the CLI's own parser."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"  # the project's CLI answers `{}` except `bench model`, which fails; no mujoco_warp
    fake.write_text(f'#!/usr/bin/env bash\nif [[ "$1" == "-c" && "$2" == *mujoco_warp* ]]; then exit 1; fi\n'
                    f'if [[ "$1" == "-m" ]]; then printf "%q " "$@" >> {calls}; echo >> {calls}; '
                    f'[[ "$4" == "model" ]] && exit 3; '
                    f'echo "{{}}"; exit 0; fi\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "env_mjwarp.json").write_text('{"env_steps_per_s": 1.0}')  # an earlier run's
    env = {**os.environ, "OUT_DIR": str(tmp_path / "out"), "PYTHON": str(fake)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failed"] == ["model"]
    assert result["model_steps_per_s"] is None and result["env_steps_per_s"] == {} and result["plan_median_ms"] is None
    calls = [shlex.split(line) for line in calls.read_text().splitlines()]  # each call's arguments, as the CLI got them
    cli = [words[words.index("flashnerd.cli.main") + 1:] for words in calls if "flashnerd.cli.main" in words]
    assert len(cli) == 12 and not any("mjwarp" in " ".join(c) for c in cli)  # 14 measurements less 2 mjwarp env steps
    assert "--dynamics mujoco,flashnerd" in " ".join(cli[-1]) and cli[-1][:2] == ["bench", "plan"]
    for argv in cli:  # every call the script makes is one the CLI takes (a renamed flag fails here, not on a GPU)
        try:
            parsed = build_parser(argv).parse_args(argv)
        except SystemExit:
            pytest.fail(f"scripts/gpu_check.sh calls `flashnerd {' '.join(argv)}`, which the CLI refuses")
        assert not getattr(parsed, "overrides", None), argv  # a stray word would be taken as an override
