"""How far the issue-6 compute goal is from what the bench's curves allow, beside the budget.

Two tables, for each curve file of the bench's tables and the same groups (the same
``--resample`` draws as the resampled tables, seed 0, or the recorded groups with
``--resample 0``). No method is replayed; it takes under a minute.

1. Sequential mode. A rule decides on a trial from that trial and the ones before it, so a
   trial better than every earlier one by more than the allowed regret (0.2%, the goal's max)
   must finish: a sweep could end with it (``hpo.bench.sequential_floor``). Columns: the
   budget (every loser stopped at t^ = 0.2), oracle@0.2 (the true finals known at t^ = 0.2,
   judged one by one), the floor at 0.2% and at zero regret, and the groups whose floor
   exceeds their own budget. Where the floor is above the budget no method meets the goal.
2. Lockstep mode, at the accuracy of our predictor: the universal curve, fitted on the
   proxies only. At each checkpoint, the error of the predicted log-ratio of two target
   trials of one group, |e_i - e_j| with e = log(prediction / final): median, 90th
   percentile and largest over every pair of the file's recorded groups; and the share of
   the losers whose true gap to their group's best, log(L_loser / L_best), is below the 90th
   percentile and below the largest. Meeting the lockstep budget means stopping the losers
   by t^ = 0.2 on average; a rule that trusts a predictor only as far as its errors go cannot
   stop a loser whose gap is within them without risking the best. This is about our
   predictor, not a bound on every rule.

    .venv/bin/python benchmarks/goal_bounds.py [--resample K] [--shared ../shared]
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hpo import bench  # noqa: E402

# (label, path relative to the repo root or the shared folder, group columns, proxy max
# params, min trials, split, resampled sub-sweeps per group as in the committed tables)
TABLES = [
    ("multipowerlaw", "shared:data/curves/multipowerlaw.csv.gz", ("n_params", "total_steps"),
     1.5e8, 2, "train", 6),
    ("lr_scheduling", "shared:data/curves/lr_scheduling.csv.gz", ("group",), 1e8, 3, "train",
     6),
    ("lr_scheduling val", "shared:data/curves/lr_scheduling.csv.gz", ("group",), 1e8, 3,
     "val", 6),
    ("CPU sweep", "benchmarks/data/cpu_sweep.csv.gz", ("group",), 3e4, 3, "train", 20),
    ("CPU sweep val", "benchmarks/data/cpu_sweep.csv.gz", ("group",), 3e4, 3, "val", 20),
    ("CPU w64", "benchmarks/data/cpu_sweep_w64.csv.gz", ("group",), 1e5, 3, "train", 20),
    ("CPU w64 val", "benchmarks/data/cpu_sweep_w64.csv.gz", ("group",), 1e5, 3, "val", 20),
]
# judged at these fractions, as the bench's collapse default
CHECKPOINTS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--resample", type=int, default=None,
                    help="sub-sweeps per group (default: as in the committed resampled tables; "
                         "0: the recorded groups)")
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"),
                    help="the shared folder (data/curves)")
    args = ap.parse_args(argv)
    from hpo.predictors import read_curves

    loaded = []
    for label, rel, cols, pmax, min_trials, split, k in TABLES:
        path = (Path(args.shared) / rel.split(":", 1)[1] if rel.startswith("shared:")
                else ROOT / rel)
        if not path.exists():
            print(f"{label:<20} (no {path})")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frame = read_curves(path)
            recorded = bench.load_groups(frame, cols, pmax, min_trials, 200, CHECKPOINTS,
                                          "file", split)
        k = k if args.resample is None else args.resample
        groups = bench.resample_groups(recorded, k, seed=0) if k else recorded
        loaded.append((label, frame, pmax, split, recorded, groups))

    print("sequential mode: the least compute of any rule with max regret 0.2% (0)")
    print(f"{'table':<20} {'groups':>6} {'budget':>7} {'oracle@0.2':>10} {'floor 0.2%':>10} "
          f"{'floor 0':>8} {'groups floor > budget':>22}")
    for label, _, _, _, _, groups in loaded:
        budgets = np.array([bench.budget(g) for g in groups])
        floors = np.array([bench.sequential_floor(g) for g in groups])
        strict = np.array([bench.sequential_floor(g, slack=0.0) for g in groups])
        oracle = np.mean([bench.group_metrics(g, bench.replay_oracle(g, 0.2, "sequential"))
                          .compute for g in groups])
        print(f"{label:<20} {len(groups):>6} {budgets.mean():>7.3f} {oracle:>10.3f} "
              f"{floors.mean():>10.3f} {strict.mean():>8.3f} "
              f"{int((floors > budgets + 1e-12).sum()):>13} of {len(groups):<4}")

    print("\nlockstep mode: the universal curve's pair errors (log) on the targets, and the "
          "losers it cannot separate")
    print(f"{'table':<20} {'t^':>4} {'pairs':>5} {'median':>7} {'p90':>6} "
          f"{'max':>6} {'losers < p90':>12} {'losers < max':>12}")
    for label, frame, pmax, split, recorded, _ in loaded:
        gaps = np.array([math.log(t.final / g.trials[g.best].final) for g in recorded
                         for i, t in enumerate(g.trials) if i != g.best])
        errors = _target_errors(frame, pmax, split, recorded)
        for j, c in enumerate(CHECKPOINTS):
            pe = np.array([abs(a[j] - b[j]) for es in errors.values()
                           for x, a in enumerate(es) for b in es[x + 1:]
                           if math.isfinite(a[j]) and math.isfinite(b[j])])
            if c in (0.1, 0.2, 0.3, 0.5) and pe.size:
                print(f"{label:<20} {c:>4g} {pe.size:>5} {np.median(pe):>7.3f} "
                      f"{np.quantile(pe, 0.9):>6.3f} {pe.max():>6.3f} "
                      f"{np.mean(gaps < np.quantile(pe, 0.9)):>11.0%} "
                      f"{np.mean(gaps < pe.max()):>11.0%}")
    return 0


def _target_errors(frame: Any, pmax: float, split: str,
                   groups: list[bench.BenchGroup]) -> dict[str, list[list[float]]]:
    """Group name -> per trial, log(prediction / final) at each checkpoint (NaN where the
    predictor gave none), from the bench's universal curve fitted on the proxies only."""
    from hpo.predictors import CollapsePredictor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curves = bench.fit_proxy_curves(frame, pmax, split, {g.family for g in groups})
        out = {}
        for g in groups:
            model = CollapsePredictor(bench.curve_for(curves, g), level=0.8)
            rows = []
            for t in g.trials:
                row = []
                for c in CHECKPOINTS:
                    m = t.steps <= c * t.total_steps
                    try:
                        value = float(model.predict(t.steps[m], t.values[m], t.controls).final)
                    except ValueError:
                        value = math.nan
                    row.append(math.log(value / t.final) if value > 0 else math.nan)
                rows.append(row)
            out[g.name] = rows
    return out

if __name__ == "__main__":
    raise SystemExit(main())
