#!/usr/bin/env bash
# ANYmal-C on the rough field: the data-aggregation loop (`flashnerd improve`) from the shipped rough-terrain model.
# PPO trained on the model walks there and falls in MuJoCo (docs/results.md, issue 28); each round rolls that policy
# out in MuJoCo on the same field, refits the model on its rollouts beside the exploration data the shipped model was
# fitted on, and trains on. Usage: scripts/rough_improve.sh [ROUNDS] [ITERATIONS]
#   OUT: data folder (the exploration sets of scripts/rough_models.sh and scripts/anymal_rough.sh, recorded here when
#   missing), LOGS: the improve folder; WORLDS, STEPS, ENVS, EPISODES, FIT (refit seconds), TARGET (MuJoCo minutes
#   per round): sizes (small ones for a quick check).
# A stopped run continues where it stopped (the recordings are skipped when present, improve resumes).
set -euo pipefail
ROUNDS=${1:-2}
ITERATIONS=${2:-500}
OUT=${OUT:-data/rough}
LOGS=${LOGS:-logs/rough_improve}
WORLDS=${WORLDS:-256}
STEPS=${STEPS:-1000}
ENVS=${ENVS:-1024}
EPISODES=${EPISODES:-32}
FIT=${FIT:-600}
TARGET=${TARGET:-85.4}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
for SEED in 40 42; do
  FILE=$OUT/explore_s$SEED.h5
  [[ $SEED == 40 ]] && FILE=$OUT/explore.h5
  [[ -f $FILE ]] || flashnerd record --robot anymal_c --terrain rough --num_worlds "$WORLDS" --steps "$STEPS" \
    --traj_len 100 --seed $SEED --out "$FILE" $(resume "$FILE.parts")
done
RESUME=()
[[ -f $LOGS/improve.json ]] && RESUME=(--resume)
flashnerd improve --task FlashNeRD-Velocity-Rough-Anymal-C-v0 --rounds "$ROUNDS" --iterations "$ITERATIONS" \
  --num_envs "$ENVS" --data "$OUT/explore.h5" "$OUT/explore_s42.h5" --target_minutes "$TARGET" \
  --target_worlds "$WORLDS" --traj_len 100 --action_noise 0.3 --fit_budget "$FIT" --patience 0 --contact_head_steps 3000 \
  --eval_episodes "$EPISODES" --seed 42 --out_dir "$LOGS" --name improve "${RESUME[@]}"
