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
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_sources import SOURCES, load_sources  # noqa: E402

from hpo.bench import fit_proxy_curves  # noqa: E402
from hpo.diagnose import diagnose_run  # noqa: E402
from hpo.predictors import raw_loss_alert, raw_loss_rise, reference_threshold  # noqa: E402
from hpo.predictors.io import runs_from_frame  # noqa: E402
from hpo.predictors.monitor import ALIGN_WINDOW, residual_threshold  # noqa: E402

DRIFT_FROM, DRIFT_BY_END = 0.5, 0.02
CAUGHT_BEFORE = 0.75


def drifted(t_hat: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """The losses with the slow drift of this benchmark injected."""
    ramp = np.clip((t_hat - DRIFT_FROM) / (1 - DRIFT_FROM), 0.0, None)
    return losses * (1 + DRIFT_BY_END * ramp)


def first_over(d, threshold: float) -> float | None:
    """The t^ of the first point after the alignment window whose smoothed residual exceeds
    ``threshold`` in absolute value."""
    over = np.nonzero((np.abs(d.residual) > threshold) & (d.t_hat > ALIGN_WINDOW[1]))[0]
    return float(d.t_hat[over[0]]) if over.size else None


def compare_thresholds(curves: dict, traces: list) -> dict:
    """False alerts and drifts caught under the held-out (product) and in-sample thresholds,
    with and without the widening beyond the proxies: name -> (false proxies, proxies, false
    targets, targets, caught before CAUGHT_BEFORE, clean targets)."""
    insample = {f: residual_threshold([d.max_abs_residual for fam, p, _, d, _ in traces
                                       if p and fam == f]) for f in curves}
    out = {}
    for name in ("held out, widened", "held out", "in-sample, widened", "in-sample"):
        counts = [0, 0, 0, 0, 0, 0]
        for family, proxy, widening, d, bad in traces:
            base = insample[family] if name.startswith("in") else \
                reference_threshold(curves[family])
            th = base * (widening if name.endswith("widened") else 1.0)
            false = first_over(d, th) is not None
            if proxy:
                counts[0] += false
                counts[1] += 1
                continue
            counts[2] += false
            counts[3] += 1
            if not false:
                counts[5] += 1
                hit = first_over(bad, th)
                counts[4] += hit is not None and hit < CAUGHT_BEFORE
        out[name] = tuple(counts)
    return out


def families_of(frame) -> dict[str, str]:
    """Each run's optimizer family ("" for a file of one optimizer, "?" where unnamed)."""
    if "optimizer" not in frame.columns or frame["optimizer"].nunique() < 2:
        return {}
    first = frame.groupby("run_id", sort=False)["optimizer"].first()
    return {rid: "?" if value != value else str(value) for rid, value in first.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="*", default=list(SOURCES))
    parser.add_argument("--split", default="train",
                        help="split monitored where a source has it (Marin: val only)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out: dict = {"drift": {"from": DRIFT_FROM, "by_end": DRIFT_BY_END}, "sources": {}}
    rows = []
    alternatives: dict[str, dict[str, tuple[int, int, int, int, int]]] = {}
    for src in load_sources(args.sources):
        frame = src.frame
        split = args.split if (frame["split"] == args.split).any() else src.split
        families = families_of(frame)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            curves = fit_proxy_curves(frame, src.proxy_max_params, split=split)
            runs = [r for r in runs_from_frame(frame, split=split, min_points=3) if r.complete]
        clean, drift, raw_rise = [], [], []
        traces = []  # (family, proxy, widening, clean trace, drifted trace) for the alternatives
        for run in runs:
            family = families.get(run.run_id, "")
            curve = curves.get(family)
            if curve is None:
                continue
            proxy = run.controls.n_params is not None and \
                run.controls.n_params <= src.proxy_max_params
            d = diagnose_run(run, curve)
            if d.max_abs_residual is None:
                continue  # no point after the alignment window, or controls it cannot predict
            clean.append((run.run_id, proxy, d.alert_t, d.max_abs_residual, d.threshold))
            raw_rise.append(raw_loss_rise(run.t_hat, run.losses))
            widening = d.threshold / reference_threshold(curve)
            if proxy:
                traces.append((family, True, widening, d, None))
                continue
            bad = replace(run, losses=drifted(run.t_hat, run.losses))
            d_bad = diagnose_run(bad, curve)
            drift.append((run.run_id, d.alert_t, d_bad.alert_t, bad.t_hat, bad.losses))
            traces.append((family, False, widening, d, d_bad))
        alternatives[src.name] = compare_thresholds(curves, traces)
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
            "clean_runs": len(clean), "drifted_runs": len(drift),
            # the runs that alerted: clean ones (false alerts) and drifted ones (caught)
            "false_alerts": {rid: a for rid, _, a, _, _ in clean if a is not None},
            "drift_alerts": {rid: {"alert_t": a, "raw_alert_t": r}
                             for (rid, _, a, _, _), r in zip(drift, raw_t, strict=True)
                             if a is not None or r is not None},
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
        n_drift = out["sources"][name]["drifted_runs"]
        print(f"| {name} | {split} | {shown} | {100 * wide[0]:.2f}-{100 * wide[1]:.2f} | {fpx} "
              f"of {npx} | {ftg} of {ntg} | {nearly} of {nct} | {med:.2f} | {100 * x:.2f} | "
              f"{raw} of {n_drift} |")
    print("\nOther thresholds on the same residuals: held out (the product's) or in-sample "
          "(1.25 x the largest residual of a proxy against the full curve), each with and "
          "without the widening beyond the proxies.\n")
    print("| source | threshold | false alerts: proxies | false alerts: targets | drift caught "
          "< 0.75 (of clean targets) |")
    print("|---|---|---|---|---|")
    for name, variants in alternatives.items():
        for variant, (fp, np_, ft, nt, caught, nc) in variants.items():
            print(f"| {name} | {variant} | {fp} of {np_} | {ft} of {nt} | {caught} of {nc} |")
    out["alternatives"] = {name: {v: dict(zip(("false_proxies", "proxies", "false_targets",
                                                "targets", "caught", "clean_targets"), c,
                                               strict=True)) for v, c in variants.items()}
                           for name, variants in alternatives.items()}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
