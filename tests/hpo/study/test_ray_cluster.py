"""``backend: ray`` against a real local Ray cluster, started by the test with ``ray start
--head`` on 127.0.0.1 only: ``hpo run --address 127.0.0.1:PORT`` (the driver joins the cluster
by its GCS address; ``ray://`` goes through the same ``ray.init`` but needs the Ray Client server,
which binds the host's address, not loopback, so it is not started here) and ``hpo submit
--address http://127.0.0.1:PORT``. The cluster is stopped by terminating the ``ray start
--block`` process this test started (never a machine-wide ``ray stop``)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hpo._studies import write_study

ROOT = Path(__file__).resolve().parents[3]
RAY = Path(sys.executable).with_name("ray")

pytestmark = pytest.mark.slow
# the dashboard (job submission) needs ray[default] (aiohttp, ...); ray[tune] alone lacks it
HAVE_DASHBOARD = importlib.util.find_spec("aiohttp") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A one-node Ray cluster on loopback: its GCS and dashboard addresses."""
    if not RAY.exists():
        pytest.skip(f"no ray executable beside {sys.executable}")
    gcs, dash = _free_port(), _free_port()
    log = (tmp_path_factory.mktemp("ray") / "ray_start.log").open("w")
    # a loopback-only test cluster without token authentication (clients and cluster agree)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            str(RAY),
            "start",
            "--head",
            "--block",
            f"--port={gcs}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--num-gpus=0",
            f"--include-dashboard={'true' if HAVE_DASHBOARD else 'false'}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash}",
            "--disable-usage-stats",
            # own ports for every agent, so another Ray on this machine cannot collide
            f"--dashboard-agent-listen-port={_free_port()}",
            f"--dashboard-agent-grpc-port={_free_port()}",
            f"--metrics-export-port={_free_port()}",
            f"--runtime-env-agent-port={_free_port()}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"ray start exited with {proc.returncode}")
            try:
                if HAVE_DASHBOARD:
                    from ray.job_submission import JobSubmissionClient

                    JobSubmissionClient(f"http://127.0.0.1:{dash}").list_jobs()
                else:
                    subprocess.run([str(RAY), "status", f"--address=127.0.0.1:{gcs}"],
                                   check=True, capture_output=True, env=env, timeout=30)
                break
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail("the Ray cluster did not come up within 120 s")
                time.sleep(1.0)
        yield {
            "gcs": f"127.0.0.1:{gcs}",
            "dashboard": f"http://127.0.0.1:{dash}",
        }
    finally:
        # stop what this fixture started: the blocking `ray start` and its process group
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        log.close()


def _ray_study(folder: Path) -> Path:
    return write_study(
        folder, backend="ray", ray={"cpus_per_trial": 1, "gpus_per_trial": 0, "max_concurrent": 2}
    )


def _run(argv: list[str], timeout: float = 420) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}
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


def test_hpo_run_on_a_ray_cluster(cluster: dict, tmp_path: Path) -> None:
    path = _ray_study(tmp_path)
    r = _run(["run", str(path), "--address", cluster["gcs"]])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "sweep (ray)" in r.stdout
    _check_outputs(tmp_path / "out")
    # rerun: the Tune experiment is restored, nothing new is trained, the summary is the same
    before = json.loads((tmp_path / "out" / "summary.json").read_text())["best"]
    r = _run(["run", str(path), "--address", cluster["gcs"], "--no-report"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "proxies: all 3 reused" in r.stdout
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["best"] == before


def test_a_killed_driver_resumes_with_the_scheduler_state(cluster: dict, tmp_path: Path) -> None:
    from hpo.pruning._ray import STATE_FILE

    path = _ray_study(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}
    state = tmp_path / "out" / "ray" / "tiny" / STATE_FILE
    driver = subprocess.Popen([sys.executable, "-m", "hpo", "run", str(path), "--address",
                               cluster["gcs"], "--quiet", "--no-report"], cwd=ROOT, env=env,
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
    r = _run(["run", str(path), "--address", cluster["gcs"]])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "restoring the experiment" in r.stdout
    _check_outputs(tmp_path / "out")
    # the restored scheduler is ours, with what it knew before the kill (not a FIFO one)
    after = json.loads(state.read_text())["trials"]
    assert set(saved) <= set(after)
    assert all(after[k]["checkpoints"] for k in saved if saved[k]["checkpoints"])


@pytest.mark.skipif(not HAVE_DASHBOARD, reason="hpo submit needs the Ray dashboard: "
                    "install ray[default] (pyproject: ray[tune,default])")
def test_hpo_submit_runs_the_study_as_a_ray_job(cluster: dict, tmp_path: Path) -> None:
    path = _ray_study(tmp_path)
    out = tmp_path / "job-out"
    r = _run(
        [
            "submit",
            str(path),
            "--address",
            cluster["dashboard"],
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
            f"http://127.0.0.1:{_free_port()}",
            "--working-dir",
            str(tmp_path),
        ],
        timeout=120,
    )
    assert r.returncode == 2 and "cannot reach the Ray job server" in r.stderr
    assert "Traceback" not in r.stderr
