#!/usr/bin/env bash
# hpo bench on the four shared sources, recorded groups and resampled sub-sweeps, lockstep and
# sequential, beside every peer; and the self-calibrating mode (no proxies: the pruner fits its
# curve on each study's finished trials) on every source (the CPU sweep for the CPU ones). Usage: benchmarks/bench_sources.sh [OUT_DIR] [extra bench args]
# (default OUT_DIR: benchmarks/results/bench). Ray Tune rows on lr_scheduling's recorded groups;
# the other runs pass --no-ray (a Ray replay of hundreds of sub-sweeps takes hours on 2 cores).
# ONLY="nanochat marin_resampled" runs only the tables named (e.g. to split the work over cores).
# Each source is replayed with the pair prior fitted without it (benchmarks/pair_prior.py writes
# PRIOR_DIR/without_<source>.json; default PRIOR_DIR: benchmarks/results/prior).
set -euo pipefail
out=${1:-benchmarks/results/bench}
shift || true
curves=${CURVES_DIR:-../shared/data/curves}
hpo=${HPO:-hpo}
priors=${PRIOR_DIR:-benchmarks/results/prior}
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
bench() {  # name, then bench arguments
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  echo "== $name: hpo bench $*" >&2
  $hpo bench --quiet --json "$out/$name.json" "$@" > "$out/$name.txt"
}
lr="$curves/lr_scheduling.csv.gz --proxy-max-params 94e6 --split val --prior $priors/without_lr_scheduling.json"
mpl="$curves/multipowerlaw.csv.gz --proxy-max-params 1.5e8 --group-col n_params,total_steps --min-trials 2 --prior $priors/without_multipowerlaw.json"
nc="$curves/nanochat.csv.gz --proxy-max-params 1e8 --min-trials 4 --max-groups 12 --prior $priors/without_nanochat.json"
mr="$curves/marin.csv.gz --proxy-max-params 1.5e8 --split val --min-trials 4 --max-groups 12 --prior $priors/without_marin.json"
bench lr_scheduling $lr "$@"
bench lr_scheduling_resampled $lr --resample 6 --no-ray "$@"
bench multipowerlaw $mpl --no-ray "$@"
bench multipowerlaw_resampled $mpl --resample 6 --no-ray "$@"
bench nanochat $nc --no-ray "$@"
bench nanochat_resampled $nc --resample 4 --no-ray "$@"
bench marin $mr --no-ray "$@"
bench marin_resampled $mr --resample 4 --no-ray "$@"
bench lr_scheduling_selfcal $curves/lr_scheduling.csv.gz --split val --prior $priors/without_lr_scheduling.json --no-ray "$@"
bench nanochat_selfcal $curves/nanochat.csv.gz --min-trials 4 --max-groups 12 --prior $priors/without_nanochat.json --no-ray "$@"
bench multipowerlaw_selfcal $curves/multipowerlaw.csv.gz --group-col n_params,total_steps --min-trials 2 --prior $priors/without_multipowerlaw.json --no-ray "$@"
bench marin_selfcal $curves/marin.csv.gz --split val --min-trials 4 --max-groups 12 --prior $priors/without_marin.json --no-ray "$@"
bench cpu_sweep_selfcal benchmarks/data/cpu_sweep.csv.gz --prior $priors/without_cpu.json --no-ray "$@"
