"""Shared fixtures of the hpo tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session (2 CPUs; Ray cannot be started twice in a process:
    after a shutdown it would try to join the old cluster)."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    ray.init(
        address="local",  # a new local Ray, even where `ray start` left a cluster
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )
    yield
    ray.shutdown()
