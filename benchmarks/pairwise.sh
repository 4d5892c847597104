#!/usr/bin/env bash
# Within-sweep pairwise accuracy of every predictor on the four shared sources: order accuracy
# on pairs of one sweep more than 0.2% apart, the median within-sweep Spearman, the error of the
# predicted log ratio of two finals and its interval's coverage, at t^ 0.1/0.2/0.3, with the raw
# loss (last_value) beside. Usage: benchmarks/pairwise.sh [OUTDIR] (default
# benchmarks/results/pairwise). MAX_TARGETS (default 200) caps each source's seeded sample of
# targets. Needs ../shared/data/curves.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${CURVES_DIR:-../shared/data/curves}"
OUT="${1:-benchmarks/results/pairwise}"
PY="${PYTHON:-.venv/bin/python}"
N="${MAX_TARGETS:-200}"
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
"$PY" -m hpo eval-predictor \
  "$DATA/lr_scheduling.csv.gz" "$DATA/multipowerlaw.csv.gz" "$DATA/nanochat.csv.gz" \
    "$DATA/marin.csv.gz" \
  --proxy-max-params 94e6 150e6 100e6 150e6 --split val train train val \
  --at 0.1,0.2,0.3 --max-targets "$N" --json "$OUT/pairwise.json" > "$OUT/pairwise.txt"
