"""scripts/gpu_check.sh runs end to end with --dry-run (tiny sizes on the CPU) and prints one JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tmp_path):
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


def test_gpu_check_lists_a_failed_measurement_and_runs_the_rest(tmp_path):
    """A bench that fails does not stop the others: it is listed under `failed`, its figures are null, the exit is 1."""
    fake = tmp_path / "python"  # the project's CLI answers `{}` except `bench model`, which fails; the rest is real
    fake.write_text(f'#!/usr/bin/env bash\nif [[ "$1" == "-m" ]]; then [[ "$4" == "model" ]] && exit 3; echo "{{}}"; '
                    f'exit 0; fi\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    env = {**os.environ, "OUT_DIR": str(tmp_path / "out"), "PYTHON": str(fake)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failed"] == ["model"]
    assert result["model_steps_per_s"] is None and result["env_steps_per_s"] == {} and result["plan_median_ms"] is None
    log = (tmp_path / "out" / "stderr.log").read_text()
    assert "gpu_check: plan" in log  # the last measurement still ran
