"""A real Ray cluster on loopback for the tests: nodes started with ``ray start --block`` on
127.0.0.1 only, each in its own session and stopped by its process id (never a machine-wide
``ray stop``)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
# the dashboard (job submission) needs ray[default] (aiohttp, ...); ray[tune] alone lacks it
HAVE_DASHBOARD = importlib.util.find_spec("aiohttp") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_env() -> dict[str, str]:
    """The environment of the cluster's nodes and drivers: a loopback-only test cluster
    without token authentication (clients and cluster agree); a lost node is declared dead
    after about 3 s instead of 15."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
            "PYTHONPATH": str(ROOT), "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "3"}


def start_node(log: Path, *args: str) -> subprocess.Popen:
    """``ray start --block`` of one node on 127.0.0.1 in its own session (stopped by its id),
    with its own ports for every agent, so another Ray on this machine cannot collide; its
    output goes to ``log``."""
    with log.open("w") as out:  # the child holds its own copy of the file
        return subprocess.Popen(
            [str(RAY), "start", "--block", "--node-ip-address=127.0.0.1", "--num-gpus=0",
             "--disable-usage-stats", f"--dashboard-agent-listen-port={free_port()}",
             f"--dashboard-agent-grpc-port={free_port()}",
             f"--metrics-export-port={free_port()}",
             f"--runtime-env-agent-port={free_port()}", *args],
            stdout=out, stderr=subprocess.STDOUT, env=ray_env(), start_new_session=True)


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (from /proc: no psutil needed)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def kill_node(proc: subprocess.Popen) -> None:
    """SIGKILL a node: the ``ray start`` process, its raylet, agents and workers, by id."""
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def cluster_cpus(gcs: str) -> float:
    """The CPUs the cluster at ``gcs`` has alive (0 while it does not answer)."""
    r = subprocess.run([str(RAY), "status", f"--address={gcs}"], capture_output=True, text=True,
                       env=ray_env(), timeout=60)
    found = re.search(r"/([0-9.]+) CPU", r.stdout) if r.returncode == 0 else None
    return float(found.group(1)) if found else 0.0


def head_node(folder: Path) -> Iterator[dict[str, str]]:
    """Start a one-node cluster (2 CPUs; the dashboard where ray[default] is installed), yield
    its GCS and dashboard addresses once it answers, stop it after."""
    if not RAY.exists():
        pytest.skip(f"no ray executable beside {sys.executable}")
    gcs, dash = free_port(), free_port()
    os.environ["RAY_AUTH_MODE"] = "disabled"
    proc = start_node(folder / "ray_start.log", "--head", f"--port={gcs}", "--num-cpus=2",
                      f"--include-dashboard={'true' if HAVE_DASHBOARD else 'false'}",
                      "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}")
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"ray start exited with {proc.returncode}")
            try:
                if HAVE_DASHBOARD:
                    from ray.job_submission import JobSubmissionClient

                    JobSubmissionClient(f"http://127.0.0.1:{dash}").list_jobs()
                elif not cluster_cpus(f"127.0.0.1:{gcs}"):
                    raise RuntimeError("not up yet")
                break
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail("the Ray cluster did not come up within 120 s")
                time.sleep(1.0)
        yield {"gcs": f"127.0.0.1:{gcs}", "dashboard": f"http://127.0.0.1:{dash}"}
    finally:
        # stop what was started here: the blocking `ray start` and its process group
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
