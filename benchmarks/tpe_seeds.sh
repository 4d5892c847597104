#!/usr/bin/env bash
# The drop-in case as a standing bench: benchmarks/optuna_charlm.py (a TPE study of 20 trials
# on the product's CPU model) at three sampler seeds, the arms no pruner (shadow),
# MedianPruner, self-calibrating collapse, collapse on a proxy curve, and self-calibrating
# collapse whose stopped trials hand their predicted final to TPE; then one table of every
# arm's steps, best and regret per seed, the best found against the steps trained and where
# each arm's settings concentrate (benchmarks/tpe_summary.py).
# Usage: benchmarks/tpe_seeds.sh [OUT_DIR] (default benchmarks/results/optuna_charlm/seeds)
set -euo pipefail
out=${1:-benchmarks/results/optuna_charlm/seeds}
py=${PYTHON:-.venv/bin/python}
for seed in 0 1 2; do
  $py benchmarks/optuna_charlm.py "$out/seed$seed" --seed "$seed" \
    --arms shadow,median,collapse,collapse_reference,collapse_predicted > /dev/null
done
$py benchmarks/tpe_summary.py "$out" > "$out/README.md"
