"""What a study reads from and writes on its Optuna trials: the names of its trial attributes,
the identity a trial trains under, the Optuna distribution of each searched name, the equality of
two param dicts, a trial's objective value from its curve rows, how well the trials' final losses
were predicted, and the text of params and losses in progress lines."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna.distributions as od
from optuna.trial import FrozenTrial

from hpo.predictors.normalize import final_loss_estimate
from hpo.pruning import TrialState

INTERRUPTED_ATTR = "hpo:interrupted"
RESUME_RUN_ID_ATTR = "resume_run_id"  # a re-run trial trains under its original's identity
HEARTBEAT_ATTR = "hpo:heartbeat"  # system attr: when the trial's worker last marked it alive
FAIL_REASON_ATTR = "fail_reason"  # user attr: why a trial failed, in one line
RESIDUAL_ALERT_ATTR = "residual_alert"  # user attr: {t_hat, residual, threshold} of the alert
RESIDUAL_MAX_ATTR = "residual_max"  # user attr: the largest absolute collapse residual


def run_id_of(frozen: FrozenTrial) -> str:
    """The identity a trial's training runs under: that of the trial it continues, if any."""
    return str(frozen.user_attrs.get(RESUME_RUN_ID_ATTR) or f"trial-{frozen.number}")


def distribution(d: dict[str, Any]) -> od.BaseDistribution:
    """The Optuna distribution of one ``search`` entry of the study."""
    if d["type"] == "categorical":
        return od.CategoricalDistribution(d["choices"])
    if d["type"] == "int":
        return od.IntDistribution(d["low"], d["high"], log=d.get("log", False),
                                  step=d.get("step") or 1)
    return od.FloatDistribution(float(d["low"]), float(d["high"]), log=d.get("log", False),
                                step=d.get("step"))


def same_params(a: dict[str, Any], b: dict[str, Any], rel: float = 1e-6) -> bool:
    """Whether two parameter dicts are equal (floats to ``rel``)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if not math.isclose(float(x), float(y), rel_tol=rel):
                return False
        elif x != y:
            return False
    return True


def objective_value(rows: list[dict], objective: str) -> float:
    """The trial's value from its curve rows: the smoothed final train loss (what the predictor
    predicts, :func:`hpo.predictors.final_loss_estimate` at t^ = 1) or the last val loss."""
    if objective == "val":
        val = [r["loss"] for r in rows if r["split"] == "val"]
        return float(val[-1]) if val else math.nan
    train = [r for r in rows if r["split"] == "train"]
    if not train:
        return math.nan
    total = float(train[0]["total_steps"])
    t = np.array([r["step"] for r in train], dtype=float) / total
    y = np.array([r["loss"] for r in train], dtype=float)
    ok = np.isfinite(y)
    if not ok.any():
        return math.nan
    return final_loss_estimate(t[ok], y[ok], at=1.0)


def prediction_accuracy(rows: list[dict[str, Any]],
                        verification: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """How well the trials' final losses were predicted (at each trial's latest checkpoint):
    against the final value of completed trials, the ``--verify`` value of stopped ones, or the
    full sweep's value of the same params. ``{"n", "inside", "median_abs_err",
    "max_abs_err"}`` (relative errors) and a ``per_trial`` list; n 0 when nothing is known."""
    verified = {v["trial"]: v["actual"] for v in verification or []}
    per = []
    for r in rows:
        truth = r["value"] if r["state"] == TrialState.COMPLETE else verified.get(
            r["trial"], r.get("full_sweep_value"))
        if truth is None or r.get("predicted") is None:
            continue
        itv = r.get("interval")
        per.append({"trial": r["trial"], "predicted": r["predicted"], "actual": truth,
                    "rel_err": r["predicted"] / truth - 1,
                    "inside": None if not itv else bool(itv[0] <= truth <= itv[1])})
    errs = sorted(abs(p["rel_err"]) for p in per)
    return {
        "n": len(per),
        "inside": sum(1 for p in per if p["inside"]),
        "median_abs_err": (errs[len(errs) // 2] if len(errs) % 2 else
                           0.5 * (errs[len(errs) // 2 - 1] + errs[len(errs) // 2])) if errs
        else None,
        "max_abs_err": errs[-1] if errs else None,
        "per_trial": per,
    }


def params_text(params: dict[str, Any]) -> str:
    """``{name=value, ...}``, sorted by name, floats to 4 significant digits."""
    return "{" + ", ".join(f"{k}={fmt_param(v)}" for k, v in sorted(params.items())) + "}"


def fmt_param(v: Any) -> str:
    """One param value: a float to 4 significant digits, anything else as ``str``."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def fmt_number(x: Any) -> str:
    """A loss to 4 decimals, or ``n/a`` for ``None``."""
    return "n/a" if x is None else f"{float(x):.4f}"
