"""``report.md`` and its PNG plots for a finished study (matplotlib, Agg backend, loaded lazily).

Plots (in the study's output folder):

- ``proxies_collapse.png``: the proxies' smoothed normalized curves L / L_final against t^, with
  the universal curve for each proxy's controls (dashed): how well the family collapses.
- ``trials.png``: each trial's smoothed loss curve; from the t^ of its latest prediction, the
  predicted rest of the curve (predicted final x universal curve) with its interval band; a cross
  where a trial was stopped, and the verified end of a stopped trial when ``--verify`` ran.
- ``compute.png``: compute of a full sweep against the pruned sweep (and with the proxies).
- ``residuals.png``: the collapse residual of every proxy and trial against the universal curve,
  with the threshold band and a cross at each alert (``hpo.diagnose``); the report's
  diagnostics table gives each run's largest residual and first alert.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hpo.study.plan import curve_runs

__all__ = ["write_report"]


def _plt() -> Any:
    from hpo._extras import pyplot

    return pyplot()


def _smooth(t: Any, y: Any) -> Any:
    from hpo.predictors.normalize import smooth_curve

    return smooth_curve(t, y, 0.02)


def plot_proxies(out: Path) -> Path | None:
    from hpo.predictors import load_universal_curve
    from hpo.predictors.normalize import final_loss_estimate

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
    ax.set_xlabel("t^ = step / T")
    ax.set_ylabel("L / L_final (smoothed)")
    ax.set_title("proxies: normalized curves (solid) and universal curve (dashed)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path = out / "proxies_collapse.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_trials(out: Path, summary: dict[str, Any]) -> Path | None:
    import numpy as np

    from hpo.predictors import load_universal_curve

    runs = {r.run_id: r for r in curve_runs(out / "trials")}
    if not runs:
        return None
    curve_path = out / "universal_curve.json"
    curve = load_universal_curve(curve_path) if curve_path.exists() else None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    verified = {v["trial"]: v for v in summary.get("verification", [])}
    ymin, ymax = math.inf, -math.inf
    for i, row in enumerate(summary.get("trial_table", [])):
        n = row["trial"]
        color = f"C{i % 10}"
        run = runs.get(f"trial-{n}")
        if run is None:
            continue
        t, y = run.t_hat, _smooth(run.t_hat, run.losses)
        ax.plot(t, y, color=color, lw=1.2, label=f"{n}: {_short(row['params'])}")
        tail = y[t >= 0.2]
        if tail.size:
            ymin, ymax = min(ymin, float(tail.min())), max(ymax, float(tail.max()))
        if n in verified:
            vr = runs.get(f"trial-{n}-verify") or None
            if vr is not None:
                vt = vr.t_hat
                keep = vt > t[-1]
                ax.plot(vt[keep], _smooth(vt, vr.losses)[keep], color=color, lw=0.8, alpha=0.5)
        pred, interval, at = row.get("predicted"), row.get("interval"), row.get("predicted_at")
        if curve is not None and pred is not None and interval and at:
            grid = np.linspace(float(at), 1.0, 40)
            # a stopped run's lr column ends at the stop: use the schedule by name
            controls = run.controls.with_(lr_schedule=None) if run.controls.schedule \
                else run.controls
            lhat = curve.predict(grid, controls)
            ax.plot(grid, pred * lhat, color=color, ls="--", lw=1)
            ax.fill_between(grid, interval[0] * lhat, interval[1] * lhat, color=color,
                            alpha=0.12)
            ymin = min(ymin, interval[0])
        if row["state"] == "pruned":
            ax.plot([t[-1]], [y[-1]], marker="x", color=color, ms=9, mew=2)
    if math.isfinite(ymin):
        pad = 0.05 * (ymax - ymin)
        ax.set_ylim(ymin - pad, ymax + pad)
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("t^ = step / T")
    ax.set_ylabel("train loss (smoothed)")
    ax.set_title("trials: curves, predicted rest with interval (dashed, band), stops (x)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    path = out / "trials.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def diagnose_study(out: Path) -> list[Any]:
    """The residual diagnosis of every proxy and trial curve of the study folder (none without
    a universal curve with a residual threshold)."""
    from hpo.diagnose import diagnose_runs
    from hpo.predictors import load_universal_curve, reference_threshold

    curve_path = out / "universal_curve.json"
    if not curve_path.exists():
        return []
    curve = load_universal_curve(curve_path)
    if reference_threshold(curve) is None:
        return []
    runs = curve_runs(out / "proxies") + curve_runs(out / "trials")
    return diagnose_runs(runs, curve)


def plot_diagnoses(out: Path, diagnoses: list[Any]) -> Path | None:
    from hpo.diagnose import plot_residuals

    if not diagnoses:
        return None
    return plot_residuals(diagnoses, out / "residuals.png",
                          title="collapse residual of proxies and trials (alerts: x)")


def plot_compute(out: Path, summary: dict[str, Any]) -> Path | None:
    c = summary.get("compute") or {}
    if not c.get("full_sweep"):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    labels = ["full sweep", "pruned sweep"]
    values = [c["full_sweep"], c["sweep_used"]]
    if c.get("proxies"):
        labels.append("pruned + proxies")
        values.append(c["sweep_used"] + c["proxies"])
    bars = ax.barh(labels, values, color=["C7", "C2", "C0"][: len(values)])
    for bar, v in zip(bars, values, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {100 * v / c['full_sweep']:.0f}%", va="center")
    ax.set_xlabel("training compute, FLOPs (6 N D)")
    ax.set_title("compute against a full sweep")
    ax.set_xlim(0, max(values) * 1.2)
    path = out / "compute.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _short(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in sorted(params.items()))


def write_report(out: str | Path, summary: dict[str, Any] | None = None) -> Path:
    """Write ``report.md`` and the plots into the study folder ``out``; returns the report path."""
    out = Path(out)
    if summary is None:
        summary = json.loads((out / "summary.json").read_text())
    diagnoses = diagnose_study(out)
    images = [p for p in (plot_proxies(out), plot_trials(out, summary),
                          plot_compute(out, summary), plot_diagnoses(out, diagnoses))
              if p is not None]
    lines = [f"# Study `{summary['study']}` ({summary['mode']})", ""]
    best = summary.get("best")
    if best:
        lines.append(f"**Best:** trial {best['trial']}, {_short(best['params'])}: final loss "
                     f"{best['loss']:.4f}.")
    c = summary["compute"]
    if c["full_sweep"]:
        lines += ["", "| compute (FLOPs, 6ND) | value | of a full sweep |", "|---|---|---|",
                  f"| full sweep | {c['full_sweep']:.3g} | 100% |",
                  f"| this sweep | {c['sweep_used']:.3g} | "
                  f"{100 * c['sweep_used'] / c['full_sweep']:.0f}% |"]
        if c.get("proxies"):
            lines.append(f"| this sweep + proxies | {c['sweep_used'] + c['proxies']:.3g} | "
                         f"{100 * (c['sweep_used'] + c['proxies']) / c['full_sweep']:.0f}% |")
    cmp_ = summary.get("comparison")
    if cmp_:
        ref = cmp_["full_sweep_best"]
        lines += ["", f"**Against the full sweep** ({cmp_['source']}): "
                      f"{'same choice' if cmp_['same_choice'] else 'different choice'}; the full "
                      f"sweep's best is {_short(ref['params'])} at {ref['loss']:.4f}."]
    lines += ["", "| trial | state | stopped at t^ | value | predicted final | interval "
                  "| full sweep's final | params |",
              "|---|---|---|---|---|---|---|---|"]
    for r in summary.get("trial_table", []):
        pred = "" if r["predicted"] is None else f"{r['predicted']:.4f}"
        itv = "" if not r["interval"] else f"[{r['interval'][0]:.4f}, {r['interval'][1]:.4f}]"
        value = "" if r["value"] is None else f"{r['value']:.4f}"
        ref = "" if r.get("full_sweep_value") is None else f"{r['full_sweep_value']:.4f}"
        lines.append(f"| {r['trial']} | {r['state']} | {r['t_hat_end']:.2f} | {value} | {pred} "
                     f"| {itv} | {ref} | {_short(r['params'])} |")
    lines += ["", "value: a stopped trial's last reported loss (Optuna's convention); predicted: "
                  "the final loss predicted at the trial's latest checkpoint."]
    why = [r for r in summary.get("trial_table", []) if r.get("explanation")]
    if why:
        lines += ["", "| trial | the pruner's latest verdict |", "|---|---|"]
        lines += [f"| {r['trial']} | {r['explanation']} |" for r in why]
    acc = summary.get("predictions") or {}
    if acc.get("n"):
        lines += ["", f"**How well it predicted**: {acc['inside']} of {acc['n']} trials with a "
                      "known final loss ended inside their interval; absolute error of the "
                      f"prediction median {100 * acc['median_abs_err']:.1f}%, max "
                      f"{100 * acc['max_abs_err']:.1f}%."]
    if summary.get("verification"):
        lines += ["", "## Stopped trials trained to the end (`--verify`)", "",
                  "| trial | stopped at | predicted | interval | actual | inside |",
                  "|---|---|---|---|---|---|"]
        for v in summary["verification"]:
            itv = "" if not v["interval"] else f"[{v['interval'][0]:.4f}, " \
                                               f"{v['interval'][1]:.4f}]"
            pred = "" if v["predicted"] is None else f"{v['predicted']:.4f}"
            lines.append(f"| {v['trial']} | {v['stopped_at']:.2f} | {pred} | {itv} | "
                         f"{v['actual']:.4f} | {v['inside_interval']} |")
    if diagnoses:
        from hpo.diagnose import format_diagnoses

        alerts = [d for d in diagnoses if d.alert_t is not None]
        stop = (summary.get("diagnostics") or {}).get("stop_on_alert")
        lines += ["", "## Collapse diagnostics", "",
                  f"{len(alerts)} of {len(diagnoses)} runs drift off the universal curve "
                  "(residual alert)" + (": " + ", ".join(f"{d.run_id} at t^ {d.alert_t:.2f}"
                                                         for d in alerts) if alerts else "")
                  + (f"; alerts {'stop' if stop else 'do not stop'} trials "
                     f"(diagnose.stop_on_alert: {str(bool(stop)).lower()})."
                     if stop is not None else "."),
                  "", format_diagnoses(diagnoses), "",
                  "residual: log L - log(L_final x universal curve), aligned on t^ 0.1-0.3 and "
                  "averaged over the last 5% of t^; threshold: calibrated on the proxies, "
                  "widened for a run beyond them."]
    lines.append("")
    for img in images:
        lines += [f"![{img.stem}]({img.name})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
