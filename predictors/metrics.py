"""Collapse metrics: how tightly normalized curves of different runs overlay.

All functions take normalized curves sampled on a common t^ grid (rows = runs, NaN = missing);
use :func:`hpo.predictors.curves.normalized_run` to build them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hpo.predictors.curves import normalized_run
from hpo.predictors.io import RunCurve

__all__ = [
    "collapse_spread",
    "seed_spread",
    "collapse_report",
    "curve_mae",
    "normalized_matrix",
    "SPREAD_GRID",
]

#: the paper's comparison range, t^ in [0.2, 1]
SPREAD_GRID = np.round(np.linspace(0.2, 1.0, 81), 6)


def normalized_matrix(
    runs: Sequence[RunCurve], grid: np.ndarray = SPREAD_GRID, window: float = 0.02
) -> np.ndarray:
    """Rows of smoothed normalized curves L / L_final of complete ``runs`` on ``grid``.

    Grid points within ``window / 2`` of the end are NaN: there the centered moving average has
    shrunk to the last few points, so it shows single-batch noise rather than the curve (on
    per-batch training losses that noise, not the runs, would set the spread at t^ = 1).
    """
    grid = np.asarray(grid, dtype=float)
    rows = np.array([normalized_run(r, grid, window) for r in runs], dtype=float)
    if rows.size:
        rows[:, grid > 1.0 - window / 2 + 1e-9] = np.nan
    return rows


def collapse_spread(curves: np.ndarray) -> float:
    """Max over t^ of (max - min across runs) of normalized curves (rows = runs).

    Grid points covered by fewer than 2 runs are ignored; NaN when none is covered by 2.
    This is the "max spread across widths" of a family's normalized curves, to compare with
    the seed-to-seed spread (:func:`seed_spread`): a family collapses when the two are close.
    """
    c = np.asarray(curves, dtype=float)
    if c.ndim != 2:
        raise ValueError(f"curves must be 2-D (runs, grid), but got shape {c.shape}")
    ok = np.sum(np.isfinite(c), axis=0) >= 2
    if not ok.any():
        return float("nan")
    spread = np.nanmax(c[:, ok], axis=0) - np.nanmin(c[:, ok], axis=0)
    return float(np.max(spread))


def seed_spread(curves_by_setting: Sequence[np.ndarray]) -> float:
    """The seed noise floor: the largest :func:`collapse_spread` among groups of seeds of one
    setting (each element: rows = seeds of one setting). NaN when no group has 2 seeds."""
    values = [collapse_spread(c) for c in curves_by_setting if np.asarray(c).shape[0] >= 2]
    values = [v for v in values if np.isfinite(v)]
    return float(max(values)) if values else float("nan")


def curve_mae(predicted: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute difference of two normalized curves over their common finite points."""
    p = np.asarray(predicted, dtype=float)
    a = np.asarray(actual, dtype=float)
    ok = np.isfinite(p) & np.isfinite(a)
    if not ok.any():
        raise ValueError("curves share no finite point")
    return float(np.mean(np.abs(p[ok] - a[ok])))


def collapse_report(
    runs: Sequence[RunCurve], seed_groups: Sequence[Sequence[RunCurve]] | None = None
) -> dict[str, float]:
    """Spread across ``runs`` (e.g. sizes at one TPP, tau, schedule) against the seed spread.

    Returns ``{"spread": ..., "seed_spread": ..., "ratio": spread / seed_spread}`` (NaN where
    no seed group has two runs).
    """
    spread = collapse_spread(normalized_matrix(runs))
    seeds = (
        seed_spread([normalized_matrix(g) for g in seed_groups]) if seed_groups else float("nan")
    )
    ratio = spread / seeds if np.isfinite(seeds) and seeds > 0 else float("nan")
    return {"spread": spread, "seed_spread": seeds, "ratio": ratio}
