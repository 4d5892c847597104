"""Collapse diagnostics: the residual of a run against its reference, and the alert rule.

The diagnostic of "Scaling with Collapse" (Bergsma et al. 2025, arXiv 2509.25087): a run that
drifts off the universal curve is broken (a numerical bug, a bad restart, corrupted data), and
the collapse residual shows it while the raw loss still looks healthy (on their 1.8B run from
~60% of training, while the smoothed loss rose only after ~90%).

The residual, in log units (about a relative deviation: 0.01 is 1% of the loss):

1. the run is aligned on its points with t^ in :data:`ALIGN_WINDOW`: L_final is the
   least-squares fit of log L = log L_final + log lhat(t^) there
   (:func:`~predictors.predict.align_final_loss`), fixed once the window has passed;
2. every point from the window's start on has the residual r = log L - log L_final - log lhat,
   smoothed as the mean of r over the last :data:`SMOOTH_WINDOW` of t^;
3. after the window, the run **alerts** at the first point where the smoothed residual, in
   absolute value, exceeds the threshold.

The threshold is the rule's one parameter, calibrated on the proxies (:func:`residual_threshold`):
:data:`THRESHOLD_MARGIN` times the largest smoothed residual of any proxy against the curve
refitted without it (the held-out fits of the interval calibration), so that a clean proxy never
alerts, even on a reference that has not seen it; a run beyond the proxies' size, TPP or tau
gets it widened as its prediction interval is. ``fit_universal_curve`` stores it in the
curve's calibration; :class:`ResidualMonitor` reads it from there.

:func:`raw_loss_rise` and :func:`raw_loss_alert` are the raw-loss rule it is compared with: the
smoothed loss rising a fraction x above its running minimum.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hpo.predictors.curves import UniversalCurve
from hpo.predictors.normalize import moving_average
from hpo.predictors.predict import EXTRAPOLATION_WIDENING, align_final_loss, extrapolation
from hpo.predictors.schedules import Controls

__all__ = [
    "ResidualMonitor",
    "MonitorState",
    "residual_threshold",
    "reference_threshold",
    "raw_loss_rise",
    "raw_loss_alert",
    "ALIGN_WINDOW",
    "SMOOTH_WINDOW",
    "THRESHOLD_MARGIN",
    "MIN_THRESHOLD",
]

#: t^ range on which a run is aligned to the reference; no alert before its end
ALIGN_WINDOW = (0.1, 0.3)
#: the residual is averaged over this trailing span of t^ (the run's step noise averages out)
SMOOTH_WINDOW = 0.05
#: the threshold is this many times the largest held-out proxy residual
THRESHOLD_MARGIN = 1.25
#: the smallest threshold (0.2% of the loss): below it a curve fitted on a few very clean
#: proxies would alert on differences no run could show on purpose
MIN_THRESHOLD = 0.002


@dataclass
class MonitorState:
    """What the monitor knows so far (see :class:`ResidualMonitor`).

    ``history`` holds ``(t_hat, residual, smoothed)`` for every point from the alignment
    window's start on (filled in once the window has passed); ``residual`` is the latest
    smoothed residual; ``max_abs_residual`` the largest absolute smoothed residual after the
    window; ``alert_t`` the t^ of the first alert (``None`` while none).
    """

    l_final: float | None = None
    residual: float | None = None
    max_abs_residual: float = 0.0
    alert_t: float | None = None
    history: list[tuple[float, float, float]] = field(default_factory=list)

    @property
    def alerted(self) -> bool:
        return self.alert_t is not None


class ResidualMonitor:
    """The collapse residual of one run against ``curve``, fed point by point.

    ``update(step, loss)`` adds one point (steps increasing, up to ``controls.total_steps``) and
    returns whether the run is in alert after it: the smoothed residual above ``threshold`` at
    this point. ``state.alert_t`` keeps the t^ of the first alert. ``threshold`` (log units)
    defaults to the one calibrated on the curve's proxies (:func:`reference_threshold`), widened
    for a run beyond the proxies as the prediction intervals are: times
    1 + ``EXTRAPOLATION_WIDENING`` x d, d the run's log distance beyond the proxies' size, TPP
    and tau (:func:`~hpo.predictors.predict.extrapolation`). A curve without a threshold (fitted
    without calibration, or on fewer than 3 proxies) needs one given.

    Raises ``ValueError`` for a threshold that is not a number > 0 (``math.inf``: never
    alerts), a non-finite or non-positive loss, a step that does not increase or a step beyond
    total_steps.
    """

    def __init__(self, curve: UniversalCurve, controls: Controls,
                 threshold: float | None = None) -> None:
        if threshold is None:
            base = reference_threshold(curve)
            if base is None:
                raise ValueError("the reference curve has no residual threshold (fitted without "
                                 "calibration or on fewer than 3 proxies): pass threshold=")
            threshold = base * (1 + EXTRAPOLATION_WIDENING * extrapolation(curve.ranges,
                                                                            controls))
        if isinstance(threshold, bool) or not (isinstance(threshold, (int, float))
                                               and threshold > 0):
            raise ValueError(f"threshold must be a number > 0, but got {threshold=}")
        self.curve = curve
        self.controls = controls
        self.threshold = float(threshold)
        self.state = MonitorState()
        self._window: list[tuple[float, float, float]] = []  # (t, log L, log lhat) to align on
        self._recent: deque[tuple[float, float]] = deque()  # (t, r) of the smoothing span
        self._last_step = -math.inf

    def update(self, step: float, loss: float) -> bool:
        """Add one point; whether the run is in alert after it."""
        t = self._check(step, loss)
        ref = float(np.log(self.curve.predict(np.array([t]), self.controls))[0])
        return self._feed(t, math.log(loss), ref)

    def run(self, steps: Iterable[float], losses: Iterable[float]) -> float | None:
        """Feed a whole curve (the reference evaluated once for all its points); the t^ of the
        first alert (``None`` if none)."""
        pts = [(float(s), float(v)) for s, v in zip(steps, losses, strict=True)]
        ts = [self._check(s, v) for s, v in pts]
        refs = np.log(self.curve.predict(np.array(ts), self.controls)) if ts else []
        for t, (_, v), ref in zip(ts, pts, refs, strict=True):
            self._feed(t, math.log(v), float(ref))
        return self.state.alert_t

    def _check(self, step: float, loss: float) -> float:
        """Validate one point; its t^."""
        if isinstance(loss, bool) or not (isinstance(loss, (int, float)) and math.isfinite(loss)
                                          and loss > 0):
            raise ValueError(f"loss must be finite and > 0, but got {loss=}")
        if step <= self._last_step:
            raise ValueError(f"steps must increase, but got {step} after {self._last_step}")
        if step > self.controls.total_steps:
            raise ValueError(f"step {step} is beyond total_steps {self.controls.total_steps}")
        self._last_step = step
        return step / self.controls.total_steps

    def _feed(self, t: float, log_loss: float, log_ref: float) -> bool:
        lo, hi = ALIGN_WINDOW
        st = self.state
        if t < lo:
            return False
        if st.l_final is None:
            self._window.append((t, log_loss, log_ref))
            if t <= hi:
                return False
            # the window has passed (or held no point: this one aligns the run)
            inside = [p for p in self._window if p[0] <= hi] or self._window
            st.l_final = align_final_loss(np.exp([p[1] for p in inside]),
                                          np.exp([p[2] for p in inside]))
            log_final = math.log(st.l_final)
            for tw, lw, rw in self._window[:-1]:
                self._add(tw, lw - log_final - rw)
            self._window.clear()
        self._add(t, log_loss - math.log(st.l_final) - log_ref)
        if t <= hi:
            return False
        assert st.residual is not None
        st.max_abs_residual = max(st.max_abs_residual, abs(st.residual))
        alert = abs(st.residual) > self.threshold
        if alert and st.alert_t is None:
            st.alert_t = t
        return alert

    def _add(self, t: float, r: float) -> None:
        self._recent.append((t, r))
        while self._recent[0][0] <= t - SMOOTH_WINDOW:
            self._recent.popleft()
        smoothed = sum(p[1] for p in self._recent) / len(self._recent)
        self.state.residual = smoothed
        self.state.history.append((t, r, smoothed))


def max_residual(curve: UniversalCurve, controls: Controls, steps: np.ndarray,
                 losses: np.ndarray) -> float | None:
    """The largest absolute smoothed residual of a complete curve after the alignment window
    (``None`` when it has no point there or the curve cannot predict its controls)."""
    mon = ResidualMonitor(curve, controls, threshold=math.inf)
    try:
        mon.run(steps, losses)
    except ValueError:
        return None
    return mon.state.max_abs_residual if mon.state.l_final is not None else None


def residual_threshold(max_residuals: Iterable[float | None]) -> float:
    """The alert threshold from the proxies' largest held-out residuals:
    :data:`THRESHOLD_MARGIN` times their maximum, at least :data:`MIN_THRESHOLD`."""
    values = [float(v) for v in max_residuals if v is not None and math.isfinite(v)]
    return max(THRESHOLD_MARGIN * max(values, default=0.0), MIN_THRESHOLD)


def reference_threshold(curve: UniversalCurve) -> float | None:
    """The residual threshold stored in ``curve.calibration["monitor"]`` (``None`` if absent)."""
    cal = curve.calibration or {}
    mon = cal.get("monitor") if isinstance(cal, dict) else None
    value = mon.get("threshold") if isinstance(mon, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


# -- the raw-loss rule ----------------------------------------------------------------------

def _rise(t_hat: np.ndarray, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """t^ from the alignment window's start on, and the smoothed loss's relative rise over its
    running minimum there."""
    t = np.asarray(t_hat, dtype=float)
    s = moving_average(t, np.asarray(losses, dtype=float), SMOOTH_WINDOW)
    keep = t >= ALIGN_WINDOW[0]
    s = s[keep]
    return t[keep], s / np.minimum.accumulate(s) - 1.0 if s.size else s


def raw_loss_rise(t_hat: np.ndarray, losses: np.ndarray) -> float:
    """The largest relative rise of the smoothed loss (mean over the last
    :data:`SMOOTH_WINDOW` of t^) above its running minimum, from t^ = ALIGN_WINDOW[0] on."""
    _, rise = _rise(t_hat, losses)
    return float(rise.max()) if rise.size else 0.0


def raw_loss_alert(t_hat: np.ndarray, losses: np.ndarray, x: float) -> float | None:
    """The first t^ at which the smoothed loss is more than a fraction ``x`` above its running
    minimum (``None`` if never): the raw-loss rule the residual alert is compared with."""
    t, rise = _rise(t_hat, losses)
    hit = np.nonzero(rise > x)[0]
    return float(t[hit[0]]) if hit.size else None
