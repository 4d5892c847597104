#!/usr/bin/env bash
# The issue-4 replays of the 124M LR sweeps of lr_scheduling.csv.gz through a real Optuna study
# and a real local Ray Tune run, on the train and the val loss; tables in benchmarks/results/replay.
# Usage: benchmarks/replays.sh [OUTDIR]   (needs ../shared/data/curves; ~5 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/results/replay}"
PY="${PYTHON:-.venv/bin/python}"
mkdir -p "$OUT"
for split in train val; do
  "$PY" benchmarks/replay_optuna.py --split "$split" | tee "$OUT/optuna_sequential_$split.txt"
  "$PY" benchmarks/replay_optuna.py --split "$split" --parallel --seconds-per-run 2 \
    | tee "$OUT/optuna_parallel_$split.txt"
  "$PY" benchmarks/replay_ray.py --split "$split" 2>/dev/null | grep -v raylet \
    | tee "$OUT/ray_$split.txt"
done
