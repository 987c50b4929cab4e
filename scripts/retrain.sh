#!/bin/sh
# Daily retraining on live traffic: trains a bundle on the committed dataset
# plus the last days of the proxy's feedback log, checks it against the
# serving bundle on the new run's held-out test split, swaps it in and tells
# the running proxy (SIGHUP). Meant for cron (README "Retraining on
# live traffic"); run from anywhere, it works in the checkout it lives in.
#
#   PRESTROID_MODEL_DIR     the serving bundle (estimator.model)   default /var/lib/prestroid/model
#   PRESTROID_FEEDBACK_DIR  feedback.dir of the proxy               default /var/lib/prestroid/feedback
#   PRESTROID_FEEDBACK_DAYS feedback files modified within N days   default 7
#   PRESTROID_TRAIN_WORKDIR intermediate files                      default /var/lib/prestroid/train
#   PRESTROID_TRAIN_DATA    the base records (space-separated)      default the committed TPC records
#   PRESTROID_TRAIN_FLAGS   model flags                             default those of models/default
#   PRESTROID_GATE          1: also train a cost-anchored network on the same workdir
#                           and gate the two (prestroid ensemble --gate), as
#                           models/default is; 0: the plain network alone  default 1
#   PRESTROID_TARGETS       1: with the gate, add the peak memory and elapsed heads
#                           (prestroid train --steps targets); 0: CPU only  default 1
#   PRESTROID_STATS_SERVER  a coordinator the text stage's table sizes are read from
#                           (prestroid table-stats: SHOW STATS of every table the
#                           records name); empty: a text stage that reads text alone
#                           (a bundle always gets a text stage)       default empty
#   PRESTROID_STATS_USER    the Trino user they are read as          default prestroid-train
#   PRESTROID_MAX_REGRESSION the new bundle may be this much worse (test MSE, relative) default 0.05
#   PRESTROID_RELOAD        the command that makes the proxy reload  default pkill -HUP -f '[p]restroid serve'
#   PRESTROID_BIN           the prestroid binary                    default bin/prestroid
#
# The new bundle replaces the serving one only when its MSE on the test
# split is at most (1 + PRESTROID_MAX_REGRESSION) times the serving bundle's
# on the same queries; otherwise it is kept beside it as MODEL.rejected.
set -eu
cd "$(dirname "$0")/.."
model=${PRESTROID_MODEL_DIR:-/var/lib/prestroid/model}
feedback=${PRESTROID_FEEDBACK_DIR:-/var/lib/prestroid/feedback}
days=${PRESTROID_FEEDBACK_DAYS:-7}
work=${PRESTROID_TRAIN_WORKDIR:-/var/lib/prestroid/train}
data=${PRESTROID_TRAIN_DATA:-data/records/tpc-seed1.jsonl.gz data/records/tpc-sf1-seed1.jsonl.gz}
flags=${PRESTROID_TRAIN_FLAGS:---n 15 --k 47 --c 3 --pf 50 --kernels 32,32,32 --dense 16,8 --lr 1e-3 --epochs 40 --patience 8 --plan-skip --dynamic-filters}
gate=${PRESTROID_GATE:-1}
targets=${PRESTROID_TARGETS:-1}
tolerance=${PRESTROID_MAX_REGRESSION:-0.05}
python=${PRESTROID_PYTHON:-.venv/bin/python}
prestroid=${PRESTROID_BIN:-bin/prestroid}
reload=${PRESTROID_RELOAD:-pkill -HUP -f '[p]restroid serve'}

set --
for f in $data; do set -- "$@" --data "$f"; done
if [ -d "$feedback" ]; then
  for f in $(find "$feedback" -name 'feedback-*.jsonl.gz' -mtime -"$days" | sort); do set -- "$@" --data "$f"; done
fi
echo "retrain: $(($# / 2)) record files" >&2

rm -rf "$model.new" "$model.plain" "$model.anchored"
if [ "$gate" = 1 ]; then
  # the plain network, then a cost-anchored one on the same tensors (its
  # flags: the plain ones without --plan-skip), gated by the plan's size
  # shellcheck disable=SC2086 # flags are words
  "$prestroid" train "$@" $flags --out "$model.plain" --workdir "$work"
  anchored=$(echo " $flags " | sed 's/ --plan-skip / /g')
  # shellcheck disable=SC2086
  "$prestroid" train "$@" $anchored --cost-anchor --scale-free --steps train --out "$model.anchored" --workdir "$work"
  "$prestroid" ensemble --gate --workdir "$work" --out "$model.new" "$model.plain" "$model.anchored"
  rm -rf "$model.plain" "$model.anchored"
else
  # shellcheck disable=SC2086
  "$prestroid" train "$@" $flags --out "$model.new" --workdir "$work"
fi

# the text stage on the same queries, with the sizes of the tables they name
# when a coordinator is given (the serving cache reads the same SHOW STATS)
stats=
if [ -n "${PRESTROID_STATS_SERVER:-}" ]; then
  "$prestroid" table-stats --server "$PRESTROID_STATS_SERVER" --user "${PRESTROID_STATS_USER:-prestroid-train}" \
    --out "$work/table-stats.json" "$@"
  stats="--table-stats $work/table-stats.json"
fi
# shellcheck disable=SC2086
"$prestroid" train "$@" --out "$model.new" --workdir "$work" --steps text --threads 1 --patience 15 $stats
# the peak memory and elapsed heads on the gated graph's trunk (its CPU
# output is checked unchanged), as models/default has them
if [ "$gate" = 1 ] && [ "$targets" = 1 ]; then
  "$prestroid" train "$@" --out "$model.new" --workdir "$work" --steps targets --targets-no-eval --threads 2
fi
# the families the model was trained on and how much wider it errs off them
# (the served interval of a statement of another family is widened by it)
"$prestroid" train "$@" --out "$model.new" --workdir "$work" --steps novelty

# mse BUNDLE DATA-FLAGS...: test MSE of a bundle on the queries of this run's test split
mse() {
  bundle=$1
  shift
  "$prestroid" eval --bundle "$bundle" "$@" --train-workdir "$work" --baselines none \
    --report "$work/eval-$(basename "$bundle")" --workdir "$work/eval-work" --json |
    "$python" -c 'import json, sys; print(json.load(sys.stdin)["models"][0]["mse"])'
}
if [ -f "$model/manifest.json" ]; then
  new=$(mse "$model.new" "$@")
  old=$(mse "$model" "$@")
  echo "retrain: test MSE new $new, serving $old" >&2
  if ! "$python" -c "import sys; sys.exit(0 if $new <= $old * (1 + $tolerance) else 1)"; then
    rm -rf "$model.rejected" && mv "$model.new" "$model.rejected"
    echo "retrain: the new bundle is worse than the serving one; kept as $model.rejected" >&2
    exit 1
  fi
  rm -rf "$model.old" && mv "$model" "$model.old"
fi
mv "$model.new" "$model"
sh -c "$reload" || true
echo "retrain: $(grep -o '"model_id": *"[^"]*"' "$model/manifest.json") serving" >&2
