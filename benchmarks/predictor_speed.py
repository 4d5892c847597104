"""Cost of fitting the universal curve (with its calibration) and of one prediction.

    .venv/bin/python benchmarks/predictor_speed.py [--sizes 100,200,400,1000]

Fits the default curve with calibration on the first N of Marin's 130M runs (every optimizer,
eval loss: a family archive of many short curves) and prints the seconds per fit and per proxy,
so that the scaling in N shows; then times ``CollapsePredictor.predict`` on a 1000-point prefix
(a lr_scheduling val curve interpolated onto 5000 logged steps, cut at t^ 0.2). Run it alone:
two CPU-heavy jobs at once on a small machine slow both.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._sources import curves_dir  # noqa: E402
from hpo.predictors import CollapsePredictor, fit_universal_curve, read_curves  # noqa: E402
from hpo.predictors.io import runs_from_frame  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="100,200,400,1000")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    warnings.simplefilter("ignore")
    marin = read_curves(curves_dir() / "marin.csv.gz")
    runs = [r for r in runs_from_frame(marin, split="val")
            if r.controls.n_params <= 1.5e8 and r.complete]
    print(f"fit_universal_curve(calibrate=True) on N of {len(runs)} Marin 130M runs")
    print(f"{'N':>6} {'seconds':>8} {'ms per proxy':>13}")
    curve = None
    for n in sizes:
        if n > len(runs):
            print(f"{n:>6} (only {len(runs)} runs)")
            continue
        t0 = time.perf_counter()
        curve = fit_universal_curve(runs[:n])
        dt = time.perf_counter() - t0
        print(f"{n:>6} {dt:>8.1f} {1e3 * dt / n:>13.1f}", flush=True)

    lrs = read_curves(curves_dir() / "lr_scheduling.csv.gz")
    all_runs = runs_from_frame(lrs, split="val")
    proxies = [r for r in all_runs if r.controls.n_params <= 94e6 and r.complete]
    target = next(r for r in all_runs if r.controls.n_params > 94e6 and r.complete)
    curve = fit_universal_curve(proxies)
    steps = np.linspace(1, target.controls.total_steps, 5000)
    losses = np.interp(steps, target.steps, target.losses)
    keep = steps <= 0.2 * target.controls.total_steps
    steps, losses = steps[keep][:1000], losses[keep][:1000]
    pred = CollapsePredictor(curve)
    pred.predict(steps, losses, target.controls)  # warm up
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        pred.predict(steps, losses, target.controls)
    ms = 1e3 * (time.perf_counter() - t0) / reps
    print(f"CollapsePredictor.predict on a {steps.size}-point prefix: {ms:.1f} ms "
          f"(mean of {reps})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
