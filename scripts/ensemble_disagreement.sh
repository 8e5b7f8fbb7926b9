#!/usr/bin/env bash
# Issue 27: does a cheaper FlashNeRD ensemble (members that share their embedding and first blocks) still tell where
# it is wrong? Two K-member ensembles fitted for the same wall time on the same exploration data, one of independent
# members and one whose members share SHARED of the model's blocks, evaluated on held-out data of two kinds: more
# exploration (the states the data covers) and noisy MuJoCo rollouts of a walking policy (states it never saw, where
# PPO on the model goes). `evaluate-model` reports each ensemble's rollout error, its mean disagreement and the rank
# correlation of disagreement with error across rollouts (1: it ranks them exactly; 0: it does not find them).
# Usage: scripts/ensemble_disagreement.sh [FIT_SECONDS]
#   POLICY: a velocity policy of the flat ANYmal-C task (trained in MuJoCo for 400 iterations when unset)
#   OUT: data folder; K, SHARED: ensemble size and shared blocks; WORLDS, STEPS: the exploration data's size
# A step whose output exists is skipped, so a stopped run continues where it stopped.
set -euo pipefail
FIT=${1:-600}
OUT=${OUT:-data/ensemble}
K=${K:-4}
SHARED=${SHARED:-3}
WORLDS=${WORLDS:-256}
STEPS=${STEPS:-1000}
T=FlashNeRD-Velocity-Flat-Anymal-C-v0
mkdir -p "$OUT"
if [[ -z ${POLICY:-} ]]; then
  POLICY=$(ls -t logs/rsl_rl/anymal_c_flat/*_ensemble_policy/model_399.pt 2>/dev/null | head -n 1 || true)
  if [[ -z $POLICY ]]; then
    flashnerd train --task "$T" --dynamics mujoco --max_iterations 400 --run_name ensemble_policy
    POLICY=$(ls -t logs/rsl_rl/anymal_c_flat/*_ensemble_policy/model_399.pt | head -n 1)
  fi
fi
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
# training data: exploration controls (seed 30); held out: exploration (seed 31) and the policy with action noise
[[ -f $OUT/explore.h5 ]] || flashnerd record --robot anymal_c --num_worlds "$WORLDS" --steps "$STEPS" --traj_len 100 \
  --seed 30 --out "$OUT/explore.h5" $(resume "$OUT/explore.h5.parts")
[[ -f $OUT/explore_eval.h5 ]] || flashnerd record --robot anymal_c --num_worlds 64 --steps 200 --traj_len 200 \
  --seed 31 --out "$OUT/explore_eval.h5" $(resume "$OUT/explore_eval.h5.parts")
[[ -f $OUT/policy_eval.h5 ]] || flashnerd record --task "$T" --checkpoint "$POLICY" --action_noise 0.3 \
  --num_worlds 64 --steps 200 --traj_len 200 --seed 61 --out "$OUT/policy_eval.h5" $(resume "$OUT/policy_eval.h5.parts")
# the same data, seed and wall time; the members of one differ in initialization and data order. A fit writes its
# checkpoint at every validation: it is done when its summary (the last line it prints) is written.
for shared in 0 "$SHARED"; do
  name=k${K}_shared${shared}
  [[ -s $OUT/$name.fit.json ]] || flashnerd fit --data "$OUT/explore.h5" --model flashnerd --ensemble "$K" \
    --ensemble_shared "$shared" --time_budget "$FIT" --max_steps 1000000 --out "$OUT/$name.safetensors" \
    $(resume "$OUT/$name.safetensors") | tail -n 1 > "$OUT/$name.fit.json"
  for held in explore_eval policy_eval; do
    [[ -s $OUT/$name.$held.json ]] || flashnerd evaluate-model --checkpoint "$OUT/$name.safetensors" \
      --data "$OUT/$held.h5" --horizons 1,15,100 | tail -n 1 > "$OUT/$name.$held.json"
  done
done
