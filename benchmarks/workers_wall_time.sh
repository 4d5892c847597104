#!/usr/bin/env bash
# Wall time of the quickstart study with --workers 1 and --workers 2, one after the other in one
# run (fresh output folders, so each trains its own proxies). Run it alone.
# Usage: benchmarks/workers_wall_time.sh [OUT]   (default benchmarks/results/workers.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/results/workers.txt}"
HPO="${HPO:-.venv/bin/hpo}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
{
  echo "quickstart wall time, $(nproc) cores, $(date -u +%F)"
  echo "workers  seconds  finished trials  best"
  for n in 1 2; do
    t0=$(date +%s.%N)
    "$HPO" run studies/quickstart.yaml --output "$TMP/w$n" --workers "$n" --quiet --no-report \
      > "$TMP/w$n.log"
    t1=$(date +%s.%N)
    trials=$(grep -o "trials: .*" "$TMP/w$n.log" | head -1)
    best=$(grep -o "best: trial .*" "$TMP/w$n.log" | head -1)
    printf "%7d  %7.0f  %s  %s\n" "$n" "$(echo "$t1 - $t0" | bc)" "$trials" "$best"
  done
} | tee "$OUT"
