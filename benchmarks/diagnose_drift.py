"""The residual monitor on the shared real curves: no alert on clean runs, and a slow drift
caught before the raw loss shows it.

For each source, the reference is the universal curve fitted (and calibrated: its residual
threshold) on the source's proxies (``corpus_sources.SOURCES``; per optimizer family where a file
mixes several). Every complete run of the source, proxies and targets, is monitored clean; then
each clean target is monitored again with a slow drift injected into its recorded losses: from
t^ = 0.5 the loss is multiplied by 1 + 0.02 (t^ - 0.5) / 0.5 (+2% by the end, while the raw loss
still falls). The raw-loss rule (smoothed loss more than x above its running minimum) is given
the smallest x without a false alert on the source's clean runs.

    python benchmarks/diagnose_drift.py --json benchmarks/results/diagnose/drift.json \
        > benchmarks/results/diagnose/drift.txt
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_sources import SOURCES, load_sources  # noqa: E402

from hpo.bench import fit_proxy_curves  # noqa: E402
from hpo.predictors import (  # noqa: E402
    ResidualMonitor,
    raw_loss_alert,
    raw_loss_rise,
    reference_threshold,
)
from hpo.predictors.io import runs_from_frame  # noqa: E402

DRIFT_FROM, DRIFT_BY_END = 0.5, 0.02
CAUGHT_BEFORE = 0.75


def drifted(t_hat: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """The losses with the slow drift of this benchmark injected."""
    ramp = np.clip((t_hat - DRIFT_FROM) / (1 - DRIFT_FROM), 0.0, None)
    return losses * (1 + DRIFT_BY_END * ramp)


def family_of(frame, run_id: str, mixed: bool) -> str:
    if not mixed:
        return ""
    value = frame.loc[frame["run_id"] == run_id, "optimizer"].iloc[0]
    return "?" if value != value else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="*", default=list(SOURCES))
    parser.add_argument("--split", default="train",
                        help="split monitored where a source has it (Marin: val only)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out: dict = {"drift": {"from": DRIFT_FROM, "by_end": DRIFT_BY_END}, "sources": {}}
    rows = []
    for src in load_sources(args.sources):
        frame = src.frame
        split = args.split if (frame["split"] == args.split).any() else src.split
        mixed = "optimizer" in frame.columns and frame["optimizer"].nunique() > 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            curves = fit_proxy_curves(frame, src.proxy_max_params, split=split)
            runs = [r for r in runs_from_frame(frame, split=split, min_points=3) if r.complete]
        clean, drift, raw_rise = [], [], []
        for run in runs:
            family = family_of(frame, run.run_id, mixed)
            curve = curves.get(family)
            if curve is None:
                continue
            proxy = run.controls.n_params is not None and \
                run.controls.n_params <= src.proxy_max_params
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mon = ResidualMonitor(curve, run.controls)
                    mon.run(run.steps, run.losses)
            except ValueError:
                continue  # controls the curve cannot predict (no schedule)
            if mon.state.l_final is None:
                continue  # no point after the alignment window
            clean.append((run.run_id, proxy, mon.state.alert_t, mon.state.max_abs_residual,
                          mon.threshold))
            raw_rise.append(raw_loss_rise(run.t_hat, run.losses))
            if proxy:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dmon = ResidualMonitor(curve, run.controls)
                dmon.run(run.steps, drifted(run.t_hat, run.losses))
            drift.append((run.run_id, mon.state.alert_t, dmon.state.alert_t,
                          run.t_hat, drifted(run.t_hat, run.losses)))
        x = float(np.max(raw_rise)) if raw_rise else math.nan
        # the raw rule at the smallest x with no false alert on the clean runs
        raw_t = [raw_loss_alert(t, v, x) for _, _, _, t, v in drift]
        clean_targets = [d for d in drift if d[1] is None]
        caught = [d[2] for d in clean_targets]
        n_proxy = sum(1 for c in clean if c[1])
        false_proxy = sum(1 for c in clean if c[1] and c[2] is not None)
        false_target = sum(1 for c in clean if not c[1] and c[2] is not None)
        base = sorted({round(reference_threshold(c), 6) for c in curves.values()
                       if reference_threshold(c) is not None})
        widened = [c[4] for c in clean if not c[1]] or [math.nan]
        early = [c for c in caught if c is not None and c < CAUGHT_BEFORE]
        med = float(np.median([c if c is not None else math.inf for c in caught])) \
            if caught else math.nan
        rows.append((src.name, split, base, (min(widened), max(widened)), n_proxy, false_proxy,
                     len(clean) - n_proxy, false_target, len(clean_targets), len(early), med,
                     x, sum(1 for r in raw_t if r is not None and r < CAUGHT_BEFORE)))
        out["sources"][src.name] = {
            "split": split, "thresholds": base, "raw_rule_x": x,
            "clean": {rid: {"proxy": p, "alert_t": a, "max_abs_residual": round(m, 6)}
                      for rid, p, a, m, _ in clean},
            "drift": {rid: {"alert_t": a, "raw_alert_t": r}
                      for (rid, _, a, _, _), r in zip(drift, raw_t, strict=True)},
        }
    print(f"Drift +{100 * DRIFT_BY_END:g}% by the end from t^ {DRIFT_FROM}; caught means an "
          f"alert before t^ {CAUGHT_BEFORE}.\n")
    print("| source | split | threshold % (families) | on targets, widened % | clean proxies: "
          "false alerts | clean targets: false alerts | drift caught < 0.75 (of clean targets) "
          "| median alert t^ | raw rule x % | raw rule caught < 0.75 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (name, split, base, wide, npx, fpx, ntg, ftg, nct, nearly, med, x, raw) in rows:
        shown = f"{100 * base[0]:.2f}" if len(base) == 1 else \
            f"{100 * base[0]:.2f}-{100 * base[-1]:.2f} ({len(base)})"
        n_drift = len(out["sources"][name]["drift"])
        print(f"| {name} | {split} | {shown} | {100 * wide[0]:.2f}-{100 * wide[1]:.2f} | {fpx} "
              f"of {npx} | {ftg} of {ntg} | {nearly} of {nct} | {med:.2f} | {100 * x:.2f} | "
              f"{raw} of {n_drift} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
