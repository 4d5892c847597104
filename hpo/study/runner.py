"""The study runner behind ``hpo run``: proxies -> universal curve -> sweep -> summary.

:class:`StudyRunner` does, in the study's output folder (see :mod:`hpo.study.schema` for the YAML):

1. **Proxies**: trains the proxy plan (small CompleteP models at the sweep's TPP and schedule,
   varying the controls the sweep moves) and writes each curve to ``proxies/<run_id>.csv.gz``.
   A finished proxy is never retrained; an interrupted one resumes from its checkpoint.
2. **Universal curve**: fitted on the proxies' train curves, cached as ``universal_curve.json``
   (refitted only when the proxy set changes).
3. **Sweep**: an Optuna study (``study.db``, or the study's ``storage``) with the configured
   sampler and :class:`hpo.CollapsePruner`; each trial trains the target model with the trial's
   recipe, reports its train loss ``pruner.report_points`` times, and stops when pruned. Curves go
   to ``trials/<number>.csv.gz``. With ``backend: ray`` the sweep runs as Ray Tune trials
   (:mod:`hpo.study.ray_backend`).
4. **Summary**: ``summary.json``, ``curves.csv.gz`` (every proxy and trial in the curve format,
   with ``role`` and ``trial`` columns) and ``report.md`` with plots (:mod:`hpo.study.report`).

Resume: running the same study again continues it. Finished proxies and trials are kept; a trial
left ``RUNNING`` by a killed process (or stopped by Ctrl-C) is marked failed and its parameters
are enqueued again; the new trial continues the interrupted one's training from its last
checkpoint (``trials/<number>.ckpt``, written about ten times per run), with the points reported
before that checkpoint copied over, so the pruner sees the whole curve. Without a checkpoint it
starts from step 0. One process at a time per output folder (a lock file says which).

Compute is counted as 6 N D FLOPs (N all parameters, D tokens trained).

Library code: progress goes to the ``progress`` callable (the CLI prints it), nothing is printed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from hpo.study.plan import (
    IDENTITY_FILE,
    FolderLock,
    check_before_run,
)
from hpo.study.proxies import ProxyStage
from hpo.study.schema import Study
from hpo.study.summary import SummaryStage
from hpo.study.sweep import SweepStage

__all__ = ["StudyRunner"]

log = logging.getLogger(__name__)


class StudyRunner(ProxyStage, SweepStage, SummaryStage):
    """Run a validated :class:`~hpo.study.schema.Study` (see the module docstring).

    Args:
        study: the validated study.
        progress: called with one line of text per event (trial start, checkpoint decisions,
            trial end); the CLI prints them.
        prune: ``False`` runs the full sweep (no proxies, no pruning): the comparison baseline.
        verify: after the sweep, train every stopped trial to its end (from its checkpoint) and
            record the actual final loss beside the prediction.
        address: Ray cluster address (``backend: ray``), overrides ``ray.address``.
    """

    def __init__(self, study: Study, progress: Callable[[str], None] | None = None, *,
                 prune: bool = True, verify: bool = False, address: str | None = None,
                 report: bool = True) -> None:
        self.study = study
        self.out = study.output
        self.progress = progress or (lambda line: log.info("%s", line))
        self.prune = prune and study.pruner["enabled"]
        self.verify = verify
        self.address = address or study.ray.get("address")
        self._address_from = "--address" if address else "ray.address"
        self.make_report = report
        self._vocab: int | None = None
        self._t0 = time.monotonic()

    # ------------------------------------------------------------------ entry point
    def run(self) -> dict[str, Any]:
        """Everything; returns the summary dict (also written to ``summary.json``)."""
        check_before_run(self.study, self.address, self._address_from)
        self.out.mkdir(parents=True, exist_ok=True)
        with FolderLock(self.out):
            ident = self.out / IDENTITY_FILE
            if not ident.exists():
                ident.write_text(json.dumps(self.study.identity(), indent=1))
            (self.out / "config.json").write_text(json.dumps(self.study.to_dict(), indent=1))
            if self.study.threads:
                import torch

                torch.set_num_threads(self.study.threads)
            curve_path = None
            if self.study.backend == "ray":
                from hpo.study.ray_backend import init

                init(self.address, self._address_from)
            if self.prune:
                self.train_proxies()
                curve_path = self.fit_curve()
            if self.study.backend == "ray":
                from hpo.study.ray_backend import run_sweep_ray

                run_sweep_ray(self, curve_path)
            else:
                self.run_sweep(curve_path)
            if self.verify and self.prune:
                self.verify_stopped()
            summary = self.summarize()
            self.write_curves()
            (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
            if self.make_report:
                try:
                    from hpo.study.report import write_report

                    write_report(self.out, summary)
                except Exception as exc:  # a plotting problem must not lose the study
                    log.warning("report failed: %s: %s", type(exc).__name__, exc)
                    summary["report_error"] = f"{type(exc).__name__}: {exc}"
            return summary
