"""The study runner behind ``hpo run``: proxies -> universal curve -> sweep -> summary.

:class:`StudyRunner` does, in the study's output folder (see :mod:`hpo._schema` for the YAML):

1. **Proxies**: trains the proxy plan (small CompleteP models at the sweep's TPP and schedule,
   varying the controls the sweep moves) and writes each curve to ``proxies/<run_id>.csv.gz``.
   A finished proxy is never retrained; an interrupted one resumes from its checkpoint.
2. **Universal curve**: fitted on the proxies' train curves, cached as ``universal_curve.json``
   (refitted only when the proxy set changes).
3. **Sweep**: an Optuna study (``study.db``, or the study's ``storage``) with the configured
   sampler and :class:`hpo.CollapsePruner`; each trial trains the target model with the trial's
   recipe, reports its train loss ``pruner.report_points`` times, and stops when pruned. Curves go
   to ``trials/<number>.csv.gz``. With ``backend: ray`` the sweep runs as Ray Tune trials
   (:mod:`hpo._ray_backend`).
4. **Summary**: ``summary.json``, ``curves.csv.gz`` (every proxy and trial in the curve format,
   with ``role`` and ``trial`` columns) and ``report.md`` with plots (:mod:`hpo._report`).

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

import contextlib
import itertools
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo._schema import Study, StudyError, check_files, check_storage

__all__ = ["StudyRunner", "ProxySpec", "plan_proxies", "trial_overrides", "same_params"]

log = logging.getLogger(__name__)

IDENTITY_FILE = "study.json"
LOCK_FILE = ".hpo.lock"
_INTERRUPTED = "hpo:interrupted"
RESUME_RUN_ID_ATTR = "resume_run_id"  # a re-run trial trains under its original's identity
CHECKPOINT_PREFIX = "collapse:cp:"  # the pruner's per-checkpoint records


@dataclass(frozen=True)
class ProxySpec:
    """One planned proxy run."""

    run_id: str
    width: int
    depth: int
    seed: int
    overrides: tuple[tuple[str, Any], ...]  # recipe settings varied for this proxy


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def plan_proxies(study: Study) -> list[ProxySpec]:
    """The proxy runs: widths x seeds x every combination of the ``vary`` values."""
    depth = study.proxies["depth"] or study.model["depth"]
    vary = study.proxies["vary"]
    names = sorted(vary)
    out = []
    for width, seed in itertools.product(study.proxies["widths"], study.proxies["seeds"]):
        for combo in itertools.product(*(vary[n] for n in names)):
            overrides = tuple(zip(names, combo, strict=True))
            tag = "".join(f"-{n}{_fmt(v)}" for n, v in overrides)
            out.append(ProxySpec(f"proxy-w{width}d{depth}{tag}-s{seed}", width, depth, seed,
                                 overrides))
    return out


def trial_overrides(study: Study, params: dict[str, Any]) -> dict[str, Any]:
    """Recipe (and seed) settings of a trial: the study's recipe with the trial's params."""
    recipe = dict(study.recipe)
    seed = study.seed
    for name, value in params.items():
        if name == "seed":
            seed = int(value)
        else:
            recipe[name] = value
    if "weight_decay" in params:
        recipe["tau"] = None
    if "tau" in params:
        recipe["weight_decay"] = None
    recipe["seed"] = seed
    return recipe


def same_params(a: dict[str, Any], b: dict[str, Any], rel: float = 1e-6) -> bool:
    """Whether two parameter dicts are equal (floats to ``rel``)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if not math.isclose(float(x), float(y), rel_tol=rel):
                return False
        elif x != y:
            return False
    return True


def train_config(study: Study, *, width: int, depth: int, recipe: dict[str, Any], run_id: str,
                 group: str, checkpoint: Path | None = None) -> Any:
    """The ``models.train.TrainConfig`` of one run of the study's family."""
    from models.train import TrainConfig

    m, d = study.model, study.data
    return TrainConfig(
        width=width, depth=depth, heads=m["heads"], context=m["context"],
        ffn_ratio=float(m["ffn_ratio"]), activation=m["activation"], position=m["position"],
        parametrization=m["parametrization"], base_width=m["base_width"],
        base_depth=m["base_depth"], alpha=float(m["alpha"]), tpp=float(recipe["tpp"]),
        tau=None if recipe.get("tau") is None else float(recipe["tau"]),
        weight_decay=None if recipe.get("weight_decay") is None else float(
            recipe["weight_decay"]),
        lr=float(recipe["lr"]), batch_tokens=int(recipe["batch_tokens"]),
        schedule=str(recipe["schedule"]), warmup=float(recipe["warmup"]),
        grad_clip=None if recipe.get("grad_clip") is None else float(recipe["grad_clip"]),
        seed=int(recipe.get("seed", study.seed)), data=d["source"],
        val_fraction=float(d["val_fraction"]), max_data_bytes=d["max_bytes"],
        device=study.device, eval_batches=int(d["eval_batches"]),
        checkpoint=None if checkpoint is None else str(checkpoint),
        resume=checkpoint is not None, run_id=run_id, group=group,
    )


def _run_id(frozen: Any) -> str:
    """The identity a trial's training runs under: that of the trial it continues, if any."""
    return str(frozen.user_attrs.get(RESUME_RUN_ID_ATTR) or f"trial-{frozen.number}")


def objective_value(rows: list[dict], objective: str) -> float:
    """The trial's value from its curve rows: the smoothed final train loss (what the predictor
    predicts, :func:`predictors.final_loss_estimate` at t^ = 1) or the last val loss."""
    import numpy as np

    from predictors.normalize import final_loss_estimate

    if objective == "val":
        val = [r["loss"] for r in rows if r["split"] == "val"]
        return float(val[-1]) if val else math.nan
    train = [r for r in rows if r["split"] == "train"]
    if not train:
        return math.nan
    total = float(train[0]["total_steps"])
    t = np.array([r["step"] for r in train], dtype=float) / total
    y = np.array([r["loss"] for r in train], dtype=float)
    ok = np.isfinite(y)
    if not ok.any():
        return math.nan
    return final_loss_estimate(t[ok], y[ok], at=1.0)


def flops(n_params: float, tokens: float) -> float:
    """Training compute, 6 N D."""
    return 6.0 * float(n_params) * float(tokens)


class _Lock:
    """A pid file in the output folder: one ``hpo run`` per study at a time."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE

    def __enter__(self) -> _Lock:
        if self.path.exists():
            try:
                pid = int(self.path.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and pid != os.getpid() and _alive(pid):
                raise UsageError(f"output folder {str(self.path.parent)!r} is in use by another "
                                 f"hpo run (pid {pid}); wait for it or stop it first.")
        self.path.write_text(str(os.getpid()))
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_resumable(study: Study) -> None:
    """``StudyError`` when the output folder holds a different study (nothing is touched)."""
    path = study.output / IDENTITY_FILE
    if not path.exists():
        return
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    mine = json.loads(json.dumps(study.identity()))
    diff = [k for k in mine if stored.get(k) != mine[k]]
    if diff:
        raise StudyError(study.source, [(
            ", ".join(diff),
            f"differs from the study already in {str(study.output)!r}; resuming needs the same "
            "settings (only budget, pruner, backend, device and ray may change): give a new "
            "output folder (--output) or restore the file")])


def check_before_run(study: Study, address: str | None = None,
                     where: str = "--address") -> None:
    """What ``hpo run`` needs that is cheap to check, before anything is trained or written
    (``hpo validate`` runs the same): the input files and the storage (every problem in one
    :class:`StudyError`), an output folder that holds this study or none, and with
    ``backend: ray`` the cluster at ``address`` (one TCP connection; a
    :class:`~hpo._errors.UsageError` naming ``where``, the flag or field that gave it)."""
    errors: list[tuple[str, str]] = []
    for check in (check_files, check_storage):
        try:
            check(study)
        except StudyError as exc:
            errors += exc.errors
    if errors:
        raise StudyError(study.source, errors)
    check_resumable(study)
    if study.backend == "ray":
        from hpo._net import check_address

        check_address(address, where)


def prediction_accuracy(rows: list[dict[str, Any]],
                        verification: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """How well the trials' final losses were predicted (at each trial's latest checkpoint):
    against the final value of completed trials, the ``--verify`` value of stopped ones, or the
    full sweep's value of the same params. ``{"n", "inside", "median_abs_err",
    "max_abs_err"}`` (relative errors) and a ``per_trial`` list; n 0 when nothing is known."""
    verified = {v["trial"]: v["actual"] for v in verification or []}
    per = []
    for r in rows:
        truth = r["value"] if r["state"] == "complete" else verified.get(
            r["trial"], r.get("full_sweep_value"))
        if truth is None or r.get("predicted") is None:
            continue
        itv = r.get("interval")
        per.append({"trial": r["trial"], "predicted": r["predicted"], "actual": truth,
                    "rel_err": r["predicted"] / truth - 1,
                    "inside": None if not itv else bool(itv[0] <= truth <= itv[1])})
    errs = sorted(abs(p["rel_err"]) for p in per)
    return {
        "n": len(per),
        "inside": sum(1 for p in per if p["inside"]),
        "median_abs_err": (errs[len(errs) // 2] if len(errs) % 2 else
                           0.5 * (errs[len(errs) // 2 - 1] + errs[len(errs) // 2])) if errs
        else None,
        "max_abs_err": errs[-1] if errs else None,
        "per_trial": per,
    }


class StudyRunner:
    """Run a validated :class:`~hpo._schema.Study` (see the module docstring).

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
        with _Lock(self.out):
            ident = self.out / IDENTITY_FILE
            if not ident.exists():
                ident.write_text(json.dumps(self.study.identity(), indent=1))
            (self.out / "config.json").write_text(json.dumps(self.study.to_dict(), indent=1))
            if self.study.threads:
                import torch

                torch.set_num_threads(self.study.threads)
            curve_path = None
            if self.study.backend == "ray":
                from hpo._ray_backend import init

                init(self.address, self._address_from)
            if self.prune:
                self.train_proxies()
                curve_path = self.fit_curve()
            if self.study.backend == "ray":
                from hpo._ray_backend import run_sweep_ray

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
                    from hpo._report import write_report

                    write_report(self.out, summary)
                except Exception as exc:  # a plotting problem must not lose the study
                    log.warning("report failed: %s: %s", type(exc).__name__, exc)
                    summary["report_error"] = f"{type(exc).__name__}: {exc}"
            return summary

    # ------------------------------------------------------------------ proxies
    def vocab_size(self) -> int:
        if self._vocab is None:
            source = self.study.data["source"]
            if source == "stdlib" or not str(source).endswith(".bin") and not (
                    Path(source).is_dir() and (Path(source) / "train.bin").exists()):
                self._vocab = 256
            else:
                from models.data import load_tokens

                self._vocab = load_tokens(source, val_fraction=self.study.data["val_fraction"],
                                          max_bytes=self.study.data["max_bytes"]).vocab_size
        return self._vocab

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
        from models.train import train, write_curve

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
        if self.study.backend == "ray" and cfgs:
            from hpo._ray_backend import train_many

            t0 = time.monotonic()
            outs = train_many([c for *_, c in cfgs], self.study)
            for (spec, path, _, _), res in zip(cfgs, outs, strict=True):
                write_curve([{**r, "role": "proxy", "trial": ""} for r in res["rows"]], path)
                self.progress(f"  proxy {spec.run_id}: {res['status']}, final train loss "
                              f"{res['final_train_loss']:.4f}, {res['steps']} steps (ray), "
                              f"{time.monotonic() - t0:.0f} s")
            return paths
        for spec, path, ckpt, cfg in cfgs:
            t0 = time.monotonic()
            result = train(cfg)
            rows = [{**r, "role": "proxy", "trial": ""} for r in result.rows]
            write_curve(rows, path)
            with contextlib.suppress(OSError):
                ckpt.unlink()
            self.progress(f"  proxy {spec.run_id}: {result.status}, final train loss "
                          f"{result.final_train_loss:.4f}, {result.steps} steps, N="
                          f"{result.n_params:,}, {time.monotonic() - t0:.0f} s")
        return paths

    def fit_curve(self) -> Path:
        """Fit (or reuse) the universal curve on the proxies; its JSON path."""
        from predictors import fit_universal_curve, read_curves, runs_from_frame

        plan = plan_proxies(self.study)
        ids = sorted(s.run_id for s in plan)
        path = self.out / "universal_curve.json"
        meta = self.out / "universal_curve.proxies.json"
        if path.exists() and meta.exists():
            with contextlib.suppress(ValueError, OSError):
                if json.loads(meta.read_text()) == ids:
                    self.progress(f"universal curve: reused {path}")
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
        return path

    def _specs_by_run(self, runs: list[Any]) -> list[ProxySpec]:
        specs = {s.run_id: s for s in plan_proxies(self.study)}
        return [specs[r.run_id] for r in runs]

    def proxy_spread(self, runs: list[Any]) -> float | None:
        """Max spread of L/L_final over t^ in [0.2, 1] across proxy widths at equal controls."""
        from predictors.metrics import collapse_spread, normalized_matrix

        if len(self.study.proxies["widths"]) < 2:
            return None
        groups: dict[str, list[Any]] = {}
        for r in runs:
            key = r.run_id.split("-", 2)[-1]  # drop the width
            groups.setdefault(key, []).append(r)
        spreads = [collapse_spread(normalized_matrix(g)) for g in groups.values() if len(g) > 1]
        return max(spreads) if spreads else None

    # ------------------------------------------------------------------ the sweep
    def storage(self) -> Any:
        import optuna

        url = self.study.storage
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.RDBStorage(url)

    def make_sampler(self, n_existing: int) -> Any:
        import optuna

        s = self.study.sampler
        seed = s["seed"]
        kind = s["type"]
        if kind == "grid":
            from hpo._samplers import AskTellGridSampler
            from hpo._schema import grid_values

            grid = {n: grid_values(d) for n, d in self.study.search.items()}
            return AskTellGridSampler(grid, seed=seed)
        if kind == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False)
        # a resumed study must not replay the proposals of its first run
        seed = None if seed is None else seed + n_existing
        if kind == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        kwargs = {}
        if s["n_startup_trials"] is not None:
            kwargs["n_startup_trials"] = s["n_startup_trials"]
        return optuna.samplers.TPESampler(seed=seed, **kwargs)

    def make_pruner(self, curve_path: Path | None) -> Any:
        import optuna

        from hpo.pruning._optuna import CollapsePruner

        if not self.prune or curve_path is None:
            return optuna.pruners.NopPruner()
        p = self.study.pruner
        return CollapsePruner(
            reference=str(curve_path),
            checkpoints=tuple(p["checkpoints"]), threshold=p["threshold"],
            margin=p["margin"], n_startup_trials=p["n_startup_trials"],
        )

    def load_study(self, curve_path: Path | None = None, n_existing: int | None = None) -> Any:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = self.storage()
        if n_existing is None:
            try:
                existing = optuna.load_study(study_name=self.study.name, storage=storage)
                n_existing = len(existing.trials)
            except KeyError:
                n_existing = 0
        return optuna.create_study(
            study_name=self.study.name, storage=storage, direction="minimize",
            sampler=self.make_sampler(n_existing), pruner=self.make_pruner(curve_path),
            load_if_exists=True,
        )

    def requeue_interrupted(self, ostudy: Any) -> int:
        """Mark trials left running by a dead process as failed and enqueue their params."""
        from optuna.trial import TrialState

        storage = ostudy._storage
        n = 0
        trials = ostudy.get_trials(deepcopy=False)
        rerun = {t.user_attrs.get("rerun_of") for t in trials}
        for t in trials:
            stale = t.state == TrialState.RUNNING
            interrupted = (t.state == TrialState.FAIL and t.system_attrs.get(_INTERRUPTED)
                           and t.number not in rerun)
            if not (stale or interrupted):
                continue
            if stale:  # attrs first: a finished trial cannot be updated
                storage.set_trial_system_attr(t._trial_id, _INTERRUPTED, True)
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            # its checkpoint stays: the re-run continues from it (run_trial)
            ostudy.enqueue_trial(dict(t.params), user_attrs={
                "rerun_of": t.number, RESUME_RUN_ID_ATTR: _run_id(t)}, skip_if_exists=False)
            self.progress(f"trial {t.number} was interrupted: re-running it as a new trial "
                          f"with the same params {_params_text(t.params)}")
            n += 1
        return n

    def run_sweep(self, curve_path: Path | None) -> None:
        """The local backend: trials one after another in this process."""
        from optuna.trial import TrialState

        ostudy = self.load_study(curve_path)
        self.requeue_interrupted(ostudy)
        budget = self.study.budget["trials"]
        wall = self.study.wall_time_s
        done_states = (TrialState.COMPLETE, TrialState.PRUNED)
        (self.out / "trials").mkdir(exist_ok=True)
        n_done = len(ostudy.get_trials(deepcopy=False, states=done_states))
        if n_done:
            self.progress(f"sweep: {n_done} finished trial(s) kept from earlier runs")
        self.progress(f"sweep: {budget} trials, sampler {self.study.sampler['type']}, "
                      f"{'collapse pruning at t^ ' + ', '.join(map(str, self.study.pruner['checkpoints'])) if self.prune else 'no pruning (full sweep)'}")  # noqa: E501
        grid_size = self.grid_size()
        if grid_size is not None and budget > grid_size:
            self.progress(f"sweep: the grid has {grid_size} points; running those")
            budget = grid_size
        while n_done < budget:
            if wall is not None and time.monotonic() - self._t0 > wall:
                self.progress(f"sweep: wall time {wall:.0f} s reached after {n_done} trials")
                break
            trial = ostudy.ask({n: _distribution(d) for n, d in self.study.search.items()})
            self.run_trial(ostudy, trial)
            n_done = len(ostudy.get_trials(deepcopy=False, states=done_states))

    def grid_size(self) -> int | None:
        if self.study.sampler["type"] != "grid":
            return None
        from hpo._schema import grid_values

        return math.prod(len(set(map(repr, grid_values(d)))) for d in self.study.search.values())

    def trial_setup(self, params: dict[str, Any], number: int,
                    run_id: str | None = None) -> tuple[Any, Any]:
        """(TrainConfig, Recipe) of a trial; ``run_id`` (default ``trial-<number>``) is the
        identity its checkpoint is written and resumed under."""
        from models.config import GPTConfig
        from models.recipe import make_recipe

        recipe = trial_overrides(self.study, params)
        cfg = train_config(self.study, width=self.study.model["width"],
                           depth=self.study.model["depth"], recipe=recipe,
                           run_id=run_id or f"trial-{number}", group=f"sweep-{self.study.name}",
                           checkpoint=self.out / "trials" / f"{number}.ckpt")
        gcfg: GPTConfig = cfg.model_config(vocab_size=self.vocab_size())
        rec = make_recipe(cfg=gcfg, tpp=cfg.tpp, batch_tokens=cfg.batch_tokens, lr=cfg.lr,
                          tau=cfg.tau if cfg.tau is not None or cfg.weight_decay is not None
                          else 0.2, weight_decay=cfg.weight_decay, warmup=cfg.warmup,
                          schedule=cfg.schedule)
        return cfg, rec

    def run_trial(self, ostudy: Any, trial: Any) -> None:
        from optuna.trial import TrialState

        from hpo.pruning._optuna import describe_trial
        from models.train import train, write_curve

        params = dict(trial.params)
        frozen = ostudy._storage.get_trial(trial._trial_id)
        run_id = _run_id(frozen)
        try:
            cfg, rec = self.trial_setup(params, trial.number, run_id)
        except ValueError as exc:
            self.progress(f"trial {trial.number} {_params_text(params)}: invalid ({exc})")
            ostudy.tell(trial, state=TrialState.FAIL)
            return
        with contextlib.suppress(OSError):
            Path(cfg.checkpoint).unlink()  # a new trial never resumes someone else's state
        resumed_from = self.take_over_checkpoint(ostudy, trial, frozen, Path(cfg.checkpoint))
        total = rec.total_steps
        describe_trial(trial, total_steps=total, tau=rec.tau, tpp=rec.tpp,
                       schedule=rec.schedule, warmup_steps=rec.warmup_steps,
                       n_params=rec.n_params, batch_tokens=rec.batch_tokens,
                       peak_lr=rec.hidden_lr, weight_decay=rec.hidden_weight_decay)
        every = max(1, total // self.study.pruner["report_points"])
        checkpoints = list(self.study.pruner["checkpoints"]) if self.prune else [0.25, 0.5, 0.75]
        shown = set()
        self.progress(f"trial {trial.number} {_params_text(params)}: {total} steps, "
                      f"tau {rec.tau:.3g}"
                      + (f", continuing trial {frozen.user_attrs.get('rerun_of')} from step "
                         f"{resumed_from}" if resumed_from else ""))
        t0 = time.monotonic()
        decision: dict[str, Any] = {}

        def callback(point: Any) -> bool:
            if point.step % every and point.step != total:
                return False
            trial.report(point.train_loss, point.step)
            stop = self.prune and trial.should_prune()
            due = [c for c in checkpoints if point.t_hat >= c and c not in shown]
            if due or stop:
                shown.update(due)
                record = self._latest_record(ostudy, trial) if self.prune else None
                decision.update(record or {})
                self.progress(self._progress_line(trial.number, point, record, stop))
            return bool(stop)

        try:
            result = train(cfg, callback)
        except KeyboardInterrupt:
            ostudy._storage.set_trial_system_attr(trial._trial_id, _INTERRUPTED, True)
            ostudy.tell(trial, state=TrialState.FAIL)
            raise
        seconds = time.monotonic() - t0
        rows = [{**r, "run_id": f"trial-{trial.number}", "role": "trial", "trial": trial.number}
                for r in result.rows]
        write_curve(rows, self.out / "trials" / f"{trial.number}.csv.gz")
        tokens = result.steps * rec.batch_tokens
        attrs = {"n_params": rec.n_params, "total_steps": total, "steps_done": result.steps,
                 "tokens": tokens, "full_tokens": rec.tokens,
                 "flops": flops(rec.n_params, tokens), "full_flops": flops(rec.n_params,
                                                                           rec.tokens),
                 "status": result.status, "seconds": seconds, "tau": rec.tau,
                 "weight_decay": rec.weight_decay, "final_val_loss": result.final_val_loss}
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        if result.status == "completed":
            value = objective_value(result.rows, self.study.objective)
            ostudy.tell(trial, value)
            with contextlib.suppress(OSError):
                Path(cfg.checkpoint).unlink()
            best = ostudy.best_trial
            mark = " (best so far)" if best.number == trial.number else \
                f" (best: trial {best.number}, {best.value:.4f})"
            self.progress(f"trial {trial.number} completed: final loss {value:.4f}{mark}, "
                          f"{seconds:.0f} s")
        elif result.status == "stopped":
            ostudy.tell(trial, state=TrialState.PRUNED)
            why = decision.get("explanation") or decision.get("reason", "")
            self.progress(f"trial {trial.number} {why}; saved "
                          f"{100 * (1 - result.steps / total):.0f}% of its compute, "
                          f"{seconds:.0f} s")
        else:
            ostudy.tell(trial, state=TrialState.FAIL)
            self.progress(f"trial {trial.number} {result.status} after {result.steps} steps")

    def take_over_checkpoint(self, ostudy: Any, trial: Any, frozen: Any, ckpt: Path) -> int:
        """For a re-run of an interrupted trial: move the interrupted trial's checkpoint to
        ``ckpt`` and copy the values it reported up to the checkpoint's step into ``trial``.
        Returns that step (0: nothing to continue, the trial starts from scratch)."""
        import torch

        old = frozen.user_attrs.get("rerun_of")
        if not isinstance(old, int):
            return 0
        src = self.out / "trials" / f"{old}.ckpt"
        if not src.exists():
            return 0
        try:
            state = torch.load(src, map_location="cpu", weights_only=True)
            step = int(state["step"])
        except Exception as exc:  # an unreadable checkpoint: start over, say why
            self.progress(f"trial {trial.number}: checkpoint {src} unreadable ({exc}); "
                          "starting from step 0")
            return 0
        src.replace(ckpt)
        before = next((t for t in ostudy.get_trials(deepcopy=False) if t.number == old), None)
        if before is not None:
            for s, v in sorted(before.intermediate_values.items()):
                if s <= step:
                    trial.report(v, s)
        trial.set_user_attr("resumed_from_step", step)
        return step

    @staticmethod
    def _latest_record(ostudy: Any, trial: Any) -> dict[str, Any] | None:
        frozen = ostudy._storage.get_trial(trial._trial_id)
        return latest_record(frozen.system_attrs)

    @staticmethod
    def _progress_line(number: int, point: Any, record: dict | None, stop: bool) -> str:
        line = f"  trial {number}  t^ {point.t_hat:.2f}  loss {point.train_loss:.4f}"
        est = (record or {}).get("estimate") or {}
        if est.get("value") is not None:
            line += (f"  predicted final {est['value']:.4f} "
                     f"[{_num(est.get('lower'))}, {_num(est.get('upper'))}]")
        if record is not None:
            line += "  -> STOP" if stop else "  -> keep"
            if record.get("explanation"):
                line += f" ({record['explanation']})"
        return line

    # ------------------------------------------------------------------ verification
    def verify_stopped(self) -> None:
        """Train each stopped trial to its end from its checkpoint; record the actual final."""
        from optuna.trial import TrialState

        from hpo.pruning._optuna import INTERVAL_ATTR, PREDICTION_ATTR
        from models.train import train, write_curve

        path = self.out / "verify.json"
        done = json.loads(path.read_text()) if path.exists() else {}
        ostudy = self.load_study()
        pruned = ostudy.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
        todo = [t for t in pruned if str(t.number) not in done]
        if todo:
            self.progress(f"verify: training {len(todo)} stopped trial(s) to the end")
        for t in todo:
            cfg, rec = self.trial_setup(dict(t.params), t.number, _run_id(t))
            t0 = time.monotonic()
            result = train(cfg)
            rows = [{**r, "run_id": f"trial-{t.number}-verify", "role": "verify",
                     "trial": t.number} for r in result.rows]
            write_curve(rows, self.out / "trials" / f"{t.number}-verify.csv.gz")
            actual = objective_value(result.rows, self.study.objective)
            pred = t.user_attrs.get(PREDICTION_ATTR)
            interval = t.user_attrs.get(INTERVAL_ATTR)
            done[str(t.number)] = {
                "trial": t.number, "params": dict(t.params), "actual": actual,
                "predicted": pred, "interval": interval,
                "stopped_at": t.user_attrs.get("steps_done", 0) / rec.total_steps,
                "inside_interval": None if interval is None else bool(
                    interval[0] <= actual <= interval[1]),
                "extra_flops": flops(rec.n_params, rec.tokens - t.user_attrs.get("tokens", 0)),
            }
            path.write_text(json.dumps(done, indent=1))
            with contextlib.suppress(OSError):
                Path(cfg.checkpoint).unlink()
            self.progress(f"  verify trial {t.number}: actual {actual:.4f}, predicted "
                          f"{_num(pred)} {interval and [round(x, 4) for x in interval]}, "
                          f"{time.monotonic() - t0:.0f} s")

    # ------------------------------------------------------------------ summary
    def summarize(self) -> dict[str, Any]:
        from optuna.trial import TrialState

        from hpo.pruning._optuna import INTERVAL_ATTR, PREDICTION_ATTR, T_HAT_ATTR

        ostudy = self.load_study()
        trials = ostudy.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        pruned = [t for t in trials if t.state == TrialState.PRUNED]
        failed = [t for t in trials if t.state == TrialState.FAIL]
        finished = complete + pruned
        used = sum(t.user_attrs.get("flops", 0.0) for t in finished)
        full = sum(t.user_attrs.get("full_flops", 0.0) for t in finished)
        wasted = sum(t.user_attrs.get("flops", 0.0) for t in failed)
        proxies = self._proxy_flops() if self.prune else 0.0
        summary: dict[str, Any] = {
            "study": self.study.name, "mode": "collapse pruning" if self.prune else "full sweep",
            "backend": self.study.backend, "objective": self.study.objective,
            "trials": {"complete": len(complete), "stopped": len(pruned),
                       "failed_or_interrupted": len(failed)},
        }
        if complete:
            best = min(complete, key=lambda t: t.value)
            summary["best"] = {"trial": best.number, "params": dict(best.params),
                               "loss": best.value,
                               "final_val_loss": best.user_attrs.get("final_val_loss")}
        else:
            summary["best"] = None
        summary["compute"] = {
            "unit": "FLOPs, 6 N D",
            "sweep_used": used, "full_sweep": full, "proxies": proxies,
            "failed_trials": wasted,
            "saved_fraction": (1 - used / full) if full else 0.0,
            "saved_fraction_with_proxies": (1 - (used + proxies) / full) if full else 0.0,
        }
        rows = []
        for t in sorted(finished, key=lambda t: t.number):
            rec = latest_record(t.system_attrs) or {}
            rows.append({
                "trial": t.number, "params": dict(t.params), "state": t.state.name.lower(),
                "value": t.value, "t_hat_end": t.user_attrs.get("steps_done", 0)
                / max(1, t.user_attrs.get("total_steps", 1)),
                "predicted": t.user_attrs.get(PREDICTION_ATTR),
                "interval": t.user_attrs.get(INTERVAL_ATTR),
                "predicted_at": t.user_attrs.get(T_HAT_ATTR),
                "probability": rec.get("probability"), "seconds": t.user_attrs.get("seconds"),
                "explanation": rec.get("explanation"),
            })
        summary["trial_table"] = rows
        verify_path = self.out / "verify.json"
        if verify_path.exists():
            ver = json.loads(verify_path.read_text())
            summary["verification"] = sorted(ver.values(), key=lambda v: v["trial"])
            if len(ver) == len(pruned) and complete:
                everyone = [(t.value, t.number, dict(t.params)) for t in complete] + [
                    (v["actual"], v["trial"], v["params"]) for v in ver.values()]
                value, number, params = min(everyone, key=lambda x: x[0])
                summary["verified_full_sweep_best"] = {"trial": number, "params": params,
                                                       "loss": value}
        summary["comparison"] = self.compare_with_full_sweep(summary.get("best"))
        ref_rows = (summary["comparison"] or {}).pop("trial_table", None) or []
        for row in rows:  # the full sweep's final value of each trial's params, if known
            match = [r for r in ref_rows if r.get("value") is not None
                     and same_params(r["params"], row["params"])]
            row["full_sweep_value"] = match[0]["value"] if match else None
        summary["predictions"] = prediction_accuracy(rows, summary.get("verification"))
        summary["wall_time_s"] = time.monotonic() - self._t0
        summary["universal_curve"] = (str(self.out / "universal_curve.json")
                                      if self.prune else None)
        return summary

    def _proxy_flops(self) -> float:
        import pandas as pd

        total = 0.0
        for path in (self.out / "proxies").glob("*.csv.gz"):
            df = pd.read_csv(path, usecols=["n_params", "tokens"], nrows=1)
            total += flops(df["n_params"].iloc[0], df["tokens"].iloc[0])
        return total

    def full_sweep_folder(self) -> Path:
        return self.out / "full_sweep"

    def compare_with_full_sweep(self, best: dict | None) -> dict[str, Any] | None:
        """Compare the choice with a full sweep's summary: ``<output>/full_sweep/summary.json``
        (``hpo run --no-prune``) or the study's ``reference`` file."""
        if not self.prune:
            return None
        candidates = [self.full_sweep_folder() / "summary.json"]
        if self.study.reference is not None:
            candidates.append(self.study.reference)
        for path in candidates:
            if not path.is_file():
                continue
            try:
                ref = json.loads(path.read_text())
                ref_best = ref["best"]
            except (OSError, ValueError, KeyError):
                continue
            if not ref_best:
                continue
            same = best is not None and same_params(best["params"], ref_best["params"])
            return {"source": str(path), "full_sweep_best": ref_best, "same_choice": same,
                    "trial_table": ref.get("trial_table"),
                    "full_sweep_wall_time_s": ref.get("wall_time_s"),
                    "full_sweep_compute": (ref.get("compute") or {}).get("full_sweep")}
        return None

    # ------------------------------------------------------------------ curves
    def write_curves(self) -> Path:
        """``curves.csv.gz``: every proxy, trial and verification curve in the curve format."""
        import pandas as pd

        from models.train import CURVE_COLUMNS

        frames = []
        for sub in ("proxies", "trials"):
            for path in sorted((self.out / sub).glob("*.csv.gz")):
                frames.append(pd.read_csv(path))
        out = self.out / "curves.csv.gz"
        if frames:
            df = pd.concat(frames, ignore_index=True)
            cols = [*CURVE_COLUMNS, *[c for c in df.columns if c not in CURVE_COLUMNS]]
            tmp = out.with_name(out.name + ".tmp")
            df[cols].to_csv(tmp, index=False, compression="gzip")
            os.replace(tmp, out)
        return out


def latest_record(system_attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The pruner's record (estimate, decision) at the latest checkpoint a trial reached: the
    ``collapse:cp:<t>`` system attr with the largest ``t``."""
    records = [v for k, v in system_attrs.items()
               if k.startswith(CHECKPOINT_PREFIX) and isinstance(v, dict)]
    if not records:
        return system_attrs.get("collapse:latest")
    return max(records, key=lambda r: float(r.get("checkpoint", 0.0)))


def _distribution(d: dict[str, Any]) -> Any:
    import optuna.distributions as od

    if d["type"] == "categorical":
        return od.CategoricalDistribution(d["choices"])
    if d["type"] == "int":
        return od.IntDistribution(d["low"], d["high"], log=d.get("log", False),
                                  step=d.get("step") or 1)
    return od.FloatDistribution(float(d["low"]), float(d["high"]), log=d.get("log", False),
                                step=d.get("step"))


def _params_text(params: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={_fmt_param(v)}" for k, v in sorted(params.items())) + "}"


def _fmt_param(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.4f}"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
