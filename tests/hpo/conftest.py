"""Shared fixtures of the hpo tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    """The suite's one Ray cluster: a head node on loopback (2 CPUs, ``ray start --head``;
    :mod:`tests.hpo._ray`), started on first use and stopped at the end; its GCS and dashboard
    addresses."""
    pytest.importorskip("ray")
    from tests.hpo._ray import head_node

    yield from head_node(tmp_path_factory.mktemp("ray"))


@pytest.fixture(scope="session")
def ray_session(ray_cluster: dict):
    """This process as a driver of :func:`ray_cluster` for the whole session (Ray cannot be
    started twice in a process: after a shutdown it would try to join the old cluster)."""
    import ray

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    ray.init(
        address=ray_cluster["gcs"],
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )
    yield
    ray.shutdown()


PG_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL cluster on a loopback port (``initdb`` + ``pg_ctl``), stopped and
    removed at the end; yields a function that creates a fresh database and returns its URL.
    Skips, saying why, where the server or the driver is missing (never mocked)."""
    import shutil
    import socket
    import subprocess
    import tempfile

    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL server not installed ({PG_BIN / 'initdb'} missing; Debian "
                    "package postgresql-15)")
    psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL driver: "
                                  'pip install -e ".[postgres]"')
    root = Path(tempfile.mkdtemp(prefix="hpo-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: run the server as postgres
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    subprocess.run([*as_user, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U",
                    "hpo", "--no-sync", "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*as_user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", "-l",
                    str(root / "log"), "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 "
                    "-c fsync=off -c max_connections=200", "start"],
                   check=True, capture_output=True)
    count = 0

    def new_database() -> str:
        nonlocal count
        count += 1
        name = f"t{count}"
        with psycopg.connect(host="127.0.0.1", port=port, user="hpo", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://hpo@127.0.0.1:{port}/{name}"

    try:
        yield new_database
    finally:
        subprocess.run([*as_user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
