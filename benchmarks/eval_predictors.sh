#!/usr/bin/env bash
# Reproduce the eval-predictor tables of issue 3 on the shared real curves.
# Usage: benchmarks/eval_predictors.sh [OUTDIR]   (default benchmarks/results)
# Needs ../shared/data/curves (beside the project root). Takes a few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${CURVES_DIR:-../shared/data/curves}"
OUT="${1:-benchmarks/results}"
PY="${PYTHON:-.venv/bin/python}"
mkdir -p "$OUT"
run() {  # name file proxy_max split
  echo "== $1: $2, proxies n_params <= $3, split $4"
  "$PY" -m hpo.cli eval-predictor --curves "$DATA/$2" --proxy-max-params "$3" \
    --at 0.1,0.2,0.3 --split "$4" --forms default,paper,empirical --json "$OUT/$1.json" \
    | tee "$OUT/$1.txt"
}
# multipowerlaw: proxies 25M and 100M, targets 400M (train loss only)
run multipowerlaw multipowerlaw.csv.gz 150e6 train
# lr_scheduling: proxies 33M-93M, targets 124M-360M; val loss (smooth) and train loss (per batch)
run lr_scheduling_val lr_scheduling.csv.gz 94e6 val
run lr_scheduling_train lr_scheduling.csv.gz 94e6 train
