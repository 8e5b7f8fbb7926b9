#!/usr/bin/env bash
# Issue 27: does paying for model disagreement keep a policy trained on a weak model on its feet in MuJoCo? A K=4
# FlashNeRD ensemble (members sharing SHARED of the model's blocks) is fitted on exploration data only for FIT
# seconds or `fit`'s default steps, whichever ends first,
# its disagreement measured on held-out exploration (`evaluate-model`: the 99th percentile of the per-step
# disagreement over whole held-out trajectories becomes the halt threshold), then the README's main job runs on it
# for every PPO seed with each of the settings below and evaluates itself on the model and in MuJoCo (eval.json):
#   none       no uncertainty terms
#   penalty    --uncertainty_penalty WEIGHT with the halt at the threshold, which bounds what a step can pay
#   threshold  the halt alone
# Usage: scripts/uncertainty_penalty.sh [FIT_SECONDS]
#   OUT: data folder; SEEDS: PPO seeds; SETTINGS: which of none, penalty, threshold, in the order they run;
#   WEIGHT: the penalty's weight; K, SHARED: ensemble size and shared blocks.
# A step whose output exists is skipped, so a stopped run continues with the next unfinished PPO run. At the end every
# run of the model is one row of a table (stdout) and one entry of <model>.runs.json.
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
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
[[ -f $OUT/explore.h5 ]] || flashnerd record --robot anymal_c --num_worlds 64 --steps 400 --seed 10 \
  --out "$OUT/explore.h5" $(resume "$OUT/explore.h5.parts")
[[ -f $OUT/explore_eval.h5 ]] || flashnerd record --robot anymal_c --num_worlds 32 --steps 400 --traj_len 400 \
  --seed 11 --out "$OUT/explore_eval.h5" $(resume "$OUT/explore_eval.h5.parts")
STEM=$OUT/weak_k${K}_shared${SHARED}_fit${FIT}
MODEL=$STEM.safetensors
[[ -s $STEM.fit.json ]] || flashnerd fit --data "$OUT/explore.h5" --ensemble "$K" --ensemble_shared "$SHARED" \
  --time_budget "$FIT" --out "$MODEL" $(resume "$MODEL") | tail -n 1 > "$STEM.fit.json"
[[ -s $STEM.eval.json ]] || flashnerd evaluate-model --checkpoint "$MODEL" --data "$OUT/explore_eval.h5" \
  --horizons 1,15,100,400 | tail -n 1 > "$STEM.eval.json"
THRESHOLD=$(python - "$STEM.eval.json" <<'PY'
import json, math, sys
q = json.load(open(sys.argv[1]))["disagreement_quantiles"]
p99 = q[max(q, key=int)]["p99"]  # over whole held-out trajectories
if not (math.isfinite(p99) and p99 > 0):
    sys.exit(f"the held-out disagreement's 99th percentile is {p99}: no threshold can be read from it")
print(f"{p99:.3g}")
PY
)
echo "halt threshold (99th percentile of held-out disagreement): $THRESHOLD"
for seed in $SEEDS; do
  for setting in $SETTINGS; do
    case $setting in
      none) terms=(--uncertainty_penalty 0) ;;
      penalty) terms=(--uncertainty_penalty "$WEIGHT" --uncertainty_threshold "$THRESHOLD") ;;
      threshold) terms=(--uncertainty_threshold "$THRESHOLD") ;;
      *) echo "unknown setting '$setting' (none, penalty or threshold)" >&2; exit 2 ;;
    esac
    name=weak_k${K}sh${SHARED}_fit${FIT}_${setting}_s${seed}
    if [[ $setting == penalty ]]; then name=weak_k${K}sh${SHARED}_fit${FIT}_penalty_w${WEIGHT}_s${seed}; fi
    if ls logs/rsl_rl/anymal_c_flat/*_"$name"/eval.json > /dev/null 2>&1; then continue; fi
    flashnerd train --task "$T" --dynamics flashnerd --dynamics_checkpoint "$MODEL" --seed "$seed" \
      --run_name "$name" "${terms[@]}"
  done
done
# every run of this model so far, one row each (the latest run of a name): returns and falls on the model and in MuJoCo
python - "$STEM" logs/rsl_rl/anymal_c_flat "weak_k${K}sh${SHARED}_fit${FIT}_" <<'PY'
import json, pathlib, sys
stem, logs, prefix = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
runs = {}
for run in sorted(logs.glob(f"*_{prefix}*/eval.json")):  # run folders start with their date: the latest comes last
    runs[run.parent.name.split(prefix, 1)[1]] = {"log_dir": str(run.parent), **json.loads(run.read_text())}
pathlib.Path(f"{stem}.runs.json").write_text(json.dumps(runs, indent=1))
print("| run | return on the model | falls on the model | return in MuJoCo | falls in MuJoCo | episode length in MuJoCo |")
print("|---|---|---|---|---|---|")
for name, r in runs.items():
    m, s = r["flashnerd"], r["mujoco"]
    print(f"| {name} | {m['mean_return']:.2f} | {round(m['fall_rate'] * m['episodes'])}/{m['episodes']} | "
          f"{s['mean_return']:.2f} | {round(s['fall_rate'] * s['episodes'])}/{s['episodes']} | "
          f"{s['mean_episode_length_s']:.1f} s |")
PY
