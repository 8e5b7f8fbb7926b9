#!/usr/bin/env bash
# Issue 27's generalization check for the Microduck roll: data lineages (roll policies pretrained in MuJoCo from
# DATA_SEEDS) feed `flashnerd improve --restart_from_policy` from the shipped model; evaluation lineages (EVAL_SEEDS,
# kept out of every dataset) are fine-tuned 100 iterations on the final model and on mujoco, evaluated in MuJoCo.
# Each evaluation lineage's pretrained policy is first evaluated on the final model (pretrained_on_model.json: how
# often its roll reproduces there), then fine-tuned.
# Usage: scripts/microduck_lineages.sh [ROUNDS] [FIT_SECONDS]   (OUT the data folder, LOGS the run folder)
# A step whose output exists is skipped, so a stopped run continues where it stopped.
# Data lineages must roll: PPO seeds differ (of seeds 3-12, 3, 4, 9 and 12 learned the roll in 400 iterations, the
# others reached 0-20% success), and a lineage that never rolls shows the model no roll. A data seed whose pretrained
# policy rolls in fewer than MIN_SUCCESS of the training run's own MuJoCo evaluation episodes is left out (evaluation
# seeds are not checked: the comparison takes them as they are).
# START=explore runs the loop from a model fitted on the exploration data alone (EXPLORE_FIT seconds; issue 27's
# "improve from exploration data only"), and then keeps only the exploration data in every refit: the model learns
# each lineage's rolls from the loop's own rollouts. Otherwise the loop starts from the shipped model, and each data
# lineage's pretrained policy with action noise is kept in every refit beside the exploration data.
set -euo pipefail
shopt -s inherit_errexit
ROUNDS=${1:-3}
FIT=${2:-400}
DATA_SEEDS=${DATA_SEEDS:-"9"}
EVAL_SEEDS=${EVAL_SEEDS:-"3 4"}
MIN_SUCCESS=${MIN_SUCCESS:-0.5}
EVAL_BACKENDS=${EVAL_BACKENDS:-mujoco,flashnerd}  # flashnerd alone where the mujoco fine-tunes were measured already
FT_SEEDS=${FT_SEEDS:-1}  # fine-tuning seeds per evaluation lineage and backend
# validations without a lower held-out loss before a refit stops (0: its whole budget); a resumed run keeps its own,
# so another PATIENCE needs another LOGS
PATIENCE=${PATIENCE:-5}
OUT=${OUT:-data/duck_lineages2}
START=${START:-shipped}
[[ $START == shipped || $START == explore ]] || { echo "START must be shipped or explore, not '$START'" >&2; exit 2; }
EXPLORE_FIT=${EXPLORE_FIT:-600}
LOGS=${LOGS:-logs/duck_improve2}
T=FlashNeRD-Roll-Flat-Microduck-v0
RUNS=logs/rsl_rl/microduck_roll
mkdir -p "$OUT"
pretrained() {  # the pretrained policy of seed $1 (trained in MuJoCo when no finished run has it)
  local found
  found=$(ls $RUNS/*_lineage_s"$1"/model_399.pt 2>/dev/null | tail -n 1 || true)
  if [[ -z $found ]]; then
    flashnerd train --task $T --dynamics mujoco --max_iterations 400 --seed "$1" --run_name lineage_s"$1" \
      >/dev/null || return 1
    found=$(ls $RUNS/*_lineage_s"$1"/model_399.pt | tail -n 1) || return 1
  fi
  echo "$found"
}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # resume
[[ -f $OUT/explore.h5 ]] || flashnerd record --robot microduck --num_worlds 256 --steps 1000 --traj_len 100 --seed 0 \
  --out "$OUT/explore.h5" $(resume "$OUT/explore.h5.parts")
rolls() {  # whether the pretrained run of policy $1 rolled in at least MIN_SUCCESS of its MuJoCo evaluation episodes
  local eval_json
  eval_json="$(dirname "$1")/eval.json"
  if [[ ! -f $eval_json ]]; then
    echo "$eval_json missing: train writes it; pretrain that seed again" >&2
    return 1
  fi
  python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["mujoco"]["success_rate"] < float(sys.argv[2]))' \
    "$eval_json" "$MIN_SUCCESS"
}
KEEP=("$OUT/explore.h5") STARTS=()
for S in $DATA_SEEDS; do
  P=$(pretrained "$S")
  if ! rolls "$P"; then
    echo "data seed $S: its policy rolls in fewer than $MIN_SUCCESS of its episodes; left out" >&2
    continue
  fi
  STARTS+=("$P")
  [[ $START == explore ]] && continue
  [[ -f $OUT/policy_s$S.h5 ]] || flashnerd record --task $T --checkpoint "$P" --action_noise 0.5 --num_worlds 256 \
    --steps 1000 --traj_len 100 --seed 1$S --out "$OUT/policy_s$S.h5" $(resume "$OUT/policy_s$S.h5.parts")
  [[ -f $OUT/rolls_s$S.h5 ]] || flashnerd record --task $T --checkpoint "$P" --action_noise 0.5 --num_worlds 2048 \
    --steps 100 --traj_len 100 --seed 2$S --out "$OUT/rolls_s$S.h5" $(resume "$OUT/rolls_s$S.h5.parts")
  KEEP+=("$OUT/policy_s$S.h5" "$OUT/rolls_s$S.h5")
done
[[ ${#STARTS[@]} -gt 0 ]] || { echo "no data seed rolls; pretrain others (DATA_SEEDS)" >&2; exit 1; }
case $START in
  shipped) MODEL0=checkpoints/microduck/flashnerd.safetensors ;;
  explore)
    MODEL0=$OUT/explore_only_fit$EXPLORE_FIT.safetensors
    [[ -s $MODEL0.fit.json ]] || flashnerd fit --data "$OUT/explore.h5" --time_budget "$EXPLORE_FIT" --max_steps 100000 \
      --out "$MODEL0" $(resume "$MODEL0") | tail -n 1 > "$MODEL0.fit.json" ;;
esac
RESUME=(); [[ -f $LOGS/improve.json ]] && RESUME=(--resume)
# 34.1 minutes of MuJoCo time per lineage and round: 1,024 worlds x one 100-step trajectory each
N=${#STARTS[@]}
flashnerd improve --task $T --policy "${STARTS[@]}" --restart_from_policy \
  --dynamics_checkpoint "$MODEL0" --data "${KEEP[@]}" --rounds "$ROUNDS" \
  --iterations 100 --target_minutes "$(awk "BEGIN {print 34.1 * $N}")" --target_worlds 1024 --traj_len 100 \
  --action_noise 0.3 \
  --fit_budget "$FIT" --patience "$PATIENCE" --out_dir "$LOGS" "${RESUME[@]}" | tail -n 1
M=$LOGS/round_$((ROUNDS - 1))/model.safetensors
for S in $EVAL_SEEDS; do
  P=$(pretrained "$S")
  E=$LOGS/eval_round$((ROUNDS - 1))_s$S  # the final model's round in the name: more rounds, a new evaluation
  mkdir -p "$E"
  # before any fine-tuning: does the pretrained policy's roll reproduce on the model? (a roll the model gets wrong
  # is one fine-tuning on it cannot keep; docs/results.md)
  [[ -s $E/pretrained_on_model.json ]] || flashnerd eval --task $T --checkpoint "$P" --dynamics flashnerd \
    --dynamics_checkpoint "$M" --episodes 64 | tail -n 1 > "$E/pretrained_on_model.json"
  [[ -f $E/finetune.json ]] || flashnerd bench finetune --task $T --pretrained "$P" --dynamics "$EVAL_BACKENDS" \
    --dynamics_checkpoint flashnerd="$M" --iterations 100 --seeds "$FT_SEEDS" --out_dir "$E" --name finetune | tail -n 1
done
