#!/usr/bin/env bash
# A robot from outside the package, end to end, with the commands of docs/howto/bring_your_robot.md: exploration data
# recorded in MuJoCo, a FlashNeRD model fitted on it and measured on held-out data, then PPO on that model and PPO in
# MuJoCo for the same number of iterations, both policies evaluated in MuJoCo (flashnerd bench ppo --robot).
# Usage: scripts/bring_your_robot.sh [SPEC] [FIT_SECONDS] [ITERATIONS]
#   SPEC: the robot's spec file (default: the test quadruped tests/assets/hound/hound.yaml)
#   OUT: data folder; WORLDS, STEPS, ENVS, EPISODES: sizes (small ones for a quick check of the whole chain)
# A step whose output exists is skipped and the benchmark resumes, so a stopped run continues where it stopped.
set -euo pipefail
SPEC=${1:-tests/assets/hound/hound.yaml}
FIT=${2:-600}
ITERS=${3:-300}
NAME=$(basename "$(dirname "$SPEC")")
OUT=${OUT:-data/$NAME}
WORLDS=${WORLDS:-256}
STEPS=${STEPS:-1000}
ENVS=${ENVS:-1024}
EPISODES=${EPISODES:-64}
TASK=FlashNeRD-Velocity-Flat-Anymal-C-v0
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
[[ -f $OUT/explore.h5 ]] || flashnerd record --robot "$SPEC" --num_worlds "$WORLDS" --steps "$STEPS" --traj_len 100 \
  --seed 0 --out "$OUT/explore.h5" $(resume "$OUT/explore.h5.parts")
[[ -f $OUT/explore_eval.h5 ]] || flashnerd record --robot "$SPEC" --num_worlds 64 --steps 200 --traj_len 200 --seed 1 \
  --out "$OUT/explore_eval.h5" $(resume "$OUT/explore_eval.h5.parts")
[[ -s $OUT/fit.json ]] || flashnerd fit --data "$OUT/explore.h5" --out "$OUT/flashnerd.safetensors" \
  --time_budget "$FIT" --max_steps 1000000 $(resume "$OUT/flashnerd.safetensors") | tail -n 1 > "$OUT/fit.json"
[[ -s $OUT/model_eval.json ]] || flashnerd evaluate-model --checkpoint "$OUT/flashnerd.safetensors" \
  --data "$OUT/explore_eval.h5" --horizons 1,15,100 | tail -n 1 > "$OUT/model_eval.json"
flashnerd bench ppo --task $TASK --robot "$SPEC" --dynamics flashnerd,mujoco \
  --dynamics_checkpoint "flashnerd=$OUT/flashnerd.safetensors" --num_envs "$ENVS" --max_iterations "$ITERS" \
  --eval_episodes "$EPISODES" --out_dir "logs/${NAME}_ppo" --name "${NAME}_ppo" --resume | tail -n 1
