"""Stage 1 and 2 of a study: train the proxy plan and fit the universal curve on it.

Each proxy's curve goes to ``proxies/<run_id>.csv.gz``; a finished proxy is never retrained, an
interrupted one resumes from its checkpoint. The curve is cached as ``universal_curve.json`` and
refitted only when the proxy set changes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hpo.diagnose import RunDiagnosis, alert_sentence, diagnose_runs
from hpo.predictors import (
    UniversalCurve,
    fit_universal_curve,
    load_universal_curve,
    read_curves,
    reference_band,
    runs_from_frame,
)
from hpo.predictors.metrics import collapse_spread, normalized_matrix
from hpo.predictors.monitor import BAND_SIGMAS
from hpo.study.folder import curve_runs
from hpo.study.plan import ProxySpec, plan_proxies, train_config
from hpo.study.schema import Study
from hpo.study.stage import RunContext, Stage

log = logging.getLogger(__name__)


#: one proxy to train: its config, its curve file and its checkpoint file
ProxyJob = tuple[Any, Path, Path]
#: how a study's proxies are trained: ``trainer(study, jobs, workers)`` trains each job and
#: writes its curve file, and yields each job's result (status, final train loss, steps, N,
#: seconds) in the jobs' order. :func:`train_locally` on this machine; the Ray backend's
#: ``hpo.study.ray_backend.train_proxies`` as Ray tasks. The study's backend
#: (:func:`hpo.study.local.backend_for`) supplies one, so this stage knows neither.
ProxyTrainer = Callable[[Study, list[ProxyJob], int], Iterator[dict[str, Any]]]


def _train_proxy(job: tuple[Any, Path, Path, int | None]) -> dict[str, Any]:
    """Train one proxy ``(config, curve path, checkpoint path, torch threads)`` and write its
    curve; returns its status, final train loss, steps, N and seconds. Runs in this process or
    in a worker process of :func:`train_locally` (so it is a module-level function)."""
    from hpo.models.training import train, write_curve

    cfg, path, ckpt, threads = job
    if threads:
        import torch

        torch.set_num_threads(threads)
    t0 = time.monotonic()
    result = train(cfg)
    write_curve([{**r, "role": "proxy", "trial": ""} for r in result.rows], path)
    with contextlib.suppress(OSError):
        ckpt.unlink()
    return {"status": result.status, "final_train_loss": result.final_train_loss,
            "steps": result.steps, "n_params": result.n_params,
            "seconds": time.monotonic() - t0}


def train_locally(study: Study, jobs: list[ProxyJob], workers: int
                  ) -> Iterator[dict[str, Any]]:
    """Train the proxies on this machine, ``workers`` at a time, each in its own process
    (spawned: torch and its threads start clean); in this process with one worker."""
    work = [(cfg, path, ckpt, study.threads) for cfg, path, ckpt in jobs]
    workers = min(workers, len(work))
    if workers <= 1:
        yield from map(_train_proxy, work)
        return

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield from pool.map(_train_proxy, work)
    finally:
        pool.shutdown(cancel_futures=True)


class ProxyStage(Stage):
    """The proxies and the universal curve of a study run: ``trainer`` trains the proxies
    (:data:`ProxyTrainer`; default :func:`train_locally`, ``workers`` of them side by side)."""

    def __init__(self, ctx: RunContext, trainer: ProxyTrainer = train_locally) -> None:
        super().__init__(ctx)
        self.trainer = trainer

    def run(self) -> Path:
        """Stages 1 and 2: train the proxies not yet trained, then fit (or reuse) the universal
        curve on them; the curve's JSON path."""
        self.train_proxies()
        return self.fit_curve()

    def proxy_recipe(self, spec: ProxySpec) -> dict[str, Any]:
        recipe = dict(self.study.recipe)
        if self.study.proxies["tpp"] is not None:
            recipe["tpp"] = self.study.proxies["tpp"]
        for name, value in spec.overrides:
            recipe[name] = value
        recipe["seed"] = spec.seed
        return recipe

    def train_proxies(self) -> list[Path]:
        """Train the proxies not yet trained (a finished one is reused); their curve files."""
        folder = self.out / "proxies"
        folder.mkdir(exist_ok=True)
        plan = plan_proxies(self.study)
        paths = []
        todo = [s for s in plan if not (folder / f"{s.run_id}.csv.gz").exists()]
        if todo:
            self.progress(f"proxies: training {len(todo)} of {len(plan)} "
                          f"({len(plan) - len(todo)} reused)")
        else:
            self.progress(f"proxies: all {len(plan)} reused from {folder}")
        cfgs = []
        for spec in plan:
            path = folder / f"{spec.run_id}.csv.gz"
            paths.append(path)
            if path.exists():
                continue
            ckpt = folder / f"{spec.run_id}.ckpt"
            cfgs.append((spec, path, ckpt, train_config(
                self.study, width=spec.width, depth=spec.depth, recipe=self.proxy_recipe(spec),
                run_id=spec.run_id, group=f"proxy-w{spec.width}", checkpoint=ckpt)))
        if not cfgs:
            return paths
        if self.workers > 1 and len(cfgs) > 1:
            self.progress(f"proxies: {min(self.workers, len(cfgs))} processes")
        results = self.trainer(self.study, [(cfg, path, ckpt) for _, path, ckpt, cfg in cfgs],
                               self.workers)
        for (spec, *_), res in zip(cfgs, results, strict=True):
            self.progress(f"  proxy {spec.run_id}: {res['status']}, final train loss "
                          f"{res['final_train_loss']:.4f}, {res['steps']} steps, N="
                          f"{res['n_params']:,}, {res['seconds']:.0f} s")
        return paths

    def fit_curve(self) -> Path:
        """Fit (or reuse) the universal curve on the proxies; its JSON path."""
        plan = plan_proxies(self.study)
        ids = sorted(s.run_id for s in plan)
        path = self.out / "universal_curve.json"
        meta = self.out / "universal_curve.proxies.json"
        cached = None
        if path.exists() and meta.exists():
            with contextlib.suppress(ValueError, OSError):  # unreadable: fitted again
                if json.loads(meta.read_text()) == ids:
                    cached = load_universal_curve(path)
        if cached is not None and reference_band(cached) is not None:
            self.progress(f"universal curve: reused {path}")
            self.diagnose_proxies(cached)
            return path
        frame = read_curves([self.out / "proxies" / f"{i}.csv.gz" for i in ids])
        runs = runs_from_frame(frame, split="train")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            curve = fit_universal_curve(runs)
        curve.to_json(path)
        meta.write_text(json.dumps(ids))
        spread = self.proxy_spread(runs)
        self.progress(f"universal curve: {curve.form} fitted on {len(runs)} proxies"
                      + (f" (collapse spread across widths {spread:.3f})" if spread else "")
                      + f" -> {path}")
        self.diagnose_proxies(curve)
        return path

    def diagnose_proxies(self, curve: UniversalCurve) -> list[RunDiagnosis]:
        """The collapse residual of every proxy against the study's universal ``curve`` (their
        own calibration: none alerts unless the curve was fitted elsewhere); prints the
        band and any alert."""
        band = reference_band(curve)
        if band is None:
            return []
        found = diagnose_runs(curve_runs(self.out / "proxies"), curve)
        alerts = [d for d in found if d.alert_t is not None]
        for d in alerts:
            self.progress("  " + alert_sentence(f"proxy {d.run_id}", d.alert_t, d.alert_value,
                                                d.alert_band, str(d.alert_kind)))
        self.progress(f"diagnostics: collapse residual band {BAND_SIGMAS:g} x each run's noise "
                      f"+ {100 * band.level:.2f}% of the loss on the level, "
                      f"+ {100 * band.jump:.2f}% on the jump (misfit allowances calibrated on "
                      f"the proxies); {len(alerts)} of {len(found)} proxies alert")
        return found

    def _specs_by_run(self, runs: list[Any]) -> list[ProxySpec]:
        specs = {s.run_id: s for s in plan_proxies(self.study)}
        return [specs[r.run_id] for r in runs]

    def proxy_spread(self, runs: list[Any]) -> float | None:
        """Max spread of L/L_final over t^ in [0.2, 1] across proxy widths at equal controls."""
        if len(self.study.proxies["widths"]) < 2:
            return None
        groups: dict[str, list[Any]] = {}
        for r in runs:
            key = r.run_id.split("-", 2)[-1]  # drop the width
            groups.setdefault(key, []).append(r)
        spreads = [collapse_spread(normalized_matrix(g)) for g in groups.values() if len(g) > 1]
        return max(spreads) if spreads else None
