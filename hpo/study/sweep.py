"""Stage 3 of a study: the Optuna sweep with the collapse pruner, run in this process.

Each trial trains the target model with the trial's recipe, reports its train loss
``pruner.report_points`` times and stops when pruned; curves go to ``trials/<number>.csv.gz``.
A trial left ``RUNNING`` by a killed process is marked failed and its parameters enqueued again;
the new trial continues from the interrupted one's last checkpoint (``trials/<number>.ckpt``),
with the points reported before it copied over, so the pruner sees the whole curve.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from hpo.pruning._optuna import latest_record
from hpo.study.plan import (
    INTERRUPTED_ATTR,
    RESUME_RUN_ID_ATTR,
    distribution,
    flops,
    fmt_number,
    objective_value,
    params_text,
    run_id_of,
    train_config,
    trial_overrides,
)

log = logging.getLogger(__name__)


class SweepStage:
    """The local Optuna sweep of a study run. A part of
    :class:`hpo.study.runner.StudyRunner`, which holds ``study``, ``out`` and ``progress``."""

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
            from hpo.study.samplers import AskTellGridSampler
            from hpo.study.schema import grid_values

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

    def optuna_study(self, curve_path: Path | None = None, n_existing: int | None = None) -> Any:
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
            interrupted = (t.state == TrialState.FAIL and t.system_attrs.get(INTERRUPTED_ATTR)
                           and t.number not in rerun)
            if not (stale or interrupted):
                continue
            if stale:  # attrs first: a finished trial cannot be updated
                storage.set_trial_system_attr(t._trial_id, INTERRUPTED_ATTR, True)
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            # its checkpoint stays: the re-run continues from it (run_trial)
            ostudy.enqueue_trial(dict(t.params), user_attrs={
                "rerun_of": t.number, RESUME_RUN_ID_ATTR: run_id_of(t)}, skip_if_exists=False)
            self.progress(f"trial {t.number} was interrupted: re-running it as a new trial "
                          f"with the same params {params_text(t.params)}")
            n += 1
        return n

    def run_sweep(self, curve_path: Path | None) -> None:
        """The local backend: trials one after another in this process."""
        from optuna.trial import TrialState

        ostudy = self.optuna_study(curve_path)
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
            trial = ostudy.ask({n: distribution(d) for n, d in self.study.search.items()})
            self.run_trial(ostudy, trial)
            n_done = len(ostudy.get_trials(deepcopy=False, states=done_states))

    def grid_size(self) -> int | None:
        if self.study.sampler["type"] != "grid":
            return None
        from hpo.study.schema import grid_values

        return math.prod(len(set(map(repr, grid_values(d)))) for d in self.study.search.values())

    def trial_setup(self, params: dict[str, Any], number: int,
                    run_id: str | None = None) -> tuple[Any, Any]:
        """(TrainConfig, Recipe) of a trial; ``run_id`` (default ``trial-<number>``) is the
        identity its checkpoint is written and resumed under."""
        from hpo.models.config import GPTConfig
        from hpo.models.recipe import make_recipe

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

        from hpo.models.train import train, write_curve
        from hpo.pruning._optuna import describe_trial

        params = dict(trial.params)
        frozen = ostudy._storage.get_trial(trial._trial_id)
        run_id = run_id_of(frozen)
        try:
            cfg, rec = self.trial_setup(params, trial.number, run_id)
        except ValueError as exc:
            self.progress(f"trial {trial.number} {params_text(params)}: invalid ({exc})")
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
        self.progress(f"trial {trial.number} {params_text(params)}: {total} steps, "
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
            ostudy._storage.set_trial_system_attr(trial._trial_id, INTERRUPTED_ATTR, True)
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
                     f"[{fmt_number(est.get('lower'))}, {fmt_number(est.get('upper'))}]")
        if record is not None:
            line += "  -> STOP" if stop else "  -> keep"
            if record.get("explanation"):
                line += f" ({record['explanation']})"
        return line

    # ------------------------------------------------------------------ verification
    def verify_stopped(self) -> None:
        """Train each stopped trial to its end from its checkpoint; record the actual final."""
        from optuna.trial import TrialState

        from hpo.models.train import train, write_curve
        from hpo.pruning._optuna import INTERVAL_ATTR, PREDICTION_ATTR

        path = self.out / "verify.json"
        done = json.loads(path.read_text()) if path.exists() else {}
        ostudy = self.optuna_study()
        pruned = ostudy.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
        todo = [t for t in pruned if str(t.number) not in done]
        if todo:
            self.progress(f"verify: training {len(todo)} stopped trial(s) to the end")
        for t in todo:
            cfg, rec = self.trial_setup(dict(t.params), t.number, run_id_of(t))
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
                          f"{fmt_number(pred)} {interval and [round(x, 4) for x in interval]}, "
                          f"{time.monotonic() - t0:.0f} s")
