"""Held-out evaluation of final-loss predictors on curve-format data (``hpo eval-predictor``).

A *source* is one curve file (one lab's runs). Within a source, runs with ``n_params <=
proxy_max_params`` are proxies: every method is fitted and calibrated on them only. Every other
run with a complete curve is a target: truncated at each prefix fraction, its final loss is
predicted by every method and compared with the truth (the end of the full curve,
:func:`~predictors.normalize.final_loss_estimate` at t^ = 1). Where a file mixes optimizers
(an ``optimizer`` column with several values), each optimizer is a family of its own: a
target's proxies are the smaller runs of its optimizer (collapse is a statement about one
recipe). A method that declines a target (``ValueError``) is counted as declined, with its
reason, never as an error of 100%.

:func:`evaluate_sources` evaluates several sources apart and adds the median over sources of
each method's summary: a method that is good on one file and poor on the others shows it.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hpo.predictors.calibrate import calibrate_predictor, fit_universal_curve
from hpo.predictors.chosen import ChosenPredictor
from hpo.predictors.curves import control_ranges, normalized_run
from hpo.predictors.io import RunCurve, require_split, runs_from_frame
from hpo.predictors.normalize import final_loss_estimate
from hpo.predictors.pairs import PairErrorLaw
from hpo.predictors.peers import (
    AnnealingLawPredictor,
    LastValuePredictor,
    PowerLawEnsemblePredictor,
    TwinPredictor,
)
from hpo.predictors.predict import (
    LEVEL,
    CollapsePredictor,
    FinalLossPredictor,
    extrapolation,
)
from hpo.predictors.shift import SHIFT_SD, SHIFT_TAU, study_shift

__all__ = [
    "Source",
    "evaluate_predictors",
    "evaluate_sources",
    "summarize_errors",
    "default_methods",
    "format_table",
    "format_sources",
    "format_pairwise",
    "pairwise_summary",
    "PAIR_MIN_GAP",
    "CURVE_MAE_GRID",
    "PEERS",
    "CHOSEN_CANDIDATES",
    "candidate_makers",
]

#: t^ grid of the normalized-curve MAE (paper: t^ in [0.2, 1])
CURVE_MAE_GRID = np.round(np.linspace(0.2, 1.0, 81), 6)
#: the peers every evaluation runs beside the collapse predictor
PEERS = ("last_value", "power_law_ensemble", "annealing_law", "twin")

#: a method: builds a fitted predictor from a family's proxies and the fractions evaluated
MethodFactory = Callable[[list[RunCurve], Sequence[float], float], FinalLossPredictor]


@dataclass(frozen=True)
class Source:
    """One source of the corpus: its curve frame, proxy threshold and split."""

    name: str
    frame: pd.DataFrame
    proxy_max_params: float
    split: str = "train"


def summarize_errors(
    rel_errors: Sequence[float],
    covered: Sequence[bool],
    curve_maes: Sequence[float | None] = (),
    declined: int = 0,
) -> dict[str, Any]:
    """Median / mean / max absolute relative error, coverage, mean curve MAE, n and the number
    of targets the method declined."""
    e = np.abs(np.asarray(rel_errors, dtype=float))
    maes = np.asarray([m for m in curve_maes if m is not None and np.isfinite(m)], dtype=float)
    if e.size == 0:
        return {"median_abs_rel_err": None, "mean_abs_rel_err": None, "max_abs_rel_err": None,
                "coverage": None, "curve_mae": None, "n": 0, "declined": int(declined)}
    return {
        "median_abs_rel_err": float(np.median(e)),
        "mean_abs_rel_err": float(np.mean(e)),
        "max_abs_rel_err": float(np.max(e)),
        "coverage": float(np.mean(np.asarray(covered, dtype=bool))),
        "curve_mae": float(np.mean(maes)) if maes.size else None,
        "n": int(e.size),
        "declined": int(declined),
    }


def _collapse(form: str) -> MethodFactory:
    def make(proxies: list[RunCurve], fractions: Sequence[float], level: float):
        return CollapsePredictor(fit_universal_curve(proxies, form=form), level=level)
    return make


#: a peer's interval is calibrated on a seeded sample of at most this many proxies
PEER_CALIBRATION_RUNS = 100


def _peer(cls: type[FinalLossPredictor]) -> MethodFactory:
    def make(proxies: list[RunCurve], fractions: Sequence[float], level: float):
        peer = cls(level=level)
        # peers learn nothing from other runs: calibrate them at the fractions evaluated, on
        # a sample of the proxies (each calibration point is a per-curve fit)
        sample = _sample(proxies, PEER_CALIBRATION_RUNS, seed=0)
        calibrate_predictor(peer, sample, sorted(set(fractions)))
        return peer
    return make


def _twin(proxies: list[RunCurve], fractions: Sequence[float], level: float):
    twin = TwinPredictor(proxies, level=level)
    twin.calibrate(sorted(set(fractions)))
    return twin


#: the twin term's width of the ``collapse_twin_term`` candidate (the width chosen with the CPU
#: sweeps held out, ``benchmarks/results/twin/``)
TWIN_TERM_WIDTH = 0.2
#: the candidates of the ``chosen`` method (:class:`~hpo.predictors.chosen.ChosenPredictor`):
#: the pooled curve, the curve with the twin term and the size trend, the twin, and the
#: per-curve laws
CHOSEN_CANDIDATES = ("collapse", "collapse_twin_term", "twin", "power_law_ensemble",
                     "annealing_law")


def candidate_makers() -> dict[str, MethodFactory]:
    """How each of :data:`CHOSEN_CANDIDATES` is fitted on a family's proxies."""
    return {
        "collapse": _collapse("default"),
        "collapse_twin_term": lambda p, f, lv: CollapsePredictor(
            fit_universal_curve(p, twin_width=TWIN_TERM_WIDTH, size_trend=True), level=lv),
        "twin": _twin,
        "power_law_ensemble": _peer(PowerLawEnsemblePredictor),
        "annealing_law": _peer(AnnealingLawPredictor),
    }


def _chosen(proxies: list[RunCurve], fractions: Sequence[float], level: float):
    """The predictor the proxies' held-out errors favour among :data:`CHOSEN_CANDIDATES`."""
    makers = candidate_makers()
    candidates = {}
    for name in CHOSEN_CANDIDATES:
        try:
            candidates[name] = makers[name](proxies, fractions, level)
        except ValueError:  # a candidate that cannot be fitted on these proxies does not rank
            continue
    return ChosenPredictor(candidates, level=level)


def default_methods(
    forms: Sequence[str] = ("default",), peers: bool | Sequence[str] = True
) -> dict[str, MethodFactory]:
    """The methods :func:`evaluate_predictors` runs: the collapse predictor with each curve
    ``form`` ("default" is reported as ``collapse``, others as ``collapse_<form>``) and the
    peers (``True``: all of :data:`PEERS`, or a list of their names; ``"chosen"`` also names
    the candidate the proxies' held-out errors favour, :func:`_chosen`)."""
    methods: dict[str, MethodFactory] = {}
    for form in forms:
        methods["collapse" if form == "default" else f"collapse_{form}"] = _collapse(form)
    factories = {c.name: _peer(c) for c in (LastValuePredictor, PowerLawEnsemblePredictor,
                                            AnnealingLawPredictor)}
    factories[TwinPredictor.name] = _twin
    factories[ChosenPredictor.name] = _chosen
    wanted = PEERS if peers is True else tuple(peers or ())
    for name in wanted:
        if name not in factories:
            raise ValueError(f"unknown peer {name!r}; choose from {', '.join(factories)}")
        methods[name] = factories[name]
    return methods


def _families(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The frame split by ``optimizer`` where it names several; else one family."""
    if "optimizer" in df.columns and df["optimizer"].nunique(dropna=True) > 1:
        opt = df["optimizer"].fillna("?").astype(str)
        return {name: part for name, part in df.groupby(opt, sort=True)}
    return {"": df}


def _sample(runs: list[RunCurve], n: int | None, seed: int) -> list[RunCurve]:
    if n is None or len(runs) <= n:
        return runs
    rng = np.random.default_rng(seed)
    keep = set(rng.choice(len(runs), size=n, replace=False).tolist())
    return [r for i, r in enumerate(runs) if i in keep]


def evaluate_predictors(
    df: pd.DataFrame,
    proxy_max_params: float,
    fractions: Sequence[float] = (0.1, 0.2, 0.3),
    split: str = "train",
    level: float = LEVEL,
    forms: Sequence[str] = ("default",),
    fraction_labels: Sequence[str] | None = None,
    peers: bool | Sequence[str] = True,
    methods: Mapping[str, MethodFactory] | None = None,
    max_targets: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Evaluate every method on one source's held-out targets (the JSON shape of the CLI).

    ``{"methods": {name: {label: {median_abs_rel_err, mean_abs_rel_err, max_abs_rel_err,
    coverage, curve_mae, n, declined, default_median_same_targets}}}, "declined": {name:
    {label: {reason: count}}}, "targets": [...], "proxies": [...], "families": {...},
    "notes": [...], "per_target": [...]}``. ``default_median_same_targets`` is the first
    method's median error on the targets the method predicts. Each ``per_target`` row holds
    the target's ``extrapolation`` beyond its family's proxies
    (:func:`~predictors.predict.extrapolation`) and, per method and label, the signed log error
    ``log(pred / true)`` and the interval's log half-width ``half`` (or the ``declined``
    reason). ``methods`` replaces the methods built from ``forms`` and ``peers``
    (:func:`default_methods`); ``max_targets`` evaluates a seeded random sample of that many
    targets (the rest are not predicted).
    """
    labels = (
        list(fraction_labels) if fraction_labels is not None else [f"{f:g}" for f in fractions]
    )
    if methods is None:
        methods = default_methods(forms, peers)
    family_proxies, targets, notes = _proxies_and_targets(
        df, proxy_max_params, split, max_targets, seed)
    tally = _Tally.empty(methods, labels)
    per_target: list[dict[str, Any]] = []
    fitted_notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for family in sorted({f for f, _ in targets}):
            fitted = _fit_family(methods, family_proxies[family], fractions, level, tally,
                                 fitted_notes)
            ranges = control_ranges(family_proxies[family])
            per_target += [_predict_target(run, family, fitted, fractions, labels, ranges, tally)
                           for fam, run in targets if fam == family]
    proxies = [r for family in family_proxies.values() for r in family]
    notes += fitted_notes + _unknown_control_notes([r for _, r in targets] + proxies)
    summaries = tally.summaries()
    default = next(iter(methods))
    for name, by in summaries.items():
        for lab, summary in by.items():
            summary["default_median_same_targets"] = (
                summary["median_abs_rel_err"] if name == default
                else _median_on_same_targets(per_target, default, name, lab))
    return {
        "methods": summaries,
        "declined": {m: {lab: dict(c) for lab, c in by.items()}
                     for m, by in tally.declined.items()},
        "default_method": next(iter(methods)),
        "split": split,
        "level": level,
        "proxy_max_params": proxy_max_params,
        "families": {f: len(p) for f, p in family_proxies.items()},
        "proxies": [r.run_id for r in proxies],
        "targets": [r.run_id for _, r in targets],
        "fit_seconds": tally.fit_seconds,
        "predict_ms": 1e3 * tally.predict_seconds / max(tally.n_predictions, 1),
        "notes": notes,
        "per_target": per_target,
        "shifted": shifted_summary(per_target, list(methods), labels),
        "pairwise": pairwise_summary(per_target, list(methods), labels, level=level),
    }


def shifted_summary(
    per_target: Sequence[Mapping[str, Any]], methods: Sequence[str], labels: Sequence[str],
    tau: float = SHIFT_TAU, sd: float = SHIFT_SD,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Each method's errors as a study that shifts its predictions would see them
    (:mod:`hpo.predictors.shift`): each sweep (``group``) one target after another in the
    order given, target i's prediction divided by ``exp(shift)`` of the signed log errors of
    the targets before it, its interval moved with it. :func:`summarize_errors` per method and
    label, plus ``signed`` (the mean signed relative error) and ``signed_raw`` (the same without
    the shift), over every target but the first of each sweep (nothing had finished)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in methods:
        out[name] = {}
        for lab in labels:
            groups: dict[Any, list[tuple[float, float]]] = {}
            for row in per_target:
                p = row["predictions"].get(name, {}).get(lab, {})
                if p.get("log_err") is not None and p.get("half") is not None:
                    groups.setdefault(row.get("group"), []).append((p["log_err"], p["half"]))
            after, covered, raw = [], [], []
            for items in groups.values():
                for i, (e, half) in enumerate(items[1:], start=1):
                    moved = e - study_shift([x for x, _ in items[:i]], tau, sd).shift
                    after.append(moved)
                    covered.append(abs(moved) <= half)
                    raw.append(e)
            summary = summarize_errors(np.expm1(after), covered)
            summary["signed"] = float(np.mean(np.expm1(after))) if after else None
            summary["signed_raw"] = float(np.mean(np.expm1(raw))) if raw else None
            out[name][lab] = summary
    return out


def _median_on_same_targets(
    per_target: Sequence[Mapping[str, Any]], default: str, method: str, label: str
) -> float | None:
    """The median absolute relative error of the ``default`` method on the targets that
    ``method`` predicts at ``label`` (a peer that predicts a subset, such as the twin, compares
    with the default there); ``None`` where they share none."""
    errs = [abs(math.expm1(row["predictions"][default][label]["log_err"])) for row in per_target
            if all("log_err" in row["predictions"].get(m, {}).get(label, {})
                   for m in (default, method))]
    return float(np.median(errs)) if errs else None


def _proxies_and_targets(
    df: pd.DataFrame, proxy_max_params: float, split: str, max_targets: int | None, seed: int
) -> tuple[dict[str, list[RunCurve]], list[tuple[str, RunCurve]], list[str]]:
    """Each family's proxies, the ``(family, run)`` targets evaluated (a seeded sample of
    ``max_targets``) and notes on what was left out. ``ValueError`` where the split has no
    run, no proxy or no target."""
    notes: list[str] = []
    targets_all: list[tuple[str, RunCurve]] = []
    family_proxies: dict[str, list[RunCurve]] = {}
    n_runs = 0
    for family, part in _families(df).items():
        runs = runs_from_frame(part, split=split, min_points=1)
        n_runs += len(runs)
        proxies = [r for r in runs if r.controls.n_params is not None
                   and r.controls.n_params <= proxy_max_params and r.complete]
        targets = [r for r in runs if r.complete and not (
            r.controls.n_params is not None and r.controls.n_params <= proxy_max_params)]
        family_proxies[family] = proxies
        if targets and not proxies:
            notes.append(f"family {family!r}: {len(targets)} target(s) without a proxy skipped")
            continue
        targets_all += [(family, r) for r in targets]
    if not n_runs:
        require_split(df, split)
        raise ValueError(f"no run with points in split {split!r}")
    if not any(family_proxies.values()):
        raise ValueError(f"no complete proxy run with n_params <= {proxy_max_params:g} "
                         f"in split {split!r}")
    if not targets_all:
        raise ValueError(f"no complete target run with n_params > {proxy_max_params:g} "
                         f"in split {split!r}")
    n_all = len(targets_all)
    keep = {r.run_id for r in _sample([r for _, r in targets_all], max_targets, seed)}
    targets_all = [(f, r) for f, r in targets_all if r.run_id in keep]
    if len(targets_all) < n_all:
        notes.append(f"{len(targets_all)} of {n_all} targets evaluated (seeded sample, "
                     f"seed {seed})")
    return family_proxies, targets_all, notes


@dataclass
class _Tally:
    """What :func:`evaluate_predictors` gathers: per method and label, each target's relative
    error, whether its interval covered the truth and its curve MAE (``errors``), the reasons
    of declined predictions (``declined``); and the time spent fitting and predicting."""

    errors: dict[str, dict[str, tuple[list[float], list[bool], list[float | None]]]]
    declined: dict[str, dict[str, Counter]]
    fit_seconds: float = 0.0
    predict_seconds: float = 0.0
    n_predictions: int = 0

    @classmethod
    def empty(cls, methods: Iterable[str], labels: Sequence[str]) -> _Tally:
        methods = list(methods)
        return cls({m: {lab: ([], [], []) for lab in labels} for m in methods},
                   {m: {lab: Counter() for lab in labels} for m in methods})

    def predict(self, pred: FinalLossPredictor, steps: np.ndarray, losses: np.ndarray,
                controls: Any) -> tuple[Any, str | None]:
        """``pred``'s prediction, timed, or ``None`` and the reason it declined."""
        t1 = time.perf_counter()
        try:
            p, reason = pred.predict(steps, losses, controls), None
        except ValueError as exc:
            p, reason = None, str(exc)
        self.predict_seconds += time.perf_counter() - t1
        self.n_predictions += 1
        return p, reason

    def summaries(self) -> dict[str, dict[str, dict[str, Any]]]:
        """:func:`summarize_errors` per method and label."""
        return {m: {lab: summarize_errors(*acc, declined=sum(self.declined[m][lab].values()))
                    for lab, acc in by.items()}
                for m, by in self.errors.items()}


def _fit_family(
    methods: Mapping[str, MethodFactory], proxies: list[RunCurve], fractions: Sequence[float],
    level: float, tally: _Tally, notes: list[str],
) -> dict[str, FinalLossPredictor | str]:
    """Every method fitted on one family's proxies (a failed fit: its reason, as a string);
    the first method's curve notes are added to ``notes`` once."""
    t0 = time.perf_counter()
    fitted: dict[str, FinalLossPredictor | str] = {}
    for name, make in methods.items():
        try:
            fitted[name] = make(proxies, fractions, level)
        except ValueError as exc:
            fitted[name] = f"fit failed: {exc}"
        curve = getattr(fitted[name], "curve", None)
        if curve is not None and name == next(iter(methods)):
            notes += [n for n in curve.notes if n not in notes]
    tally.fit_seconds += time.perf_counter() - t0
    return fitted


def _predict_target(
    run: RunCurve, family: str, fitted: Mapping[str, FinalLossPredictor | str],
    fractions: Sequence[float], labels: Sequence[str], ranges: Mapping[str, Sequence[float]],
    tally: _Tally,
) -> dict[str, Any]:
    """One target's ``per_target`` row: every fitted method's prediction from each prefix."""
    true = final_loss_estimate(run.t_hat, run.losses, at=1.0)
    true_curve = normalized_run(run, CURVE_MAE_GRID)
    row: dict[str, Any] = {"run_id": run.run_id, "family": family, "group": run.group,
                           "true_final": true,
                           "extrapolation": extrapolation(ranges, run.controls),
                           "predictions": {}}
    for name, pred in fitted.items():
        out_m = row["predictions"][name] = {}
        for f, lab in zip(fractions, labels, strict=True):
            out_m[lab] = _predict_prefix(name, lab, pred, run, f, true, true_curve, tally)
    return row


def _predict_prefix(
    name: str, lab: str, pred: FinalLossPredictor | str, run: RunCurve, fraction: float,
    true: float, true_curve: np.ndarray, tally: _Tally,
) -> dict[str, Any]:
    """One method's prediction of ``run`` from its prefix up to ``fraction``, tallied: the
    signed log error, the interval's log half-width and the side of the pair law, or the
    reason it declined."""
    keep_pts = run.t_hat <= fraction + 1e-9
    steps, losses = run.steps[keep_pts], run.losses[keep_pts]
    p, reason = (None, pred) if isinstance(pred, str) else tally.predict(
        pred, steps, losses, run.controls)
    if reason is not None:
        tally.declined[name][lab][_reason_key(reason)] += 1
        return {"declined": reason}
    err = math.log(p.final / true)
    half = 0.5 * math.log(p.upper / p.lower)
    errors, covered, maes = tally.errors[name][lab]
    errors.append(p.final / true - 1)
    covered.append(p.lower <= true <= p.upper)
    maes.append(_curve_mae(pred, steps, losses, run, true_curve))
    out = {"log_err": round(err, 7), "half": round(half, 7),
           "pair_scale": round(float(p.pair_scale), 7),
           "pair_dof": float(p.pair_dof) if math.isfinite(p.pair_dof) else None}
    if p.method != getattr(pred, "name", p.method):  # a method that predicts through another
        out["by"] = p.method
    return out


def _unknown_control_notes(runs: Sequence[RunCurve]) -> list[str]:
    """Notes on the controls some runs lack."""
    notes = []
    if any(r.controls.tau is None for r in runs):
        notes.append("tau unknown for some runs (weight_decay or peak_lr missing)")
    if any(r.controls.tpp is None for r in runs):
        notes.append("TPP unknown for some runs (tokens or n_params missing)")
    return notes


#: pairs whose true finals differ by less than this (in log) are ties for order accuracy
PAIR_MIN_GAP = 0.002


def pairwise_summary(
    per_target: Sequence[Mapping[str, Any]],
    methods: Sequence[str],
    labels: Sequence[str],
    min_gap: float = PAIR_MIN_GAP,
    level: float = LEVEL,
) -> dict[str, dict[str, dict[str, Any]]]:
    """What a sweep's decision uses, per method and label, from :func:`evaluate_predictors`'
    ``per_target`` rows: pairs of targets of one sweep (same family and ``group``) both
    predicted at that label.

    ``order_accuracy``: the share of pairs whose finals differ by more than ``min_gap`` (log)
    that the predictions order right (``n_pairs`` of them); ``spearman``: the median over
    sweeps of 3 or more predicted targets of the predictions' Spearman correlation with the
    finals (``n_sweeps``); ``median_ratio_err``: the median absolute error of the predicted
    log ratio of two finals; ``ratio_coverage``: how often the true log ratio lies in the
    pair's interval at ``level`` (the quantile of the pair's :class:`PairErrorLaw`: the
    wider scale of the two sides, a Student-t with the smaller dof; a side without a pair law
    is a normal of ``sqrt(2)`` x its interval).
    """
    from scipy import stats

    sweeps: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for row in per_target:
        sweeps.setdefault((row.get("family"), row.get("group")), []).append(row)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for m in methods:
        out[m] = {}
        for lab in labels:
            right, covered, errs, rhos = [], [], [], []
            for rows in sweeps.values():
                got = [(r["true_final"], r["predictions"][m][lab]) for r in rows
                       if "log_err" in r["predictions"].get(m, {}).get(lab, {})]
                for (fa, pa), (fb, pb) in itertools.combinations(got, 2):
                    true = math.log(fa / fb)
                    d = pa["log_err"] - pb["log_err"]  # predicted minus true log ratio
                    errs.append(abs(d))
                    if abs(true) > min_gap:
                        right.append((true + d) * true > 0)
                    law = _pair_side(pa, level).combine(_pair_side(pb, level))
                    covered.append(abs(d) <= law.halfwidth(level))
                if len(got) >= 3:
                    finals = [f for f, _ in got]
                    preds = [math.log(f) + p["log_err"] for f, p in got]
                    if len(set(finals)) > 1 and len(set(preds)) > 1:
                        rhos.append(float(stats.spearmanr(preds, finals)[0]))
            out[m][lab] = {
                "order_accuracy": float(np.mean(right)) if right else None,
                "n_pairs": len(right),
                "spearman": float(np.median(rhos)) if rhos else None,
                "n_sweeps": len(rhos),
                "median_ratio_err": float(np.median(errs)) if errs else None,
                "ratio_coverage": float(np.mean(covered)) if covered else None,
            }
    return out


def _pair_side(prediction: Mapping[str, Any], level: float) -> PairErrorLaw:
    """A ``per_target`` prediction's side of the pair law (:meth:`PairErrorLaw.side`)."""
    return PairErrorLaw.side(prediction.get("pair_scale") or 0.0,
                             prediction.get("pair_dof") or math.inf, prediction["half"], level)


def _reason_key(reason: str) -> str:
    """A declined prediction's reason without its numbers (so that reasons can be counted)."""
    head = reason.split(";")[0].split("(")[0]
    return "".join("#" if c.isdigit() else c for c in head).strip()


def _curve_mae(pred: Any, steps, losses, run: RunCurve, true_curve: np.ndarray) -> float | None:
    try:
        c = pred.predict_curve(steps, losses, run.controls, CURVE_MAE_GRID)
    except ValueError:
        return None
    if c is None:
        return None
    ok = np.isfinite(true_curve) & np.isfinite(c)
    return float(np.mean(np.abs(c[ok] - true_curve[ok]))) if ok.any() else None


def evaluate_sources(
    sources: Sequence[Source],
    fractions: Sequence[float] = (0.1, 0.2, 0.3),
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`evaluate_predictors` on each source apart, plus the median over sources.

    ``{"sources": {name: <evaluate_predictors result>}, "median_over_sources": {method:
    {label: {median_abs_rel_err, max_abs_rel_err, coverage, n_sources}}}}``: per method and
    fraction, the median over the sources that have the method's summary of each statistic.
    ``kwargs`` go to :func:`evaluate_predictors`.
    """
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"source names must be unique, got {names}")
    results = {
        s.name: evaluate_predictors(s.frame, s.proxy_max_params, fractions, split=s.split,
                                    **kwargs)
        for s in sources
    }
    return {"sources": results, "median_over_sources": median_over_sources(results)}


def median_over_sources(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per method and label, the median over sources of median / max error and coverage."""
    out: dict[str, Any] = {}
    for res in results.values():
        for method, by_lab in res["methods"].items():
            for lab in by_lab:
                out.setdefault(method, {}).setdefault(lab, None)
    for method, by_lab in out.items():
        for lab in by_lab:
            stats = [r["methods"][method][lab] for r in results.values()
                     if method in r["methods"] and r["methods"][method][lab]["n"]]
            row: dict[str, Any] = {"n_sources": len(stats)}
            for key in ("median_abs_rel_err", "max_abs_rel_err", "coverage"):
                vals = [s[key] for s in stats if s[key] is not None]
                row[key] = float(np.median(vals)) if vals else None
            by_lab[lab] = row
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}"


def format_table(result: Mapping[str, Any]) -> str:
    """A plain-text table of :func:`evaluate_predictors` output (percentages)."""
    default = result.get("default_method", next(iter(result["methods"])))
    shifted = result.get("shifted", {})
    lines = [
        f"{'method':<22} {'at':>5} {'n':>4} {'declined':>8} {'med|err|%':>9} {'mean|err|%':>10} "
        f"{'max|err|%':>9} {'cover%':>7} {'curveMAE%':>9} {'default':>8} {'shifted':>8}"
    ]
    for name, by_frac in result["methods"].items():
        for lab, s in by_frac.items():
            moved = shifted.get(name, {}).get(lab, {}).get("median_abs_rel_err")
            lines.append(
                f"{name:<22} {lab:>5} {s['n']:>4} {s.get('declined', 0):>8} "
                f"{_pct(s['median_abs_rel_err']):>9} {_pct(s['mean_abs_rel_err']):>10} "
                f"{_pct(s['max_abs_rel_err']):>9} {_pct(s['coverage']):>7} "
                f"{_pct(s['curve_mae']):>9} {_pct(s.get('default_median_same_targets')):>8} "
                f"{_pct(moved):>8}"
            )
    lines.append(f"(default: the median |err|% of {default} on the targets the row's method "
                 "predicts; shifted: the median |err|% with each sweep's targets moved, one "
                 "after another, by the errors of those before them, as the pruner moves its "
                 "predictions; hpo.predictors.shift)")
    return "\n".join(lines)


def format_pairwise(result: Mapping[str, Any]) -> str:
    """The within-sweep pairwise table of :func:`evaluate_predictors` output."""
    lines = [f"{'method':<22} {'at':>5} {'pairs':>6} {'order acc':>9} {'sweeps':>6} "
             f"{'spearman':>8} {'med|ratio err|%':>15} {'ratio cover%':>12}"]
    for name, by_lab in (result.get("pairwise") or {}).items():
        for lab, s in by_lab.items():
            acc = "-" if s["order_accuracy"] is None else f"{s['order_accuracy']:.3f}"
            rho = "-" if s["spearman"] is None else f"{s['spearman']:.2f}"
            lines.append(f"{name:<22} {lab:>5} {s['n_pairs']:>6} {acc:>9} {s['n_sweeps']:>6} "
                         f"{rho:>8} {_pct(s['median_ratio_err']):>15} "
                         f"{_pct(s['ratio_coverage']):>12}")
    return "\n".join(lines)


def format_sources(result: Mapping[str, Any]) -> str:
    """The table of each source of :func:`evaluate_sources`, then the median over sources."""
    parts = []
    for name, res in result["sources"].items():
        parts.append(
            f"== {name}: {len(res['proxies'])} proxies (n_params <= "
            f"{res['proxy_max_params']:g}), {len(res['targets'])} targets, split "
            f"{res['split']}, {res['level']:.0%} intervals; errors of the final loss in %"
        )
        parts.append(format_table(res))
        parts.append(f"-- {name}: within-sweep pairs (order on pairs more than "
                     f"{PAIR_MIN_GAP:.1%} apart; last_value is the raw loss)")
        parts.append(format_pairwise(res))
        parts += [f"note: {n}" for n in res["notes"]]
    parts.append(f"== median over {len(result['sources'])} sources")
    parts.append(f"{'method':<22} {'at':>5} {'sources':>7} {'med|err|%':>9} {'max|err|%':>9} "
                 f"{'cover%':>7}")
    for name, by_lab in result["median_over_sources"].items():
        for lab, s in by_lab.items():
            parts.append(f"{name:<22} {lab:>5} {s['n_sources']:>7} "
                         f"{_pct(s['median_abs_rel_err']):>9} {_pct(s['max_abs_rel_err']):>9} "
                         f"{_pct(s['coverage']):>7}")
    return "\n".join(parts)
