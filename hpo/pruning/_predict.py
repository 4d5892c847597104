"""Helpers the Optuna pruner and the Ray Tune scheduler share (no optuna or ray import).

* the JSON codec of a trial's controls (``controls_to_json`` / ``controls_from_json``): a
  ``hpo.predictors.Controls`` as a small dict; an exact LR schedule is stored as knots
  ``[[step, lr], ...]`` (every step for short runs, at most ~2k knots plus the corners of
  piecewise-linear schedules for long ones) and rebuilt by linear interpolation;
* ``build_controls``: validated ``Controls`` from keyword arguments (``describe_trial``, Ray
  configs), with ``warmup_steps`` read by :func:`warmup_steps_for` (a value in (0, 1) is a
  fraction of ``total_steps``, as ``hpo train --warmup`` and the study YAML's ``warmup``);
* ``load_reference`` / ``fit_reference``: the reference curve from a
  path, a dict or a fitted ``hpo.predictors.UniversalCurve``, or fitted on finished trials;
* ``WarnOnce``: one warning per cause and owner.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CONTROL_FIELDS",
    "build_controls",
    "warmup_steps_for",
    "controls_to_json",
    "controls_from_json",
    "load_reference",
    "fit_reference",
    "WarnOnce",
]


CONTROL_FIELDS = (
    "total_steps",
    "tpp",
    "tau",
    "schedule",
    "warmup_steps",
    "lr_schedule",
    "n_params",
    "batch_tokens",
    "peak_lr",
    "weight_decay",
    "base_lr",
)
_MAX_UNIFORM_KNOTS = 2049
_MAX_CORNERS = 2048


class WarnOnce:
    """Emit each warning cause at most once for this owner, as a ``UserWarning`` (one channel:
    ``warnings`` filters silence it, ``logging.captureWarnings`` routes it to logging)."""

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._seen: set[str] = set()

    def __call__(self, cause: str, message: str) -> None:
        if cause in self._seen:
            return
        self._seen.add(cause)
        warnings.warn(f"{self._owner}: {message}", UserWarning, stacklevel=3)


def _full_lr_schedule(lr_schedule: Any, total_steps: int) -> np.ndarray:
    arr = np.asarray(lr_schedule, dtype=float).ravel()
    if arr.size == total_steps:  # LR at steps 0..T-1: hold the last one at step T
        arr = np.concatenate([arr, arr[-1:]])
    if arr.size != total_steps + 1:
        raise ValueError(
            f"lr_schedule must give the LR at every step (total_steps={total_steps} or "
            f"{total_steps + 1} values), but got {arr.size} values"
        )
    if not np.all(np.isfinite(arr)) or arr.max() <= 0:
        raise ValueError("lr_schedule must be finite with a positive peak")
    return arr / arr.max()


def warmup_steps_for(warmup: float | None, total_steps: int) -> float | None:
    """Warmup in optimizer steps from ``warmup`` as the user gives it: a value in (0, 1) is a
    fraction of ``total_steps`` (``round(warmup * total_steps)`` steps, as ``hpo train --warmup``
    and the study YAML's ``warmup`` read it); 0 or a value >= 1 is a number of steps, kept as
    given. ``None`` (and NaN, "unknown") passes through; a negative or infinite value, and a
    warmup of ``total_steps`` or more (no step would train at the peak LR's schedule), raise
    ``ValueError``."""
    if warmup is None:
        return None
    if isinstance(warmup, bool):
        raise ValueError(f"warmup_steps must be a number, but got warmup_steps={warmup!r}")
    value = float(warmup)
    if math.isnan(value):
        return value
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            "warmup_steps must be a fraction of total_steps in (0, 1) or a number of steps "
            f">= 0, but got warmup_steps={warmup!r}"
        )
    steps = float(round(value * total_steps)) if 0 < value < 1 else value
    if steps >= total_steps:
        raise ValueError(
            f"warmup_steps must be fewer than total_steps={total_steps}, but got "
            f"warmup_steps={warmup!r}")
    return steps


def build_controls(**kwargs: Any) -> Any:
    """A validated ``hpo.predictors.Controls`` from keyword arguments named like its fields.

    ``warmup_steps`` in (0, 1) is a fraction of ``total_steps``, stored as steps; 0 or >= 1 is a
    number of steps (:func:`warmup_steps_for`).
    ``lr_schedule`` (a list or array of the LR at every step, any units, ``total_steps`` or
    ``total_steps + 1`` values) is normalized to its peak. A schedule must be known: either
    ``lr_schedule`` or a curve-format ``schedule`` name; otherwise ``ValueError`` says what to
    give. Unknown keywords raise ``TypeError``.
    """
    from hpo.predictors import Controls

    unknown = sorted(set(kwargs) - set(CONTROL_FIELDS))
    if unknown:
        raise TypeError(f"unknown control(s) {', '.join(unknown)}; known: {CONTROL_FIELDS}")
    total = kwargs.get("total_steps")
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if not isinstance(total, (int, np.integer)) or isinstance(total, bool) or total <= 0:
        raise ValueError(f"total_steps must be a positive int, but got {total!r}")
    values = {k: v for k, v in kwargs.items() if v is not None}
    values["total_steps"] = int(total)
    if "warmup_steps" in values:
        values["warmup_steps"] = warmup_steps_for(values["warmup_steps"], int(total))
    if "lr_schedule" in values:
        values["lr_schedule"] = _full_lr_schedule(values["lr_schedule"], int(total))
    controls = Controls(**values)
    if not controls.has_schedule:
        if controls.schedule is not None:
            controls.eta(np.zeros(1))  # raises the ValueError naming the known schedule names
        raise ValueError(
            "the LR schedule is unknown: give schedule= (a curve-format name such as 'linear', "
            "'cosine:0.1', 'wsd:linear:0.2', 'constant') or lr_schedule= (the LR at every step), "
            f"but got schedule={kwargs.get('schedule')!r}"
        )
    return controls


def _knots(lr: np.ndarray) -> list[list[float]]:
    n = lr.size
    if n <= _MAX_UNIFORM_KNOTS:
        idx = np.arange(n)
    else:
        uniform = np.unique(np.linspace(0, n - 1, _MAX_UNIFORM_KNOTS).round().astype(int))
        second = np.abs(np.diff(lr, 2))
        corners = np.nonzero(second > 1e-6 * float(np.max(np.abs(lr))))[0] + 1
        if corners.size > _MAX_CORNERS:
            corners = corners[:0]
        idx = np.unique(np.concatenate([uniform, corners, corners - 1, corners + 1]))
        idx = idx[(idx >= 0) & (idx < n)]
    return [[int(i), float(lr[i])] for i in idx]


def controls_to_json(controls: Any) -> dict[str, Any]:
    """JSON-friendly dict of a ``Controls`` (exact LR schedule as ``lr_knots``)."""
    data = controls.to_dict()
    lr = data.pop("lr_schedule", None)
    if lr is not None:
        arr = np.asarray(lr, dtype=float)
        data["lr_knots"] = _knots(arr / arr.max())
    return {k: v for k, v in data.items() if v is not None}


def controls_from_json(data: Mapping[str, Any]) -> Any:
    """Inverse of :func:`controls_to_json`; ``ValueError`` when malformed."""
    from hpo.predictors import Controls

    values = dict(data)
    knots = values.pop("lr_knots", None)
    if "total_steps" not in values:
        raise ValueError("stored controls lack total_steps")
    total = int(values["total_steps"])
    values["total_steps"] = total
    if knots is not None:
        k = np.asarray(knots, dtype=float).reshape(-1, 2)
        values["lr_schedule"] = np.interp(np.arange(total + 1, dtype=float), k[:, 0], k[:, 1])
    return Controls.from_dict(values)


def load_reference(reference: Any) -> Any:
    """A fitted ``hpo.predictors.UniversalCurve`` from a path (JSON), a dict, or a curve object."""
    from hpo.predictors import load_universal_curve

    if isinstance(reference, (str, Path, Mapping)):
        return load_universal_curve(reference)
    if hasattr(reference, "predict") and hasattr(reference, "to_dict"):
        return reference
    raise TypeError(
        "reference must be a path to a curve JSON file, its dict, or a fitted "
        f"predictors.UniversalCurve, but got {type(reference).__name__}"
    )


def fit_reference(runs: Sequence[tuple[str, np.ndarray, np.ndarray, Any]], sign: float) -> Any:
    """A universal curve fitted on finished trials ``(run_id, steps, values, controls)``.

    Values are multiplied by ``sign`` (so a maximized ``-loss`` becomes a loss). Non-finite
    points are dropped. The trials are one sweep (``group`` ``"study"``): the curve's pair law
    is measured on their pairs. Raises ``ValueError`` when the fit is impossible.
    """
    from hpo.predictors import RunCurve, fit_universal_curve

    curves = []
    for run_id, steps, values, controls in runs:
        s = np.asarray(steps, dtype=float)
        v = sign * np.asarray(values, dtype=float)
        ok = np.isfinite(s) & np.isfinite(v)
        s, v = s[ok], v[ok]
        order = np.argsort(s, kind="stable")
        curves.append(
            RunCurve(run_id=str(run_id), steps=s[order], losses=v[order], controls=controls,
                     group="study")
        )
    if not curves:
        raise ValueError("no finished trial to fit a reference curve on")
    return fit_universal_curve(curves)


def finite_or_none(x: float | None) -> float | None:
    """``x`` as float when finite, else ``None`` (JSON storage of numbers)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
