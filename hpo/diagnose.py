"""Collapse diagnostics for whole runs and for a training loop.

The residual rule itself is :class:`hpo.predictors.ResidualMonitor` (pure numerics); this module
applies it where the product needs it:

- :func:`diagnose_runs`: the residual of every run of a curve file against a reference (what
  ``hpo diagnose`` prints and the study report plots), as :class:`RunDiagnosis` records;
- :class:`ResidualCallback`: the monitor as a callback of ``hpo.models.training.train`` (or of any
  loop that hands it points with ``step`` and ``train_loss``): it logs the first alert, keeps it,
  and stops the run on it when asked;
- :func:`plot_residuals`: residuals over t^ against the threshold band, alerts marked.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RunDiagnosis", "diagnose_run", "diagnose_runs", "ResidualCallback", "plot_residuals",
           "alert_sentence", "format_diagnoses"]

log = logging.getLogger(__name__)


@dataclass
class RunDiagnosis:
    """One run's residual against the reference: the smoothed residual (log units) at each
    ``t_hat`` from the alignment window on, the run's threshold, its largest absolute residual
    after the window and the t^ of its first alert (``None``: none fired). ``note`` says why a
    run has no residual (controls the reference cannot predict, no point after the window)."""

    run_id: str
    threshold: float | None = None
    alert_t: float | None = None
    max_abs_residual: float | None = None
    t_hat: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    residual: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    note: str | None = None

    @property
    def alert_residual(self) -> float | None:
        """The smoothed residual at the first alert (``None`` without one)."""
        if self.alert_t is None:
            return None
        i = min(int(np.searchsorted(self.t_hat, self.alert_t)), self.t_hat.size - 1)
        return float(self.residual[i])

    def to_dict(self, trace: bool = True) -> dict[str, Any]:
        """JSON-friendly; with ``trace`` the residual over t^ too."""
        out: dict[str, Any] = {"alert_t": _round(self.alert_t),
                               "max_abs_residual": _round(self.max_abs_residual),
                               "threshold": _round(self.threshold)}
        if self.note:
            out["note"] = self.note
        if trace:
            out["t_hat"] = [round(float(t), 6) for t in self.t_hat]
            out["residual"] = [round(float(r), 6) for r in self.residual]
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def diagnose_run(run: Any, curve: Any, threshold: float | None = None) -> RunDiagnosis:
    """The residual of one :class:`~hpo.predictors.RunCurve` against ``curve``.

    The reference is the curve of the run as planned: where the run's schedule has a name the
    curve format knows, that schedule, not the logged ``lr`` column (which a fault such as an LR
    spike, or a stop, changes). ``ValueError`` only for a ``threshold`` that is not > 0 or a
    reference without one."""
    from hpo.predictors import ResidualMonitor

    controls = run.controls
    planned = controls.with_(lr_schedule=None)
    if planned.has_schedule:
        controls = planned
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a run beyond the curve's range: its threshold widens
        mon = ResidualMonitor(curve, controls, threshold=threshold)
        try:
            mon.run(run.steps, run.losses)
        except ValueError as exc:
            return RunDiagnosis(run.run_id, mon.threshold, note=str(exc).splitlines()[0])
    st = mon.state
    if st.l_final is None:
        return RunDiagnosis(run.run_id, mon.threshold,
                            note="no point after the alignment window (t^ 0.3)")
    hist = np.array(st.history, dtype=float).reshape(-1, 3)
    return RunDiagnosis(run.run_id, mon.threshold, st.alert_t, st.max_abs_residual,
                        hist[:, 0], hist[:, 2])


def diagnose_runs(runs: Sequence[Any], curve: Any,
                  threshold: float | None = None) -> list[RunDiagnosis]:
    """:func:`diagnose_run` for every run, in order."""
    return [diagnose_run(r, curve, threshold) for r in runs]


def alert_sentence(name: str, t_hat: float, residual: float, threshold: float) -> str:
    """One line for an alert: which run, where, how far off the reference."""
    return (f"{name}: residual alert at t^ {t_hat:.2f}: the loss is {100 * residual:+.2f}% off "
            f"the universal curve (threshold {100 * threshold:.2f}%)")


class ResidualCallback:
    """The residual monitor as a training-loop callback: ``callback(point) -> bool``.

    ``point`` has ``step`` and ``train_loss`` (``hpo.models.training.TrainPoint``); non-finite
    losses are skipped (the loop stops a diverged run itself). The first alert is kept in
    :attr:`alert` (``{"t_hat", "residual", "threshold"}``) and handed to ``on_alert`` (without
    one, logged as a warning: :func:`alert_sentence`); with ``stop_on_alert`` the callback returns
    ``True`` from then on, which stops ``train``. ``then``: a callback called after the monitor
    on every point (the pruner's), whose answer is combined with ``or``.
    """

    def __init__(self, curve: Any, controls: Any, *, name: str = "run",
                 stop_on_alert: bool = False, threshold: float | None = None,
                 on_alert: Callable[[dict[str, float]], None] | None = None,
                 then: Callable[[Any], bool | None] | None = None) -> None:
        from hpo.predictors import ResidualMonitor

        self.monitor = ResidualMonitor(curve, controls, threshold=threshold)
        self.name = name
        self.stop_on_alert = stop_on_alert
        self.on_alert = on_alert
        self.then = then
        self.alert: dict[str, float] | None = None
        self._last_step = -math.inf  # a resumed loop may hand a step again: it is skipped

    @property
    def max_abs_residual(self) -> float | None:
        st = self.monitor.state
        return st.max_abs_residual if st.l_final is not None else None

    def observe(self, point: Any) -> None:
        """Feed one point to the monitor (a step not after the last one is skipped); on the
        first alert, keep it and report it."""
        loss = float(point.train_loss)
        if not (math.isfinite(loss) and loss > 0 and point.step > self._last_step):
            return
        self._last_step = float(point.step)
        self.monitor.update(float(point.step), loss)
        st = self.monitor.state
        if st.alert_t is None or self.alert is not None:
            return
        assert st.residual is not None
        self.alert = {"t_hat": st.alert_t, "residual": st.residual,
                      "threshold": self.monitor.threshold}
        if self.on_alert is not None:
            self.on_alert(self.alert)
        else:
            log.warning("%s", alert_sentence(self.name, st.alert_t, st.residual,
                                             self.monitor.threshold))

    def __call__(self, point: Any) -> bool:
        self.observe(point)
        stop = self.stop_on_alert and self.alert is not None
        if self.then is not None:
            stop = bool(self.then(point)) or stop
        return stop


def format_diagnoses(diagnoses: Sequence[RunDiagnosis]) -> str:
    """A markdown table: run, threshold, largest residual, first alert (or why none)."""
    lines = ["| run | threshold | max abs residual | first alert at t^ |", "|---|---|---|---|"]
    for d in diagnoses:
        th = "" if d.threshold is None else f"{100 * d.threshold:.2f}%"
        mx = "" if d.max_abs_residual is None else f"{100 * d.max_abs_residual:.2f}%"
        alert = d.note or ("-" if d.alert_t is None else f"{d.alert_t:.2f}")
        lines.append(f"| {d.run_id} | {th} | {mx} | {alert} |")
    return "\n".join(lines)


def plot_residuals(diagnoses: Sequence[RunDiagnosis], path: str | Path,
                   title: str = "collapse residual against the reference") -> Path:
    """Each run's smoothed residual (in %) over t^, the band of +-threshold (the smallest of the
    runs' thresholds shaded; larger ones dashed) and a cross at each first alert. Where a run
    goes beyond 5 times the largest threshold the y axis is clipped there (and the title says
    so), so that the band stays readable."""
    from hpo._extras import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    shown = [d for d in diagnoses if d.t_hat.size]
    thresholds = sorted({round(d.threshold, 9) for d in shown if d.threshold is not None
                         and math.isfinite(d.threshold)})
    if thresholds:
        ax.axhspan(-100 * thresholds[0], 100 * thresholds[0], color="C7", alpha=0.15,
                   label=f"threshold {100 * thresholds[0]:.2f}%")
        for th in thresholds[1:]:
            ax.axhline(100 * th, color="C7", lw=0.6, ls="--")
            ax.axhline(-100 * th, color="C7", lw=0.6, ls="--")
    many = len(shown) > 12
    for i, d in enumerate(shown):
        color = f"C{i % 10}"
        ax.plot(d.t_hat, 100 * d.residual, color=color, lw=1.0,
                label=None if many else d.run_id)
        if d.alert_t is not None:
            ax.plot([d.alert_t], [100 * d.alert_residual], marker="x", color=color, ms=9,
                    mew=2)
    from hpo.predictors.monitor import ALIGN_WINDOW

    ax.axvspan(ALIGN_WINDOW[0], ALIGN_WINDOW[1], color="C0", alpha=0.06, label="alignment")
    peak = max((float(np.max(np.abs(d.residual))) for d in shown), default=0.0)
    if thresholds and peak > 5 * thresholds[-1]:  # a run far off the curve: keep the band readable
        limit = 500 * thresholds[-1]
        ax.set_ylim(-limit, limit)
        title += " (y clipped)"
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("t^ = step / T")
    ax.set_ylabel("residual, % of the loss (smoothed)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
