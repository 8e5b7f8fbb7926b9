#!/usr/bin/env bash
# One GPU check of the CUDA paths; prints one JSON object (also written to $OUT_DIR/gpu_check.json).
#   bash scripts/gpu_check.sh            # on a CUDA machine: 16,384 worlds, batches up to 512,000, 30 PPO iterations
#   bash scripts/gpu_check.sh --dry-run  # tiny sizes on the CPU (CI runs this)
# The lent GPU machines have torch but not mujoco, gymnasium, rsl-rl-lib or tensordict: put their wheels (Python 3.12,
# manylinux x86-64; mujoco-warp and warp-lang where they fit) in .whl/ of the checkout and they are installed into
# /tmp/site first. Without mujoco_warp the mjwarp figures are skipped and planning is timed against MuJoCo's threads.
# Every measurement runs even when one fails; the JSON lists the failures and the exit status is then 1.
# Warp's compiled kernels go to its own cache (~/.cache/warp, or $WARP_CACHE_PATH), shared with every other run.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1
PY=${PYTHON:-python3}
if [[ -d .whl ]] && ! "$PY" -c "import mujoco, gymnasium, rsl_rl, tensordict, mujoco_warp" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
if ! "$PY" -c "import flashnerd_tasks" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null
fi
if (( DRY )); then
  DEV=cpu; N=16; BATCH=16,64; ITERS=2; STEPS=3; CPU_N=16; SHAC_N=4; COUPLED=(--num_worlds 4 --steps 2)
  SUITE=(--robots cartpole --eval_rollouts 4 --horizons 1,15 --batches 16 --max_batch 64)
  PLAN=(--num_samples 8 --horizon 6 --decisions 2 --turns 2 --warmup 1)
else
  DEV=cuda; N=16384; BATCH=16,16384,512000; ITERS=30; STEPS=20; CPU_N=4096; SHAC_N=4096
  COUPLED=(--num_worlds 256 --steps 50)
  SUITE=(--robots cartpole,franka,g1 --batches 16,16384 --max_batch 512000)
  PLAN=(--num_samples 2048 --decisions 40 --turns 4 --warmup 3)  # the published sample count
fi
OUT=${OUT_DIR:-logs/gpu_check}
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT/ppo/bench_ppo.json"  # a figure this run does not measure must not come from an earlier run
: > "$OUT/stderr.log"
TASK=FlashNeRD-Velocity-Flat-Anymal-C-v0
# MuJoCo Warp is optional here: a machine that cannot take warp-lang's wheel (~150 MB) still measures the rest
WARP=""
if "$PY" -c "import mujoco_warp" 2>/dev/null; then WARP=mjwarp; else echo "gpu_check: no mujoco_warp, mjwarp skipped" >&2; fi
# every measurement runs even when one fails (a lent GPU is measured once); failures are listed and the exit is 1
FAILED=()
run() {  # run NAME ARGS...: the last stdout line of `flashnerd ARGS...` into $OUT/NAME.json
  local name=$1; shift
  echo "gpu_check: $name $(date +%T)" >> "$OUT/stderr.log"
  if ! "$PY" -m flashnerd.cli.main "$@" > "$OUT/$name.out" 2>>"$OUT/stderr.log"; then FAILED+=("$name"); fi
  tail -n 1 "$OUT/$name.out" > "$OUT/$name.json"
  rm -f "$OUT/$name.out"
}

run model bench model --robot anymal_c --batch "$BATCH" --models flashnerd,nerd --device "$DEV"
run env_mujoco bench env --task $TASK --dynamics mujoco --num_envs "$N" --steps "$STEPS" --device cpu
for D in $WARP nerd flashnerd; do
  run "env_$D" bench env --task $TASK --dynamics $D --num_envs "$N" --steps "$STEPS" --device "$DEV"
done
# the learned env step against MuJoCo on the machine's CPU cores (issue 29's CPU bar, on more cores)
for D in mujoco flashnerd; do
  run "env_cpu_$D" bench env --task $TASK --dynamics $D --num_envs "$CPU_N" --steps "$STEPS" --device cpu
done
# the rough task: heightfield contact rows of every probe on the GPU (the CPU skips probes far above the field) and
# MuJoCo Warp's heightfield collisions, against MuJoCo's threaded step on the CPU cores
ROUGH=FlashNeRD-Velocity-Rough-Anymal-C-v0
run rough_mujoco bench env --task $ROUGH --dynamics mujoco --num_envs "$CPU_N" --steps "$STEPS" --device cpu
for D in $WARP flashnerd; do
  run "rough_$D" bench env --task $ROUGH --dynamics $D --num_envs "$N" --steps "$STEPS" --device "$DEV"
done
# the two-way coupled step (Allegro + cube) against MuJoCo on the same scene, CPU threads
run coupled bench coupled "${COUPLED[@]}"
# the model suite with the shipped checkpoints (held-out sets recorded on the CPU into $OUT/suite_data)
run suite bench suite "${SUITE[@]}" --device "$DEV" --data_dir "$OUT/suite_data" --out_dir "$OUT" --name model_suite_gpu
# PPO on each backend, and SHAC through FlashNeRD (its differentiable rollouts: forward and backward through the model)
run ppo bench ppo --task $TASK --dynamics "${WARP:+$WARP,}nerd,flashnerd,flashnerd:shac" --num_envs "$N" \
  --max_iterations "$ITERS" --shac_num_envs "$SHAC_N" --eval_episodes 4 --device "$DEV" --out_dir "$OUT/ppo"
# DIAL-MPC planning time per control decision on the highest platform, planning on the GPU (executed in MuJoCo on the
# CPU), backends in turns, against MuJoCo Warp (or MuJoCo's CPU threads without it); eager (torch.compile on CUDA
# needs Triton, which a bare machine may lack)
run plan bench plan --dynamics "${WARP:-mujoco},flashnerd" --platform 5 "${PLAN[@]}" --no-compile --device "$DEV"

"$PY" - "$OUT" "$DEV" "${FAILED[@]}" <<'PYEOF'
import json, sys, pathlib, torch
out, dev, failed = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]


def load(name):  # a measurement's JSON object, or {} where it failed
    try:
        value = json.loads((out / name).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def field(make):  # a figure whose measurement failed is null (the failure is listed)
    try:
        return make()
    except (KeyError, TypeError, ValueError, ZeroDivisionError, StopIteration):
        return None


envs = lambda prefix, names: {d: v for d in names
                              if (v := load(f"{prefix}{d}.json").get("env_steps_per_s")) is not None}
ppo, plan = load("ppo.json"), load("plan.json")
result = {
    "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
    "torch": torch.__version__,
    "failed": failed,
    "model_steps_per_s": field(lambda: load("model.json")["steps_per_s"]),
    "model_ratio": field(lambda: load("model.json").get("ratio")),
    "env_steps_per_s": envs("env_", ("mujoco", "mjwarp", "nerd", "flashnerd")),
    "env_steps_per_s_cpu": envs("env_cpu_", ("mujoco", "flashnerd")),
    "rough_env_steps_per_s": envs("rough_", ("mujoco", "mjwarp", "flashnerd")),
    "coupled": load("coupled.json") or None,
    "ppo_seconds_per_iteration": {d: r["seconds_per_iteration"] for d, r in ppo.items()
                                  if r.get("algo", "ppo") == "ppo"},
    "ppo_collect_seconds_per_iteration": {d: r["collect_seconds_per_iteration"] for d, r in ppo.items()
                                          if r.get("algo", "ppo") == "ppo"},
    # SHAC's env-steps per second of training (windows of its horizon over its worlds; forward, backward, critic fit)
    "shac_env_steps_per_s": field(lambda: {
        d: load("ppo/bench_ppo.json")["shac"]["horizon"] * r["num_envs"] / r["seconds_per_iteration"]
        for d, r in ppo.items() if r.get("algo") == "shac"}),
    "plan_median_ms": field(lambda: {d: r["median_planning_ms"] for d, r in plan["backends"].items()}),
    # each backend's planning time over the first one's (mjwarp, or mujoco where MuJoCo Warp is not installed)
    "plan_ratio": field(lambda: next(v for k, v in plan.items() if k.startswith("ratio_to_"))),
    "suite": field(lambda: {robot: {m: {"nrmse": v["nrmse"], "steps_per_s": v["steps_per_s"],
                                        "max_batch": v["max_batch"]} for m, v in r["models"].items()}
                            for robot, r in load("suite.json")["robots"].items()}),
}
(out / "gpu_check.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result))
sys.exit(1 if failed else 0)
PYEOF
