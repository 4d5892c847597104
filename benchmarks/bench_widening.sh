#!/usr/bin/env bash
# The candidates of the pair law's extrapolation widening K (predictors.predict.PAIR_WIDENING;
# the default's tables are benchmarks/bench_sources.sh's): hpo bench on the four shared sources'
# recorded groups with K set, lockstep and sequential, the threshold frontier and the shadow
# replay. Usage: benchmarks/bench_widening.sh K [OUT_DIR] (default
# benchmarks/results/bench/widening_K). About 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
k=$1
out=${2:-benchmarks/results/bench/widening_$k}
curves=${CURVES_DIR:-../shared/data/curves}
py=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
bench() {  # name, then bench arguments
  local name=$1; shift
  "$py" benchmarks/pair_widening.py "$k" bench --quiet --no-ray --no-knobs \
    --json "$out/$name.json" "$@" > "$out/$name.txt"
}
bench lr_scheduling --curves "$curves/lr_scheduling.csv.gz" --proxy-max-params 94e6 --split val
bench multipowerlaw --curves "$curves/multipowerlaw.csv.gz" --proxy-max-params 1.5e8 \
  --group-col n_params,total_steps --min-trials 2
bench nanochat --curves "$curves/nanochat.csv.gz" --proxy-max-params 1e8 --min-trials 4 \
  --max-groups 12
bench marin --curves "$curves/marin.csv.gz" --proxy-max-params 1.5e8 --split val \
  --min-trials 4 --max-groups 12
