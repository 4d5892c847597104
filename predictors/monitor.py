"""Collapse diagnostics: the residual of a run against its reference, and the alert rule.

The diagnostic of "Scaling with Collapse" (Bergsma et al. 2025, arXiv 2509.25087): a run that
drifts off the universal curve is broken (a numerical bug, a bad restart, corrupted data), and
the collapse residual shows it while the raw loss still looks healthy (on their 1.8B run from
~60% of training, while the smoothed loss rose only after ~90%).

The residual, in log units (about a relative deviation: 0.01 is 1% of the loss):

1. the run is aligned on its points with t^ in the alignment window (default
   :data:`ALIGN_WINDOW`): L_final is the least-squares fit of log L = log L_final +
   log lhat(t^) there (:func:`~predictors.predict.align_final_loss`), fixed once the window
   has passed;
2. every point from the window's start on has the residual r = log L - log L_final - log lhat;
   the **level** is r averaged over the last :data:`SMOOTH_WINDOW` of t^, the **jump** is the
   level minus its mean over the :data:`JUMP_BASELINE` of t^ before that window (how far the
   run moved off the curve within the last 0.25 of t^);
3. the run's **noise** n is the scatter of its own level, measured online from the run: the
   larger of its per-point scatter over the square root of the window's number of points and
   the scatter of the level's second differences at lag :data:`SMOOTH_WINDOW` (which still
   holds for a logged loss that is already smoothed), both robust (medians) over the points so
   far;
4. after the window, the run **alerts** at the first point where the level leaves
   ±(k n + w a_level) or the jump leaves ±(k c n + w a_jump): k (default :data:`BAND_SIGMAS`),
   c = sqrt(1 + SMOOTH_WINDOW / JUMP_BASELINE) (the baseline's own noise), w = 1 +
   ``EXTRAPOLATION_WIDENING`` x d (d the run's log distance beyond the proxies' size, TPP and
   tau, :func:`~hpo.predictors.predict.extrapolation`), never below :data:`MIN_BAND`.

The noise is the run's; the **misfit allowances** a_level and a_jump are the family's: the
largest excess of any proxy, against the curve refitted without it or against the curve
itself, beyond its own k-noise band (:func:`calibrate_monitor`), so that no proxy alerts. Only
they are widened for a run beyond the proxies: a run's batch noise does not grow with its
distance from them, the reference's misfit may. Runs whose schedule no proxy ran (a hybrid
curve's transfer path) get the allowances measured on schedules held out, and their jump is
not judged: the reference's response to a schedule it has not seen can change within a
quarter of t^. ``fit_universal_curve`` stores the allowances in the curve's calibration;
:func:`reference_band` reads them. A run is monitored as :func:`planned`.

The window and k are parameters (``align_window``, ``band_sigmas``) of :class:`ResidualMonitor`,
:func:`held_out_trace`, :func:`calibrate_monitor` and the raw-loss rule; ``None`` stands for
:data:`ALIGN_WINDOW` and :data:`BAND_SIGMAS`, read when the function is called.

:func:`raw_loss_rise` and :func:`raw_loss_alert` are the raw-loss rule it is compared with: the
smoothed loss rising a fraction x above its running minimum.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpo.predictors.curves import UniversalCurve
from hpo.predictors.normalize import moving_average
from hpo.predictors.predict import EXTRAPOLATION_WIDENING, align_final_loss, extrapolation
from hpo.predictors.schedules import Controls

__all__ = [
    "ResidualMonitor",
    "MonitorState",
    "ResidualBand",
    "reference_band",
    "calibrate_monitor",
    "raw_loss_rise",
    "raw_loss_alert",
    "ALIGN_WINDOW",
    "SMOOTH_WINDOW",
    "JUMP_BASELINE",
    "BAND_SIGMAS",
    "MIN_BAND",
]

#: t^ range on which a run is aligned to the reference; no alert before its end
ALIGN_WINDOW = (0.1, 0.3)
#: the level is the residual averaged over this trailing span of t^
SMOOTH_WINDOW = 0.05
#: the jump compares the level with its mean over this span of t^ before the smoothing window;
#: of 0.1, 0.15, 0.2 and 0.3 (none with a false alert on the CPU family), 0.2 and 0.3 caught
#: its injected faults earliest, and 0.2 judges the jump from t^ 0.35 on (0.3: from 0.45)
JUMP_BASELINE = 0.2
#: k: the bands are this many times the run's own noise (plus the misfit allowance); of 2.5, 3,
#: 3.5, 4 and 5, none raises a false alert on the clean runs of the CPU family or of the shared
#: sources but for one recorded spike of Marin, which alerts at every k
#: (benchmarks/diagnose_drift.py), and 3.5 catches the CPU family's injected faults earliest
#: (benchmarks/diagnose_faults.py)
BAND_SIGMAS = 3.5
#: the narrowest band (0.2% of the loss): below it a curve fitted on a few very clean proxies
#: would alert on differences no run could show on purpose
MIN_BAND = 0.002
#: the fewest points a median noise is taken over (the median of fewer moves by half of itself
#: from one draw to the next); before them the run has the proxies' noise
MIN_NOISE_POINTS = 5
#: the noise of the mean over the jump's baseline, relative to the level's
_JUMP_NOISE = math.sqrt(1 + SMOOTH_WINDOW / JUMP_BASELINE)
_MAD = 1.4826  # median absolute deviation -> standard deviation, for normal noise


@dataclass(frozen=True)
class ResidualBand:
    """The family's parts of the alert bands, calibrated on the proxies (log units).

    ``level`` and ``jump`` are the misfit allowances for a run whose schedule a proxy ran,
    ``level_transfer`` and ``jump_transfer`` for one whose schedule no proxy ran (equal to the
    first two for a curve without a transfer path); ``noise`` is the proxies' median
    noise, a run's own until it has :data:`MIN_NOISE_POINTS` points.
    """

    noise: float
    level: float
    jump: float
    level_transfer: float
    jump_transfer: float

    def allowances(self, matched: bool) -> tuple[float, float]:
        """(level, jump) allowance of a run whose schedule a proxy ran (``matched``) or not."""
        return (self.level, self.jump) if matched else (self.level_transfer, self.jump_transfer)


@dataclass
class MonitorState:
    """What the monitor knows so far (see :class:`ResidualMonitor`).

    ``history`` holds ``(t_hat, residual, level, jump, noise, band, jump_band)`` for every
    point from the alignment window's start on (filled in once the window has passed; ``jump``
    is NaN until the run has a baseline, ``noise`` until it has :data:`MIN_NOISE_POINTS`
    points and the reference none, ``jump_band`` where the jump is not judged);
    ``residual`` is the latest level, ``jump`` the latest jump (``None`` before a baseline),
    ``noise`` the run's noise, ``band`` and ``jump_band`` the latest bands;
    ``max_abs_residual`` the largest absolute level after the window; ``alert_t`` the t^ of the
    first alert (``None`` while none) and ``alert_kind`` which statistic left its band there
    (``"level"`` or ``"jump"``).
    """

    l_final: float | None = None
    residual: float | None = None
    jump: float | None = None
    noise: float | None = None
    band: float | None = None
    jump_band: float | None = None
    max_abs_residual: float = 0.0
    alert_t: float | None = None
    alert_kind: str | None = None
    history: list[tuple[float, ...]] = field(default_factory=list)

    @property
    def alerted(self) -> bool:
        return self.alert_t is not None


def _settings(align_window: tuple[float, float] | None,
              band_sigmas: float | None) -> tuple[tuple[float, float], float]:
    """The alignment window and k to use: the arguments, ``None`` standing for
    :data:`ALIGN_WINDOW` and :data:`BAND_SIGMAS`. ``ValueError`` for a window that is not two
    numbers with 0 <= lo < hi <= 1, or a k that is not a number >= 0."""
    window = ALIGN_WINDOW if align_window is None else align_window
    k = BAND_SIGMAS if band_sigmas is None else band_sigmas
    try:
        lo, hi = (float(v) for v in window)
    except (TypeError, ValueError):
        raise ValueError("align_window must be two numbers (lo, hi), but got "
                         f"{align_window=}") from None
    if not 0 <= lo < hi <= 1:
        raise ValueError(f"align_window must have 0 <= lo < hi <= 1, but got {align_window=}")
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not k >= 0:
        raise ValueError(f"band_sigmas must be a number >= 0, but got {band_sigmas=}")
    return (lo, hi), float(k)


class ResidualMonitor:
    """The collapse residual of one run against ``curve``, fed point by point.

    ``update(step, loss)`` adds one point (steps increasing, up to ``controls.total_steps``) and
    returns whether the run is in alert after it: its level or its jump beyond its band at this
    point (the module's rule). ``state.alert_t`` keeps the t^ of the first alert. The bands
    come from the curve's calibration (:func:`reference_band`), widened for a run beyond the
    proxies. ``threshold`` (log units) replaces the rule by a fixed one: the level beyond
    ``threshold`` at every point, no jump (``math.inf``: never alerts); a curve without a
    calibrated band (fitted without calibration, or on fewer than 3 proxies) needs it.
    ``align_window`` (t^ lo, hi) and ``band_sigmas`` (k) are the rule's window and k
    (``None``: :data:`ALIGN_WINDOW`, :data:`BAND_SIGMAS`); the curve's allowances hold for the
    window and k they were measured with (:func:`calibrate_monitor`; ``fit_universal_curve``
    measures them with the defaults).

    Raises ``ValueError`` for a threshold that is not a number > 0, a window that is not two
    numbers with 0 <= lo < hi <= 1, a k that is not a number >= 0, a non-finite or
    non-positive loss, a step that does not increase or a step beyond total_steps.
    """

    def __init__(self, curve: UniversalCurve, controls: Controls,
                 threshold: float | None = None, *,
                 align_window: tuple[float, float] | None = None,
                 band_sigmas: float | None = None) -> None:
        window, k = _settings(align_window, band_sigmas)
        band = None
        if threshold is None:
            band = reference_band(curve)
            if band is None:
                raise ValueError("the reference curve has no residual band (fitted without "
                                 "calibration or on fewer than 3 proxies): pass threshold=")
        elif isinstance(threshold, bool) or not (isinstance(threshold, (int, float))
                                                 and threshold > 0):
            raise ValueError(f"threshold must be a number > 0, but got {threshold=}")
        self.curve = curve
        self.controls = controls
        self._lhat: Callable[[np.ndarray], np.ndarray] | None = None  # curve.of_run(controls)
        #: the alignment window (t^ lo, hi) and k of the rule
        self.align_window, self.band_sigmas = window, k
        self.fixed = None if threshold is None else float(threshold)
        self.reference = band
        #: the widening of the misfit allowances for a run beyond the proxies
        self.widening = 1 + EXTRAPOLATION_WIDENING * extrapolation(curve.ranges, controls)
        #: whether the proxies ran this run's schedule (its jump is judged)
        self.matched = _schedule_matched(curve, controls)
        self.state = MonitorState()
        self._window: list[tuple[float, float, float]] = []  # (t, log L, log lhat) to align on
        self._recent: deque[tuple[float, float]] = deque()  # (t, r) of the smoothing span
        self._t: list[float] = []  # t^ of every point from the window's start on
        self._level: list[float] = []  # their level
        self._cum: list[float] = [0.0]  # running sums of the level (the jump's baseline)
        self._diffs: list[float] = []  # sorted |r_i - r_{i-1}|
        self._curv: list[float] = []  # sorted |second differences of the level at lag W|
        self._last_r: float | None = None
        self._last_step = -math.inf

    @property
    def threshold(self) -> float:
        """The level's band now (log units): the fixed threshold, or k n + w a_level with the
        run's noise so far."""
        if self.fixed is not None:
            return self.fixed
        return self._bands(self._noise(len(self._recent) or 1))[0]

    def update(self, step: float, loss: float) -> bool:
        """Add one point; whether the run is in alert after it."""
        t = self._check(step, loss)
        ref = float(self._log_reference(np.array([t]))[0])
        return self._feed(t, math.log(loss), ref)

    def run(self, steps: Iterable[float], losses: Iterable[float]) -> float | None:
        """Feed a whole curve (the reference evaluated once for all its points); the t^ of the
        first alert (``None`` if none)."""
        pts = [(float(s), float(v)) for s, v in zip(steps, losses, strict=True)]
        ts = [self._check(s, v) for s, v in pts]
        refs = self._log_reference(np.array(ts)) if ts else []
        for t, (_, v), ref in zip(ts, pts, refs, strict=True):
            self._feed(t, math.log(v), float(ref))
        return self.state.alert_t

    def _log_reference(self, t: np.ndarray) -> np.ndarray:
        """log lhat of the run at ``t``; the curve works out the run's part on the first call
        (and raises there what its ``predict`` raises)."""
        if self._lhat is None:
            self._lhat = self.curve.of_run(self.controls)
        return np.log(self._lhat(t))

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
        lo, hi = self.align_window
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
        assert st.residual is not None and st.band is not None
        st.max_abs_residual = max(st.max_abs_residual, abs(st.residual))
        kind = None
        if abs(st.residual) > st.band:
            kind = "level"
        elif st.jump is not None and st.jump_band is not None and abs(st.jump) > st.jump_band:
            kind = "jump"
        if kind is not None and st.alert_t is None:
            st.alert_t, st.alert_kind = t, kind
        return kind is not None

    def _add(self, t: float, r: float) -> None:
        """One point's residual: its level, the run's noise, the jump and the bands."""
        st = self.state
        self._recent.append((t, r))
        while self._recent[0][0] <= t - SMOOTH_WINDOW:
            self._recent.popleft()
        level = sum(p[1] for p in self._recent) / len(self._recent)
        if self._last_r is not None:
            bisect.insort(self._diffs, abs(r - self._last_r))
        self._last_r = r
        if self._t and t - 2 * SMOOTH_WINDOW >= self._t[0]:
            curv = level - 2 * self._level_at(t - SMOOTH_WINDOW) + \
                self._level_at(t - 2 * SMOOTH_WINDOW)
            bisect.insort(self._curv, abs(curv))
        jump = self._jump(t, level)
        self._t.append(t)
        self._level.append(level)
        self._cum.append(self._cum[-1] + level)
        noise = self._noise(len(self._recent))
        band, jump_band = self._bands(noise)
        st.residual, st.jump, st.noise, st.band, st.jump_band = (level, jump, noise, band,
                                                                 jump_band)
        st.history.append((t, r, level, math.nan if jump is None else jump, noise, band,
                           math.nan if jump_band is None else jump_band))

    def _level_at(self, t: float) -> float:
        """The level at t^ ``t`` (between two earlier points: interpolated)."""
        i = bisect.bisect_right(self._t, t)
        if i == 0:
            return self._level[0]
        if i == len(self._t):
            return self._level[-1]
        t0, t1 = self._t[i - 1], self._t[i]
        w = (t - t0) / (t1 - t0)
        return (1 - w) * self._level[i - 1] + w * self._level[i]

    def _jump(self, t: float, level: float) -> float | None:
        """The level minus its mean over the baseline before the smoothing window (``None``
        before the run has one)."""
        start = t - SMOOTH_WINDOW - JUMP_BASELINE
        if not self._t or start < self._t[0]:
            return None
        lo = bisect.bisect_right(self._t, start)
        hi = bisect.bisect_right(self._t, t - SMOOTH_WINDOW)
        if hi <= lo:
            return None
        return level - (self._cum[hi] - self._cum[lo]) / (hi - lo)

    def _noise(self, points: int) -> float:
        """The run's noise at the level's scale (module docstring, step 3)."""
        parts = []
        if len(self._diffs) >= MIN_NOISE_POINTS:
            parts.append(_MAD * _median(self._diffs) / math.sqrt(2 * points))
        if len(self._curv) >= MIN_NOISE_POINTS:
            parts.append(_MAD * _median(self._curv) / math.sqrt(6))
        if parts:
            return max(parts)
        return self.reference.noise if self.reference is not None else math.nan

    def _bands(self, noise: float) -> tuple[float, float | None]:
        """(level band, jump band) for the run's noise; the jump band is ``None`` where the
        jump is not judged (a fixed threshold, a schedule no proxy ran)."""
        if self.fixed is not None:
            return self.fixed, None
        assert self.reference is not None
        a_level, a_jump = self.reference.allowances(self.matched)
        k = self.band_sigmas
        band = max(k * noise + self.widening * a_level, MIN_BAND)
        if not self.matched:
            return band, None
        return band, max(k * _JUMP_NOISE * noise + self.widening * a_jump, MIN_BAND)


def _median(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else 0.5 * (sorted_values[mid - 1] + sorted_values[mid])


def _schedule_matched(curve: UniversalCurve, controls: Controls) -> bool:
    """Whether a proxy of ``curve`` ran the schedule of ``controls`` (always, for a curve
    without a transfer path)."""
    empirical = getattr(curve, "empirical", None)
    if empirical is None or not hasattr(empirical, "matches"):
        return True
    try:
        return bool(empirical.matches(controls).size)
    except ValueError:
        return False


def planned(controls: Controls) -> Controls:
    """The controls of a run as planned, which a run is monitored against: where its schedule
    has a name the curve format knows, that schedule, not a logged ``lr`` (which a fault such
    as an LR spike, or a stop, changes)."""
    plan = controls.with_(lr_schedule=None)
    return plan if plan.has_schedule else controls


def held_out_trace(curve: UniversalCurve, controls: Controls, steps: np.ndarray,
                   losses: np.ndarray, *,
                   align_window: tuple[float, float] | None = None) -> np.ndarray | None:
    """The monitor's trace of a complete curve against ``curve`` (the run as
    :func:`planned`, aligned on ``align_window``, default :data:`ALIGN_WINDOW`): rows
    ``(t_hat, level, jump, noise)`` from the alignment window's start on (noise NaN before the
    run has :data:`MIN_NOISE_POINTS` points, jump NaN before its baseline); ``None`` when it
    has no point after the window or ``curve`` cannot predict its controls. What
    :func:`calibrate_monitor` is measured on."""
    mon = ResidualMonitor(curve, planned(controls), threshold=math.inf,
                          align_window=align_window)
    try:
        mon.run(steps, losses)
    except ValueError:
        return None
    hist = np.array(mon.state.history, dtype=float).reshape(-1, 7)
    if mon.state.l_final is None or not np.any(hist[:, 0] > mon.align_window[1]):
        return None
    return hist[:, [0, 2, 3, 4]]


def calibrate_monitor(traces: Iterable[tuple[np.ndarray | None, bool]], *,
                      align_window: tuple[float, float] | None = None,
                      band_sigmas: float | None = None) -> dict[str, Any]:
    """The residual band of a curve (``calibration["monitor"]``) from its proxies' traces.

    ``traces``: for each proxy against a curve refitted without it (or against the curve
    itself), its :func:`held_out_trace` (``None``: not measured) and whether that curve has a
    proxy with its schedule. ``noise`` is the median of the proxies' final noises (and stands for a
    proxy's own before it has one); a proxy's excesses are its largest |level| - k n and
    |jump| - k c n after the alignment window (at least 0). The allowances ``level`` and
    ``jump`` are the largest excesses of the matched proxies (of all, where none matched),
    ``level_transfer`` and ``jump_transfer`` those of all. ``align_window`` and ``band_sigmas``
    (k): the rule's (``None``: :data:`ALIGN_WINDOW`, :data:`BAND_SIGMAS`), the traces measured
    with the same window; ``ValueError`` for a window that is not 0 <= lo < hi <= 1 or a k
    that is not a number >= 0."""
    (_, after_t), k = _settings(align_window, band_sigmas)
    rows = [(np.asarray(tr, dtype=float), bool(ok)) for tr, ok in traces if tr is not None]
    finals = [float(tr[np.isfinite(tr[:, 3]), 3][-1]) for tr, _ in rows
              if np.isfinite(tr[:, 3]).any()]
    noise = float(np.median(finals)) if finals else 0.0
    excess = []
    for tr, ok in rows:
        after = tr[tr[:, 0] > after_t]
        n = np.where(np.isfinite(after[:, 3]), after[:, 3], noise)
        level = float(np.max(np.abs(after[:, 1]) - k * n, initial=0.0))
        jump = np.abs(after[:, 2]) - k * _JUMP_NOISE * n
        jump = float(np.max(jump[np.isfinite(jump)], initial=0.0))
        excess.append((level, jump, ok))
    matched = [e for e in excess if e[2]] or excess
    return {
        "sigmas": k,
        "noise": round(noise, 7),
        "level": round(max((e[0] for e in matched), default=0.0), 7),
        "jump": round(max((e[1] for e in matched), default=0.0), 7),
        "level_transfer": round(max((e[0] for e in excess), default=0.0), 7),
        "jump_transfer": round(max((e[1] for e in excess), default=0.0), 7),
        "proxies": len(excess),
    }


def reference_band(curve: UniversalCurve) -> ResidualBand | None:
    """The residual band stored in ``curve.calibration["monitor"]`` (``None`` if absent)."""
    cal = curve.calibration or {}
    mon = cal.get("monitor") if isinstance(cal, dict) else None
    if not isinstance(mon, dict):
        return None
    values = {}
    for key in ("noise", "level", "jump"):
        value = mon.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        values[key] = float(value)
    return ResidualBand(values["noise"], values["level"], values["jump"],
                        float(mon.get("level_transfer", values["level"])),
                        float(mon.get("jump_transfer", values["jump"])))


# -- the raw-loss rule ----------------------------------------------------------------------

def _rise(t_hat: np.ndarray, losses: np.ndarray,
          align_window: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray]:
    """t^ from the alignment window's start on, and the smoothed loss's relative rise over its
    running minimum there."""
    (start, _), _ = _settings(align_window, None)
    t = np.asarray(t_hat, dtype=float)
    s = moving_average(t, np.asarray(losses, dtype=float), SMOOTH_WINDOW)
    keep = t >= start
    s = s[keep]
    return t[keep], s / np.minimum.accumulate(s) - 1.0 if s.size else s


def raw_loss_rise(t_hat: np.ndarray, losses: np.ndarray, *,
                  align_window: tuple[float, float] | None = None) -> float:
    """The largest relative rise of the smoothed loss (mean over the last
    :data:`SMOOTH_WINDOW` of t^) above its running minimum, from the start of
    ``align_window`` (default :data:`ALIGN_WINDOW`) on."""
    _, rise = _rise(t_hat, losses, align_window)
    return float(rise.max()) if rise.size else 0.0


def raw_loss_alert(t_hat: np.ndarray, losses: np.ndarray, x: float, *,
                   align_window: tuple[float, float] | None = None) -> float | None:
    """The first t^ from the start of ``align_window`` (default :data:`ALIGN_WINDOW`) on at
    which the smoothed loss is more than a fraction ``x`` above its running minimum (``None``
    if never): the raw-loss rule the residual alert is compared with."""
    t, rise = _rise(t_hat, losses, align_window)
    hit = np.nonzero(rise > x)[0]
    return float(t[hit[0]]) if hit.size else None
