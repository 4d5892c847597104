"""The study report: what each plot and table tells the user (synthetic curves, no training)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpo.predictors import fit_universal_curve
from hpo.pruning import Record
from hpo.pruning._sentence import explain
from hpo.study.report import _trials_figure, plot_trials, write_report
from hpo.study.summary import interval_level, verdict
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)
TOTAL = 2000


def _record(*, stop: bool, predicted_at: float, judged_at: float, reason: str,
            checkpoint: float = 0.3, level: float = 0.8, **extra: Any) -> Record:
    """A judge's record read back from the dict the pruner stores, with its sentence from the
    pruner's own ``explain``."""
    record = Record.from_dict({
        "estimate": {"value": 3.0, "lower": 2.9, "upper": 3.1, "t_hat": predicted_at,
                     "level": level, "status": "ok"},
              "threshold": 0.05, "stop": stop, "reason": reason, "checkpoint": checkpoint,
              "step": judged_at * TOTAL, "t_hat": judged_at, **extra})
    return record.replace(explanation=explain(record))


KEPT = _record(stop=False, predicted_at=0.3065, judged_at=0.394, reason="may_win",
               probability=0.97, against={"label": 0, "final": 3.2})
STOPPED = _record(stop=True, predicted_at=0.3065, judged_at=0.3065, reason="may_lose",
                  probability=1e-9, against={"label": 0, "final": 2.5})


def test_verdict_names_the_checkpoint_it_judged() -> None:
    # the pruner's sentence starts with the t^ of the report that re-judged the prediction
    assert KEPT.explanation.startswith("kept at t^ 0.39")
    row = {"trial": 1, "state": "complete"}
    text = verdict(KEPT, row)
    # the verdict names the checkpoint, then the t^ the prediction and the re-judging were at
    assert text.startswith("kept at checkpoint t^ 0.3 (on the curve up to t^ 0.31, "
                           "re-judged at t^ 0.39): 97.0% chance to end below trial 0")
    assert "kept at t^ 0.39" not in text
    # judged once: no re-judging to name
    assert verdict(STOPPED, {"trial": 2, "state": "stopped"}).startswith(
        "stopped at checkpoint t^ 0.3 (on the curve up to t^ 0.31): ")
    # never judged
    assert verdict(None, row) is None


def test_verdict_of_a_trial_the_residual_monitor_stopped() -> None:
    row = {"trial": 3, "state": "stopped",
           "residual_alert": {"t_hat": 0.33, "residual": -0.1, "threshold": 0.09}}
    # the judge kept it; the monitor stopped it: the verdict says who stopped it, and where
    assert verdict(KEPT, row, stop_on_alert=True).startswith(
        "stopped by the residual monitor (trial 3: residual alert at t^ 0.33")
    assert verdict(KEPT, row, stop_on_alert=False).startswith("kept at checkpoint t^ 0.3")


def test_interval_level_comes_from_the_records() -> None:
    records = {"0.3": _record(stop=False, predicted_at=0.3, judged_at=0.3,
                              reason="startup", level=0.9)}
    assert interval_level(records) == pytest.approx(0.9)
    assert interval_level({}) is None


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A study folder with a universal curve and three trial curves: trial 0 completed, trial 1
    stopped at t^ 0.3 by the pruner, trial 2 at t^ 0.3 by the residual monitor; and its
    summary."""
    out = tmp_path_factory.mktemp("report")
    fit_universal_curve(paper_family(TRUE, noise=0.003), form="paper").to_json(
        out / "universal_curve.json")
    (out / "trials").mkdir()
    rows = []
    for n, (lr, end) in enumerate(((1e-3, 1.0), (0.5e-3, 0.3), (2e-3, 0.3))):
        df = make_run(f"trial-{n}", 2e7, TOTAL, lr, 20.0, TRUE, noise=0.003, seed=n)
        df = df[df.step <= end * TOTAL]
        df.to_csv(out / "trials" / f"{n}.csv.gz", index=False)
        record = KEPT if n != 1 else STOPPED
        row = {"trial": n, "params": {"lr": lr, "tau": round(1 / (lr * 0.1 * TOTAL), 3)},
               "state": "complete" if n == 0 else "stopped", "value": float(df.loss.iloc[-1]),
               "t_hat_end": end, "predicted": 3.0, "interval": [2.9, 3.1], "level": 0.8,
               "predicted_at": 0.3065, "checkpoint": 0.3, "judged_at": record.t_hat,
               "explanation": record.explanation, "full_sweep_value": None,
               "residual_alert": {"t_hat": 0.3, "residual": 0.1, "threshold": 0.05}
               if n == 2 else None}
        row["verdict"] = verdict(record, row, stop_on_alert=True)
        rows.append(row)
    summary = {"study": "synthetic", "mode": "collapse pruning", "trial_table": rows,
               "checkpoints": [0.3], "interval_level": 0.8,
               "trials": {"complete": 1, "stopped": 2, "failed_or_interrupted": 0},
               "compute": {"full_sweep": 3.0, "sweep_used": 1.6, "proxies": 0.2},
               "predictions": {"n": 1, "inside": 1, "median_abs_err": 0.01,
                               "max_abs_err": 0.01},
               "diagnostics": {"stop_on_alert": True}}
    return out, summary


def test_trials_plot_marks_where_each_trial_ended_and_names_it(folder) -> None:
    out, summary = folder
    fig = _trials_figure(out, summary)
    ax = fig.axes[0]
    # one legend entry per trial: its number, params and how it ended
    entries = [t.get_text() for t in ax.get_legend().get_texts()]
    final = summary["trial_table"][0]["value"]
    assert entries == [f"#0 lr=0.001, tau=5: kept, final {final:.4f}",
                       "#1 lr=0.0005, tau=10: stopped at t^ 0.30 (checkpoint 0.3)",
                       "#2 lr=0.002, tau=2.5: stopped at t^ 0.30 (residual monitor)"]
    # a marker at each trial's last point (x: stopped, o: completed), labelled beside it
    ends = {(line.get_marker(), round(float(line.get_xdata()[0]), 2)) for line in ax.lines
            if len(line.get_xdata()) == 1 and line.get_marker() in ("x", "o")}
    assert ends == {("o", 1.0), ("x", 0.3)}
    labels = {t.get_text() for t in ax.texts}
    assert {"#0 kept", "#1 stopped t^ 0.30", "#2 stopped t^ 0.30"} <= labels
    # the key names the interval's level and the checkpoint the pruner judges at
    key = [t.get_text() for a in ax.artists for t in getattr(a, "get_texts", list)()]
    assert "predicted final, 80% interval" in key and "checkpoint t^ 0.3" in key
    assert "80% interval" in ax.get_title()
    import matplotlib.pyplot as plt

    plt.close(fig)
    path = plot_trials(out, summary)
    assert path == out / "trials.png" and path.stat().st_size > 0


def test_report_names_the_level_and_the_judged_checkpoint(folder) -> None:
    out, summary = folder
    text = write_report(out, summary).read_text()
    # every interval printed says its level
    assert "| 80% interval |" in text and "the pruner's latest verdict (80% intervals)" in text
    assert "ended inside their 80% interval" in text
    # every verdict names the checkpoint it judged, not the t^ of the re-judging report
    assert "| 0 | kept at checkpoint t^ 0.3 (on the curve up to t^ 0.31, re-judged at t^ " \
           "0.39): " in text
    assert "| 1 | stopped at checkpoint t^ 0.3 (on the curve up to t^ 0.31): " in text
    assert "| 2 | stopped by the residual monitor (trial 2: residual alert at t^ 0.30" in text
    assert "kept at t^ 0.39" not in text
    # the trial table: how each ended and the checkpoint it was judged at
    assert "| 1 | lr=0.0005, tau=10 | stopped at t^ 0.30 | 0.3 |" in text
    # every plot is there with a caption; the residual lines are labelled by trial params
    for name in ("trials", "compute", "residuals"):
        assert f"![{name}]({name}.png)" in text and (out / f"{name}.png").is_file()
    assert "predicted final with its 80% interval" in text


def test_report_names_a_trial_broken_on_purpose_and_both_rules(folder, tmp_path) -> None:
    import shutil

    src, summary = folder
    out = tmp_path / "study"
    shutil.copytree(src, out)
    (out / "proxies").mkdir()
    for n, lr in enumerate((0.5e-3, 1e-3, 2e-3)):
        make_run(f"proxy-{n}", 1e7, TOTAL, lr, 20.0, TRUE, noise=0.003, seed=10 + n).to_csv(
            out / "proxies" / f"proxy-{n}.csv.gz", index=False)
    broken = dict(summary, diagnostics={"stop_on_alert": False,
                                        "inject": {"trial": 0, "fault": "lr-spike@0.5"}})
    text = write_report(out, broken).read_text()
    # the raw-loss rule's column, at the x no proxy reaches, beside the residual's alert
    assert "raw-loss rule (x = " in text and "smallest with no alert on the proxies" in text
    assert "| proxy-0 |" in text
    line = next(x for x in text.splitlines() if x.startswith("trial-0 was broken on purpose"))
    assert "`lr-spike@0.5` (diagnose.inject)" in line
    assert "Residual monitor: no alert" in line and "raw-loss rule: " in line
    # a study without a fault or without proxies says neither
    plain = write_report(src, summary).read_text()
    assert "broken on purpose" not in plain and "raw-loss rule (x" not in plain
