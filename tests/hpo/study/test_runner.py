"""``hpo run`` end to end on tiny real models: outputs, resume, kill -9 and resume, full sweep."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from hpo.cli import main
from tests.hpo._studies import write_study

ROOT = Path(__file__).resolve().parents[3]


def _trials(out: Path, name: str = "tiny") -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'study.db'}")
    return study.get_trials(deepcopy=False)


def _peek(out: Path) -> list[tuple[int, str, int, float | None]]:
    """(number, state, n intermediate values, value) of every trial, read through a read-only
    SQLite connection: opening the storage with Optuna would create tables and race the running
    process that is creating them."""
    con = sqlite3.connect(f"file:{out / 'study.db'}?mode=ro", uri=True, timeout=1.0)
    try:
        return con.execute(
            "SELECT t.number, t.state,"
            " (SELECT COUNT(*) FROM trial_intermediate_values i WHERE i.trial_id = t.trial_id),"
            " (SELECT v.value FROM trial_values v WHERE v.trial_id = t.trial_id"
            "  AND v.objective = 0) FROM trials t"
        ).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny study run to the end (shared by the tests that only read it)."""
    folder = tmp_path_factory.mktemp("study")
    assert main(["run", str(write_study(folder)), "--quiet"]) == 0
    return folder


def test_run_writes_every_output(finished: Path) -> None:
    out = finished / "out"
    for name in ("study.db", "curves.csv.gz", "universal_curve.json", "summary.json",
                 "report.md", "proxies_collapse.png", "trials.png", "compute.png",
                 "residuals.png"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    # 4 finished trials, a best one, compute counted against the full sweep
    assert summary["trials"]["complete"] + summary["trials"]["stopped"] == 4
    assert summary["best"]["params"].keys() == {"lr", "tau"}
    c = summary["compute"]
    assert 0 < c["sweep_used"] <= c["full_sweep"] and c["proxies"] > 0
    assert c["saved_fraction"] == pytest.approx(1 - c["sweep_used"] / c["full_sweep"])
    # every judged trial's latest verdict is in the summary and the report, in one sentence
    why = [r["explanation"] for r in summary["trial_table"] if r.get("explanation")]
    assert why and all(w.startswith(("stopped", "kept")) for w in why)
    assert "the pruner's latest verdict" in (out / "report.md").read_text()
    # the verdict the report prints names the checkpoint judged (one of the study's), and the
    # interval's level is the predictor's (80%)
    assert summary["checkpoints"] == [0.2, 0.3] and summary["interval_level"] == 0.8
    for r in summary["trial_table"]:
        verb = "stopped" if r["state"] == "stopped" else "kept"
        assert r["checkpoint"] in (0.2, 0.3)
        assert r["verdict"].startswith(f"{verb} at checkpoint t^ {r['checkpoint']:g}")
        assert r["verdict"] in (out / "report.md").read_text()
    assert "| 80% interval |" in (out / "report.md").read_text()
    acc = summary["predictions"]
    assert 0 <= acc["inside"] <= acc["n"] <= 4
    # the curve file holds every proxy and trial, in the curve format
    import pandas as pd

    curves = pd.read_csv(out / "curves.csv.gz")
    assert {"proxy", "trial"} <= set(curves["role"])
    assert curves[curves.role == "trial"]["trial"].nunique() == 4
    # each trial has its controls and was judged at a checkpoint; a prediction, where the
    # predictor made one (it declines a prefix that does not follow the curve: fail open), is
    # stored with the t^ it was made at
    predicted = 0
    for t in _trials(out):
        assert "collapse_controls" in t.user_attrs
        records = [v for k, v in t.system_attrs.items() if k.startswith("collapse:cp:")]
        assert records and all(r["checkpoint"] >= 0.2 for r in records)
        if "predicted_final_loss_t_hat" in t.user_attrs:
            assert t.user_attrs["predicted_final_loss_t_hat"] >= 0.2
            predicted += 1
        else:
            assert all(r["estimate"]["status"] != "ok" for r in records)
    assert predicted >= 1
    # every proxy and trial is monitored: the report has their residuals, the trials their
    # largest residual; an alert (if any) is stored with its t^
    report = (out / "report.md").read_text()
    assert "## Collapse diagnostics" in report and "![residuals](residuals.png)" in report
    for name in ("proxy-", "trial-"):
        assert f"| {name}" in report
    aligned = [t for t in _trials(out)
               if t.user_attrs["steps_done"] > 0.31 * t.user_attrs["total_steps"]]
    assert aligned and all(t.user_attrs["residual_max"] >= 0 for t in aligned)
    assert summary["diagnostics"]["stop_on_alert"] is False
    for alert in summary["diagnostics"]["alerts"]:
        assert 0.3 < alert["t_hat"] <= 1 and abs(alert["residual"]) > alert["threshold"]


def test_stop_on_alert_stops_a_trial_that_leaves_the_curve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hpo.predictors.calibrate as calibrate
    import hpo.predictors.monitor as monitor

    # a reference whose band no run can stay inside: every trial alerts after t^ 0.3
    monkeypatch.setattr(calibrate, "calibrate_monitor",
                        lambda traces: {"noise": 0.0, "level": 0.0, "jump": 0.0})
    monkeypatch.setattr(monitor, "BAND_SIGMAS", 0.0)
    monkeypatch.setattr(monitor, "MIN_BAND", 1e-9)
    path = write_study(tmp_path, diagnose={"stop_on_alert": True},
                       pruner={"checkpoints": [0.9], "report_points": 40},
                       budget={"trials": 2})
    assert main(["run", str(path), "--no-report"]) == 0
    text = capsys.readouterr().out
    assert "residual alert at t^ 0.3" in text and "stopping it (diagnose.stop_on_alert)" in text
    trials = _trials(tmp_path / "out")
    assert [t.state for t in trials] == [TrialState.PRUNED] * 2
    for t in trials:
        alert = t.user_attrs["residual_alert"]
        assert 0.3 < alert["t_hat"] < 0.35
        assert t.user_attrs["steps_done"] / t.user_attrs["total_steps"] < 0.35


def test_rerun_of_a_finished_study_trains_nothing(finished: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = finished / "out"
    stamps = {p: p.stat().st_mtime_ns for p in (out / "proxies").glob("*.csv.gz")}
    before = [(t.number, t.state, t.value) for t in _trials(out)]
    t0 = time.monotonic()
    assert main(["run", str(finished / "tiny.yaml")]) == 0
    text = capsys.readouterr().out
    # proxies, curve and trials reused; the summary printed again
    assert "proxies: all 3 reused" in text and "universal curve: reused" in text
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert [(t.number, t.state, t.value) for t in _trials(out)] == before
    assert "compute: sweep used" in text and time.monotonic() - t0 < 60


def test_full_sweep_baseline_and_comparison(finished: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = finished / "tiny.yaml"
    assert main(["run", str(path), "--no-prune", "--quiet", "--no-report"]) == 0
    full = json.loads((finished / "out" / "full_sweep" / "summary.json").read_text())
    # the full sweep trains every trial to the end, without proxies
    assert full["trials"] == {"complete": 4, "stopped": 0, "failed_or_interrupted": 0}
    assert full["compute"]["saved_fraction"] == 0 and full["compute"]["proxies"] == 0
    assert main(["run", str(path), "--quiet", "--no-report"]) == 0
    summary = json.loads((finished / "out" / "summary.json").read_text())
    cmp_ = summary["comparison"]
    # the pruned study says whether it chose what the full sweep chose
    assert cmp_["full_sweep_best"]["params"] == full["best"]["params"]
    assert cmp_["same_choice"] == (summary["best"]["params"] == full["best"]["params"])
    assert "vs full sweep" in capsys.readouterr().out


@pytest.mark.slow
def test_kill_9_mid_sweep_then_resume(tmp_path: Path) -> None:
    # trials of a few seconds, so the kill lands mid-trial
    path = write_study(tmp_path, budget={"trials": 3},
                       recipe={"tpp": 6, "lr": 0.01, "tau": 0.2, "batch_tokens": 256})
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "hpo", "run", str(path), "--quiet"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "stderr.txt").open("w"))
    killed_at = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            if not (out / "study.db").exists():
                continue
            try:
                trials = _peek(out)
            except sqlite3.Error:  # the study is being created
                continue
            done = [t for t in trials if t[1] in ("COMPLETE", "PRUNED")]
            # mid-trial, after its first checkpoint was written
            running = [t for t in trials if t[1] == "RUNNING" and t[2] >= 3
                       and (out / "trials" / f"{t[0]}.ckpt").exists()]
            if len(done) >= 1 and running:
                proc.send_signal(signal.SIGKILL)
                killed_at = ([(n, TrialState[state], value) for n, state, _, value in done],
                             running[0][0])
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert killed_at is not None, (tmp_path / "stderr.txt").read_text()[-2000:]
    done_before, interrupted = killed_at
    # the killed process left its trial running and its lock behind
    assert (out / ".hpo.lock").exists()
    assert main(["run", str(path), "--quiet", "--no-report"]) == 0
    trials = {t.number: t for t in _trials(out)}
    # finished trials kept as they were
    for number, state, value in done_before:
        assert trials[number].state == state and trials[number].value == value
    # the interrupted trial failed and was re-run with the same params
    assert trials[interrupted].state == TrialState.FAIL
    rerun = [t for t in trials.values() if t.user_attrs.get("rerun_of") == interrupted]
    assert len(rerun) == 1 and rerun[0].params == trials[interrupted].params
    assert rerun[0].state in (TrialState.COMPLETE, TrialState.PRUNED)
    # ... and it continued the interrupted training from its checkpoint: the points reported
    # before the checkpoint were copied over, the curve file holds one whole run
    start = rerun[0].user_attrs.get("resumed_from_step", 0)
    assert start > 0
    old_values = trials[interrupted].intermediate_values
    assert {s: v for s, v in rerun[0].intermediate_values.items() if s <= start} == {
        s: v for s, v in old_values.items() if s <= start}
    curve = pd.read_csv(out / "trials" / f"{rerun[0].number}.csv.gz")
    train_steps = curve.loc[curve["split"] == "train", "step"].to_numpy()
    assert train_steps[0] < start and (np.diff(train_steps) > 0).all()
    assert set(curve["run_id"]) == {f"trial-{rerun[0].number}"}
    assert not (out / "trials" / f"{interrupted}.ckpt").exists()
    # the study completed its budget; nothing is left running
    finished = [t for t in trials.values() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 3
    assert not any(t.state == TrialState.RUNNING for t in trials.values())
    assert json.loads((out / "summary.json").read_text())["trials"]["failed_or_interrupted"] == 1


def test_verify_trains_stopped_trials_to_the_end(finished: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = finished / "out"
    assert main(["run", str(finished / "tiny.yaml"), "--verify", "--quiet", "--no-report"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    stopped = summary["trials"]["stopped"]
    verification = summary.get("verification", [])
    # every stopped trial was trained to its end: actual final loss beside the prediction
    assert len(verification) == stopped
    for v in verification:
        assert v["actual"] > 0 and v["predicted"] is not None and 0 < v["stopped_at"] < 1
    if stopped:
        assert summary["verified_full_sweep_best"]["trial"] is not None
        assert (out / "trials" / f"{verification[0]['trial']}-verify.csv.gz").is_file()


def test_prediction_accuracy_counts_known_finals_inside_their_intervals():
    from hpo.study.trials import prediction_accuracy

    rows = [
        # completed: the truth is its value; 10% high, inside its interval
        {"trial": 0, "state": "complete", "value": 2.0, "predicted": 2.2,
         "interval": [1.9, 2.5]},
        # stopped, verified: the truth is the verify run's final; 20% low, outside
        {"trial": 1, "state": "stopped", "value": 3.0, "predicted": 2.0, "interval": [1.9, 2.1]},
        # stopped, the full sweep's value of the same params; exact
        {"trial": 2, "state": "stopped", "value": 3.0, "predicted": 2.0, "interval": [1.9, 2.1],
         "full_sweep_value": 2.0},
        # stopped with no known final: left out
        {"trial": 3, "state": "stopped", "value": 3.0, "predicted": 2.0, "interval": None},
    ]
    acc = prediction_accuracy(rows, [{"trial": 1, "actual": 2.5}])
    assert acc["n"] == 3 and acc["inside"] == 2
    assert acc["median_abs_err"] == pytest.approx(0.1)
    assert acc["max_abs_err"] == pytest.approx(0.2)
    assert prediction_accuracy([])["n"] == 0


@pytest.mark.parametrize(("sampler", "predicted"), [("tpe", True), ("grid", False),
                                                      ("random", False)])
def test_a_stopped_trial_reaches_tpe_with_its_predicted_final(sampler: str,
                                                              predicted: bool) -> None:
    """``hpo run`` ends a stopped trial with its predicted final where the sampler learns from
    finals (TPE), and PRUNED where it does not."""
    import optuna

    from hpo import PREDICTED_VALUE_ATTR, CollapsePruner, describe_trial
    from hpo.study.trial import end_stopped
    from tests.hpo._fakes import LastValuePredictor

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))
    for loss in (3.0, 4.0):
        trial = study.ask()
        describe_trial(trial, total_steps=100, tau=0.2, tpp=20.0, schedule="linear",
                       warmup_steps=5)
        for step in range(100):
            trial.report(loss, step)
            if trial.should_prune():
                end_stopped(study, trial, sampler)
                break
        else:
            study.tell(trial, loss)
    stopped = study.trials[1]
    assert max(stopped.intermediate_values) < 99
    if predicted:
        assert stopped.state == optuna.trial.TrialState.COMPLETE
        assert stopped.value == pytest.approx(4.0) and stopped.user_attrs[PREDICTED_VALUE_ATTR]
    else:
        assert stopped.state == optuna.trial.TrialState.PRUNED
    assert study.best_trial.number == 0
    # the summary's row calls it stopped either way (its value is no final)
    from hpo.study.summary import _trial_row

    row = _trial_row(stopped, False)
    assert row["state"] == "stopped" and row["value_is_predicted"] is predicted
