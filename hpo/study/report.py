"""``report.md`` and its PNG plots for a finished study (matplotlib, Agg backend, loaded lazily).

Plots (in the study's output folder), each with a caption in the report:

- ``proxies_collapse.png``: the proxies' smoothed normalized curves L / L_final against t^, with
  the universal curve for each proxy's controls (dashed): how well the family collapses.
- ``trials.png``: each trial's smoothed loss curve with a marker where it ended (x: stopped, at
  the t^ of its last report; o: completed) and a label ("#4 stopped t^ 0.31", "#1 kept"); from
  the t^ of its latest prediction, the predicted rest of the curve (dashed) and, at t^ 1, the
  predicted final with its interval (bars, the level named in the key); the pruner's
  checkpoints (dotted); the verified end of a stopped trial when ``--verify`` ran. The legend
  names every trial by number and params with its outcome.
- ``compute.png``: compute of a full sweep against this sweep (and with the proxies).
- ``residuals.png``: the collapse residual of every proxy and trial against the universal curve,
  each line in the legend (trials with their params and outcome), the alert bands labelled with
  their thresholds and a cross at each first alert (``hpo.diagnose``); the report's
  diagnostics table gives each run's largest residual and first alert.

The report's tables name each interval's coverage level (as the trials' records store it) and
each verdict the checkpoint it judged (``hpo.study.summary.verdict``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from hpo._extras import pyplot
from hpo.diagnose import _LINE_STYLES, clean_raw_x, diagnose_runs, format_diagnoses, plot_residuals
from hpo.predictors import load_universal_curve, reference_band
from hpo.predictors.monitor import ALIGN_WINDOW
from hpo.predictors.normalize import final_loss_estimate, smooth_curve
from hpo.pruning import TrialState
from hpo.study.folder import curve_runs

__all__ = ["write_report"]


def _plt() -> Any:
    return pyplot()


def _smooth(t: Any, y: Any) -> Any:
    return smooth_curve(t, y, 0.02)


def plot_proxies(out: Path) -> Path | None:
    """``proxies_collapse.png``: each proxy's smoothed L / L_final against t^ with the
    universal curve at its controls (dashed); ``None`` without proxies or a curve."""
    runs = curve_runs(out / "proxies")
    curve_path = out / "universal_curve.json"
    if not runs or not curve_path.exists():
        return None
    curve = load_universal_curve(curve_path)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(runs):
        t = r.t_hat
        final = final_loss_estimate(t, r.losses, at=1.0)
        color = f"C{i % 10}"
        ax.plot(t, _smooth(t, r.losses) / final, color=color, lw=1.2, label=r.run_id)
        grid = t[t >= 0.05]
        ax.plot(grid, curve.predict(grid, r.controls), color=color, lw=1, ls="--")
    ax.set_xlim(0.05, 1.0)
    ax.set_ylim(0.97, 1.35)
    ax.set_xlabel("t^ = step / T (fraction of the proxy's steps)")
    ax.set_ylabel("L / L_final (smoothed)")
    ax.set_title("proxies: normalized curves (solid) and universal curve (dashed)")
    ax.plot([], [], color="0.3", lw=1, ls="--", label="universal curve at the proxy's controls")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path = out / "proxies_collapse.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _interval_name(level: float | None) -> str:
    """``"80% interval"`` for ``level`` 0.8; ``"interval"`` when the level is unknown."""
    return "interval" if level is None else f"{100 * level:.0f}% interval"


def _level(summary: dict[str, Any]) -> float | None:
    """The intervals' coverage level: the summary's, else the first trial row's."""
    level = summary.get("interval_level")
    if level is None:
        level = next((r["level"] for r in summary.get("trial_table", []) if r.get("level")),
                     None)
    return level


def _stopped_by_monitor(row: dict[str, Any]) -> bool:
    return str(row.get("verdict") or "").startswith("stopped by the residual monitor")


def _outcome(row: dict[str, Any]) -> str:
    """How a trial of the trial table ended, in a few words: ``"stopped at t^ 0.31
    (checkpoint 0.3)"``, ``"kept, final 2.2415"``."""
    cp = row.get("checkpoint")
    if row["state"] == TrialState.STOPPED:
        why = "residual monitor" if _stopped_by_monitor(row) else (
            f"checkpoint {cp:g}" if cp is not None else "pruned")
        return f"stopped at t^ {row['t_hat_end']:.2f} ({why})"
    value = "" if row.get("value") is None else f", final {row['value']:.4f}"
    return ("kept" if cp is not None else "completed") + value


def _spread(ys: list[float], gap: float, lo: float, hi: float) -> list[float]:
    """Label heights near ``ys``, at least ``gap`` apart and inside [lo, hi], in ``ys``' order."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    placed = [0.0] * len(ys)
    prev = -math.inf
    for i in order:
        prev = max(ys[i], prev + gap, lo)
        placed[i] = prev
    over = placed[order[-1]] - hi if order else 0.0
    if over > 0:  # pushed past the top: shift the stack down, keeping the gaps
        placed = [y - over for y in placed]
    return placed


def _trials_figure(out: Path, summary: dict[str, Any]) -> Any | None:
    """The figure of :func:`plot_trials` (``None`` without trial curves)."""
    runs = {r.run_id: r for r in curve_runs(out / "trials")}
    rows = [r for r in summary.get("trial_table", []) if f"trial-{r['trial']}" in runs]
    if not rows:
        return None
    curve_path = out / "universal_curve.json"
    curve = load_universal_curve(curve_path) if curve_path.exists() else None
    itv = _interval_name(_level(summary))
    plt = _plt()
    verified = {v["trial"] for v in summary.get("verification", [])}
    # tall enough for both legends beside the plot (about 0.17 in per entry)
    fig, ax = plt.subplots(figsize=(8, max(5.0, 0.17 * (len(rows) + 7) + 1.2)))
    checkpoints = summary.get("checkpoints") or sorted(
        {r["checkpoint"] for r in rows if r.get("checkpoint") is not None})
    for cp in checkpoints:
        ax.axvline(cp, color="0.35", ls=":", lw=1)
    bars = [r for r in rows if r.get("predicted") is not None and r.get("interval")]
    bar_x = {r["trial"]: 1.0 + 0.006 * (k + 1) for k, r in enumerate(bars)}
    right = max(bar_x.values(), default=1.0) + 0.02
    lo, hi = math.inf, -math.inf
    handles, ends = [], []
    for i, row in enumerate(rows):
        n = row["trial"]
        verify = runs.get(f"trial-{n}-verify") if n in verified else None
        handle, end, (lo_i, hi_i) = _draw_trial(ax, i, row, runs[f"trial-{n}"], verify, curve,
                                                bar_x.get(n), right)
        handles.append(handle)
        ends.append(end)
        lo, hi = min(lo, lo_i), max(hi, hi_i)
    if math.isfinite(lo):
        pad = 0.06 * (hi - lo)
        lo, hi = lo - pad, hi + pad
        ax.set_ylim(lo, hi)
    else:
        lo, hi = ax.get_ylim()
    _label_ends(ax, ends, lo, hi)
    ax.set_xlim(0, right + 0.13)
    ax.set_xlabel("t^ = step / T (fraction of the trial's steps)")
    ax.set_ylabel("train loss (smoothed)")
    ax.set_title(f"trials: where each was stopped (x) or kept (o); predicted final with its "
                 f"{itv} (bars)", fontsize=10)
    ax.grid(alpha=0.3)
    _trials_legends(ax, handles, itv, checkpoints, bool(verified))
    fig.tight_layout()
    return fig


def _draw_trial(
    ax: Any, i: int, row: dict[str, Any], run: Any, verify: Any | None, curve: Any | None,
    bar_x: float | None, right: float,
) -> tuple[Any, tuple[float, float, str, str], tuple[float, float]]:
    """Draw the ``i``-th trial of the plot: its smoothed curve, the verified rest (``verify``,
    faint), its end marker and, with a prediction, the predicted rest (dashed) and final with
    its interval (a bar at ``bar_x``). Returns the curve's legend handle, the end's label
    ``(x, y, text, color)`` (a kept trial's at ``right``) and the y range the trial needs."""
    n = row["trial"]
    color, style = f"C{i % 10}", _LINE_STYLES[(i // 10) % len(_LINE_STYLES)]
    t, y = run.t_hat, _smooth(run.t_hat, run.losses)
    (line,) = ax.plot(t, y, color=color, lw=1.3, ls=style,
                      label=f"#{n} {_short(row['params'])}: {_outcome(row)}")
    tail = y[t >= 0.2]
    lo, hi = (float(tail.min()), float(tail.max())) if tail.size else (math.inf, -math.inf)
    stopped = row["state"] == TrialState.STOPPED
    if verify is not None:
        keep = verify.t_hat > t[-1]
        ax.plot(verify.t_hat[keep], _smooth(verify.t_hat, verify.losses)[keep], color=color,
                lw=0.8, ls=style, alpha=0.45)
    ax.plot([t[-1]], [y[-1]], ls="none", color=color, marker="x" if stopped else "o",
            ms=8 if stopped else 5, mew=2)
    if stopped:
        end = (float(t[-1]) + 0.012, float(y[-1]), f"#{n} stopped t^ {row['t_hat_end']:.2f}",
               color)
    else:
        tag = f"#{n} {'kept' if row.get('checkpoint') is not None else 'completed'}"
        end = (right, float(y[-1]), tag, color)
    pred, interval, at = row.get("predicted"), row.get("interval"), row.get("predicted_at")
    if pred is None or not interval:
        return line, end, (lo, hi)
    if curve is not None and at:
        grid = np.linspace(float(at), 1.0, 40)
        # a stopped run's lr column ends at the stop: use the schedule by name
        controls = run.controls.with_(lr_schedule=None) if run.controls.schedule \
            else run.controls
        ax.plot(grid, pred * curve.predict(grid, controls), color=color, ls="--", lw=0.9)
    ax.errorbar([bar_x], [pred], yerr=[[pred - interval[0]], [interval[1] - pred]],
                color=color, marker="_", ms=7, capsize=2, lw=1.2)
    return line, end, (min(lo, interval[0]), max(hi, interval[1]))


def _label_ends(ax: Any, ends: list[tuple[float, float, str, str]], lo: float, hi: float
                ) -> None:
    """The labels at each trial's end, in columns that share an x, spread so that they do
    not overlap within the y range [lo, hi]."""
    columns: dict[int, list[tuple[float, float, str, str]]] = {}
    for e in ends:
        columns.setdefault(round(e[0] / 0.05), []).append(e)
    for column in columns.values():
        ys = _spread([e[1] for e in column], 0.035 * (hi - lo), lo, hi - 0.02 * (hi - lo))
        for (x, _, tag, color), yy in zip(column, ys, strict=True):
            ax.text(x, yy, tag, color=color, fontsize=7, va="center",
                    bbox={"fc": "white", "ec": "none", "alpha": 0.75, "pad": 0.5})


def _trials_legends(ax: Any, handles: list[Any], itv: str, checkpoints: list[float],
                    verified: bool) -> None:
    """Right of the plot: the key to the marks at the bottom, the trials (one entry each)
    from the top."""
    from matplotlib.lines import Line2D

    key = [Line2D([], [], color="0.3", marker="x", ls="none", mew=2,
                  label="stopped (its last report)"),
           Line2D([], [], color="0.3", marker="o", ls="none", label="completed"),
           Line2D([], [], color="0.3", ls="--", lw=0.9,
                  label="predicted rest (from the t^ of the prediction)"),
           Line2D([], [], color="0.3", marker="|", ms=10, mew=1.5, ls="none",
                  label=f"predicted final, {itv}")]
    if checkpoints:
        key.append(Line2D([], [], color="0.35", ls=":", lw=1,
                          label="checkpoint t^ " + ", ".join(f"{c:g}" for c in checkpoints)))
    if verified:
        key.append(Line2D([], [], color="0.3", lw=0.8, alpha=0.45,
                          label="stopped trial trained on (--verify)"))
    key_legend = ax.legend(handles=key, fontsize=7, loc="lower left",
                           bbox_to_anchor=(1.01, 0.0), borderaxespad=0)
    key_legend.set_clip_on(False)  # outside the axes: in the saved image's bounds
    ax.add_artist(key_legend)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0, title="trial params: outcome", title_fontsize=7)


def plot_trials(out: Path, summary: dict[str, Any]) -> Path | None:
    """``trials.png``: each trial's smoothed loss with a marker where it ended (x: stopped at
    that t^, o: completed) and a label saying so; from the t^ of its latest prediction, the
    predicted rest of the curve (dashed) and, at t^ 1, the predicted final with its interval
    (its level named); the pruner's checkpoints dotted; the verified end of a stopped trial
    (``--verify``) faint. The legend names every trial by number and params with its outcome.
    ``None`` without trial curves."""
    fig = _trials_figure(out, summary)
    if fig is None:
        return None
    path = out / "trials.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return path


def diagnose_study(out: Path) -> tuple[list[Any], float | None]:
    """The residual diagnosis of every proxy and trial curve of the study folder (none without
    a universal curve with a residual band), each with the raw-loss rule's alert beside it, and
    that rule's x: the smallest without an alert on the proxies (``None`` without diagnoses)."""
    curve_path = out / "universal_curve.json"
    if not curve_path.exists():
        return [], None
    curve = load_universal_curve(curve_path)
    if reference_band(curve) is None:
        return [], None
    proxies = curve_runs(out / "proxies")
    raw_x = clean_raw_x(proxies) if proxies else None
    return diagnose_runs(proxies + curve_runs(out / "trials"), curve, raw_x=raw_x), raw_x


def _inject_lines(summary: dict[str, Any], diagnoses: list[Any]) -> list[str]:
    """The report's line on a trial broken on purpose (``diagnose.inject``): the fault, and
    where the residual monitor and the raw-loss rule first alerted on it."""
    inject = (summary.get("diagnostics") or {}).get("inject")
    if not inject:
        return []
    run = f"trial-{inject['trial']}"
    d = next((d for d in diagnoses if d.run_id == run), None)
    line = f"{run} was broken on purpose: `{inject['fault']}` (diagnose.inject)"
    if d is None:
        return ["", line + "; it has no curve to diagnose."]

    def at(t: float | None) -> str:
        return "no alert" if t is None else f"t^ {t:.3f}"

    return ["", f"{line}. Residual monitor: {at(d.alert_t)}; raw-loss rule: "
                f"{at(d.raw_alert_t)}."]


def _residual_labels(summary: dict[str, Any]) -> dict[str, str]:
    """Legend text of each trial's residual line: run id, params and outcome."""
    labels = {}
    for r in summary.get("trial_table", []):
        n = r["trial"]
        labels[f"trial-{n}"] = f"trial-{n} {_short(r['params'])}: {_outcome(r)}"
        labels[f"trial-{n}-verify"] = f"trial-{n} trained on (--verify)"
    return labels


def plot_diagnoses(out: Path, diagnoses: list[Any],
                   summary: dict[str, Any] | None = None) -> Path | None:
    """``residuals.png`` (:func:`hpo.diagnose.plot_residuals`), each trial's line labelled with
    its params and outcome; ``None`` without diagnoses."""
    if not diagnoses:
        return None
    return plot_residuals(diagnoses, out / "residuals.png",
                          title="collapse residual of proxies and trials (first alerts: x)",
                          labels=_residual_labels(summary or {}))


def plot_compute(out: Path, summary: dict[str, Any]) -> Path | None:
    """``compute.png``: the training compute of a full sweep, of this sweep and of this sweep
    with its proxies, each bar labelled with its share of the full sweep."""
    c = summary.get("compute") or {}
    if not c.get("full_sweep"):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3))
    labels = ["full sweep", "this sweep"]
    values = [c["full_sweep"], c["sweep_used"]]
    if c.get("proxies"):
        labels.append("this sweep + proxies")
        values.append(c["sweep_used"] + c["proxies"])
    bars = ax.barh(labels, values, color=["C7", "C2", "C0"][: len(values)])
    for bar, v in zip(bars, values, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {100 * v / c['full_sweep']:.0f}% ({v:.3g})", va="center", fontsize=9)
    ax.set_xlabel("training compute, FLOPs (6 N D)")
    t = summary.get("trials") or {}
    stopped = f": {t['stopped']} of {t['complete'] + t['stopped']} trials stopped early" \
        if t.get("complete") is not None and t.get("stopped") is not None else ""
    ax.set_title(f"compute against a full sweep{stopped}", fontsize=10)
    ax.set_xlim(0, max(values) * 1.35)
    path = out / "compute.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _short(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in sorted(params.items()))


#: what each plot shows, written under it in the report
_CAPTIONS = {
    "proxies_collapse": "The proxies' loss over their own final loss against t^ (solid) and the "
                        "universal curve at each proxy's controls (dashed): the closer, the "
                        "better the family collapses and the better the predictions.",
    "trials": "Each trial's loss; x where it was stopped, o where it completed, each with a "
              "label; from its prediction on, the predicted rest (dashed) and at t^ 1 the "
              "predicted final with its {itv} (bars). Dotted: the pruner's checkpoints.",
    "compute": "Training compute of this sweep against training every trial to the end.",
    "residuals": "How far each run's loss is off the universal curve (in % of the loss) after "
                 "its alignment window; a run that leaves the alert band (x) has drifted off "
                 "the curve: its prediction is not to be trusted.",
}


def write_report(out: str | Path, summary: dict[str, Any] | None = None) -> Path:
    """Write ``report.md`` and the plots into the study folder ``out``; returns the report path.

    Every interval in it is named with its coverage level (the predictor's, as the trials'
    records store it), and every verdict with the checkpoint it judged."""
    out = Path(out)
    if summary is None:
        summary = json.loads((out / "summary.json").read_text())
    diagnoses, raw_x = diagnose_study(out)
    images = [p for p in (plot_proxies(out), plot_trials(out, summary),
                          plot_compute(out, summary), plot_diagnoses(out, diagnoses, summary))
              if p is not None]
    itv = _interval_name(_level(summary))
    table = summary.get("trial_table", [])
    lines = [f"# Study `{summary['study']}` ({summary['mode']})", ""]
    best = summary.get("best")
    if best:
        lines.append(f"**Best:** trial {best['trial']}, {_short(best['params'])}: final loss "
                     f"{best['loss']:.4f}.")
    lines += _compute_lines(summary["compute"])
    cmp_ = summary.get("comparison")
    if cmp_:
        ref = cmp_["full_sweep_best"]
        lines += ["", f"**Against the full sweep** ({cmp_['source']}): "
                      f"{'same choice' if cmp_['same_choice'] else 'different choice'}; the full "
                      f"sweep's best is {_short(ref['params'])} at {ref['loss']:.4f}."]
    lines += _trial_table_lines(table, itv)
    lines += _verdict_lines(table, summary.get("checkpoints"), itv)
    acc = summary.get("predictions") or {}
    if acc.get("n"):
        lines += ["", f"**How well it predicted**: {acc['inside']} of {acc['n']} trials with a "
                      f"known final loss ended inside their {itv}; absolute error of the "
                      f"prediction median {100 * acc['median_abs_err']:.1f}%, max "
                      f"{100 * acc['max_abs_err']:.1f}%."]
    lines += _verification_lines(summary.get("verification"), itv)
    if diagnoses:
        lines += _diagnostics_lines(summary, diagnoses, raw_x)
    lines.append("")
    for img in images:
        caption = _CAPTIONS.get(img.stem, "").format(itv=itv)
        lines += [f"![{img.stem}]({img.name})", ""] + ([caption, ""] if caption else [])
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _compute_lines(c: dict[str, Any]) -> list[str]:
    """The compute table: a full sweep, this sweep and this sweep with its proxies (none
    without a full sweep's compute)."""
    if not c["full_sweep"]:
        return []
    lines = ["", "| compute (FLOPs, 6ND) | value | of a full sweep |", "|---|---|---|",
             f"| full sweep | {c['full_sweep']:.3g} | 100% |",
             f"| this sweep | {c['sweep_used']:.3g} | "
             f"{100 * c['sweep_used'] / c['full_sweep']:.0f}% |"]
    if c.get("proxies"):
        lines.append(f"| this sweep + proxies | {c['sweep_used'] + c['proxies']:.3g} | "
                     f"{100 * (c['sweep_used'] + c['proxies']) / c['full_sweep']:.0f}% |")
    return lines


def _trial_table_lines(table: list[dict[str, Any]], itv: str) -> list[str]:
    """The trial table: each trial's params, outcome, last checkpoint judged, value and latest
    prediction with its interval, and what the value and the prediction mean."""
    lines = ["", "| trial | params | outcome | last checkpoint judged | value "
                 f"| predicted final | {itv} | full sweep's final |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table:
        pred = "" if r["predicted"] is None else f"{r['predicted']:.4f}"
        if pred and r.get("predicted_at") is not None:
            pred += f" (at t^ {r['predicted_at']:.2f})"
        bounds = "" if not r["interval"] else \
            f"[{r['interval'][0]:.4f}, {r['interval'][1]:.4f}]"
        value = "" if r["value"] is None else f"{r['value']:.4f}"
        ref = "" if r.get("full_sweep_value") is None else f"{r['full_sweep_value']:.4f}"
        cp = "" if r.get("checkpoint") is None else f"{r['checkpoint']:g}"
        state = {TrialState.STOPPED: f"stopped at t^ {r['t_hat_end']:.2f}",
                 TrialState.COMPLETE: "completed"}.get(r["state"], r["state"])
        if _stopped_by_monitor(r):
            state += " by the residual monitor"
        lines.append(f"| {r['trial']} | {_short(r['params'])} | {state} | {cp} | {value} "
                     f"| {pred} | {bounds} | {ref} |")
    lines += ["", "value: a stopped trial's last reported loss (Optuna's convention); predicted: "
                  "the final loss predicted at the trial's latest prediction (made on the curve "
                  f"up to the t^ given), with its {itv}."]
    return lines


def _verdict_lines(table: list[dict[str, Any]], checkpoints: list[float] | None, itv: str
                   ) -> list[str]:
    """When the pruner judges, and each judged trial's latest verdict (none without one)."""
    why = [r for r in table if r.get("verdict") or r.get("explanation")]
    if not why:
        return []
    lines = []
    if checkpoints:
        lines += ["", "The pruner judges each trial at the first report from t^ "
                      + ", ".join(f"{x:g}" for x in checkpoints) + " on (pruner.checkpoints) and "
                      "re-judges that prediction at its next few reports as other trials "
                      "finish."]
    lines += ["", f"| trial | the pruner's latest verdict ({itv}s) |", "|---|---|"]
    lines += [f"| {r['trial']} | {r.get('verdict') or r['explanation']} |" for r in why]
    return lines


def _verification_lines(verification: list[dict[str, Any]] | None, itv: str) -> list[str]:
    """The stopped trials trained to the end (``--verify``): predicted against actual."""
    if not verification:
        return []
    lines = ["", "## Stopped trials trained to the end (`--verify`)", "",
             f"| trial | stopped at t^ | predicted | {itv} | actual | inside |",
             "|---|---|---|---|---|---|"]
    for v in verification:
        bounds = "" if not v["interval"] else f"[{v['interval'][0]:.4f}, " \
                                              f"{v['interval'][1]:.4f}]"
        pred = "" if v["predicted"] is None else f"{v['predicted']:.4f}"
        lines.append(f"| {v['trial']} | {v['stopped_at']:.2f} | {pred} | {bounds} | "
                     f"{v['actual']:.4f} | {v['inside_interval']} |")
    return lines


def _diagnostics_lines(summary: dict[str, Any], diagnoses: list[Any], raw_x: float | None
                       ) -> list[str]:
    """The collapse diagnostics: which runs drift off the universal curve, whether alerts
    stop trials, a trial broken on purpose, and the table of every run's residual."""
    alerts = [d for d in diagnoses if d.alert_t is not None]
    stop = (summary.get("diagnostics") or {}).get("stop_on_alert")
    return ["", "## Collapse diagnostics", "",
            f"{len(alerts)} of {len(diagnoses)} runs drift off the universal curve "
            "(residual alert)" + (": " + ", ".join(f"{d.run_id} at t^ {d.alert_t:.2f}"
                                                   for d in alerts) if alerts else "")
            + (f"; alerts {'stop' if stop else 'do not stop'} trials "
               f"(diagnose.stop_on_alert: {str(bool(stop)).lower()})."
               if stop is not None else "."),
            *_inject_lines(summary, diagnoses),
            "", format_diagnoses(diagnoses, raw_x), "",
            "residual: log L - log(L_final x universal curve), aligned on t^ "
            f"{ALIGN_WINDOW[0]:g}-{ALIGN_WINDOW[1]:g} and "
            "averaged over the last 5% of t^; threshold: calibrated on the proxies, "
            "widened for a run beyond them. The raw-loss rule alerts where the loss, "
            "averaged over the same 5% of t^, rises x above its lowest so far; x is the "
            "smallest with no alert on the proxies."]
