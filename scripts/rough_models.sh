#!/usr/bin/env bash
# ANYmal-C on the rough field: record exploration data, fit FlashNeRD (variable contact rows, which see the
# heightfield) and NeRD (fixed ground probes, which read the height above z = 0) for the same training wall time, and
# measure both on held-out rough-terrain trajectories at H = 1, 15, 100.
# Usage: scripts/rough_models.sh [SECONDS_PER_FIT]   (sizes from WORLDS, STEPS, EVAL_WORLDS; OUT the folder)
# A step whose output exists is skipped, so a stopped run continues where it stopped.
set -euo pipefail
BUDGET=${1:-600}
WORLDS=${WORLDS:-256}
STEPS=${STEPS:-1000}
EVAL_WORLDS=${EVAL_WORLDS:-64}
OUT=${OUT:-data/rough}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
[[ -f $OUT/explore.h5 ]] || flashnerd record --robot anymal_c --terrain rough --num_worlds "$WORLDS" --steps "$STEPS" \
  --traj_len 100 --seed 40 --out "$OUT/explore.h5" $(resume "$OUT/explore.h5.parts")
[[ -f $OUT/explore_eval.h5 ]] || flashnerd record --robot anymal_c --terrain rough --num_worlds "$EVAL_WORLDS" \
  --steps 200 --traj_len 200 --seed 41 --out "$OUT/explore_eval.h5" $(resume "$OUT/explore_eval.h5.parts")
for MODEL in flashnerd nerd; do
  CONTACTS=probes
  [[ $MODEL == flashnerd ]] && CONTACTS=rows
  CKPT=$OUT/${MODEL}_$CONTACTS.safetensors
  [[ -s $OUT/fit_$MODEL.json ]] || flashnerd fit --data "$OUT/explore.h5" --model $MODEL --contacts $CONTACTS \
    --out "$CKPT" --max_steps 1000000 --time_budget "$BUDGET" $(resume "$CKPT") | tail -n 1 > "$OUT/fit_$MODEL.json"
  [[ -s $OUT/eval_$MODEL.json ]] || flashnerd evaluate-model --checkpoint "$CKPT" --data "$OUT/explore_eval.h5" \
    --horizons 1,15,100 | tail -n 1 > "$OUT/eval_$MODEL.json"
done
