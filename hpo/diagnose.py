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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hpo._extras import pyplot
from hpo.predictors import (
    Controls,
    ResidualMonitor,
    RunCurve,
    UniversalCurve,
    raw_loss_alert,
    raw_loss_rise,
)
from hpo.predictors.monitor import ALIGN_WINDOW, JUMP_BASELINE, SMOOTH_WINDOW, planned

if TYPE_CHECKING:
    from hpo.models.training import TrainPoint

__all__ = ["RunDiagnosis", "diagnose_run", "diagnose_runs", "clean_raw_x", "ResidualCallback",
           "plot_residuals", "alert_sentence", "format_diagnoses"]

log = logging.getLogger(__name__)


@dataclass
class RunDiagnosis:
    """One run's residual against the reference (log units), from the alignment window on.

    At each ``t_hat``: the level (``residual``: the smoothed residual), its ``band``, the
    ``jump`` (NaN before the run has a baseline) and its ``jump_band`` (NaN where the jump is
    not judged): :class:`hpo.predictors.ResidualMonitor`'s rule. ``threshold`` is the level's
    band at the first alert, else at the run's last point; ``max_abs_residual`` the largest
    absolute level after the window; ``alert_t`` the t^ of the first alert (``None``: none
    fired) and ``alert_kind`` which statistic left its band there (``"level"`` or ``"jump"``).
    ``note`` says why a run has no residual (controls the reference cannot predict, no point
    after the window). ``raw_alert_t``: where the raw-loss rule
    (:func:`hpo.predictors.raw_loss_alert`) alerts on the same run, when asked for."""

    run_id: str
    threshold: float | None = None
    alert_t: float | None = None
    max_abs_residual: float | None = None
    t_hat: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    residual: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    note: str | None = None
    band: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    jump: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    jump_band: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    alert_kind: str | None = None
    #: the raw-loss rule's first alert on the same run (``None``: none, or not asked for)
    raw_alert_t: float | None = None

    def _alert_index(self) -> int | None:
        if self.alert_t is None or not self.t_hat.size:
            return None
        return min(int(np.searchsorted(self.t_hat, self.alert_t)), self.t_hat.size - 1)

    @property
    def alert_residual(self) -> float | None:
        """The level at the first alert (``None`` without one)."""
        i = self._alert_index()
        return None if i is None else float(self.residual[i])

    @property
    def alert_value(self) -> float | None:
        """The statistic that left its band at the first alert: the level or the jump."""
        i = self._alert_index()
        if i is None:
            return None
        return float(self.jump[i] if self.alert_kind == "jump" else self.residual[i])

    @property
    def alert_band(self) -> float | None:
        """The band :attr:`alert_value` left."""
        i = self._alert_index()
        if i is None:
            return None
        return float(self.jump_band[i] if self.alert_kind == "jump" else self.band[i])

    def to_dict(self, trace: bool = True) -> dict[str, Any]:
        """JSON-friendly; with ``trace`` the level and its band over t^ too."""
        out: dict[str, Any] = {"alert_t": _round(self.alert_t),
                               "max_abs_residual": _round(self.max_abs_residual),
                               "threshold": _round(self.threshold)}
        if self.alert_kind:
            out["alert_kind"] = self.alert_kind
        if self.raw_alert_t is not None:
            out["raw_alert_t"] = _round(self.raw_alert_t)
        if self.note:
            out["note"] = self.note
        if trace:
            out["t_hat"] = [round(float(t), 6) for t in self.t_hat]
            out["residual"] = [round(float(r), 6) for r in self.residual]
            out["band"] = [round(float(b), 6) for b in self.band]
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def diagnose_run(run: RunCurve, curve: UniversalCurve, threshold: float | None = None, *,
                 align_window: tuple[float, float] | None = None,
                 band_sigmas: float | None = None) -> RunDiagnosis:
    """The residual of one :class:`~hpo.predictors.RunCurve` against ``curve``.

    The reference is the curve of the run as planned: where the run's schedule has a name the
    curve format knows, that schedule, not the logged ``lr`` column (which a fault such as an LR
    spike, or a stop, changes). ``align_window`` and ``band_sigmas``: the monitor's window and
    k (:class:`hpo.predictors.ResidualMonitor`; ``None``: its defaults). ``ValueError`` only
    for a ``threshold`` that is not > 0, a reference without one, or a window or k the monitor
    rejects."""
    controls = planned(run.controls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a run beyond the curve's range: its threshold widens
        mon = ResidualMonitor(curve, controls, threshold=threshold, align_window=align_window,
                              band_sigmas=band_sigmas)
        try:
            mon.run(run.steps, run.losses)
        except ValueError as exc:
            return RunDiagnosis(run.run_id, mon.threshold, note=str(exc).splitlines()[0])
    st = mon.state
    if st.l_final is None:
        return RunDiagnosis(run.run_id, mon.threshold, note="no point after the alignment "
                            f"window (t^ {mon.align_window[1]:g})")
    hist = np.array(st.history, dtype=float).reshape(-1, 7)
    d = RunDiagnosis(run.run_id, None, st.alert_t, st.max_abs_residual, hist[:, 0], hist[:, 2],
                     band=hist[:, 5], jump=hist[:, 3], jump_band=hist[:, 6],
                     alert_kind=st.alert_kind)
    i = d._alert_index()
    d.threshold = float(d.band[-1 if i is None else i])
    return d


def diagnose_runs(runs: Sequence[RunCurve], curve: UniversalCurve, threshold: float | None = None,
                  raw_x: float | None = None, *,
                  align_window: tuple[float, float] | None = None,
                  band_sigmas: float | None = None) -> list[RunDiagnosis]:
    """:func:`diagnose_run` for every run, in order, with the monitor's ``align_window`` and
    ``band_sigmas`` (``None``: its defaults); with ``raw_x`` each run's ``raw_alert_t`` too:
    where its smoothed loss first rises ``raw_x`` above its running minimum, from the window's
    start on (:func:`hpo.predictors.raw_loss_alert`)."""
    out = [diagnose_run(r, curve, threshold, align_window=align_window,
                        band_sigmas=band_sigmas) for r in runs]
    if raw_x is not None:
        for d, r in zip(out, runs, strict=True):
            d.raw_alert_t = raw_loss_alert(r.t_hat, r.losses, raw_x, align_window=align_window)
    return out


def clean_raw_x(runs: Sequence[Any], *,
                align_window: tuple[float, float] | None = None) -> float:
    """The raw-loss rule's ``x`` at the false-alert rate of 0 on ``runs`` (runs known to be
    clean, such as a study's proxies): the largest rise of their smoothed loss above its running
    minimum from the start of ``align_window`` on (:func:`hpo.predictors.raw_loss_rise`;
    ``None``: the monitor's default window); 0 without runs."""
    return max((raw_loss_rise(r.t_hat, r.losses, align_window=align_window) for r in runs),
               default=0.0)


def alert_sentence(name: str, t_hat: float, residual: float, threshold: float,
                   kind: str = "level") -> str:
    """One line for an alert: which run, where, how far off the reference (``kind``
    ``"level"``) or how far it moved off it within the last 0.25 of t^ (``"jump"``), and the
    band it left."""
    what = (f"the loss is {100 * residual:+.2f}% off the universal curve" if kind != "jump"
            else f"the loss moved {100 * residual:+.2f}% off the universal curve within "
                 f"{SMOOTH_WINDOW + JUMP_BASELINE:g} of t^")
    return f"{name}: residual alert at t^ {t_hat:.2f}: {what} (band {100 * threshold:.2f}%)"


class ResidualCallback:
    """The residual monitor as a training-loop callback: ``callback(point) -> bool``.

    ``point`` has ``step`` and ``train_loss`` (``hpo.models.training.TrainPoint``); non-finite
    losses are skipped (the loop stops a diverged run itself). The first alert is kept in
    :attr:`alert` (``{"t_hat", "residual", "threshold", "kind"}``: the statistic that left its
    band, the level or the jump, that band and which) and handed to ``on_alert`` (without
    one, logged as a warning: :func:`alert_sentence`); with ``stop_on_alert`` the callback returns
    ``True`` from then on, which stops ``train``. ``then``: a callback called after the monitor
    on every point (the pruner's), whose answer is combined with ``or``. ``threshold``,
    ``align_window`` and ``band_sigmas`` go to :class:`hpo.predictors.ResidualMonitor`.
    """

    def __init__(self, curve: UniversalCurve, controls: Controls, *, name: str = "run",
                 stop_on_alert: bool = False, threshold: float | None = None,
                 on_alert: Callable[[dict[str, Any]], None] | None = None,
                 then: Callable[[TrainPoint], bool | None] | None = None,
                 align_window: tuple[float, float] | None = None,
                 band_sigmas: float | None = None) -> None:
        self.monitor = ResidualMonitor(curve, controls, threshold=threshold,
                                       align_window=align_window, band_sigmas=band_sigmas)
        self.name = name
        self.stop_on_alert = stop_on_alert
        self.on_alert = on_alert
        self.then = then
        self.alert: dict[str, Any] | None = None
        self._last_step = -math.inf  # a resumed loop may hand a step again: it is skipped

    @property
    def max_abs_residual(self) -> float | None:
        st = self.monitor.state
        return st.max_abs_residual if st.l_final is not None else None

    def observe(self, point: TrainPoint) -> None:
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
        jump = st.alert_kind == "jump"
        value, band = (st.jump, st.jump_band) if jump else (st.residual, st.band)
        assert value is not None and band is not None
        self.alert = {"t_hat": st.alert_t, "residual": value, "threshold": band,
                      "kind": st.alert_kind}
        if self.on_alert is not None:
            self.on_alert(self.alert)
        else:
            log.warning("%s", alert_sentence(self.name, st.alert_t, value, band,
                                             str(st.alert_kind)))

    def __call__(self, point: TrainPoint) -> bool:
        self.observe(point)
        stop = self.stop_on_alert and self.alert is not None
        if self.then is not None:
            stop = bool(self.then(point)) or stop
        return stop


def format_diagnoses(diagnoses: Sequence[RunDiagnosis], raw_x: float | None = None) -> str:
    """A markdown table: run, level band (at the alert, else at the end), largest residual,
    first alert and which statistic fired (or why none); with ``raw_x`` (the x the diagnoses'
    ``raw_alert_t`` were found with) the raw-loss rule's first alert beside it."""
    head = "| run | level band | max abs residual | first alert at t^ |"
    rule = "|---|---|---|---|"
    if raw_x is not None:
        head += f" raw-loss rule (x = {100 * raw_x:.2f}%) alert at t^ |"
        rule += "---|"
    lines = [head, rule]
    for d in diagnoses:
        th = "" if d.threshold is None else f"{100 * d.threshold:.2f}%"
        mx = "" if d.max_abs_residual is None else f"{100 * d.max_abs_residual:.2f}%"
        alert = d.note or ("-" if d.alert_t is None else f"{d.alert_t:.2f} ({d.alert_kind})")
        row = f"| {d.run_id} | {th} | {mx} | {alert} |"
        if raw_x is not None:
            row += " - |" if d.raw_alert_t is None else f" {d.raw_alert_t:.2f} |"
        lines.append(row)
    return "\n".join(lines)


def plot_residuals(diagnoses: Sequence[RunDiagnosis], path: str | Path,
                   title: str = "collapse residual against the reference",
                   labels: Mapping[str, str] | None = None) -> Path:
    """Each run's smoothed residual (in % of the loss) over t^, the alert band of +-threshold
    (one band per kind of run, proxies, trials or others, at the widest of its runs' thresholds
    and labelled with their range; the narrowest band shaded, the others dashed), the
    alignment window and a cross at each first alert.
    Every line is in the legend: ``labels`` maps a run id to its legend text (default: the run
    id); a run ``<id>-verify`` (a stopped trial trained on to its end) is dashed in the color
    of run ``<id>``. Where a run goes beyond 5 times the largest threshold the y axis is
    clipped there (and the title says so), so that the band stays readable. Returns ``path``."""
    fig = _residuals_figure(diagnoses, title, labels)
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(fig)
    return path


#: line styles cycled every 10 colors, so that more than 10 lines stay apart
_LINE_STYLES = ("-", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
#: the run id of a stopped trial trained on to its end (``hpo run --verify``): ``<run>-verify``
VERIFY_SUFFIX = "-verify"


def _band_owners(run_ids: Sequence[str]) -> str:
    """Who an alert band applies to, in a few words."""
    if all(r.startswith("proxy-") for r in run_ids):
        return "the proxies"
    if all(r.startswith("trial-") for r in run_ids):
        return "the trials"
    if len(run_ids) <= 2:
        return ", ".join(run_ids)
    return f"{len(run_ids)} runs"


def _residuals_figure(diagnoses: Sequence[RunDiagnosis], title: str,
                      labels: Mapping[str, str] | None = None) -> Any:
    """The figure of :func:`plot_residuals`."""
    plt = pyplot()
    shown = [d for d in diagnoses if d.t_hat.size]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    # one band per kind of run (proxies, trials, others): the widest of the kind's thresholds,
    # labelled with their range
    by_owner: dict[str, list[tuple[float, str]]] = {}
    for d in shown:
        if d.threshold is not None and math.isfinite(d.threshold):
            kind = next((p for p in ("proxy-", "trial-") if d.run_id.startswith(p)), "")
            by_owner.setdefault(kind, []).append((d.threshold, d.run_id))
    merged: dict[tuple[float, float], list[tuple[float, str]]] = {}
    for members in by_owner.values():  # kinds with the same range share one band
        key = (round(min(t for t, _ in members), 5), round(max(t for t, _ in members), 5))
        merged.setdefault(key, []).extend(members)
    bands = sorted(merged.values(), key=lambda ms: max(t for t, _ in ms))
    thresholds = [max(t for t, _ in members) for members in bands]
    for k, members in enumerate(bands):
        lo, th = min(t for t, _ in members), max(t for t, _ in members)
        ids = [r for _, r in members]
        owner = "the proxies" if all(r.startswith("proxy-") for r in ids) else (
            "the trials" if all(r.startswith("trial-") for r in ids) else _band_owners(ids))
        span = f"±{100 * th:.2f}%" if th - lo < 5e-5 else f"±{100 * lo:.2f}-{100 * th:.2f}%"
        text = f"alert band {span} (monitor threshold, {owner})"
        if k == 0:
            ax.axhspan(-100 * th, 100 * th, color="C7", alpha=0.15, label=text)
        else:
            ax.axhline(100 * th, color="C7", lw=0.8, ls="--", label=text)
            ax.axhline(-100 * th, color="C7", lw=0.8, ls="--")
    ax.axvspan(ALIGN_WINDOW[0], ALIGN_WINDOW[1], color="C0", alpha=0.06,
               label=f"alignment window, t^ {ALIGN_WINDOW[0]:g}-{ALIGN_WINDOW[1]:g} "
                     "(L_final fitted, no alert)")
    if any(d.alert_t is not None for d in shown):
        ax.plot([], [], marker="x", color="0.3", ms=9, mew=2, ls="none", label="first alert")
    labels = labels or {}
    styles: dict[str, tuple[str, Any]] = {}
    i = 0
    for d in shown:
        base = d.run_id.removesuffix(VERIFY_SUFFIX)
        if base != d.run_id and base in styles:  # a run continued: its run's color, dashed
            color, style = styles[base][0], "--"
        else:
            color, style = f"C{i % 10}", _LINE_STYLES[(i // 10) % len(_LINE_STYLES)]
            i += 1
        styles[d.run_id] = (color, style)
        label = labels.get(d.run_id, d.run_id)
        if d.alert_t is not None:
            label += f", alert at t^ {d.alert_t:.2f}"
        ax.plot(d.t_hat, 100 * d.residual, color=color, lw=1.0, ls=style, label=label)
        if d.alert_t is not None:
            ax.plot([d.alert_t], [100 * d.alert_residual], marker="x", color=color, ms=9,
                    mew=2, ls="none")
    peak = max((float(np.max(np.abs(d.residual))) for d in shown), default=0.0)
    if thresholds and peak > 5 * thresholds[-1]:  # a run far off the curve: keep the band readable
        limit = 500 * thresholds[-1]
        ax.set_ylim(-limit, limit)
        title += " (y clipped)"
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("t^ = step / T (fraction of the run's steps)")
    ax.set_ylabel(f"residual, % of the loss (mean over {SMOOTH_WINDOW:g} of t^)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    n = len(shown) + 2
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
              ncol=1 if n <= 24 else 2)
    fig.tight_layout()
    return fig
