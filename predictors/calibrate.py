"""Fitting a universal curve on proxy runs and calibrating the final-loss predictor on them.

:func:`fit_universal_curve` fits a curve form on the proxies and, by default, calibrates it
(:func:`calibrate_curve`): the collapse predictor predicts each proxy from its prefixes with the
curve refitted without that proxy's fold, and the signed log errors become the curve's
``calibration``, from which intervals (:func:`~hpo.predictors.predict.halfwidth_from_errors`) and
the pair law of one sweep's predictions (:func:`hpo.predictors.pairs.fit_proxy_pair_scale`) are
measured. The
same held-out fits give the residual monitor's misfit allowances (``calibration["monitor"]``,
:func:`~hpo.predictors.monitor.calibrate_monitor`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from hpo.predictors.curves import (
    _FORMS,
    DEFAULT_FORM,
    HybridCurve,
    UniversalCurve,
    _as_runs,
    _usable,
)
from hpo.predictors.io import RunCurve
from hpo.predictors.monitor import calibrate_monitor, held_out_trace, planned
from hpo.predictors.normalize import final_loss_estimate
from hpo.predictors.predict import (
    MIN_POINTS,
    PREDICTOR_CANDIDATES,
    CollapsePredictor,
    FinalLossPredictor,
    alignment_window,
    collapse_final,
    despike,
)

__all__ = [
    "fit_universal_curve",
    "calibrate_curve",
    "calibrate_predictor",
    "prefix_errors",
    "cal_folds",
    "CAL_FOLDS",
    "CAL_FRACTIONS",
]

#: the number of folds of the cross-fitted calibration (:func:`calibrate_curve`)
CAL_FOLDS = 10
#: prefix fractions at which calibration errors are measured
CAL_FRACTIONS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def fit_universal_curve(
    runs: pd.DataFrame | Sequence[RunCurve] | Sequence[pd.DataFrame],
    form: str = "default",
    calibrate: bool = True,
    **options: Any,
) -> UniversalCurve:
    """Fit a universal curve of ``form`` ("default" = ``DEFAULT_FORM``) on proxy runs.

    ``runs``: a curve-format DataFrame (the ``train`` split is used: a frame without train rows
    raises ``ValueError`` naming the splits it has, see :func:`~predictors.io.require_split`),
    a list of per-run frames (likewise), or a list of :class:`~predictors.io.RunCurve` (any
    split, e.g. ``runs_from_frame(frame, split="val")``). With ``calibrate`` the
    leave-one-out errors of the collapse predictor on the proxies are stored in
    ``curve.calibration`` (needs at least 3 proxies; skipped with a note otherwise).
    ``options`` go to the form's constructor (the empirical and hybrid forms' ``twin_width``
    and ``size_trend``, both off by default: ``benchmarks/results/twin/README.md``); an
    option the form does not take is a ``TypeError``.
    """
    name = DEFAULT_FORM if form == "default" else form
    if name not in _FORMS:
        raise ValueError(f"unknown curve form {form!r}; choose from default, {', '.join(_FORMS)}")
    run_list = _usable(_as_runs(runs))
    curve = _FORMS[name](**options).fit(run_list)
    if calibrate:
        calibrate_curve(curve, run_list)
    return curve


def prefix_errors(
    predictor: FinalLossPredictor,
    run: RunCurve,
    fractions: Sequence[float] = CAL_FRACTIONS,
) -> list[float | None]:
    """Signed log errors log(pred / true) of ``predictor`` on prefixes of a complete ``run``.

    The truth is :func:`~predictors.normalize.final_loss_estimate` of the whole curve at t^ = 1.
    ``None`` where the predictor cannot predict.
    """
    true = final_loss_estimate(run.t_hat, run.losses, at=1.0)
    out: list[float | None] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in fractions:
            keep = run.t_hat <= f + 1e-9
            try:
                pred = predictor.predict(run.steps[keep], run.losses[keep], run.controls)
            except ValueError:
                out.append(None)
                continue
            out.append(math.log(pred.final / true))
    return out


def calibrate_predictor(
    predictor: FinalLossPredictor,
    runs: Sequence[RunCurve],
    fractions: Sequence[float] = CAL_FRACTIONS,
) -> dict[str, Any]:
    """Calibration (signed log errors per fraction) of a predictor that learns nothing from
    other runs, measured on ``runs``; stored on the predictor and returned."""
    errors = [prefix_errors(predictor, r, fractions) for r in runs if r.complete]
    cal = {
        "fractions": list(fractions),
        "errors": [[e[i] for e in errors] for i in range(len(fractions))],
        "method": "proxies",
    }
    predictor.calibration = cal
    return cal


def _choose(
    errors: Sequence[list[list[float | None]]], fractions: Sequence[float]
) -> tuple[int, list[float]]:
    """Index of the candidate with the smallest median |error| over prefixes of 10-30 %."""
    early = [i for i, f in enumerate(fractions) if 0.1 - 1e-9 <= f <= 0.3 + 1e-9]
    early = early or list(range(len(fractions)))
    n_cand = len(errors[0]) if errors else len(PREDICTOR_CANDIDATES)
    scores = []
    for ci in range(n_cand):
        errs = [abs(e[ci][i]) for e in errors for i in early if e[ci][i] is not None]
        scores.append(float(np.median(errs)) if errs else float("inf"))
    return int(np.argmin(scores)), scores


def _candidate_errors(
    curve: UniversalCurve,
    run: RunCurve,
    fractions: Sequence[float],
    candidates: Sequence[dict[str, Any]],
    t_floor: float,
) -> list[list[float | None]]:
    """Signed log errors of the collapse predictor with each candidate setting on prefixes of
    a complete run (what :func:`prefix_errors` gives, with lhat evaluated once per run)."""
    true = final_loss_estimate(run.t_hat, run.losses, at=1.0)
    t, v = run.t_hat, run.losses
    out: list[list[float | None]] = [[None] * len(fractions) for _ in candidates]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lhat_all = curve.predict(t, run.controls)
    except ValueError:
        return out
    warm = (run.controls.warmup_steps or 0.0) / run.controls.total_steps
    twin = curve.twin_weight(run.controls)
    for i, f in enumerate(fractions):
        n = int(np.sum(t <= f + 1e-9))
        # the predictor's own rule: at least MIN_POINTS points after the warmup
        if int(np.sum((t[:n] >= t_floor) & (t[:n] > warm))) < MIN_POINTS:
            continue
        vn = despike(v[:n])  # as the predictor sees the prefix
        for ci, c in enumerate(candidates):
            try:
                sel = alignment_window(t[:n], c["align_from"], t_floor,
                                       CollapsePredictor.min_points)
                pred = collapse_final(vn[sel], lhat_all[:n][sel], c["stretch"], twin)
            except ValueError:
                continue
            out[ci][i] = math.log(pred / true)
    return out


def calibrate_curve(
    curve: UniversalCurve,
    runs: Sequence[RunCurve],
    fractions: Sequence[float] = CAL_FRACTIONS,
    t_floor: float = 0.02,
) -> dict[str, Any] | None:
    """Leave-one-out calibration of the collapse predictor on the proxies ``runs``.

    For each proxy, the curve's form is refitted on the other proxies and the collapse
    predictor predicts the left-out run from each prefix fraction, with every setting of
    ``PREDICTOR_CANDIDATES``; the setting with the smallest median error over prefixes of
    10-30 % is kept (``calibration["predictor"]``; one setting for all prefixes, since choosing
    per fraction was noisier). Its signed log errors, together with those of predicting each
    proxy size from the other sizes (when the held-out fit can still estimate the curve's size
    term, :func:`_sizes_needed`), are stored in ``calibration["errors"]``; each proxy's own
    leave-one-out errors in ``calibration["runs"]`` (run id, group, n_params, total_steps,
    errors per fraction), from which :func:`~hpo.predictors.pairs.fit_proxy_pair_scale`
    measures the error of the predicted log ratio of two runs of one sweep.
    ``calibration["monitor"]`` holds the residual monitor's band, from each proxy's level and
    jump against its refits and against the curve itself
    (:func:`~hpo.predictors.monitor.calibrate_monitor`; for a hybrid curve, the
    leave-one-schedule-group-out refits give the allowances of new schedules).

    For a hybrid curve the two paths are calibrated apart: runs whose schedule a proxy ran
    (left-out runs that the refit still matches) give ``predictor`` and ``errors``; runs whose
    schedule no proxy ran (each schedule group predicted from the others, plus left-out runs
    left without a match) give ``predictor_transfer`` and ``errors_transfer``. Needs at least 3
    runs; otherwise the calibration stays ``None`` and a note is added.
    """
    if len(runs) < 3:
        curve.notes.append("calibration skipped: fewer than 3 proxy runs")
        curve.calibration = None
        return None
    hybrid = isinstance(curve, HybridCurve)
    fits: list[tuple[RunCurve, UniversalCurve, bool]] = []  # (held-out run, its refit, matched)
    loo = _held_out(curve, runs, cal_folds(runs), fractions, t_floor, fits)
    sizes = [r.controls.n_params for r in runs]
    size_out = None not in sizes and len(set(sizes)) >= _sizes_needed(curve)
    by_size = _held_out(curve, runs, sizes, fractions, t_floor, fits) if size_out else []
    # each proxy's schedule group in the full curve
    emp = _empirical_part(curve)
    groups = emp._groups().tolist() if emp is not None and hybrid else []
    by_group = (_held_out(curve, runs, groups, fractions, t_floor, fits)
                if hybrid and len(set(groups)) > 1 else [])
    matched = [e for e, m, _ in loo if m] or [e for e, _, _ in loo]
    best, scores = _choose(matched, fractions)
    errors = [e[best] for e in matched] + [e[best] for e, m, _ in by_size if m]
    method = "leave-one-out on proxies" + (" and leave-one-size-out" if by_size else "")
    curve.calibration = {
        "fractions": list(fractions),
        "errors": _transpose(errors, len(fractions)),
        "method": method,
        "predictor": _predictor_choice(best, scores, len(fractions)),
        # per proxy, its leave-one-out errors with the chosen setting (runs whose schedule the
        # refit still matched): what the pruner's pair law is measured on
        "runs": [_proxy_errors(r, e[best]) for e, m, r in loo if m],
    }
    curve.calibration["monitor"] = _monitor_band(curve, runs, fits, hybrid)
    if hybrid:
        new_schedule = [e for e, _, _ in by_group] + [e for e, m, _ in loo if not m]
        _calibrate_transfer(curve, new_schedule, fractions)
    return curve.calibration


#: one held-out prediction: (errors of every candidate per fraction, matched, the run)
_HeldOut = tuple[list[list[float | None]], bool, RunCurve]


def _held_out(
    curve: UniversalCurve,
    runs: Sequence[RunCurve],
    labels: Sequence[Any],
    fractions: Sequence[float],
    t_floor: float,
    fits: list[tuple[RunCurve, UniversalCurve, bool]],
) -> list[_HeldOut]:
    """Each run's errors with every candidate setting (:func:`_candidate_errors`), from a fit
    of ``curve``'s form without every run sharing its label; ``matched``: the refit still has
    a proxy with the run's schedule (always, for a curve that is not hybrid). Each
    ``(run, refit, matched)`` is appended to ``fits``; a label whose refit fails is left
    out."""
    hybrid = isinstance(curve, HybridCurve)
    out = []
    for lab in sorted(set(labels)):
        sub = _refit(curve, [r for r, g in zip(runs, labels, strict=True) if g != lab])
        if sub is None:
            continue
        for r, g in zip(runs, labels, strict=True):
            if g != lab:
                continue
            errs = _candidate_errors(sub, r, fractions, PREDICTOR_CANDIDATES, t_floor)
            matched = not hybrid or sub.empirical.matches(r.controls).size > 0
            out.append((errs, matched, r))
            fits.append((r, sub, matched))
    return out


def _refit(curve: UniversalCurve, subset: list[RunCurve]) -> UniversalCurve | None:
    """``curve``'s form fitted on ``subset``; ``None`` where that fit fails."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return curve.blank().fit(subset)
    except ValueError:
        return None


def _transpose(rows: list[list[float | None]], n: int) -> list[list[float | None]]:
    """Per-run rows of ``n`` errors as ``n`` per-fraction lists."""
    return [[e[i] for e in rows] for i in range(n)]


def _predictor_choice(best: int, scores: list[float], n: int) -> dict[str, Any]:
    """The calibration's record of the candidate setting kept for all ``n`` fractions."""
    return {"candidates": [dict(c) for c in PREDICTOR_CANDIDATES], "choice": [best] * n,
            "loo_median_abs_err_10_30": scores}


def _proxy_errors(run: RunCurve, errors: list[float | None]) -> dict[str, Any]:
    """One proxy's entry of ``calibration["runs"]``: its controls and held-out errors."""
    c = run.controls
    return {"run_id": run.run_id, "group": run.group, "n_params": c.n_params,
            "total_steps": c.total_steps, "tpp": c.tpp, "tau": c.tau,
            "errors": [None if x is None else round(float(x), 7) for x in errors]}


def _monitor_band(
    curve: UniversalCurve,
    runs: Sequence[RunCurve],
    fits: list[tuple[RunCurve, UniversalCurve, bool]],
    hybrid: bool,
) -> dict[str, Any]:
    """The residual monitor's band: each proxy's residual against every refit without it
    (loo, by size and by schedule group) and against the curve itself, apart by whether that
    curve ran its schedule."""
    own = [(r, curve, not hybrid or curve.empirical.matches(planned(r.controls)).size > 0)
           for r in runs]
    return calibrate_monitor(
        (held_out_trace(c, r.controls, r.steps, r.losses), m) for r, c, m in fits + own)


def _calibrate_transfer(
    curve: UniversalCurve, new_schedule: list[list[list[float | None]]],
    fractions: Sequence[float],
) -> None:
    """A hybrid curve's calibration for runs whose schedule no proxy ran, from the errors of
    ``new_schedule`` runs (each schedule group predicted from the others, and left-out runs
    left without a match); with one schedule group, a note instead."""
    if not new_schedule:
        curve.notes.append(
            "one schedule group among the proxies: runs with a new schedule use the "
            "leave-one-out calibration, whose intervals are likely too narrow"
        )
        return
    best_t, scores_t = _choose(new_schedule, fractions)
    curve.calibration["errors_transfer"] = _transpose(
        [e[best_t] for e in new_schedule], len(fractions))
    curve.calibration["predictor_transfer"] = _predictor_choice(best_t, scores_t,
                                                                len(fractions))
    curve.calibration["method"] += "; leave-one-schedule-group-out for new schedules"


def cal_folds(runs: Sequence[RunCurve], k: int = CAL_FOLDS) -> list[int]:
    """The fold of each proxy in the cross-fitted calibration: whole sweep groups (the curve
    format's ``group``: one size, horizon and schedule) are held out together, dealt into at
    most ``k`` folds, so that a proxy is predicted by a fit that has not seen its setting, as a
    target is; runs without a group, and every run where all share one group, are folds of
    their own. At most ``k`` refits: the cost grows linearly with the number of proxies."""
    keys = [r.group if r.group is not None else f"run:{r.run_id}" for r in runs]
    if len(set(keys)) < 2:  # one sweep group: nothing to hold out but single runs
        keys = [f"run:{r.run_id}" for r in runs]
    order = {g: i for i, g in enumerate(sorted(set(keys)))}
    n = min(len(order), k)
    return [order[g] % n for g in keys]


def _sizes_needed(curve: Any) -> int:
    """How many proxy sizes leave-one-size-out calibration needs: 3 when the curve's shape
    has a size term (log n_params, used where TPP is unknown), so that the held-out fit still
    estimates it as the fit that predicts a target does; else 2."""
    emp = _empirical_part(curve)
    return 3 if emp is not None and "log_n_params" in getattr(emp, "covariates", []) else 2


def _empirical_part(curve: Any) -> Any | None:
    """The empirical curve inside ``curve`` (a hybrid's, or the curve itself), else None."""
    if getattr(curve, "form", "") == "empirical":
        return curve
    return getattr(curve, "empirical", None)
