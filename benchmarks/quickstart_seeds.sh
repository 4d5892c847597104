#!/usr/bin/env bash
# The residual monitor on the quickstart study at 3 seeds (model init and data order of proxies
# and trials): every stopped trial trained on to its end (--verify), so that each of the 27
# settings has a whole clean curve, and the report's collapse diagnostics of each seed printed:
# how many of the proxies, trials and trained-on trials alert. A study folder already there is
# resumed (nothing finished is trained again).
# Usage: benchmarks/quickstart_seeds.sh [ROOT] [SEEDS...]  (default runs/quickstart_seeds, 0 1 2)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="${1:-runs/quickstart_seeds}"
shift || true
SEEDS=("${@:-0 1 2}")
HPO="${HPO:-.venv/bin/hpo}"
mkdir -p "$ROOT"
for seed in ${SEEDS[@]}; do
  study="$ROOT/seed$seed.yaml"
  # the quickstart with its seed (trials) and its proxies' seed changed; no reference sweep
  sed -e "s/^seed: 0$/seed: $seed/" -e "s/seeds: \[0\]/seeds: [$seed]/" \
      -e "s#^output: .*#output: $ROOT/seed$seed#" -e "/^reference:/d" \
      studies/quickstart.yaml > "$study"
  "$HPO" run "$study" --verify --quiet > "$ROOT/seed$seed.log"
  echo "== seed $seed: $(grep -m1 -E '^[0-9]+ of [0-9]+ runs drift' "$ROOT/seed$seed/report.md")"
  sed -n '/^| run | level band/,/^$/p' "$ROOT/seed$seed/report.md"
done
