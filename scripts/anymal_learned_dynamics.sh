#!/usr/bin/env bash
# Record ANYmal-C data, fit FlashNeRD and NeRD on it for the same training wall time, measure both, benchmark them.
# Usage: scripts/anymal_learned_dynamics.sh SECONDS_PER_FIT [POLICY_CHECKPOINT ...]
#   Each POLICY_CHECKPOINT (a `flashnerd train` model_<it>.pt of FlashNeRD-Velocity-Flat-Anymal-C-v0) adds 128 worlds
#   x 1000 steps of that policy with action noise up to 0.3 (0.5 for the first) to the exploration data.
# Writes data/v2/, logs/learned_v2/*.json and data/v2/ckpt/anymal_c_{flashnerd,nerd}.safetensors.
set -euo pipefail
BUDGET=${1:-600}
shift || true
TASK=FlashNeRD-Velocity-Flat-Anymal-C-v0
OUT=logs/learned_v2
DATA=data/v2
mkdir -p "$OUT" "$DATA/ckpt"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
flashnerd record --robot anymal_c --num_worlds 256 --steps 1000 --traj_len 100 --seed 0 \
  --out $DATA/explore.h5 $(resume "$DATA/explore.h5.parts")
flashnerd record --robot anymal_c --num_worlds 64 --steps 200 --traj_len 200 --seed 1 \
  --out $DATA/explore_eval.h5 $(resume "$DATA/explore_eval.h5.parts")
SETS=($DATA/explore.h5)
SEED=10
NOISE=0.5
WORLDS=256
for CKPT in "$@"; do
  flashnerd record --task $TASK --checkpoint "$CKPT" --action_noise $NOISE --num_worlds $WORLDS --steps 1000 \
    --traj_len 100 --seed $SEED --out $DATA/policy_$SEED.h5 $(resume "$DATA/policy_$SEED.h5.parts")
  if [[ $SEED == 10 ]]; then  # held-out policy data from the first policy, another seed
    flashnerd record --task $TASK --checkpoint "$CKPT" --action_noise 0.3 --num_worlds 64 --steps 200 \
      --traj_len 200 --seed 21 --out $DATA/policy_eval.h5 $(resume "$DATA/policy_eval.h5.parts")
  fi
  SETS+=($DATA/policy_$SEED.h5)
  SEED=$((SEED + 1)); NOISE=0.3; WORLDS=128
done
for MODEL in flashnerd nerd; do
  CKPT=$DATA/ckpt/anymal_c_$MODEL.safetensors
  [[ -s $OUT/fit_$MODEL.json ]] || flashnerd fit --data "${SETS[@]}" --model "$MODEL" --out "$CKPT" --max_steps 100000 \
    --time_budget "$BUDGET" $(resume "$CKPT") | tee "$OUT/fit_$MODEL.json"
  for EVAL in explore_eval policy_eval; do
    [[ -f $DATA/$EVAL.h5 ]] || continue
    flashnerd evaluate-model --checkpoint "$DATA/ckpt/anymal_c_$MODEL.safetensors" --data $DATA/$EVAL.h5 \
      | tail -n 1 > "$OUT/eval_${MODEL}_$EVAL.json"
  done
done
flashnerd bench model --robot anymal_c --batch 16,1024,16384 --models flashnerd,nerd | tail -n 1 > "$OUT/bench_model.json"
