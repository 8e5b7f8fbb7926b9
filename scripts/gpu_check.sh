#!/usr/bin/env bash
# One GPU check of the CUDA paths; prints one JSON object (also written to $OUT_DIR/gpu_check.json).
#   bash scripts/gpu_check.sh            # on a CUDA machine: 16,384 worlds, batches up to 512,000, 30 PPO iterations
#   bash scripts/gpu_check.sh --dry-run  # tiny sizes on the CPU (CI runs this)
# The lent GPU machines have torch but not mujoco, gymnasium, rsl-rl-lib or tensordict: put their wheels (Python 3.12,
# manylinux x86-64, including mujoco-warp and warp-lang) in .whl/ of the checkout and they are installed into
# /tmp/site first. Warp's compiled kernels are cached in .warp_cache/ of the working tree (WARP_CACHE_PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
export WARP_CACHE_PATH=${WARP_CACHE_PATH:-$PWD/.warp_cache}
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
TASK=FlashNeRD-Velocity-Flat-Anymal-C-v0
run() { "$PY" -m flashnerd.cli.main "$@" 2>>"$OUT/stderr.log" | tail -n 1; }

run bench model --robot anymal_c --batch "$BATCH" --models flashnerd,nerd --device "$DEV" > "$OUT/model.json"
run bench env --task $TASK --dynamics mujoco --num_envs "$N" --steps "$STEPS" --device cpu > "$OUT/env_mujoco.json"
for D in mjwarp nerd flashnerd; do
  run bench env --task $TASK --dynamics $D --num_envs "$N" --steps "$STEPS" --device "$DEV" > "$OUT/env_$D.json"
done
# the learned env step against MuJoCo on the machine's CPU cores (issue 29's CPU bar, on more cores)
for D in mujoco flashnerd; do
  run bench env --task $TASK --dynamics $D --num_envs "$CPU_N" --steps "$STEPS" --device cpu > "$OUT/env_cpu_$D.json"
done
# the rough task: heightfield contact rows of every probe on the GPU (the CPU skips probes far above the field) and
# MuJoCo Warp's heightfield collisions, against MuJoCo's threaded step on the CPU cores
ROUGH=FlashNeRD-Velocity-Rough-Anymal-C-v0
run bench env --task $ROUGH --dynamics mujoco --num_envs "$CPU_N" --steps "$STEPS" --device cpu \
  > "$OUT/rough_mujoco.json"
for D in mjwarp flashnerd; do
  run bench env --task $ROUGH --dynamics $D --num_envs "$N" --steps "$STEPS" --device "$DEV" > "$OUT/rough_$D.json"
done
# the two-way coupled step (Allegro + cube) against MuJoCo on the same scene, CPU threads
run bench coupled "${COUPLED[@]}" > "$OUT/coupled.json"
# the model suite with the shipped checkpoints (held-out sets recorded on the CPU into $OUT/suite_data)
run bench suite "${SUITE[@]}" --device "$DEV" --data_dir "$OUT/suite_data" --out_dir "$OUT" --name model_suite_gpu \
  > "$OUT/suite.json"
# PPO on each backend, and SHAC through FlashNeRD (its differentiable rollouts: forward and backward through the model)
run bench ppo --task $TASK --dynamics mjwarp,nerd,flashnerd,flashnerd:shac --num_envs "$N" --max_iterations "$ITERS" \
  --shac_num_envs "$SHAC_N" --eval_episodes 4 --device "$DEV" --out_dir "$OUT/ppo" > "$OUT/ppo.json"
# DIAL-MPC planning time per control decision on the highest platform, planning on the GPU (executed in MuJoCo on the
# CPU), backends in turns; eager (torch.compile on CUDA needs Triton, which a bare machine may lack)
run bench plan --dynamics mjwarp,flashnerd --platform 5 "${PLAN[@]}" --no-compile --device "$DEV" > "$OUT/plan.json"

"$PY" - "$OUT" "$DEV" <<'PYEOF'
import json, sys, pathlib, torch
out, dev = pathlib.Path(sys.argv[1]), sys.argv[2]
load = lambda name: json.loads((out / name).read_text())
shac_horizon = load("ppo/bench_ppo.json")["shac"]["horizon"]
result = {
    "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
    "torch": torch.__version__,
    "model_steps_per_s": load("model.json")["steps_per_s"],
    "model_ratio": load("model.json").get("ratio"),
    "env_steps_per_s": {d: load(f"env_{d}.json")["env_steps_per_s"] for d in ("mujoco", "mjwarp", "nerd", "flashnerd")},
    "env_steps_per_s_cpu": {d: load(f"env_cpu_{d}.json")["env_steps_per_s"] for d in ("mujoco", "flashnerd")},
    "rough_env_steps_per_s": {d: load(f"rough_{d}.json")["env_steps_per_s"]
                              for d in ("mujoco", "mjwarp", "flashnerd")},
    "coupled": load("coupled.json"),
    "ppo_seconds_per_iteration": {d: r["seconds_per_iteration"] for d, r in load("ppo.json").items()
                                  if r.get("algo", "ppo") == "ppo"},
    "ppo_collect_seconds_per_iteration": {d: r["collect_seconds_per_iteration"] for d, r in load("ppo.json").items()
                                          if r.get("algo", "ppo") == "ppo"},
    # SHAC's env-steps per second of training (windows of its horizon over its worlds; forward, backward, critic fit)
    "shac_env_steps_per_s": {d: shac_horizon * r["num_envs"] / r["seconds_per_iteration"]
                             for d, r in load("ppo.json").items() if r.get("algo") == "shac"},
    "plan_median_ms": {d: r["median_planning_ms"] for d, r in load("plan.json")["backends"].items()},
    "plan_ratio_to_mjwarp": load("plan.json")["ratio_to_mjwarp"],
    "suite": {robot: {m: {"nrmse": v["nrmse"], "steps_per_s": v["steps_per_s"], "max_batch": v["max_batch"]}
                      for m, v in r["models"].items()} for robot, r in load("suite.json")["robots"].items()},
}
(out / "gpu_check.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result))
PYEOF
