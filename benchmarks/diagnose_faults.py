"""Collapse diagnostics on a CPU family: how early the residual alert and the raw-loss rule
catch each injected fault, and whether either alerts on clean seeds.

The family is the one of ``benchmarks/collapse_family.py`` (CompleteP, depth 2, context 64,
squared ReLU, base width 32, TPP 80, tau 0.2, linear decay, batch 2048 tokens). The reference
is the universal curve fitted on the proxies (width 32, seeds 0-2, calibrated as ``hpo run``
does: its residual threshold comes from them). Targets are width 48: clean seeds 0-4, and seed 0
with each fault of ``hpo train --inject`` at t^ = 0.5 (data-repeat at 0.4), ``--jobs`` runs at
once (``benchmarks/_cpu_sweep.py``). Curves already present are reused, so a rerun only
analyses.

The residual alert is the product's rule (``hpo.predictors.monitor``: the level or the jump
beyond k times the run's own noise plus the family's misfit allowance); the raw-loss rule stops
when the smoothed loss rises x above its running minimum, with the smallest x without a false
alert on every clean run (proxies and clean targets), the most favourable x it could have.
"Remaining" is 1 - t^ at the alert (0 where nothing fired). The jump band is its median over
the run (it follows the run's noise). The last table is the rule at other k (``--sigmas``), the
allowances measured again at each k on the same held-out proxy traces.

    python benchmarks/diagnose_faults.py --out-dir benchmarks/results/diagnose/cpu \
        --json benchmarks/results/diagnose/faults.json > benchmarks/results/diagnose/faults.txt
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._cpu_sweep import train_runs  # noqa: E402
from benchmarks.diagnose_drift import fit_with_traces  # noqa: E402

FAULTS = ("lr-spike@0.5", "data-repeat@0.4", "grad-noise@0.5", "precision@0.5", "restart@0.5")


def _run(out: Path, width: int, seed: int, args: argparse.Namespace,
         inject: str | None = None) -> tuple[Path, dict[str, object]]:
    """One run of the family: its curve file and ``hpo train``'s flags."""
    return out, {"width": width, "depth": 2, "heads": 4, "context": 64, "activation": "relu2",
                 "base_width": 32, "tpp": args.tpp, "tau": 0.2, "lr": 0.01,
                 "batch_tokens": 2048, "schedule": "linear", "warmup": 0.05, "seed": seed,
                 "eval_every": 1000000, "run_id": out.name.removesuffix(".csv.gz"),
                 "group": f"w{width}", "inject": inject}


def _t3(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/diagnose/cpu"))
    parser.add_argument("--tpp", type=float, default=80.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--sigmas", nargs="*", type=float, default=[2.5, 3.0, 3.5, 4.0, 5.0],
                        help="values of k (BAND_SIGMAS) to compare")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once (default: 1)")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    root = args.out_dir
    runs = [_run(root / f"w32_s{s}.csv.gz", 32, s, args) for s in range(3)]
    runs += [_run(root / f"w48_s{s}.csv.gz", 48, s, args) for s in range(5)]
    runs += [_run(root / f"w48_s0_{f.replace('@', '_')}.csv.gz", 48, 0, args, f) for f in FAULTS]
    paths = train_runs(runs, args.jobs, echo=True)
    proxies, clean = paths[:3], paths[3:8]
    faulty = dict(zip(FAULTS, paths[8:], strict=True))

    from hpo.diagnose import clean_raw_x, diagnose_runs
    from hpo.predictors import (
        fit_universal_curve,
        raw_loss_alert,
        read_curves,
        reference_band,
        runs_from_frame,
    )
    from hpo.predictors.monitor import BAND_SIGMAS, calibrate_monitor

    def runs_of(paths: list[Path]) -> list:
        return runs_from_frame(read_curves(paths), split="train")

    # the held-out proxies' traces give the allowances again at each k of the last table
    curve, traces = fit_with_traces(lambda: fit_universal_curve(runs_of(proxies)))
    proxy_runs, clean_runs = runs_of(proxies), runs_of(clean)
    fault_runs = runs_of(list(faulty.values()))
    x = clean_raw_x(proxy_runs + clean_runs)
    band = reference_band(curve)
    assert band is not None
    rows, out = [], {"band": vars(band), "band_sigmas": BAND_SIGMAS, "raw_rule_x": x,
                     "runs": {}}
    for kind, group in (("proxy", proxy_runs), ("clean", clean_runs), ("fault", fault_runs)):
        for run, d in zip(group, diagnose_runs(group, curve), strict=True):
            raw = raw_loss_alert(run.t_hat, run.losses, x)
            jb = d.jump_band[np.isfinite(d.jump_band)]
            rows.append((kind, run.run_id, d, float(np.median(jb)) if jb.size else None, raw))
            out["runs"][run.run_id] = {"role": kind, **d.to_dict(trace=False),
                                       "raw_alert_t": raw}
    print(f"Reference: the universal curve of {len(proxy_runs)} proxies (width 32, TPP "
          f"{args.tpp:g}); k = {BAND_SIGMAS:g}, proxies' noise {100 * band.noise:.2f}%, misfit "
          f"allowances {100 * band.level:.2f}% (level) and {100 * band.jump:.2f}% (jump); raw "
          f"rule x = {100 * x:.2f}% (the smallest without a false alert on the clean runs).\n")
    print("| run | role | level band | jump band | max abs residual | residual alert t^ "
          "| raw-rule alert t^ | remaining at residual / raw alert |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, rid, d, jb, raw in rows:
        rem_a = 0.0 if d.alert_t is None else 1 - d.alert_t
        rem_r = 0.0 if raw is None else 1 - raw
        alert = "-" if d.alert_t is None else f"{d.alert_t:.3f} ({d.alert_kind})"
        jump = "-" if jb is None else f"{100 * jb:.2f}%"
        print(f"| {rid} | {kind} | {100 * d.threshold:.2f}% | {jump} | "
              f"{100 * d.max_abs_residual:.2f}% | {alert} | {_t3(raw)} | "
              f"{rem_a:.3f} / {rem_r:.3f} |")
    # the same runs under other values of k (the proxies' allowances measured again at each)
    print("\nOther k (first alert t^; false alerts on the proxies and clean seeds):\n")
    print("| k | false alerts | " + " | ".join(r.run_id.removeprefix("w48_s0_")
                                            for r in fault_runs) + " |")
    print("|---|---|" + "---|" * len(fault_runs))
    out["by_k"] = {}
    for k in args.sigmas:
        curve_k = copy.copy(curve)
        curve_k.calibration = {**curve.calibration,
                               "monitor": calibrate_monitor(traces, band_sigmas=k)}
        false = sum(d.alert_t is not None for d in diagnose_runs(proxy_runs + clean_runs,
                                                                 curve_k, band_sigmas=k))
        alerts = [d.alert_t for d in diagnose_runs(fault_runs, curve_k, band_sigmas=k)]
        out["by_k"][f"{k:g}"] = {"false_alerts": false, "alerts": alerts}
        print(f"| {k:g} | {false} | " + " | ".join(_t3(a) for a in alerts) + " |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
