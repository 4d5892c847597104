"""CollapsePruner in an Optuna study that is not a collapse family: TPE over (lr, weight decay)
of a tiny byte-level GPT, with five pruning arms side by side.

Every trial trains the product's CompleteP GPT with :func:`hpo.models.train` (width 32, depth 2,
4 heads, context 64, GELU, 1,024 tokens a step, TPP 7: 297 steps, cosine decay after a 5%
warmup, seed 0, one CPU thread, on the standard library's bytes), reports its train loss at
every step with ``trial.report(loss, step)`` and stops when ``trial.should_prune()`` says so.
``optuna.samplers.TPESampler(seed=0)`` samples the base LR (log-uniform in [3e-3, 3e-1]) and the
base weight decay (log-uniform in [1e-3, 1]), so tau = 1 / (lr * wd * T) spans five decades: the
trials share a shape and a horizon, but not a tau. A trial's value is its smoothed
final train loss (:func:`hpo.predictors.final_loss_estimate` at t^ = 1, the value ``hpo run``
gives a trial and the final the predictor predicts).

The arms, each a fresh in-memory study with the same sampler seed and trial count:

1. ``shadow``: ``CollapsePruner(threshold=0)``, self-calibrating: it stops nothing and records
   every prediction (the no-pruner baseline, with its predictions);
2. ``median``: ``optuna.pruners.MedianPruner()`` with its defaults;
3. ``collapse``: ``CollapsePruner()``, self-calibrating (no reference curve);
4. ``collapse_reference``: ``CollapsePruner(reference=curve)``, the curve fitted by
   :func:`hpo.predictors.fit_universal_curve` on proxy runs of the same recipe at widths 16 and
   24 (four (lr, wd) settings each);
5. ``conformal``: surestop's ``ConformalPruner(n_calibration=19)`` (``pip install surestop``),
   its other settings at their defaults (alpha 0.05, tau the 0.2 quantile of the calibration
   finals, the last reported value as the forecast, kills from the first step): the first 19
   finished trials run unpruned and calibrate the rule once, and it judges the trials after them.
   19 is the fewest calibration runs that certify at its default alpha (its default, 60, is more
   than the study has trials).

Per arm: steps trained (and as a fraction of the shadow arm's), trials pruned, the best final
value found, and the coverage of the stored 80% intervals (system attrs ``collapse:cp:<t>``) of
the trials that ran to the end, per checkpoint, with the predictions' median signed error (for
the conformal arm, which has no intervals, the error of its forecast, the loss reported at the
checkpoint); for the shadow, reference and conformal arms also the Spearman rank correlation
with the finals of the predictions at t^ 0.2 and 0.3 beside that of the raw loss reported at the
same step; the conformal arm's fitted rule (its threshold tau, margin lambda and calibration
trials). Writes
``optuna_charlm.json`` (every number, every trial) and ``tables.md`` to OUT_DIR and prints the
tables.

    .venv/bin/python benchmarks/optuna_charlm.py OUT_DIR [--trials 20] [--seed 0] [--quick]

``--quick`` runs a toy version (width 16, TPP 3, 4 trials, 4 proxies) in well under a minute.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from scipy import stats

from hpo import (
    DEFAULT_CHECKPOINTS,
    INTERVAL_ATTR,
    REASON_ATTR,
    CollapsePruner,
    describe_trial,
    stop_with_prediction,
    value_is_predicted,
)
from hpo.models import Recipe, TrainConfig, TrainPoint, make_recipe, train
from hpo.predictors import fit_universal_curve, runs_from_frame
from hpo.predictors.normalize import final_loss_estimate
from hpo.pruning import trial_records

ARMS = ("shadow", "median", "collapse", "collapse_reference", "conformal", "collapse_predicted")
ARM_TITLES = {
    "shadow": "(1) no pruner: CollapsePruner(threshold=0), shadow",
    "median": "(2) MedianPruner()",
    "collapse": "(3) CollapsePruner(), self-calibrating",
    "collapse_reference": "(4) CollapsePruner(reference=proxy curve)",
    "conformal": "(5) surestop ConformalPruner(n_calibration=19)",
    "collapse_predicted": "(6) CollapsePruner(), self-calibrating, stopped trials end with "
                          "their predicted final (hpo.stop_with_prediction)",
}
# surestop's ConformalPruner: the fewest calibration trials that certify at its default alpha
# (0.05 needs ceil((1 - alpha)(n + 1)) <= n, n >= 19); its default (60) exceeds the study's 20
# trials, so it would never calibrate. Every other setting is its default.
CONFORMAL_CALIBRATION = 19
SURESTOP_MISSING = ("optuna_charlm.py: the conformal arm needs surestop's ConformalPruner: "
                    "pip install surestop")
VOCAB = 256  # byte-level tokens of the default data (the standard library's source)
SPEARMAN_AT = (0.2, 0.3)
JSON_NAME = "optuna_charlm.json"
TABLES_NAME = "tables.md"


@dataclass(frozen=True)
class Setup:
    """The recipe every trial and proxy shares, the search space and the proxies' settings."""

    width: int = 32
    depth: int = 2
    heads: int = 4
    context: int = 64
    batch_tokens: int = 1024
    tpp: float = 7.0
    warmup: float = 0.05  # fraction of T
    schedule: str = "cosine"
    seed: int = 0
    lr_range: tuple[float, float] = (3e-3, 3e-1)
    wd_range: tuple[float, float] = (1e-3, 1.0)
    trials: int = 20
    sampler_seed: int = 0
    proxy_widths: tuple[int, ...] = (16, 24)
    # (base lr, base weight decay) of the proxies at every proxy width
    proxy_settings: tuple[tuple[float, float], ...] = (
        (0.01, 0.01), (0.03, 0.1), (0.1, 0.3), (0.3, 1.0))


FULL = Setup()
QUICK = Setup(width=16, depth=1, heads=2, context=32, batch_tokens=512, tpp=3.0, trials=4,
              proxy_widths=(8, 12), proxy_settings=((0.01, 0.03), (0.1, 0.3)))


class Diverged(Exception):
    """A trial whose train loss became non-finite (Optuna records it as failed)."""


# ---- one run ------------------------------------------------------------------------------------


def train_config(setup: Setup, width: int, lr: float, weight_decay: float) -> TrainConfig:
    """The run's :class:`TrainConfig`: the setup's recipe at ``width`` (base width = the trials'
    width, so a trial's lr and weight decay are those of its hidden weights)."""
    return TrainConfig(
        width=width, depth=setup.depth, heads=setup.heads, context=setup.context,
        base_width=setup.width, base_depth=setup.depth, tpp=setup.tpp, lr=lr,
        weight_decay=weight_decay, batch_tokens=setup.batch_tokens, schedule=setup.schedule,
        warmup=setup.warmup, seed=setup.seed, threads=1, log_every=1,
        eval_every=10**9,  # one evaluation, at T (the final val loss, for the record)
    )


def plan(cfg: TrainConfig) -> Recipe:
    """The run's recipe (T, warmup steps, tau) before training, as :func:`train` derives it."""
    gcfg = cfg.model_config(vocab_size=VOCAB)
    return make_recipe(cfg=gcfg, tpp=cfg.tpp, batch_tokens=cfg.batch_tokens, lr=cfg.lr,
                       weight_decay=cfg.weight_decay, warmup=cfg.warmup, schedule=cfg.schedule)


def final_value(rows: Sequence[dict[str, Any]]) -> float:
    """The smoothed final train loss of a complete run (``final_loss_estimate`` at t^ = 1)."""
    train_rows = [r for r in rows if r["split"] == "train"]
    total = float(train_rows[0]["total_steps"])
    t = np.array([r["step"] for r in train_rows], dtype=float) / total
    y = np.array([r["loss"] for r in train_rows], dtype=float)
    return final_loss_estimate(t, y, at=1.0)


# ---- the proxies and their curve ----------------------------------------------------------------


def proxy_curve(setup: Setup, log: Callable[[str], None]) -> tuple[Any, dict[str, Any]]:
    """The universal curve fitted on the proxies (every proxy width x every setting), with a
    record of the proxies."""
    frames, proxies = [], []
    t0 = time.perf_counter()
    for width in setup.proxy_widths:
        for lr, wd in setup.proxy_settings:
            cfg = train_config(setup, width, lr, wd)
            result = train(cfg)
            if result.status != "completed":
                raise RuntimeError(f"proxy {result.run_id} {result.status}")
            frames.append(pd.DataFrame(result.rows))
            proxies.append({"run_id": result.run_id, "width": width, "lr": lr,
                            "weight_decay": wd, "n_params": result.n_params,
                            "total_steps": result.recipe.total_steps, "tau": result.tau,
                            "final": final_value(result.rows)})
            log(f"proxy {result.run_id}: {result.recipe.total_steps} steps, final "
                f"{proxies[-1]['final']:.4f}")
    train_seconds = time.perf_counter() - t0
    runs = runs_from_frame(frames, split="train")
    t0 = time.perf_counter()
    curve = fit_universal_curve(runs)
    fit_seconds = time.perf_counter() - t0
    return curve, {"proxies": proxies, "train_seconds": train_seconds,
                   "fit_seconds": fit_seconds, "form": getattr(curve, "form", None),
                   "notes": list(getattr(curve, "notes", []))}


# ---- one arm ------------------------------------------------------------------------------------


def make_objective(setup: Setup, predicted: bool = False) -> Callable[[optuna.Trial], float]:
    """The study's objective: train one trial, reporting every step, stopping when pruned
    (``predicted``: a stopped trial returns its predicted final, :func:`hpo.stop_with_prediction`,
    instead of raising ``TrialPruned``)."""

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", *setup.lr_range, log=True)
        wd = trial.suggest_float("weight_decay", *setup.wd_range, log=True)
        cfg = train_config(setup, setup.width, lr, wd)
        rec = plan(cfg)
        describe_trial(
            trial, total_steps=rec.total_steps, tau=rec.tau,
            tpp=rec.tokens / rec.n_params,  # as the curve format reads it (tokens / n_params)
            schedule=rec.schedule, warmup_steps=rec.warmup_steps, n_params=rec.n_params,
            batch_tokens=rec.batch_tokens, peak_lr=rec.hidden_lr,
            weight_decay=rec.hidden_weight_decay, base_lr=rec.lr,
        )
        trial.set_user_attr("tau", rec.tau)
        trial.set_user_attr("total_steps", rec.total_steps)

        def callback(point: TrainPoint) -> bool:
            if not math.isfinite(point.train_loss):
                return False  # train() stops a diverged run itself
            trial.report(point.train_loss, point.step)
            return trial.should_prune()

        result = train(cfg, callback)
        if result.recipe != rec:
            raise RuntimeError(f"planned recipe {rec} but trained {result.recipe}")
        trial.set_user_attr("steps", result.steps)
        trial.set_user_attr("status", result.status)
        if result.status == "stopped":
            if predicted:
                return stop_with_prediction(trial)
            raise optuna.TrialPruned()
        if result.status != "completed":
            raise Diverged(f"{result.status} after {result.steps} steps")
        trial.set_user_attr("final_val_loss", result.final_val_loss)
        return final_value(result.rows)

    return objective


def conformal_pruner_class() -> type[optuna.pruners.BasePruner] | None:
    """surestop's ``ConformalPruner``, or ``None`` when surestop is not installed."""
    try:
        from surestop import ConformalPruner
    except ImportError:
        return None
    return ConformalPruner


def make_pruner(arm: str, curve: Any) -> optuna.pruners.BasePruner:
    """The arm's pruner (see the module docstring)."""
    if arm == "shadow":
        return CollapsePruner(threshold=0.0)
    if arm == "median":
        return optuna.pruners.MedianPruner()
    if arm in ("collapse", "collapse_predicted"):
        return CollapsePruner()
    if arm == "collapse_reference":
        return CollapsePruner(reference=curve)
    if arm == "conformal":
        cls = conformal_pruner_class()
        if cls is None:
            raise RuntimeError(SURESTOP_MISSING)
        return cls(n_calibration=CONFORMAL_CALIBRATION)
    raise ValueError(f"unknown arm {arm!r}")


def _num(x: Any) -> float | None:
    """``x`` as a finite float, else ``None`` (JSON)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def trial_record(t: optuna.trial.FrozenTrial, last_value_forecasts: bool = False
                 ) -> dict[str, Any]:
    """One trial as the report keeps it: settings, state, steps, values and its predictions.

    With ``last_value_forecasts`` (the conformal arm, whose pruner stores nothing), the
    predictions are its predictor's forecasts of the final at each checkpoint the trial reached:
    the loss reported there, with no interval."""
    predictions: dict[str, Any] = {}
    for key, rec in sorted(trial_records(t).items()):
        est = rec.estimate
        predictions[key] = {
            "value": _num(est.value), "lower": _num(est.lower), "upper": _num(est.upper),
            "t_hat": _num(est.t_hat), "status": est.status, "reason": rec.reason,
            "probability": _num(rec.probability), "stop": rec.stop,
            "against": None if rec.against is None else rec.against.label,
            "tolerance": _num(rec.tolerance),
        }
    total = int(t.user_attrs.get("total_steps", 0)) or None
    steps = t.user_attrs.get("steps")
    predicted = value_is_predicted(t)
    measured = t.state == optuna.trial.TrialState.COMPLETE and not predicted
    values = t.intermediate_values
    last = max(values) if values else None
    raw_loss = ({f"{cp:g}": _num(values.get(math.ceil(cp * total - 1e-9)))
                 for cp in DEFAULT_CHECKPOINTS} if total else {})
    if last_value_forecasts:
        predictions = {
            cp: {"value": v, "lower": None, "upper": None, "t_hat": float(cp),
                 "status": "last_value", "reason": None, "probability": None, "stop": False}
            for cp, v in raw_loss.items() if v is not None}
    return {
        "number": t.number, "state": t.state.name, "lr": t.params.get("lr"),
        "weight_decay": t.params.get("weight_decay"), "tau": _num(t.user_attrs.get("tau")),
        "total_steps": total, "steps": steps,
        "final": _num(t.value) if measured else None,
        "predicted_value": _num(t.value) if predicted else None,
        "last_reported": _num(values[last]) if last is not None else None,
        "final_val_loss": _num(t.user_attrs.get("final_val_loss")),
        "stopped_at_t_hat": (steps / total if total and steps is not None
                             and (t.state == optuna.trial.TrialState.PRUNED or predicted)
                             else None),
        "has_interval": INTERVAL_ATTR in t.user_attrs,
        "reason": t.user_attrs.get(REASON_ATTR),
        "predictions": predictions,
        "raw_loss": raw_loss,
    }


def run_arm(arm: str, setup: Setup, curve: Any, log: Callable[[str], None]) -> dict[str, Any]:
    """One study of ``setup.trials`` trials under the arm's pruner; its trials and warnings (and
    the conformal arm's fitted rule)."""
    pruner = make_pruner(arm, curve)
    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=setup.sampler_seed),
                                pruner=pruner)
    objective = make_objective(setup, predicted=arm == "collapse_predicted")

    def progress(study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
        steps = t.user_attrs.get("steps")
        value = "" if t.value is None else f" value {t.value:.4f}"
        log(f"{arm} trial {t.number}: lr {t.params['lr']:.3g} wd "
            f"{t.params['weight_decay']:.3g} tau {t.user_attrs.get('tau', math.nan):.3g}: "
            f"{t.state.name.lower()} after {steps} steps{value}")

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        study.optimize(objective, n_trials=setup.trials, catch=(Diverged,),
                       callbacks=[progress])
    seconds = time.perf_counter() - t0
    messages = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    out = {"seconds": seconds, "warnings": messages,
           "trials": [trial_record(t, last_value_forecasts=arm == "conformal")
                      for t in study.get_trials(deepcopy=False)]}
    if arm == "conformal":
        out["rule"] = conformal_rule(pruner, out["trials"])
    return out


def conformal_rule(pruner: Any, trials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The conformal pruner's settings and the rule it fitted (``fitted`` false when the study
    had too few finished trials to calibrate it): a trial after the calibration trials stops at
    the first step from ``first_step`` on whose reported loss exceeds ``tau + lambda``."""
    kw = dict(getattr(pruner, "_kw", {}))  # its constructor's keywords, defaults included
    settings = {"n_calibration": pruner.n_calibration,
                **{k: v for k, v in kw.items() if k != "predictor"},
                "predictor": getattr(kw.get("predictor"), "__name__", repr(kw.get("predictor")))}
    rule, steps = getattr(pruner, "rule_", None), getattr(pruner, "steps_", None)
    if rule is None or steps is None:
        return {"settings": settings, "fitted": False}
    calibration = list(pruner.calibration_trials_)
    judged = [t for t in trials if t["number"] not in calibration]
    return {
        "settings": settings, "fitted": True, "calibration_trials": calibration,
        "n_good": rule.n_good_, "tau": rule.tau_, "lambda": rule.lambda_,
        "kill_above": rule.tau_ + rule.lambda_,
        "first_step": steps[rule.first_peek_] if 0 <= rule.first_peek_ < len(steps) else None,
        "last_step": steps[-2] if len(steps) >= 2 else None,
        "judged_trials": [t["number"] for t in judged],
        "stopped_trials": [t["number"] for t in judged if t["state"] == "PRUNED"],
    }


# ---- the summary --------------------------------------------------------------------------------


def coverage(trials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per checkpoint, over the complete trials with a prediction there: how many intervals hold
    the trial's final (``covered``), of ``n``, and the median signed error log(prediction /
    final) (of every prediction with a value, with or without an interval)."""
    out: dict[str, Any] = {}
    total_n = total_in = 0
    for cp in DEFAULT_CHECKPOINTS:
        key = f"{cp:g}"
        n = covered = 0
        errors = []
        for t in trials:
            p = t["predictions"].get(key)
            if t["final"] is None or p is None:
                continue
            if p.get("value") is not None:
                errors.append(math.log(p["value"] / t["final"]))
            if p["lower"] is None or p["upper"] is None:
                continue
            n += 1
            covered += int(p["lower"] <= t["final"] <= p["upper"])
        out[key] = {"n": n, "covered": covered, "fraction": covered / n if n else None,
                    "median_log_error": float(np.median(errors)) if errors else None}
        total_n, total_in = total_n + n, total_in + covered
    out["all"] = {"n": total_n, "covered": total_in,
                  "fraction": total_in / total_n if total_n else None}
    return out


def spearman(trials: Sequence[dict[str, Any]], cps: Sequence[float] = SPEARMAN_AT
             ) -> dict[str, Any]:
    """Spearman rank correlation with the finals of the prediction at each checkpoint and of
    the raw loss at the same step, over the complete trials with a prediction there."""
    out: dict[str, Any] = {}
    for cp in cps:
        key = f"{cp:g}"
        rows = [(t["predictions"][key]["value"], t["raw_loss"].get(key), t["final"])
                for t in trials if t["final"] is not None and key in t["predictions"]
                and t["predictions"][key]["value"] is not None
                and t["raw_loss"].get(key) is not None]
        if len(rows) < 3:
            out[key] = {"n": len(rows), "prediction": None, "raw_loss": None}
            continue
        pred, raw, final = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
        out[key] = {"n": len(rows),
                    "prediction": _num(stats.spearmanr(pred, final).statistic),
                    "raw_loss": _num(stats.spearmanr(raw, final).statistic)}
    return out


def summarize(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per arm: steps, pruned trials, the best final and the intervals' coverage; the rank
    correlations of the shadow, reference and conformal arms; the conformal arm's rule."""
    base = sum(t["steps"] or 0 for t in arms["shadow"]["trials"]) if "shadow" in arms else None
    out: dict[str, Any] = {}
    for arm, data in arms.items():
        trials = data["trials"]
        steps = sum(t["steps"] or 0 for t in trials)
        planned = sum(t["total_steps"] or 0 for t in trials)
        done = [t for t in trials if t["final"] is not None]
        best = min(done, key=lambda t: t["final"]) if done else None
        out[arm] = {
            "trials": len(trials), "complete": len(done),
            "pruned": sum(t["state"] == "PRUNED" or t.get("predicted_value") is not None
                          for t in trials),
            "failed": sum(t["state"] == "FAIL" for t in trials),
            "steps": steps, "planned_steps": planned,
            "steps_fraction": steps / base if base else None,
            "best_final": best["final"] if best else None,
            "best_trial": ({k: best[k] for k in ("number", "lr", "weight_decay", "tau")}
                           if best else None),
            "with_predictions": sum(bool(t["has_interval"]) for t in trials),
            "coverage": coverage(trials), "seconds": data["seconds"],
        }
        if "rule" in data:
            out[arm]["rule"] = data["rule"]
    # the arms whose trials (all, or all but the few the conformal rule judges) ran on
    for arm in ("shadow", "collapse_reference", "conformal"):
        if arm in arms:
            out[arm]["spearman"] = spearman(arms[arm]["trials"])
    return out


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render(results: dict[str, Any]) -> str:
    """The tables in Markdown."""
    summary = results["summary"]
    lines = ["| arm | steps trained | of arm (1) | trials pruned | best final | best trial "
             "(lr, wd, tau) |", "|---|---|---|---|---|---|"]
    for arm, s in summary.items():
        b = s["best_trial"]
        best = (f"#{b['number']} ({b['lr']:.3g}, {b['weight_decay']:.3g}, {b['tau']:.3g})"
                if b else "-")
        lines.append(f"| {ARM_TITLES[arm]} | {s['steps']:,} | {_f(s['steps_fraction'], '.1%')} "
                     f"| {s['pruned']} of {s['trials']} | {_f(s['best_final'], '.4f')} "
                     f"| {best} |")
    lines += rule_table(summary)
    cps = [f"{cp:g}" for cp in DEFAULT_CHECKPOINTS]
    lines += ["", "Coverage of the 80% intervals (trials run to the end, intervals holding the "
              "final / intervals; arm (5) forecasts no interval):", "",
              "| arm | " + " | ".join(f"t^ {c}" for c in cps) + " | all |",
              "|---|" + "---|" * (len(cps) + 1)]
    for arm, s in summary.items():
        if arm == "median":
            continue
        cov = s["coverage"]
        cells = [f"{cov[c]['covered']}/{cov[c]['n']}" if cov[c]["n"] else "-"
                 for c in (*cps, "all")]
        lines.append(f"| {ARM_TITLES[arm]} | " + " | ".join(cells) + " |")
    lines += ["", "Median signed error of the predictions, log(prediction / final), same "
              "trials (arm (5), without intervals: its forecast, the loss reported at t^, "
              "over every trial run to the end):", "",
              "| arm | " + " | ".join(f"t^ {c}" for c in cps) + " |",
              "|---|" + "---|" * len(cps)]
    for arm, s in summary.items():
        if arm == "median":
            continue
        cells = [_f(s["coverage"][c]["median_log_error"], "+.3f") for c in cps]
        lines.append(f"| {ARM_TITLES[arm]} | " + " | ".join(cells) + " |")
    ranked = [arm for arm in summary if "spearman" in summary[arm]]
    if ranked:
        lines += ["", "Spearman rank correlation with the finals, over the trials run to the end "
                  "with a prediction at t^ (raw loss: the train loss reported at that step; arm "
                  "(5)'s prediction is that loss):",
                  "", "| arm | t^ | trials | prediction | raw loss |", "|---|---|---|---|---|"]
        for arm in ranked:
            for cp, r in summary[arm]["spearman"].items():
                lines.append(f"| {ARM_TITLES[arm]} | {cp} | {r['n']} "
                             f"| {_f(r['prediction'], '.3f')} | {_f(r['raw_loss'], '.3f')} |")
    lines += trial_table(results)
    return "\n".join(lines) + "\n"


def rule_table(summary: dict[str, Any]) -> list[str]:
    """Markdown lines: the conformal arm's fitted rule, if the run has that arm."""
    s = summary.get("conformal")
    if s is None or "rule" not in s:
        return []
    rule = s["rule"]
    head = ["", f"Arm (5)'s rule: fitted once on its first {rule['settings']['n_calibration']} "
            "finished trials (alpha "
            f"{rule['settings']['alpha']:g}; good: a last reported loss at or below tau, the "
            f"{rule['settings']['good_quantile']:g} quantile of theirs); a later trial stops at "
            "the first step, from the first step judged on, whose reported loss exceeds "
            "tau + lambda:", ""]
    if not rule["fitted"]:
        return [*head, "| fitted |", "|---|",
                f"| no: {s['complete']} finished trials, fewer than "
                f"{rule['settings']['n_calibration']} |"]

    def nums(xs: Sequence[int]) -> str:
        return ", ".join(f"#{x}" for x in xs) if xs else "none"

    return [*head,
            "| calibration trials | good | tau | lambda | stops above | steps judged "
            "| trials judged | stopped |", "|---|---|---|---|---|---|---|---|",
            f"| {len(rule['calibration_trials'])} | {rule['n_good']} | {rule['tau']:.4f} "
            f"| {rule['lambda']:.4f} | {rule['kill_above']:.4f} "
            f"| {rule['first_step']} to {rule['last_step']} | {nums(rule['judged_trials'])} "
            f"| {nums(rule['stopped_trials'])} |"]


def trial_table(results: dict[str, Any]) -> list[str]:
    """Markdown lines: every trial of the shadow arm (settings, final, rank) and the steps the
    same trial number trained in each other arm (starred where its settings differ)."""
    arms = results["arms"]
    if "shadow" not in arms:
        return []
    shadow = arms["shadow"]["trials"]
    others = [a for a in ARMS if a in arms and a != "shadow"]
    finals = sorted(t["final"] for t in shadow if t["final"] is not None)
    lines = ["", "Trials (arm (1)'s settings and final; the steps each arm trained on that trial "
             "number, * where its (lr, wd) differ from arm (1)'s):", "",
             "| trial | lr | wd | tau | final | rank | " + " | ".join(
                 f"steps {ARM_TITLES[a].split()[0]}" for a in others) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(others)]
    for t in shadow:
        rank = finals.index(t["final"]) + 1 if t["final"] is not None else None
        cells = []
        for arm in others:
            o = next((x for x in arms[arm]["trials"] if x["number"] == t["number"]), None)
            if o is None:
                cells.append("-")
                continue
            same = (o["lr"], o["weight_decay"]) == (t["lr"], t["weight_decay"])
            cells.append(f"{o['steps']}{'' if same else '*'}")
        lines.append(f"| {t['number']} | {t['lr']:.3g} | {t['weight_decay']:.3g} "
                     f"| {_f(t['tau'], '.3g')} | {_f(t['final'], '.4f')} | {_f(rank, 'd')} | "
                     + " | ".join(cells) + " |")
    return lines


def _clean(x: Any) -> Any:
    """``x`` with non-finite floats as ``None`` and tuples as lists (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return _num(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="folder for optuna_charlm.json and tables.md")
    parser.add_argument("--trials", type=int, default=None,
                        help=f"trials per arm (default {FULL.trials}; {QUICK.trials} with "
                             "--quick)")
    parser.add_argument("--quick", action="store_true",
                        help="a toy version (TPP 3, 4 trials, 4 proxies), well under a minute")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"the TPE sampler's seed (default {FULL.sampler_seed})")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma-separated arms (default all: {','.join(ARMS)})")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else FULL
    if args.trials is not None:
        if args.trials < 1:
            parser.error(f"--trials must be >= 1, but got {args.trials}")
        setup = replace(setup, trials=args.trials)
    if args.seed is not None:
        if args.seed < 0:
            parser.error(f"--seed must be >= 0, but got {args.seed}")
        setup = replace(setup, sampler_seed=args.seed)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms must name arms of {', '.join(ARMS)}, but got {args.arms}")
    if "conformal" in arms and conformal_pruner_class() is None:
        sys.exit(SURESTOP_MISSING)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.0f} s] {msg}", file=sys.stderr, flush=True)

    rec = plan(train_config(setup, setup.width, *setup.lr_range))
    log(f"trials: N = {rec.n_params:,}, T = {rec.total_steps} steps, warmup "
        f"{rec.warmup_steps} steps, {setup.trials} trials per arm")
    curve, proxies = (proxy_curve(setup, log) if "collapse_reference" in arms
                      else (None, None))
    results: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", "benchmarks/optuna_charlm.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "setup": asdict(setup),
        "trial_recipe": {"n_params": rec.n_params, "total_steps": rec.total_steps,
                         "warmup_steps": rec.warmup_steps, "schedule": rec.schedule,
                         "tpp": rec.tokens / rec.n_params},
        "checkpoints": list(DEFAULT_CHECKPOINTS),
        "proxies": proxies, "arms": {},
    }
    for arm in arms:
        results["arms"][arm] = run_arm(arm, setup, curve, log)
    results["summary"] = summarize(results["arms"])
    results["seconds"] = time.perf_counter() - t_start
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / JSON_NAME).write_text(json.dumps(_clean(results), indent=1) + "\n")
    tables = render(results)
    (args.out_dir / TABLES_NAME).write_text(tables)
    print(tables)
    print(f"total {results['seconds']:.0f} s; wrote {args.out_dir / JSON_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
