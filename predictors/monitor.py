"""Online residual monitor: flags a run whose normalized curve leaves the reference.

The diagnostic of "Scaling with Collapse" (Bergsma et al. 2025, arXiv 2509.25087): the collapse
residual (the run's normalized curve minus the reference) diverges long before the raw loss shows
trouble (on their 1.8B run from ~60% of training, while the smoothed loss rose only after ~90%).
The monitor:

1. aligns the run on an early window t^ in ``align_window`` (the divisor L_final from
   :func:`~predictors.predict.align_final_loss`, fixed once the window has passed);
2. for every later point, the residual r = L / L_final - lhat(t^), smoothed by an EMA;
3. sigma is the standard deviation of the raw residuals inside the alignment window (floored at
   ``min_sigma``), i.e. the run's own noise around the reference;
4. alerts when the smoothed residual exceeds ``k`` sigma (in absolute value, or only upwards with
   ``upward_only``) for ``n`` consecutive points; ``first_alert`` is the t^ of the n-th point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpo.predictors.curves import UniversalCurve
from hpo.predictors.predict import align_final_loss
from hpo.predictors.schedules import Controls

__all__ = ["ResidualMonitor", "MonitorState"]


@dataclass
class MonitorState:
    """What the monitor knows so far (see :class:`ResidualMonitor`)."""

    l_final: float | None = None
    sigma: float | None = None
    smoothed: float | None = None
    streak: int = 0
    first_alert: float | None = None
    history: list[tuple[float, float, float]] = field(default_factory=list)


class ResidualMonitor:
    """Online collapse-residual monitor for one run.

    Feed points in step order with :meth:`update` (or a whole curve with :meth:`run`); each call
    returns whether the monitor is in alert. ``state.first_alert`` holds the t^ of the first
    alert (``None`` while none). Points before the alignment window ends are buffered.
    """

    def __init__(
        self,
        curve: UniversalCurve,
        controls: Controls,
        k: float = 3.0,
        n: int = 5,
        align_window: tuple[float, float] = (0.1, 0.3),
        ema_alpha: float = 0.2,
        min_sigma: float = 1e-3,
        upward_only: bool = False,
    ) -> None:
        lo, hi = align_window
        if not 0 <= lo < hi <= 1:
            raise ValueError(
                f"align_window must satisfy 0 <= lo < hi <= 1, but got {align_window}"
            )
        if k <= 0 or n < 1:
            raise ValueError(f"k must be > 0 and n >= 1, but got {k=}, {n=}")
        self.curve = curve
        self.controls = controls
        self.k, self.n = k, n
        self.align_window = (lo, hi)
        self.ema_alpha = ema_alpha
        self.min_sigma = min_sigma
        self.upward_only = upward_only
        self.state = MonitorState()
        self._buffer: list[tuple[float, float]] = []
        self._last_step = -np.inf

    def update(self, step: float, loss: float) -> bool:
        """Add one point; returns whether the monitor is in alert after it.

        Raises ``ValueError`` for a non-finite or non-positive loss, a step that does not
        increase, or a step beyond total_steps.
        """
        if not np.isfinite(loss) or loss <= 0:
            raise ValueError(f"loss must be finite and > 0, but got {loss=}")
        if step <= self._last_step:
            raise ValueError(f"steps must increase, but got {step} after {self._last_step}")
        if step > self.controls.total_steps:
            raise ValueError(f"step {step} is beyond total_steps {self.controls.total_steps}")
        self._last_step = step
        t = step / self.controls.total_steps
        st = self.state
        lo, hi = self.align_window
        if st.l_final is None:
            if t >= lo:
                self._buffer.append((t, loss))
            if t < hi or len(self._buffer) < 2:
                return False
            tt = np.array([p[0] for p in self._buffer])
            ll = np.array([p[1] for p in self._buffer])
            ref = self.curve.predict(tt, self.controls)
            st.l_final = align_final_loss(ll, ref)
            st.sigma = max(float(np.std(ll / st.l_final - ref)), self.min_sigma)
            return False
        r = loss / st.l_final - float(self.curve.predict(np.array([t]), self.controls)[0])
        a = self.ema_alpha
        st.smoothed = r if st.smoothed is None else (1 - a) * st.smoothed + a * r
        st.history.append((t, r, st.smoothed))
        over = st.smoothed > self.k * st.sigma if self.upward_only else (
            abs(st.smoothed) > self.k * st.sigma
        )
        st.streak = st.streak + 1 if over else 0
        alert = st.streak >= self.n
        if alert and st.first_alert is None:
            st.first_alert = t
        return alert

    def run(self, steps: np.ndarray, losses: np.ndarray) -> float | None:
        """Feed a whole curve; returns the t^ of the first alert (``None`` if none)."""
        for s, v in zip(np.asarray(steps, float), np.asarray(losses, float), strict=False):
            self.update(float(s), float(v))
        return self.state.first_alert
