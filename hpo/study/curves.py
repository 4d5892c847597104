"""What a study reads from loss curves: the train curves of a folder's curve files and a
trial's objective value from its curve rows."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def curve_runs(folder: Path, pattern: str = "*.csv.gz") -> list[Any]:
    """The train curves (``hpo.predictors.RunCurve``) of the curve files in ``folder``."""
    from hpo.predictors import read_curves, runs_from_frame

    paths = sorted(folder.glob(pattern))
    return runs_from_frame(read_curves(paths), split="train") if paths else []


def objective_value(rows: list[dict], objective: str) -> float:
    """The trial's value from its curve rows: the smoothed final train loss (what the predictor
    predicts, :func:`hpo.predictors.final_loss_estimate` at t^ = 1) or the last val loss."""
    import numpy as np

    from hpo.predictors.normalize import final_loss_estimate

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
