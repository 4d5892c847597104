"""Held-out evaluation of final-loss predictors on curve-format data (``hpo eval-predictor``).

Runs with ``n_params <= proxy_max_params`` are proxies: the universal curve is fitted (and the
collapse predictor calibrated, leave-one-out) on them only, and every peer's interval is
calibrated on their prefixes. Every other run with a complete curve is a target: truncated at each
fraction, its final loss predicted by every method and compared with the truth (the end of the
full curve, :func:`~predictors.normalize.final_loss_estimate` at t^ = 1).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from predictors.curves import fit_universal_curve, normalized_run, outside_ranges
from predictors.io import RunCurve, runs_from_frame
from predictors.normalize import final_loss_estimate
from predictors.peers import AnnealingLawPredictor, LastValuePredictor, PowerLawEnsemblePredictor
from predictors.predict import CollapsePredictor, FinalLossPredictor, calibrate_predictor

__all__ = ["evaluate_predictors", "summarize_errors", "CURVE_MAE_GRID"]

#: t^ grid of the normalized-curve MAE (paper: t^ in [0.2, 1])
CURVE_MAE_GRID = np.round(np.linspace(0.2, 1.0, 81), 6)


def summarize_errors(
    rel_errors: Sequence[float], covered: Sequence[bool], curve_maes: Sequence[float]
) -> dict[str, Any]:
    """Median / mean / max absolute relative error, coverage, mean curve MAE and n."""
    e = np.abs(np.asarray(rel_errors, dtype=float))
    maes = np.asarray([m for m in curve_maes if m is not None and np.isfinite(m)], dtype=float)
    if e.size == 0:
        return {"median_abs_rel_err": None, "mean_abs_rel_err": None, "max_abs_rel_err": None,
                "coverage": None, "curve_mae": None, "n": 0}
    return {
        "median_abs_rel_err": float(np.median(e)),
        "mean_abs_rel_err": float(np.mean(e)),
        "max_abs_rel_err": float(np.max(e)),
        "coverage": float(np.mean(np.asarray(covered, dtype=bool))),
        "curve_mae": float(np.mean(maes)) if maes.size else None,
        "n": int(e.size),
    }


def _method_set(
    proxies: list[RunCurve],
    level: float,
    forms: Sequence[str],
    peers: bool | Sequence[str],
    fractions: Sequence[float],
):
    methods: dict[str, FinalLossPredictor] = {}
    curves = {}
    for form in forms:
        curve = fit_universal_curve(proxies, form=form)
        curves[form] = curve
        name = "collapse" if form == "default" else f"collapse_{form}"
        methods[name] = CollapsePredictor(curve, level=level)
    all_peers = (LastValuePredictor(level=level), PowerLawEnsemblePredictor(level=level),
                 AnnealingLawPredictor(level=level))
    wanted = {p.name for p in all_peers} if peers is True else set(peers or ())
    for peer in (p for p in all_peers if p.name in wanted):
        # peers learn nothing from other runs: calibrate them at the fractions evaluated
        calibrate_predictor(peer, proxies, sorted(set(fractions)))
        methods[peer.name] = peer
    return methods, curves


def evaluate_predictors(
    df: pd.DataFrame,
    proxy_max_params: float,
    fractions: Sequence[float] = (0.1, 0.2, 0.3),
    split: str = "train",
    level: float = 0.8,
    forms: Sequence[str] = ("default", "paper", "empirical"),
    fraction_labels: Sequence[str] | None = None,
    peers: bool | Sequence[str] = True,
) -> dict[str, Any]:
    """Evaluate every method on held-out targets; the result has the JSON shape of the CLI.

    ``{"methods": {name: {label: {median_abs_rel_err, mean_abs_rel_err, max_abs_rel_err,
    coverage, curve_mae, n}}}, "targets": [...], "proxies": [...], "notes": [...],
    "per_target": [...]}``. ``forms``: universal-curve forms to evaluate with the collapse
    predictor ("default" is reported as ``collapse``, others as ``collapse_<form>``);
    ``peers``: also evaluate the peers (``True``: last_value, power_law_ensemble and
    annealing_law; or a list of those names).
    """
    labels = (
        list(fraction_labels) if fraction_labels is not None else [f"{f:g}" for f in fractions]
    )
    runs = runs_from_frame(df, split=split, min_points=1)
    if not runs:
        raise ValueError(f"no run has points in split {split!r}")
    notes: list[str] = []
    no_n = [r.run_id for r in runs if r.controls.n_params is None]
    if no_n:
        notes.append(f"{len(no_n)} run(s) without n_params treated as targets")
    proxies = [r for r in runs if r.controls.n_params is not None
               and r.controls.n_params <= proxy_max_params and r.complete]
    targets = [r for r in runs if not (r.controls.n_params is not None
                                       and r.controls.n_params <= proxy_max_params)]
    incomplete = [r.run_id for r in targets if not r.complete]
    if incomplete:
        notes.append(f"{len(incomplete)} target run(s) without a complete curve skipped")
    targets = [r for r in targets if r.complete]
    if len(proxies) < 1:
        raise ValueError(f"no complete proxy run with n_params <= {proxy_max_params:g}")
    if not targets:
        raise ValueError(f"no complete target run with n_params > {proxy_max_params:g}")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        methods, curves = _method_set(proxies, level, forms, peers, fractions)
    fit_seconds = time.perf_counter() - t0
    default_curve = curves[forms[0]]
    notes.extend(default_curve.notes)
    if any(r.controls.tau is None for r in runs):
        notes.append("tau unknown for some runs (weight_decay or peak_lr missing)")
    if any(r.controls.tpp is None for r in runs):
        notes.append("TPP unknown for some runs (tokens or n_params missing)")

    acc = {m: {lab: ([], [], []) for lab in labels} for m in methods}
    # the default method again, split by whether the target's shape controls lie inside the
    # proxies' ranges (extrapolating in tau or TPP is where the curve has no data)
    by_range = {k: {lab: ([], [], []) for lab in labels} for k in ("inside", "outside")}
    default_name = "collapse" if "collapse" in methods else next(iter(methods))
    per_target = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for run in targets:
            true = final_loss_estimate(run.t_hat, run.losses, at=1.0)
            true_curve = normalized_run(run, CURVE_MAE_GRID)
            outside = outside_ranges(default_curve.ranges, run.controls, ("tau", "tpp"))
            row: dict[str, Any] = {"run_id": run.run_id, "true_final": true,
                                   "outside_ranges": outside}
            for f, lab in zip(fractions, labels, strict=False):
                keep = run.t_hat <= f + 1e-9
                steps, losses = run.steps[keep], run.losses[keep]
                for name, pred in methods.items():
                    try:
                        p = pred.predict(steps, losses, run.controls)
                    except ValueError:
                        row[f"{name}@{lab}"] = None
                        continue
                    rel = p.final / true - 1
                    cov = p.lower <= true <= p.upper
                    mae = None
                    try:
                        c = pred.predict_curve(steps, losses, run.controls, CURVE_MAE_GRID)
                    except ValueError:
                        c = None
                    if c is not None:
                        ok = np.isfinite(true_curve) & np.isfinite(c)
                        if ok.any():
                            mae = float(np.mean(np.abs(c[ok] - true_curve[ok])))
                    acc[name][lab][0].append(rel)
                    acc[name][lab][1].append(cov)
                    acc[name][lab][2].append(mae)
                    if name == default_name:
                        part = by_range["outside" if outside else "inside"][lab]
                        part[0].append(rel)
                        part[1].append(cov)
                        part[2].append(mae)
                    row[f"{name}@{lab}"] = rel
            per_target.append(row)
    out = {
        "methods": {m: {lab: summarize_errors(*acc[m][lab]) for lab in labels} for m in methods},
        "default_method": "collapse",
        "split": split,
        "level": level,
        "proxy_max_params": proxy_max_params,
        "proxies": [r.run_id for r in proxies],
        "targets": [r.run_id for r in targets],
        "curve": default_curve.to_dict()["form"],
        "fit_seconds": fit_seconds,
        "notes": notes,
        "per_target": per_target,
        "by_range": {
            "method": default_name,
            "controls": ["tau", "tpp"],
            **{k: {lab: summarize_errors(*v[lab]) for lab in labels}
               for k, v in by_range.items()},
        },
    }
    return out


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table of :func:`evaluate_predictors` output (percentages)."""

    def pct(x: float | None) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}"

    lines = [
        f"{'method':<22} {'at':>5} {'n':>3} {'med|err|%':>9} {'mean|err|%':>10} "
        f"{'max|err|%':>9} {'cover%':>7} {'curveMAE%':>9}"
    ]
    rows = list(result["methods"].items())
    split = result.get("by_range")
    if split and any(s["n"] for s in split.get("outside", {}).values()):
        # the default method on targets inside / outside the proxies' tau and TPP ranges
        rows += [(f"{split['method']}[in range]", split["inside"]),
                 (f"{split['method']}[outside]", split["outside"])]
    for name, by_frac in rows:
        for lab, s in by_frac.items():
            lines.append(
                f"{name:<22} {lab:>5} {s['n']:>3} {pct(s['median_abs_rel_err']):>9} "
                f"{pct(s['mean_abs_rel_err']):>10} {pct(s['max_abs_rel_err']):>9} "
                f"{pct(s['coverage']):>7} {pct(s['curve_mae']):>9}"
            )
    return "\n".join(lines)
