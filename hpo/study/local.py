"""The two ways a study trains, behind one interface: :class:`Backend`, and its local form,
:class:`LocalBackend` (``backend: local``). The Ray form is
:class:`hpo.study.ray_backend.RayBackend`; :func:`backend_for` picks one for a study.

A backend ``start``\\ s (torch's threads; Ray: joins or starts the cluster), trains the proxies
(``train_proxies``, a :data:`~hpo.study.proxies.ProxyTrainer`) and runs the sweep stage's trials
(``run_sweep``). The runner calls them in that order and knows neither form.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from hpo._net import mask_password
from hpo.study.folder import READY_FILE
from hpo.study.proxies import ProxyJob, train_locally
from hpo.study.schema import Study
from hpo.study.stage import set_threads
from hpo.study.sweep import SweepStage

__all__ = ["Backend", "LocalBackend", "backend_for", "COORDINATOR_ENV"]

#: set in the environment of the workers a coordinating ``hpo run`` starts (its pid): such a
#: worker leaves a lost storage for the coordinator to report, once
COORDINATOR_ENV = "HPO_COORDINATOR_PID"


class Backend(Protocol):
    """How a study's proxies and trials train (see the module docstring)."""

    def start(self) -> None: ...

    def train_proxies(self, study: Study, jobs: list[ProxyJob],
                      workers: int) -> Iterator[dict[str, Any]]: ...

    def run_sweep(self, sweep: SweepStage, curve_path: Path | None) -> None: ...


class LocalBackend:
    """``backend: local``: the proxies train on this machine (:func:`train_locally`), the
    sweep runs in this process and in ``workers - 1`` worker processes (``worker_command``,
    ``hpo run STUDY --worker``) on the same storage; a worker (:meth:`join`) waits for the
    coordinator's ``sweep.ready`` and runs trials until the budget is used."""

    def __init__(self, study: Study, progress: Callable[[str], None], workers: int = 1,
                 worker_command: Sequence[str] = ()) -> None:
        self.study = study
        self.progress = progress
        self.workers = workers
        self.worker_command = list(worker_command)

    def start(self) -> None:
        set_threads(self.study)
        with contextlib.suppress(FileNotFoundError):
            (self.study.output / READY_FILE).unlink()  # workers wait for this run's proxies

    def train_proxies(self, study: Study, jobs: list[ProxyJob],
                      workers: int) -> Iterator[dict[str, Any]]:
        return train_locally(study, jobs, workers)

    def run_sweep(self, sweep: SweepStage, curve_path: Path | None) -> None:
        (self.study.output / READY_FILE).write_text(json.dumps(
            {"curve": str(curve_path) if curve_path else None}))
        with self._extra_workers():
            sweep.run_sweep(curve_path)

    def join(self, sweep: SweepStage) -> None:
        """A worker's sweep: wait for the coordinator's ``sweep.ready`` (its proxies and
        curve), then run trials beside it."""
        ready = self.study.output / READY_FILE
        if not ready.exists():
            self.progress(f"worker: waiting for {ready} (the coordinating hpo run writes it "
                          "when the proxies and the curve are ready)")
        while not ready.exists():
            time.sleep(1.0)
        curve = json.loads(ready.read_text()).get("curve") if sweep.prune else None
        set_threads(self.study)
        sweep.run_sweep(Path(curve) if curve else None, coordinator=False)

    @contextlib.contextmanager
    def _extra_workers(self) -> Iterator[None]:
        """Start ``workers - 1`` worker processes and wait for them at the end; they receive
        SIGTERM if this process dies."""

        def die_with_parent() -> None:
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

        env = {**os.environ, COORDINATOR_ENV: str(os.getpid())}
        procs = [subprocess.Popen(self.worker_command, preexec_fn=die_with_parent, env=env)
                 for _ in range(self.workers - 1)]
        if procs:
            self.progress(f"sweep: {len(procs) + 1} workers on "
                          f"{mask_password(self.study.storage)}")
        try:
            yield
        finally:
            for proc in procs:
                if proc.wait() != 0:
                    self.progress(f"sweep: worker pid {proc.pid} exited with code "
                                  f"{proc.returncode}")


def backend_for(study: Study, progress: Callable[[str], None], *, workers: int = 1,
                worker_command: Sequence[str] = (), address: str | None = None,
                address_from: str = "ray.address") -> Backend:
    """The study's backend: :class:`LocalBackend`, or for ``backend: ray``
    :class:`hpo.study.ray_backend.RayBackend` (Ray is imported here, the one place the runner
    needs the ray extra)."""
    if study.backend != "ray":
        return LocalBackend(study, progress, workers=workers, worker_command=worker_command)
    from hpo.study.ray_backend import RayBackend

    return RayBackend(study, progress, workers=workers, address=address,
                      address_from=address_from)
