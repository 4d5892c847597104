#!/usr/bin/env bash
# The per-source prediction table of the four shared sources, every method, and the
# leave-one-source-out choice of the default's settings.
# Usage: benchmarks/corpus.sh [OUTDIR]   (default benchmarks/results/corpus)
# Needs ../shared/data/curves. Each source's targets are capped at a seeded sample: MAX_TARGETS
# (default 60) for the table of every method, CHOICE_TARGETS (default 200) for the candidates of
# the default's settings (the tables say "N of M targets evaluated"). About 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${CURVES_DIR:-../shared/data/curves}"
OUT="${1:-benchmarks/results/corpus}"
PY="${PYTHON:-.venv/bin/python}"
N="${MAX_TARGETS:-60}"
NC="${CHOICE_TARGETS:-200}"
mkdir -p "$OUT"
# the candidates of each choice (raw intervals), then the leave-one-source-out rows
"$PY" benchmarks/corpus_candidates.py "$OUT/candidates.json" --max-targets "$NC" \
  > "$OUT/candidates.txt"
"$PY" benchmarks/choose_default.py "$OUT/candidates.json" | tee "$OUT/choose_default.txt"
# proxies: each source's runs of at most ~100M parameters (Marin's smallest runs are 130M);
# lr_scheduling on its val loss, Marin's only split is val
"$PY" -m hpo eval-predictor \
  "$DATA/lr_scheduling.csv.gz" "$DATA/multipowerlaw.csv.gz" "$DATA/nanochat.csv.gz" \
    "$DATA/marin.csv.gz" \
  --proxy-max-params 94e6 150e6 100e6 150e6 --split val train train val \
  --at 0.1,0.2,0.3 --max-targets "$N" --json "$OUT/corpus.json" | tee "$OUT/corpus.txt"
