#!/usr/bin/env bash
# ANYmal-C on the rough field, end to end: the shipped rough-terrain FlashNeRD model
# (checkpoints/anymal_c/flashnerd_rough.safetensors, the default of the learned backend on the rough task) and PPO on
# it against PPO in MuJoCo for the same training time, both evaluated in MuJoCo on the rough field.
# Usage: scripts/anymal_rough.sh [REFIT_SECONDS] [PPO_SECONDS]
#   OUT: data folder, LOGS: benchmark folder, SHIPPED: the model written;
#   WORLDS, STEPS, ENVS, EPISODES: sizes (small ones for a quick check of the whole chain)
# Starts from scripts/rough_models.sh's data and its 600 s FlashNeRD fit (run first when missing). A step whose output
# exists is skipped, and the benchmark resumes, so a stopped run continues where it stopped.
set -euo pipefail
REFIT=${1:-900}
PPO=${2:-900}
OUT=${OUT:-data/rough}
LOGS=${LOGS:-logs/rough_ppo}
WORLDS=${WORLDS:-256}
STEPS=${STEPS:-1000}
ENVS=${ENVS:-1024}
EPISODES=${EPISODES:-32}
SHIPPED=${SHIPPED:-checkpoints/anymal_c/flashnerd_rough.safetensors}
[[ -s $OUT/fit_flashnerd.json ]] || OUT=$OUT WORLDS=$WORLDS STEPS=$STEPS scripts/rough_models.sh 600
# more exploration of the field (another seed), then the 600 s model fitted further on both sets
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
[[ -f $OUT/explore_s42.h5 ]] || flashnerd record --robot anymal_c --terrain rough --num_worlds "$WORLDS" \
  --steps "$STEPS" --traj_len 100 --seed 42 --out "$OUT/explore_s42.h5" $(resume "$OUT/explore_s42.h5.parts")
[[ -s $OUT/refit.json ]] || flashnerd fit --init "$OUT/flashnerd_rows.safetensors" --contacts rows \
  --data "$OUT/explore.h5" "$OUT/explore_s42.h5" --time_budget "$REFIT" --max_steps 1000000 --lr 3e-4 --patience 0 \
  --contact_head_steps 3000 --out "$OUT/refit.safetensors" $(resume "$OUT/refit.safetensors") \
  | tail -n 1 > "$OUT/refit.json"
# held out: rough_models.sh's 64 x 200 steps of seed 41
[[ -s $OUT/refit_eval.json ]] || flashnerd evaluate-model --checkpoint "$OUT/refit.safetensors" \
  --data "$OUT/explore_eval.h5" --horizons 1,15,100,200 | tail -n 1 > "$OUT/refit_eval.json"
[[ -f $SHIPPED ]] || flashnerd export-model --checkpoint "$OUT/refit.safetensors" --out "$SHIPPED" \
  --metrics "$OUT/refit_eval.json"
# equal training time on each backend ($ENVS worlds each); every 25th policy and the last one evaluated in MuJoCo
flashnerd bench ppo --task FlashNeRD-Velocity-Rough-Anymal-C-v0 --dynamics flashnerd,mujoco \
  --dynamics_checkpoint "flashnerd=$SHIPPED" --num_envs "$ENVS" --max_iterations 1500 --max_seconds "$PPO" \
  --eval_every 25 --eval_episodes "$EPISODES" --out_dir "$LOGS" --name rough_ppo --resume
