#!/usr/bin/env bash
# Issue 27: does paying for model disagreement keep a policy trained on a weak model on its feet in MuJoCo? A K=4
# FlashNeRD ensemble (members sharing SHARED of the model's blocks) is fitted FIT seconds on exploration data only,
# its disagreement measured on held-out exploration (`evaluate-model`: the 99th percentile of the per-step
# disagreement over whole held-out trajectories becomes the halt threshold), then the README's main job runs on it
# for every PPO seed with each of the settings below and evaluates itself on the model and in MuJoCo (eval.json):
#   none       no uncertainty terms
#   penalty    --uncertainty_penalty WEIGHT with the halt at the threshold, which bounds what a step can pay
#   threshold  the halt alone
# Usage: scripts/uncertainty_penalty.sh [FIT_SECONDS]
#   OUT: data folder; SEEDS: PPO seeds; SETTINGS: which of none, penalty, threshold, in the order they run;
#   WEIGHT: the penalty's weight; K, SHARED: ensemble size and shared blocks.
# A step whose output exists is skipped, so a stopped run continues with the next unfinished PPO run.
set -euo pipefail
FIT=${1:-120}
OUT=${OUT:-data/weak}
SEEDS=${SEEDS:-42 43}
SETTINGS=${SETTINGS:-none penalty}
WEIGHT=${WEIGHT:-1.0}
K=${K:-4}
SHARED=${SHARED:-3}
T=FlashNeRD-Velocity-Flat-Anymal-C-v0
mkdir -p "$OUT"
resume() {  # --resume where a stopped recording left its partial output ($1), so it continues instead of starting over
  if [[ -e $1 ]]; then echo --resume; fi
}
[[ -f $OUT/explore.h5 ]] || flashnerd record --robot anymal_c --num_worlds 64 --steps 400 --seed 10 \
  --out "$OUT/explore.h5" $(resume "$OUT/explore.h5.parts")
[[ -f $OUT/explore_eval.h5 ]] || flashnerd record --robot anymal_c --num_worlds 32 --steps 400 --traj_len 400 \
  --seed 11 --out "$OUT/explore_eval.h5" $(resume "$OUT/explore_eval.h5.parts")
MODEL=$OUT/weak_k${K}_shared${SHARED}.safetensors
[[ -s $OUT/fit.json ]] || flashnerd fit --data "$OUT/explore.h5" --ensemble "$K" --ensemble_shared "$SHARED" \
  --time_budget "$FIT" --out "$MODEL" | tail -n 1 > "$OUT/fit.json"
[[ -s $OUT/eval_model.json ]] || flashnerd evaluate-model --checkpoint "$MODEL" --data "$OUT/explore_eval.h5" \
  --horizons 1,15,100,400 | tail -n 1 > "$OUT/eval_model.json"
THRESHOLD=$(python -c "import json; q = json.load(open('$OUT/eval_model.json'))['disagreement_quantiles']
print(round(q[max(q, key=int)]['p99'], 3))")
echo "halt threshold (99th percentile of held-out disagreement): $THRESHOLD"
for seed in $SEEDS; do
  for setting in $SETTINGS; do
    case $setting in
      none) terms=() ;;
      penalty) terms=(--uncertainty_penalty "$WEIGHT" --uncertainty_threshold "$THRESHOLD") ;;
      threshold) terms=(--uncertainty_threshold "$THRESHOLD") ;;
      *) echo "unknown setting '$setting' (none, penalty or threshold)" >&2; exit 2 ;;
    esac
    name=weak_${setting}_s${seed}
    if ls logs/rsl_rl/anymal_c_flat/*_"$name"/eval.json > /dev/null 2>&1; then continue; fi
    flashnerd train --task "$T" --dynamics flashnerd --dynamics_checkpoint "$MODEL" --seed "$seed" \
      --run_name "$name" "${terms[@]}"
  done
done
