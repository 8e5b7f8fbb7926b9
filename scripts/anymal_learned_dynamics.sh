#!/usr/bin/env bash
# Record ANYmal-C data, fit FlashNeRD and NeRD for the same training wall time, measure both, benchmark them.
# Usage: scripts/anymal_learned_dynamics.sh [seconds per fit]   (writes data/, logs/ and logs/learned/*.json)
set -euo pipefail
BUDGET=${1:-600}
OUT=logs/learned
mkdir -p "$OUT" data/ckpt
flashnerd record --robot anymal_c --num_worlds 256 --steps 1000 --traj_len 100 --seed 0 --out data/anymal_c.h5 \
  | tee "$OUT/record_train.json"
flashnerd record --robot anymal_c --num_worlds 64 --steps 200 --traj_len 200 --seed 1 --out data/anymal_c_eval.h5 \
  | tee "$OUT/record_eval.json"
for MODEL in flashnerd nerd; do
  flashnerd fit --data data/anymal_c.h5 --model "$MODEL" --out "data/ckpt/anymal_c_$MODEL.pt" \
    --max_steps 100000 --time_budget "$BUDGET" | tee "$OUT/fit_$MODEL.json"
  flashnerd evaluate-model --checkpoint "data/ckpt/anymal_c_$MODEL.pt" --data data/anymal_c_eval.h5 \
    | tee "$OUT/eval_$MODEL.json"
done
flashnerd bench model --robot anymal_c --batch 16,1024,16384 --models flashnerd,nerd | tee "$OUT/bench_model.json"
