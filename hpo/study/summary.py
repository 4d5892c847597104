"""Stage 4 of a study: ``summary.json`` and ``curves.csv.gz`` (every proxy and trial in the curve
format, with ``role`` and ``trial`` columns).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from optuna.trial import FrozenTrial

from hpo.diagnose import alert_sentence
from hpo.pruning import (
    INTERVAL_ATTR,
    PREDICTION_ATTR,
    T_HAT_ATTR,
    Record,
    TrialState,
    latest_record,
    trial_records,
    trial_state,
    value_is_predicted,
)
from hpo.study.plan import flops
from hpo.study.stage import RunContext, Stage
from hpo.study.sweep import SweepStage
from hpo.study.trials import (
    RESIDUAL_ALERT_ATTR,
    RESIDUAL_MAX_ATTR,
    prediction_accuracy,
    same_params,
)

log = logging.getLogger(__name__)


def interval_level(records: Mapping[str, Record]) -> float | None:
    """The coverage level of a trial's predicted intervals, as its judge's ``records`` hold it
    (``None`` without a record that has a prediction)."""
    return next((r.estimate.level for r in records.values() if r.estimate.usable), None)


def verdict(record: Record | None, row: Mapping[str, Any],
            stop_on_alert: bool = False) -> str | None:
    """The pruner's latest verdict on a trial, naming the checkpoint it judged.

    The judge's sentence (``record.explanation``) starts with the t^ of the report that
    gave the verdict, which can be past the checkpoint: a prediction is re-judged at later
    reports as other trials finish. This sentence names the checkpoint first, then the t^ of
    the curve the prediction was made on and of the latest re-judging, then the judge's
    reason. A trial stopped by the residual monitor (``diagnose.stop_on_alert``) says so
    instead. ``None``: never judged (``record`` is ``None``) and not stopped by the monitor."""
    alert = row.get("residual_alert")
    if (stop_on_alert and alert and row.get("state") == TrialState.STOPPED
            and (record is None or not record.stop)):
        return "stopped by the residual monitor (" + alert_sentence(
            f"trial {row.get('trial')}", alert["t_hat"], alert["residual"],
            alert["threshold"], alert.get("kind", "level")) + ")"
    if record is None:
        return None
    sentence, checkpoint = record.explanation, record.checkpoint
    if not sentence or not math.isfinite(checkpoint):
        return sentence or None
    _, sep, reason = sentence.partition(": ")
    reason = reason if sep else sentence
    predicted_at, judged_at = record.estimate.t_hat, record.t_hat
    when = []
    if math.isfinite(predicted_at):
        when.append(f"on the curve up to t^ {predicted_at:.2f}")
        if judged_at > predicted_at + 1e-3:
            when.append(f"re-judged at t^ {judged_at:.2f}")
    verb = "stopped" if record.stop else "kept"
    return (f"{verb} at checkpoint t^ {checkpoint:g}"
            + (f" ({', '.join(when)})" if when else "") + f": {reason}")


def _best(complete: list[FrozenTrial]) -> dict[str, Any] | None:
    """The completed trial of lowest value (``None`` when no trial completed)."""
    if not complete:
        return None
    best = min(complete, key=lambda t: t.value)
    return {"trial": best.number, "params": dict(best.params), "loss": best.value,
            "final_val_loss": best.user_attrs.get("final_val_loss")}


def _compute(finished: list[FrozenTrial], failed: list[FrozenTrial],
             proxies: float) -> dict[str, Any]:
    """The compute accounting, in FLOPs: what the finished trials used against what they would
    have used trained to the end, the proxies' and the failed trials' share."""
    used = sum(t.user_attrs.get("flops", 0.0) for t in finished)
    full = sum(t.user_attrs.get("full_flops", 0.0) for t in finished)
    wasted = sum(t.user_attrs.get("flops", 0.0) for t in failed)
    return {
        "unit": "FLOPs, 6 N D",
        "sweep_used": used, "full_sweep": full, "proxies": proxies,
        "failed_trials": wasted,
        "saved_fraction": (1 - used / full) if full else 0.0,
        "saved_fraction_with_proxies": (1 - (used + proxies) / full) if full else 0.0,
    }


def _trial_row(t: FrozenTrial, stop_on_alert: bool) -> dict[str, Any]:
    """The trial table's row of the finished Optuna trial ``t``, its ``verdict`` included."""
    records = trial_records(t)
    rec = latest_record(records)
    # a stopped trial that handed its predicted final to the sampler is stopped; its value is
    # that prediction, not a final (value_is_predicted)
    predicted = value_is_predicted(t)
    row = {
        "trial": t.number, "params": dict(t.params),
        "state": str(trial_state(t)),
        "value_is_predicted": predicted,
        "value": t.value, "t_hat_end": t.user_attrs.get("steps_done", 0)
        / max(1, t.user_attrs.get("total_steps", 1)),
        "predicted": t.user_attrs.get(PREDICTION_ATTR),
        "interval": t.user_attrs.get(INTERVAL_ATTR),
        "level": interval_level(records),
        "predicted_at": t.user_attrs.get(T_HAT_ATTR),
        "checkpoint": None if rec is None else rec.checkpoint,
        "judged_at": None if rec is None else rec.t_hat,
        "probability": None if rec is None else rec.probability,
        "seconds": t.user_attrs.get("seconds"),
        "explanation": None if rec is None else rec.explanation or None,
        "residual_alert": t.user_attrs.get(RESIDUAL_ALERT_ATTR),
        "residual_max": t.user_attrs.get(RESIDUAL_MAX_ATTR),
    }
    row["verdict"] = verdict(rec, row, stop_on_alert)
    return row


def _add_full_sweep_values(rows: list[dict[str, Any]], comparison: dict[str, Any] | None) -> None:
    """Set each row's ``full_sweep_value``: the full sweep's final value of the same parameters
    (``None`` when unknown). Takes the full sweep's ``trial_table`` out of ``comparison``."""
    ref_rows = (comparison or {}).pop("trial_table", None) or []
    for row in rows:
        match = [r for r in ref_rows if r.get("value") is not None
                 and same_params(r["params"], row["params"])]
        row["full_sweep_value"] = match[0]["value"] if match else None


class SummaryStage(Stage):
    """The summary and the curves file of a study run (its :class:`RunContext`), read from
    the sweep's storage (``sweep``)."""

    def __init__(self, ctx: RunContext, sweep: SweepStage) -> None:
        super().__init__(ctx)
        self.sweep = sweep  # the SweepStage whose Optuna study is summarized

    def run(self) -> dict[str, Any]:
        """Stage 4: the summary (:meth:`summarize`), written to ``summary.json`` beside the
        curves file (:meth:`write_curves`); returns the summary."""
        summary = self.summarize()
        self.write_curves()
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    # ------------------------------------------------------------------ summary
    def summarize(self) -> dict[str, Any]:
        """The summary of the study as it stands (``summary.json``): the trials' counts, the
        best trial, the compute used and saved, one row per finished trial, the residual
        monitor's alerts, the verification of stopped trials and the comparison with a full
        sweep when there are any, and how well the stopped trials' finals were predicted."""
        trials = self.sweep.optuna_study().get_trials(deepcopy=False)
        # a stopped trial that handed its predicted final to the sampler is COMPLETE with a
        # predicted value: it counts as stopped (trial_state), and its value is never a
        # measured final
        states = [trial_state(t) for t in trials]
        complete = [t for t, s in zip(trials, states, strict=True) if s == TrialState.COMPLETE]
        pruned = [t for t, s in zip(trials, states, strict=True) if s == TrialState.STOPPED]
        failed = [t for t, s in zip(trials, states, strict=True) if s == TrialState.ENDED]
        finished = complete + pruned
        proxies = self._proxy_flops() if self.prune else 0.0
        summary: dict[str, Any] = {
            "study": self.study.name, "mode": "collapse pruning" if self.prune else "full sweep",
            "backend": self.study.backend, "objective": self.study.objective,
            "trials": {"complete": len(complete), "stopped": len(pruned),
                       "failed_or_interrupted": len(failed)},
            "best": _best(complete),
            "compute": _compute(finished, failed, proxies),
        }
        rows = self._trial_table(finished)
        summary["trial_table"] = rows
        summary["checkpoints"] = list(self.study.pruner["checkpoints"]) if self.prune else []
        summary["interval_level"] = next((r["level"] for r in rows if r["level"]), None)
        summary["diagnostics"] = self._diagnostics(rows)
        summary.update(self._verification(complete, pruned))
        summary["comparison"] = self.compare_with_full_sweep(summary["best"])
        _add_full_sweep_values(rows, summary["comparison"])
        summary["predictions"] = prediction_accuracy(rows, summary.get("verification"))
        summary["wall_time_s"] = time.monotonic() - self.ctx.t0
        summary["universal_curve"] = (str(self.out / "universal_curve.json")
                                      if self.prune else None)
        return summary

    def _trial_table(self, finished: list[FrozenTrial]) -> list[dict[str, Any]]:
        """One row per finished trial, by trial number: its parameters, state and value, the
        prediction it was judged on and the pruner's latest verdict."""
        stop_on_alert = bool(self.study.diagnose["stop_on_alert"])
        return [_trial_row(t, stop_on_alert) for t in sorted(finished, key=lambda t: t.number)]

    def _diagnostics(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The residual monitor's part of the summary: its alerts and any injected fault."""
        diagnose = self.study.diagnose
        return {
            "stop_on_alert": bool(diagnose["stop_on_alert"]),
            "alerts": [{"trial": r["trial"], **r["residual_alert"]} for r in rows
                       if r["residual_alert"]],
            "inject": None if not diagnose.get("inject") else {
                "trial": diagnose["inject_trial"], "fault": diagnose["inject"]},
        }

    def _verification(self, complete: list[FrozenTrial],
                      pruned: list[FrozenTrial]) -> dict[str, Any]:
        """``verify.json`` (``hpo run --verify``) as summary entries: ``verification``, the
        stopped trials trained to their end, and, once every stopped trial is verified,
        ``verified_full_sweep_best``, the best of all trials' true finals. Empty without it."""
        verify_path = self.out / "verify.json"
        if not verify_path.exists():
            return {}
        ver = json.loads(verify_path.read_text())
        out: dict[str, Any] = {"verification": sorted(ver.values(), key=lambda v: v["trial"])}
        if len(ver) == len(pruned) and complete:
            everyone = [(t.value, t.number, dict(t.params)) for t in complete] + [
                (v["actual"], v["trial"], v["params"]) for v in ver.values()]
            value, number, params = min(everyone, key=lambda x: x[0])
            out["verified_full_sweep_best"] = {"trial": number, "params": params, "loss": value}
        return out

    def _proxy_flops(self) -> float:
        total = 0.0
        for path in (self.out / "proxies").glob("*.csv.gz"):
            df = pd.read_csv(path, usecols=["n_params", "tokens"], nrows=1)
            total += flops(df["n_params"].iloc[0], df["tokens"].iloc[0])
        return total

    def full_sweep_folder(self) -> Path:
        return self.out / "full_sweep"

    def compare_with_full_sweep(self, best: dict | None) -> dict[str, Any] | None:
        """Compare the choice with a full sweep's summary: ``<output>/full_sweep/summary.json``
        (``hpo run --no-prune``) or the study's ``reference`` file."""
        if not self.prune:
            return None
        candidates = [self.full_sweep_folder() / "summary.json"]
        if self.study.reference is not None:
            candidates.append(self.study.reference)
        for path in candidates:
            if not path.is_file():
                continue
            try:
                ref = json.loads(path.read_text())
                ref_best = ref["best"]
            except (OSError, ValueError, KeyError):
                continue
            if not ref_best:
                continue
            same = best is not None and same_params(best["params"], ref_best["params"])
            return {"source": str(path), "full_sweep_best": ref_best, "same_choice": same,
                    "trial_table": ref.get("trial_table"),
                    "full_sweep_wall_time_s": ref.get("wall_time_s"),
                    "full_sweep_compute": (ref.get("compute") or {}).get("full_sweep")}
        return None

    # ------------------------------------------------------------------ curves
    def write_curves(self) -> Path:
        """``curves.csv.gz``: every proxy, trial and verification curve in the curve format."""
        from hpo.models.training import CURVE_COLUMNS

        frames = []
        for sub in ("proxies", "trials"):
            for path in sorted((self.out / sub).glob("*.csv.gz")):
                frames.append(pd.read_csv(path))
        out = self.out / "curves.csv.gz"
        if frames:
            df = pd.concat(frames, ignore_index=True)
            cols = [*CURVE_COLUMNS, *[c for c in df.columns if c not in CURVE_COLUMNS]]
            tmp = out.with_name(out.name + ".tmp")
            df[cols].to_csv(tmp, index=False, compression="gzip")
            os.replace(tmp, out)
        return out
