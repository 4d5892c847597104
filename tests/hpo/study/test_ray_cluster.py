"""``backend: ray`` against the suite's real Ray cluster (``ray_cluster``: ``ray start --head``
on 127.0.0.1 only): ``hpo run --address 127.0.0.1:PORT`` (the driver joins the cluster
by its GCS address; ``ray://`` goes through the same ``ray.init`` but needs the Ray Client server,
which binds the host's address, not loopback, so it is not started here) and ``hpo submit
--address http://127.0.0.1:PORT``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hpo._ray import (
    HAVE_DASHBOARD,
    ROOT,
    cluster_cpus,
    descendants,
    free_port,
    kill_node,
    ray_env,
    start_node,
)
from tests.hpo._studies import TINY, write_study

pytestmark = pytest.mark.slow


def _ray_study(folder: Path) -> Path:
    return write_study(
        folder, backend="ray", ray={"cpus_per_trial": 1, "gpus_per_trial": 0, "max_concurrent": 2}
    )


def _run(argv: list[str], timeout: float = 420) -> subprocess.CompletedProcess:
    env = ray_env()
    return subprocess.run(
        [sys.executable, "-m", "hpo", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _check_outputs(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    # every trial ran as a Ray Tune trial and was recorded in the study's Optuna storage
    assert summary["backend"] == "ray"
    assert summary["trials"]["complete"] + summary["trials"]["stopped"] == 4
    assert summary["trials"]["failed_or_interrupted"] == 0
    assert summary["best"] is not None
    for name in ("study.db", "curves.csv.gz", "universal_curve.json", "report.md"):
        assert (out / name).is_file(), name
    assert (out / "ray" / "tiny").is_dir()
    # the Ray trainables ran the residual monitor: each trial that passed the alignment window
    # (t^ 0.3) carries its largest residual
    import optuna

    trials = optuna.load_study(study_name="tiny",
                               storage=f"sqlite:///{out / 'study.db'}").get_trials()
    aligned = [t for t in trials if t.user_attrs["steps_done"] > 0.31 * t.user_attrs[
        "total_steps"]]
    assert aligned and all(t.user_attrs["residual_max"] >= 0 for t in aligned)
    return summary


def test_a_killed_driver_resumes_with_the_scheduler_state(ray_cluster: dict,
                                                          tmp_path: Path) -> None:
    """`hpo run --address`: its driver killed mid-sweep, the study run again resumes with the
    scheduler's state and finishes; run once more, it reuses everything."""
    from hpo.pruning._ray import STATE_FILE

    path = _ray_study(tmp_path)
    env = ray_env()
    state = tmp_path / "out" / "ray" / "tiny" / STATE_FILE
    driver = subprocess.Popen([sys.executable, "-m", "hpo", "run", str(path), "--address",
                               ray_cluster["gcs"], "--quiet", "--no-report"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.monotonic() + 300
    while not state.exists():  # the scheduler has saved its state: the sweep is under way
        assert driver.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    time.sleep(2)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    saved = json.loads(state.read_text())["trials"]
    assert saved
    r = _run(["run", str(path), "--address", ray_cluster["gcs"]])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "restoring the experiment" in r.stdout
    _check_outputs(tmp_path / "out")
    # the restored scheduler is ours, with what it knew before the kill (not a FIFO one)
    after = json.loads(state.read_text())["trials"]
    assert set(saved) <= set(after)
    assert all(after[k]["checkpoints"] for k in saved if saved[k]["checkpoints"])
    # the finished study run again: the Tune experiment is restored, nothing new is trained,
    # the summary is the same
    before = json.loads((tmp_path / "out" / "summary.json").read_text())["best"]
    r = _run(["run", str(path), "--address", ray_cluster["gcs"], "--no-report"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "sweep (ray)" in r.stdout and "proxies: all 3 reused" in r.stdout
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["best"] == before


@pytest.mark.skipif(not HAVE_DASHBOARD, reason="hpo submit needs the Ray dashboard: "
                    "install ray[default] (pyproject: ray[tune,default])")
def test_hpo_submit_runs_the_study_as_a_ray_job(ray_cluster: dict, tmp_path: Path) -> None:
    path = _ray_study(tmp_path)
    out = tmp_path / "job-out"
    r = _run(
        [
            "submit",
            str(path),
            "--address",
            ray_cluster["dashboard"],
            "--working-dir",
            str(tmp_path),
            "--output",
            str(out),
            "--timeout",
            "400",
            "--python",
            sys.executable,
        ]
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "submitted 'tiny' as Ray job" in r.stdout and "SUCCEEDED" in r.stdout
    _check_outputs(out)


def test_hpo_submit_unreachable_address_exit_2(tmp_path: Path) -> None:
    r = _run(
        [
            "submit",
            str(_ray_study(tmp_path)),
            "--address",
            f"http://127.0.0.1:{free_port()}",
            "--working-dir",
            str(tmp_path),
        ],
        timeout=120,
    )
    assert r.returncode == 2 and "cannot reach the Ray job server" in r.stderr
    assert "Traceback" not in r.stderr


def _latest_results(exp: Path) -> dict[str, dict]:
    """Each Tune trial's latest result in the experiment folder ``exp`` (its ``result.json``),
    by trial id."""
    found = {}
    for path in exp.glob("*/result.json"):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        if lines:
            try:
                last = json.loads(lines[-1])
            except ValueError:  # a line being written
                continue
            found[last["trial_id"]] = last
    return found


def _trials_run_by(pids: set[int]) -> dict[str, str]:
    """The Tune trials whose trainable runs in one of ``pids``, by id, with their working
    directory: Tune runs each in its own, named ``<trainable>_<trial id>_...`` (read from /proc
    as they run; Tune copies result.json into the experiment folder only now and then)."""
    found = {}
    for pid in pids:
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # gone
            continue
        match = re.search(r"/working_dirs/_trainable_([0-9a-f]+)_", cwd)
        if match:
            found[match.group(1)] = cwd
    return found


def _checkpoint_progress(path: Path) -> tuple[int, float]:
    """The step and t^ of a trial's training checkpoint ((0, 0.0) when there is none); the file
    is memory-mapped and replaced whole, never read half-written."""
    if not path.exists():
        return 0, 0.0
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return state["step"], state["step"] / state["identity"]["recipe"]["total_steps"]


def test_a_sweep_survives_losing_a_node(ray_cluster: dict, tmp_path: Path) -> None:
    """A second node joins the cluster; trials spread over both; the second node is killed
    (every process of it, by id) while one of its trials is past its verdicts and has a
    training checkpoint. The sweep completes on the head: each grid point once, the
    interrupted trial resumed from its checkpoint, every verdict kept, the report whole."""
    from hpo.pruning._ray import STATE_FILE

    node = start_node(tmp_path / "second_node.log", f"--address={ray_cluster['gcs']}",
                       "--num-cpus=2")
    try:
        deadline = time.monotonic() + 120
        while cluster_cpus(ray_cluster["gcs"]) < 4:
            assert node.poll() is None and time.monotonic() < deadline, "no second node"
            time.sleep(1.0)
        # four trials at once over 2 + 2 CPUs: two land on the second node. threshold 0 (a
        # shadow run) judges every trial at t^ 0.2 and 0.3 and stops none, so a trial of the
        # second node is certain to be running past its verdicts when the node goes
        path = write_study(tmp_path, backend="ray",
                           recipe={**TINY["recipe"], "tpp": 10},
                           proxies={"widths": [8], "tpp": 5},
                           pruner={**TINY["pruner"], "threshold": 0.0},
                           ray={"cpus_per_trial": 1, "gpus_per_trial": 0, "max_concurrent": 4,
                                "max_failures": 3})
        exp = tmp_path / "out" / "ray" / "tiny"
        log = (tmp_path / "driver.log").open("w")
        driver = subprocess.Popen([sys.executable, "-m", "hpo", "run", str(path), "--address",
                                   ray_cluster["gcs"]], cwd=ROOT, env=ray_env(), stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        killed: dict = {}
        deadline = time.monotonic() + 400
        while not killed:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no trial of the second node passed t^ 0.35"
            on_node = set(descendants(node.pid))
            for trial_id, cwd in _trials_run_by(on_node).items():
                step, t_hat = _checkpoint_progress(exp / "checkpoints" / f"{trial_id}.pt")
                if 0.35 <= t_hat < 0.7:
                    # what the scheduler has saved on the driver (Tune copies it into the
                    # experiment folder later): its trial working directories' sibling
                    staged = Path(cwd).parents[1] / "driver_artifacts" / STATE_FILE
                    state = json.loads(staged.read_text())["trials"] if staged.exists() else {}
                    killed = {"trial": trial_id, "step": step, "pids": on_node, "state": state}
                    kill_node(node)
                    break
            time.sleep(0.2)
        assert driver.wait(timeout=500) == 0, (tmp_path / "driver.log").read_text()[-3000:]
        log.close()
    finally:
        if node.poll() is None:
            kill_node(node)
    out = tmp_path / "out"
    text = (tmp_path / "driver.log").read_text()
    summary = _check_outputs(out)
    assert summary["trials"]["complete"] == 4

    # every grid point finished exactly once
    import optuna

    trials = optuna.load_study(study_name="tiny",
                               storage=f"sqlite:///{out / 'study.db'}").get_trials()
    points = sorted((t.params["lr"], t.params["tau"]) for t in trials)
    assert points == sorted({(lr, tau) for lr in (0.005, 0.02) for tau in (0.1, 0.4)})

    # the interrupted trial resumed on the head from the checkpoint it had written
    final = _latest_results(exp)[killed["trial"]]
    assert final["pid"] not in killed["pids"]
    assert final["resumed_from_step"] >= killed["step"] > 0
    assert final["t_hat"] == 1.0
    assert "Ray Tune runs it again from its last training checkpoint" in text
    number = next(t.number for t in trials if t.user_attrs["ray_trial_id"] == killed["trial"])
    assert trials[number].user_attrs["resumed_from_step"] == final["resumed_from_step"]

    # every verdict the scheduler held when the node died is kept, the interrupted trial's
    # included: a kept trial is judged again at later reports until its next checkpoint, so a
    # record may be replaced by a later one, never by one of the reports that came again
    after = json.loads((exp / STATE_FILE).read_text())["trials"]
    # the interrupted trial resumed past its checkpoints t^ 0.2 and 0.3: its verdicts there
    # are the ones reached on the lost node
    assert set(after[killed["trial"]]["checkpoints"]) == {"0.2", "0.3"}
    for trial_id, data in killed["state"].items():
        for cp, record in data["checkpoints"].items():
            assert after[trial_id]["checkpoints"][cp]["t_hat"] >= record["t_hat"], (trial_id, cp)
    # each trial's latest verdict and its sentence are in the study's storage and the report
    from hpo.pruning import REASON_ATTR

    for t in trials:
        assert t.user_attrs[REASON_ATTR], t.number
    report = (out / "report.md").read_text()
    assert all(f"| {t.number} " in report or f"trial {t.number}" in report for t in trials)
    assert "is already reported" not in text
