#!/usr/bin/env bash
# One round of data aggregation for the shipped ANYmal-C FlashNeRD model, as the round-2 card in
# checkpoints/anymal_c/README.md ran it: simulation data kept in the refit, then `flashnerd improve --rounds 1`.
# Usage: scripts/anymal_improve_round.sh NOMINAL_POLICY RANDOMIZED_POLICY [OUT_DIR]
#   NOMINAL_POLICY, RANDOMIZED_POLICY: policies of FlashNeRD-Velocity-Flat-Anymal-C-v0 trained in MuJoCo (e.g. the
#   `nominal` and `randomized` baselines of a `flashnerd bench reality-gap` run); their noisy rollouts join the refit.
# Writes data/improve/*.h5, OUT_DIR (default logs/improve_anymal)/{improve.json,improve.png,round_0/} and the
# held-out NRMSE of the starting and the refitted model in OUT_DIR/eval_*.json. Exporting the result is left to the
# user: flashnerd export-model --checkpoint OUT_DIR/round_0/model.safetensors --out ... --metrics OUT_DIR/eval_new_explore.json
set -euo pipefail
NOMINAL=${1:?nominal MuJoCo policy}
RANDOMIZED=${2:?randomized MuJoCo policy}
OUT=${3:-logs/improve_anymal}
TASK=FlashNeRD-Velocity-Flat-Anymal-C-v0
DATA=data/improve
mkdir -p "$DATA" "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
flashnerd record --robot anymal_c --num_worlds 256 --steps 1000 --traj_len 100 --seed 33 \
  --out $DATA/explore_s33.h5 $(resume "$DATA/explore_s33.h5.parts")
flashnerd record --task $TASK --checkpoint "$NOMINAL" --action_noise 0.3 --num_worlds 256 --steps 1000 --traj_len 100 \
  --seed 53 --out $DATA/policy_nominal_s53.h5 $(resume "$DATA/policy_nominal_s53.h5.parts")
flashnerd record --task $TASK --checkpoint "$RANDOMIZED" --action_noise 0.3 --num_worlds 128 --steps 1000 \
  --traj_len 100 --seed 54 --out $DATA/policy_randomized_s54.h5 $(resume "$DATA/policy_randomized_s54.h5.parts")
RESUME=()
[[ -f $OUT/improve.json ]] && RESUME=(--resume)
flashnerd improve --task $TASK --rounds 1 \
  --data $DATA/explore_s33.h5 $DATA/policy_nominal_s53.h5 $DATA/policy_randomized_s54.h5 \
  --target_minutes 85.4 --target_worlds 256 --traj_len 100 --action_noise 0.3 --fit_budget 900 --patience 0 \
  --contact_head_steps 3000 --seed 42 --out_dir "$OUT" --name improve "${RESUME[@]}"
flashnerd record --robot anymal_c --num_worlds 64 --steps 200 --traj_len 200 --seed 31 \
  --out $DATA/explore_eval_s31.h5 $(resume "$DATA/explore_eval_s31.h5.parts")
for MODEL in start new; do
  CKPT=checkpoints/anymal_c/flashnerd.safetensors
  [[ $MODEL == new ]] && CKPT=$OUT/round_0/model.safetensors
  flashnerd evaluate-model --checkpoint "$CKPT" --data $DATA/explore_eval_s31.h5 | tail -n 1 > "$OUT/eval_${MODEL}_explore.json"
done
