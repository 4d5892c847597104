"""The backend a study trains with: one interface, picked once by the runner."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from hpo.study.folder import READY_FILE
from hpo.study.local import LocalBackend, backend_for
from hpo.study.schema import parse_study
from tests.hpo._studies import TINY


def _study(tmp_path: Path, **changes):
    return parse_study({**TINY, "output": str(tmp_path / "out"), **changes}, source="s.yaml")


def test_the_runner_trains_proxies_and_trials_through_the_studys_backend(tmp_path) -> None:
    from hpo.study.runner import StudyRunner

    runner = StudyRunner(_study(tmp_path))
    assert isinstance(runner.backend, LocalBackend)
    pytest.importorskip("ray")
    from hpo.study.ray_backend import RayBackend

    ray_study = _study(tmp_path, backend="ray", ray={"cpus_per_trial": 1})
    backend = backend_for(ray_study, print, address="127.0.0.1:1", address_from="--address")
    assert isinstance(backend, RayBackend)
    assert (backend.address, backend.address_from) == ("127.0.0.1:1", "--address")


def test_a_worker_waits_for_the_coordinators_ready_file(tmp_path) -> None:
    study = _study(tmp_path)
    study.output.mkdir(parents=True)
    lines: list[str] = []
    backend = LocalBackend(study, lines.append)

    class Sweep:
        prune = True
        ran: list = []

        def run_sweep(self, curve, coordinator=True):
            self.ran.append((curve, coordinator))

    sweep = Sweep()
    worker = threading.Thread(target=backend.join, args=(sweep,))
    worker.start()
    time.sleep(1.5)
    assert sweep.ran == [] and "worker: waiting for" in lines[0]
    (study.output / READY_FILE).write_text(json.dumps({"curve": "c.json"}))
    worker.join(timeout=10)
    assert sweep.ran == [(Path("c.json"), False)]
    # a coordinator's start clears the file: its workers wait for its own proxies
    backend.start()
    assert not (study.output / READY_FILE).exists()


def test_a_worker_of_a_ray_study_is_refused_in_one_line(tmp_path, capsys) -> None:
    pytest.importorskip("ray")
    from hpo.cli import main
    from tests.hpo._studies import write_study

    path = write_study(tmp_path, backend="ray", ray={"cpus_per_trial": 1})
    assert main(["run", str(path), "--worker", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "hpo run: error: --worker: the ray backend runs its trials on the cluster; a worker "
        "joins a study of backend: local"]
    assert not (tmp_path / "out").exists()


def test_a_runner_lacking_an_extra_says_which_before_it_writes(tmp_path, monkeypatch) -> None:
    """The library's runner refuses a run that needs a package not installed with the one
    line the CLI prints, before it writes anything (the core-only venv test runs the CLI)."""
    from hpo._extras import MissingExtra
    from hpo.study import folder
    from hpo.study.runner import StudyRunner

    monkeypatch.setattr(folder, "missing", lambda module: module == "matplotlib")
    with pytest.raises(MissingExtra, match=r"^matplotlib is not installed; it comes with the "
                                           r"'plots' extra"):
        StudyRunner(_study(tmp_path))
    assert not (tmp_path / "out").exists()
    StudyRunner(_study(tmp_path), report=False)  # no report: no plots needed
