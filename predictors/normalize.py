"""Normalization (L / L_final), smoothing and interpolation of loss curves on a t^ grid.

All functions are pure and take numpy arrays; ``steps`` must be sorted and unique (use
:func:`hpo.predictors.io.run_arrays`), ``t_hat = steps / total_steps``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "relative_noise",
    "NOISY",
    "check_curve",
    "moving_average",
    "ema",
    "smooth_curve",
    "final_loss_estimate",
    "normalize_curve",
    "interpolate_on_grid",
    "T_GRID",
]

#: The default t^ grid for fitting and comparing normalized curves.
T_GRID = np.linspace(0.02, 1.0, 99)


def check_curve(
    steps: np.ndarray, losses: np.ndarray, min_points: int = 2, total_steps: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Validated float copies of ``steps`` and ``losses``, sorted by step, duplicates averaged.

    Raises ``ValueError`` on a shape mismatch, non-finite or non-positive losses, non-finite or
    negative steps, a step beyond ``total_steps``, or fewer than ``min_points`` distinct steps.
    """
    s = np.asarray(steps, dtype=float).ravel()
    v = np.asarray(losses, dtype=float).ravel()
    if s.shape != v.shape:
        raise ValueError(f"steps and losses differ in length: {s.size} != {v.size}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"losses must be finite, but got {int((~np.isfinite(v)).sum())} NaN/inf")
    if np.any(v <= 0):
        raise ValueError("losses must be > 0 to be normalized")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("steps must be finite and >= 0")
    if total_steps is not None and s.size and s.max() > total_steps:
        raise ValueError(f"step {s.max():g} is beyond total_steps {total_steps}")
    if s.size and np.any(np.diff(s) <= 0):
        uniq, inv = np.unique(s, return_inverse=True)
        v = np.bincount(inv, weights=v) / np.bincount(inv)
        s = uniq
    if s.size < min_points:
        raise ValueError(f"need at least {min_points} distinct steps, but got {s.size}")
    return s, v


def moving_average(t: np.ndarray, y: np.ndarray, window: float) -> np.ndarray:
    """Trailing moving average of ``y`` over a window of width ``window`` in units of ``t``.

    Point i averages the points with t in (t_i - window, t_i]; trailing (causal), so a prefix
    gives the same values as the full curve. ``window <= 0`` returns a copy.
    """
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if window <= 0 or y.size == 0:
        return y.copy()
    c = np.concatenate([[0.0], np.cumsum(y)])
    lo = np.searchsorted(t, t - window, side="right")
    hi = np.arange(1, y.size + 1)
    return (c[hi] - c[lo]) / (hi - lo)


def ema(y: np.ndarray, alpha: float) -> np.ndarray:
    """Bias-corrected exponential moving average with weight ``alpha`` on the newest point."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], but got {alpha=}")
    y = np.asarray(y, dtype=float)
    out = np.empty_like(y)
    acc, norm = 0.0, 0.0
    for i, value in enumerate(y):
        acc = (1 - alpha) * acc + alpha * value
        norm = (1 - alpha) * norm + alpha
        out[i] = acc / norm
    return out


def smooth_curve(t_hat: np.ndarray, losses: np.ndarray, window: float = 0.02) -> np.ndarray:
    """Centered moving average in t^ (half-width ``window / 2``), shrinking at the ends.

    The window is symmetric where the data allow and shrinks symmetrically near both ends, so a
    linear trend is reproduced exactly and the last point is not lagged.
    """
    t = np.asarray(t_hat, dtype=float)
    y = np.asarray(losses, dtype=float)
    if window <= 0 or y.size < 3:
        return y.copy()
    half = window / 2
    c = np.concatenate([[0.0], np.cumsum(y)])
    h = np.minimum(half, np.minimum(t - t[0], t[-1] - t))
    lo = np.searchsorted(t, t - h - 1e-12, side="left")
    hi = np.searchsorted(t, t + h + 1e-12, side="right")
    return (c[hi] - c[lo]) / np.maximum(hi - lo, 1)


def relative_noise(losses: np.ndarray) -> float:
    """Per-point relative noise of a curve, from the first differences of its last quarter
    (std / sqrt 2 / mean); 0 for fewer than 8 points."""
    y = np.asarray(losses, dtype=float)
    if y.size < 8:
        return 0.0
    q = y[-max(8, y.size // 4):]
    return float(np.std(np.diff(q)) / math.sqrt(2) / np.mean(q))


#: per-point relative noise above which a curve counts as noisy (per-batch training losses)
NOISY = 0.005


def final_loss_estimate(
    t_hat: np.ndarray,
    losses: np.ndarray,
    tail: float = 0.03,
    at: float | None = None,
    noisy_tail: float = 0.25,
) -> float:
    """The loss at the end of a complete curve, evaluated at t^ = ``at`` (default: the last
    point; ``at=1.0`` extends to the planned end when logging stopped just short of it).

    Smooth curves (see :func:`relative_noise` and ``NOISY``): a line fitted over the last
    ``tail`` of t^ (at least 3 points), unbiased where the curve still falls linearly.
    Noisy curves (per-batch training losses): a quadratic over the last ``noisy_tail`` of t^
    (at least 10 points), which averages the noise down at the price of a small curvature bias.
    """
    t = np.asarray(t_hat, dtype=float)
    y = np.asarray(losses, dtype=float)
    if y.size == 0:
        raise ValueError("empty curve")
    if y.size < 3:
        return float(y[-1])
    deg = 1
    k = max(3, int(np.sum(t >= t[-1] - tail)))
    if relative_noise(y) > NOISY and y.size >= 20:
        deg = 2
        k = max(10, int(np.sum(t >= t[-1] - noisy_tail)))
    tt, yy = t[-k:], y[-k:]
    if np.ptp(tt) <= 0:
        return float(np.mean(yy))
    coef = np.polyfit(tt - tt[-1], yy, deg)
    end = tt[-1] if at is None else max(float(at), tt[-1])
    return float(np.polyval(coef, end - tt[-1]))


def normalize_curve(
    t_hat: np.ndarray, losses: np.ndarray, final: float | None = None, window: float = 0.02
) -> np.ndarray:
    """The smoothed normalized curve l(t^) = L(t^) / L_final at the logged points.

    ``final`` defaults to :func:`final_loss_estimate` of the raw curve.
    """
    l_final = final_loss_estimate(t_hat, losses) if final is None else float(final)
    return smooth_curve(t_hat, losses, window) / l_final


def interpolate_on_grid(
    t_hat: np.ndarray, values: np.ndarray, grid: np.ndarray = T_GRID
) -> np.ndarray:
    """Linear interpolation of ``values`` at ``grid``; NaN outside the logged range."""
    t = np.asarray(t_hat, dtype=float)
    v = np.asarray(values, dtype=float)
    g = np.asarray(grid, dtype=float)
    out = np.interp(g, t, v)
    out[(g < t[0] - 1e-9) | (g > t[-1] + 1e-9)] = np.nan
    return out
