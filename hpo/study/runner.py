"""The study runner behind ``hpo run``: proxies -> universal curve -> sweep -> summary.

:class:`StudyRunner` does, in the study's output folder (see :mod:`hpo.study.schema` for the YAML):

1. **Proxies**: trains the proxy plan (small CompleteP models at the sweep's TPP and schedule,
   varying the controls the sweep moves) and writes each curve to ``proxies/<run_id>.csv.gz``.
   A finished proxy is never retrained; an interrupted one resumes from its checkpoint.
2. **Universal curve**: fitted on the proxies' train curves, cached as ``universal_curve.json``
   (refitted only when the proxy set changes).
3. **Sweep**: an Optuna study (``study.db``, or the study's ``storage``) with the configured
   sampler and :class:`hpo.CollapsePruner`; each trial trains the target model with the trial's
   recipe, reports the loss the study optimizes (train, or val) ``pruner.report_points`` times,
   and stops when pruned. Curves go to ``trials/<number>.csv.gz``. With ``backend: ray`` the
   sweep runs as Ray Tune trials (:mod:`hpo.study.ray_backend`).
4. **Summary**: ``summary.json``, ``curves.csv.gz`` (every proxy and trial in the curve format,
   with ``role`` and ``trial`` columns) and ``report.md`` with plots (:mod:`hpo.study.report`).

Resume: running the same study again continues it. Finished proxies and trials are kept; a trial
left ``RUNNING`` by a killed process (or stopped by Ctrl-C) is marked failed and its parameters
are enqueued again; the new trial continues the interrupted one's training from its last
checkpoint (``trials/<number>.ckpt``, written about ten times per run), with the points reported
before that checkpoint copied over, so the pruner sees the whole curve. Without a checkpoint it
starts from step 0. One process at a time per output folder (a lock file says which).

A storage that stops answering in the middle (a database that refuses connections, a server
gone) ends the run with :class:`StorageLost`, one line naming the storage; what finished is in
the storage and in ``trials/``, and running the same study again resumes it.

Compute is counted as 6 N D FLOPs (N all parameters, D tokens trained).

Library code: progress goes to the ``progress`` callable (the CLI prints it), nothing is printed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo._extras import MissingExtra, install_hint
from hpo._net import mask_password
from hpo.study.folder import check_resumable, needed_extras, prepared_folder
from hpo.study.local import COORDINATOR_ENV, LocalBackend, backend_for
from hpo.study.proxies import ProxyStage
from hpo.study.schema import Study
from hpo.study.stage import RunContext
from hpo.study.summary import SummaryStage
from hpo.study.sweep import SweepStage

__all__ = ["StudyRunner", "StorageLost", "COORDINATOR_ENV"]

log = logging.getLogger(__name__)


class StorageLost(UsageError):
    """The study's storage stopped answering during the run (the message names it and why)."""


def _connection_error(exc: BaseException) -> BaseException | None:
    """The database driver's connection error behind ``exc`` (``exc`` itself, its cause or
    context: SQLAlchemy's ``OperationalError`` / ``InterfaceError``, a DB-API
    ``OperationalError``), or ``None`` when ``exc`` is not one."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        names = {c.__name__ for c in type(e).__mro__}
        if names & {"OperationalError", "InterfaceError"}:
            return getattr(e, "orig", None) or e
        e = e.__cause__ or e.__context__
    return None


@contextlib.contextmanager
def storage_lost(storage: str, out: Path) -> Iterator[None]:
    """Turn a connection error of the study's storage into :class:`StorageLost`: one line with
    the storage (password masked), the driver's reason, and how to resume."""
    try:
        yield
    except Exception as exc:
        cause = _connection_error(exc)
        if cause is None:
            raise
        lines = str(cause).strip().splitlines() or [type(cause).__name__]
        reason = next((line.strip() for line in lines if "FATAL" in line), lines[0].strip())
        raise StorageLost(
            f"storage={mask_password(storage)!r} stopped answering ({mask_password(reason)}); "
            f"what finished is kept there and in {out / 'trials'}: run the same command again "
            "once it answers") from exc


class StudyRunner:
    """Run a validated :class:`~hpo.study.schema.Study` (see the module docstring).

    Args:
        study: the validated study.
        progress: called with one line of text per event (trial start, checkpoint decisions,
            trial end); the CLI prints them.
        prune: ``False`` runs the full sweep (no proxies, no pruning): the comparison baseline.
        verify: after the sweep, train every stopped trial to its end (from its checkpoint) and
            record the actual final loss beside the prediction.
        address: Ray cluster address (``backend: ray``), overrides ``ray.address``.
        workers: ``worker_command`` processes to start beside this one for the sweep (local
            backend); they share the storage, the proxies and the curve.
        worker_command: the command line of one extra worker (``hpo run STUDY --worker``).

    Raises :class:`hpo._extras.MissingExtra` (one line naming the extra to install) when an
    optional package the run needs is missing (:func:`hpo.study.folder.needed_extras`: torch,
    ray for ``backend: ray``, matplotlib with ``report``), before anything is written.

    Its stages share one :class:`~hpo.study.stage.RunContext` (``ctx``), each made when its turn
    comes from what the one before it made: the proxies and their curve
    (:class:`~hpo.study.proxies.ProxyStage`), the sweep on that curve
    (:class:`~hpo.study.sweep.SweepStage`), the summary of that sweep
    (:class:`~hpo.study.summary.SummaryStage`), the report of that summary; ``backend``
    (:func:`hpo.study.local.backend_for`: local or Ray) starts, trains the proxies and runs the
    sweep's trials. The run is a straight line: the folder checked and locked, backend start,
    proxies and curve, sweep, summary, report.
    """

    def __init__(self, study: Study, progress: Callable[[str], None] | None = None, *,
                 prune: bool = True, verify: bool = False, address: str | None = None,
                 report: bool = True, workers: int = 1,
                 worker_command: Sequence[str] = ()) -> None:
        self.ctx = RunContext(study, progress or (lambda line: log.info("%s", line)),
                              prune=prune and study.pruner["enabled"], workers=workers)
        self.study = study
        self.out = study.output
        self.progress = self.ctx.progress
        self.verify = verify
        self.address = address or study.ray.get("address")
        self._address_from = "--address" if address else "ray.address"
        self.make_report = report
        lacking = needed_extras(study, report=report)
        if lacking:
            raise MissingExtra(install_hint(*lacking[0]))
        #: how the study trains: :class:`~hpo.study.local.LocalBackend` or the Ray backend
        self.backend = backend_for(study, self.progress, workers=workers,
                                   worker_command=worker_command, address=self.address,
                                   address_from=self._address_from)

    @property
    def prune(self) -> bool:
        """Whether the run trains proxies and stops trials (``False``: the full sweep)."""
        return self.ctx.prune

    # ------------------------------------------------------------------ entry point
    def run(self) -> dict[str, Any]:
        """Everything; returns the summary dict (also written to ``summary.json``). Raises
        :class:`StorageLost` when the study's storage stops answering."""
        with storage_lost(self.study.storage, self.out):
            return self._run()

    def _run(self) -> dict[str, Any]:
        with prepared_folder(self.study, self.address, self._address_from) as out:
            self.backend.start()
            curve_path = None
            if self.prune:
                curve_path = ProxyStage(self.ctx, trainer=self.backend.train_proxies).run()
            sweep = SweepStage(self.ctx)
            self.backend.run_sweep(sweep, curve_path)
            if self.verify and self.prune:
                sweep.verify_stopped()
            summary = SummaryStage(self.ctx, sweep).run()
            if self.make_report:
                try:
                    from hpo.study.report import write_report  # the plots extra

                    write_report(out, summary)
                except Exception as exc:  # a plotting problem must not lose the study
                    log.warning("report failed: %s: %s", type(exc).__name__, exc)
                    summary["report_error"] = f"{type(exc).__name__}: {exc}"
            return summary

    def run_worker(self) -> None:
        """``hpo run --worker``: join the study that a coordinating ``hpo run`` prepares (its
        proxies and universal curve, read from the output folder once it has written
        ``sweep.ready``) and run its trials until the budget is used; no summary. Raises
        :class:`StorageLost` when the study's storage stops answering."""
        with storage_lost(self.study.storage, self.out):
            self._run_worker()

    def _run_worker(self) -> None:
        if not isinstance(self.backend, LocalBackend):
            raise UsageError("--worker: the ray backend runs its trials on the cluster; a "
                             "worker joins a study of backend: local")
        check_resumable(self.study)
        self.backend.join(SweepStage(self.ctx))
