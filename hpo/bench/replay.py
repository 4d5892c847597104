"""``hpo bench``: replay recorded sweeps through real pruners and schedulers, side by side.

Each run of a group is one trial of that group's sweep; a trial reports its recorded training
loss point by point (``trial.report(loss, step)`` / ``tune.report``) and stopping it stops its
replay. A trial that runs to the end returns the run's final loss (the smoothed end of its
curve, :func:`hpo.predictors.final_loss_estimate`).

Two launch modes:

* ``lockstep``: the sweep launched at once; every trial reports its k-th point before any
  reports its (k+1)-th.
* ``sequential``: one trial after another in a fixed order (``study.optimize(n_jobs=1)``).

The accounting (compute, regret, whether the best trial was stopped), the ``oracle@0.2``
reference and the sequential floor are :mod:`hpo.bench.metrics`'s.

Optuna and the "current best" and "predicted best" baselines replay in-process (ask/tell with
the real pruner objects); Ray Tune methods run real ``Tuner.fit`` calls (one per group, class
trainables that checkpoint their position so HyperBand can pause and resume them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import optuna
import optuna.pruners as op

from hpo.bench.data import BenchGroup, BenchTrial, budget, curve_for
from hpo.bench.knobs import FRONTIER_THRESHOLDS, collapse_pruner
from hpo.bench.metrics import (
    MODES,
    GroupMetrics,
    TrialOutcome,
    aggregate,
    compare_to_goal,
    group_metrics,
    sequential_floor,
)
from hpo.bench.reliability import reliability
from hpo.predictors import CollapsePredictor, FinalLossPredictor
from hpo.pruning import DEFAULT_THRESHOLD, KEEP, REASON_ATTR, STOP, Record, describe_trial

#: where the paper's two rules ("current best", "predicted best") and oracle@f judge: the
#: trials' reported points there are kept when a curve is subsampled
BASELINE_FRACTIONS = (0.1, 0.2, 0.3)

__all__ = [
    "BASELINE_FRACTIONS",
    "replay_optuna", "replay_current_best", "replay_predicted_best", "replay_oracle",
    "optuna_methods", "ray_methods", "replay_ray", "run_bench", "shadow_verdicts",
]


def replay_optuna(
    group: BenchGroup, make_pruner: Callable[[BenchGroup], Any], mode: str,
    describe: bool = False,
) -> list[TrialOutcome]:
    """Replay a group through a real Optuna study (in-memory storage, ask/tell).

    ``describe``: call :func:`hpo.describe_trial` with each run's controls (the collapse
    pruner needs them). Returns one outcome per trial, in the group's order.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")
    # a fixed name: HyperbandPruner assigns brackets by a hash of the study name and trial number
    study = optuna.create_study(direction="minimize", pruner=make_pruner(group),
                                study_name=f"bench-{group.name}")
    n = len(group.trials)
    outcomes: list[TrialOutcome | None] = [None] * n

    def start(i: int) -> Any:
        trial = study.ask()
        trial.set_user_attr("bench_trial", i)
        controls = group.trials[i].controls
        if describe and controls is not None and controls.has_schedule:
            # a run whose schedule the curve format cannot read is not described: the
            # collapse pruner judges it on the same-step evidence alone, the others as usual
            describe_trial(trial, total_steps=group.trials[i].total_steps, controls=controls)
        return trial

    def step(trial: Any, i: int, k: int) -> bool:
        """Report point k; True when the trial is stopped (told PRUNED)."""
        bt = group.trials[i]
        trial.report(float(bt.values[k]), int(bt.steps[k]))
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            outcomes[i] = TrialOutcome(True, float(bt.steps[k]), float(bt.values[k]))
            return True
        return False

    def finish(trial: Any, i: int) -> None:
        bt = group.trials[i]
        study.tell(trial, bt.final)
        outcomes[i] = TrialOutcome(False, float(bt.total_steps), bt.final)

    if mode == "sequential":
        for i, bt in enumerate(group.trials):
            trial = start(i)
            for k in range(bt.steps.size):
                if step(trial, i, k):
                    break
            else:
                finish(trial, i)
    else:
        trials = [start(i) for i in range(n)]
        alive = set(range(n))
        for k in range(max(t.steps.size for t in group.trials)):
            for i in sorted(alive):
                bt = group.trials[i]
                if k >= bt.steps.size:
                    continue
                if step(trials[i], i, k):
                    alive.discard(i)
                elif k == bt.steps.size - 1:
                    finish(trials[i], i)
                    alive.discard(i)
    reasons = {t.user_attrs.get("bench_trial"): t.user_attrs.get(REASON_ATTR, "")
               for t in study.get_trials(deepcopy=False)}
    return [dataclasses.replace(o, reason=reasons.get(i) or "")
            for i, o in enumerate(outcomes) if o is not None]


def shadow_verdicts(
    group: BenchGroup, curve: Any, mode: str, collapse_kwargs: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every trial's lowest-probability verdict per checkpoint in a replay through a real Optuna
    study with ``CollapsePruner(threshold=0)``, which stops nothing, so every verdict meets its
    outcome: ``{"trial", "checkpoint", "probability", "against", "same_step", "won"}``
    (``same_step``: the same-step chance of the same event recorded beside the verdict, or
    ``None``; ``won``: the trial's final ended more than the pruner's ``tolerance`` below that
    of the competitor the verdict named). Per trial and
    checkpoint the verdict kept is the lowest stated probability: the one that would have
    stopped it first at any threshold above it (:mod:`hpo.bench.reliability`)."""
    kept: dict[tuple[int, float], dict[str, Any]] = {}

    def observe(label: Any, record: Record) -> None:
        if (record.reason in (STOP, KEEP) and record.probability is not None
                and record.against is not None):
            key = (int(label), float(record.checkpoint))
            p = float(record.probability)
            if key not in kept or p < kept[key]["probability"]:
                step = record.same_step
                kept[key] = {"trial": key[0], "checkpoint": key[1], "probability": p,
                             "against": int(record.against.label),
                             "same_step": None if step is None else float(step.probability),
                             "tolerance": float(record.tolerance or 0.0)}

    def make(g: BenchGroup) -> Any:
        return collapse_pruner(curve_for(curve, g), **{**(collapse_kwargs or {}),
                                                       "threshold": 0.0, "on_verdict": observe})

    replay_optuna(group, make, mode, True)
    finals = [t.final for t in group.trials]
    out = []
    for v in sorted(kept.values(), key=lambda v: (v["trial"], v["checkpoint"])):
        tol = v.pop("tolerance")
        out.append({**v, "won": bool(finals[v["trial"]] < finals[v["against"]] * (1 - tol))})
    return out


def _at_f(t: BenchTrial, f: float) -> tuple[int, float]:
    """Where a trial is judged at t^ = f, and its current loss there.

    Returns ``(k, current)``: k the index of its first reported point at or after f (its last
    point when it ends before f), ``current`` the mean of its reported values in t^ in
    [0.9 f, t^_k] (the value at k when that window is empty).
    """
    th = t.steps / t.total_steps
    k = min(int(np.searchsorted(th, f - 1e-12)), th.size - 1)
    win = (th >= 0.9 * f) & (th <= th[k] + 1e-12)
    return k, float(np.mean(t.values[win])) if win.any() else float(t.values[k])


def _keep_lowest_at_f(
    group: BenchGroup, f: float, mode: str, scores: Sequence[float | None],
) -> list[TrialOutcome]:
    """The "best at t^ = f" rule on one score per trial (lower is better; ``None``: no score,
    the trial is kept and runs to its end).

    ``lockstep``: every trial with a score but the lowest (the first on a tie) stops at f.
    ``sequential``: a trial with a score stops at f when its score is above the lowest score
    of the earlier trials that were kept. A stopped trial trained to its point at f
    (:func:`_at_f`) and reports its current loss there; a kept one trains all its
    ``total_steps`` and returns its final loss.
    """
    at = [_at_f(t, f) for t in group.trials]

    def stop(i: int) -> TrialOutcome:
        k, cur = at[i]
        return TrialOutcome(True, float(group.trials[i].steps[k]), cur)

    def keep(i: int) -> TrialOutcome:
        t = group.trials[i]
        return TrialOutcome(False, t.total_steps, t.final)

    if mode == "lockstep":
        scored = [i for i, s in enumerate(scores) if s is not None]
        best = scored[int(np.argmin([scores[i] for i in scored]))] if scored else -1
        return [stop(i) if s is not None and i != best else keep(i)
                for i, s in enumerate(scores)]
    outcomes, bar = [], math.inf
    for i, s in enumerate(scores):
        if s is not None and s > bar:
            outcomes.append(stop(i))
            continue
        if s is not None:
            bar = s
        outcomes.append(keep(i))
    return outcomes


def replay_current_best(group: BenchGroup, f: float, mode: str) -> list[TrialOutcome]:
    """The paper's baseline: at t^ = f keep only the trial whose current loss is lowest.

    The current loss is the mean of the reported values in t^ in [0.9 f, f]. ``lockstep``:
    all trials are compared at f and all but the lowest stopped there. ``sequential``: a trial
    reaching f is stopped when its current loss is worse than the best current loss at f of
    the earlier trials that were not stopped.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")
    return _keep_lowest_at_f(group, f, mode, [_at_f(t, f)[1] for t in group.trials])


def replay_predicted_best(
    group: BenchGroup, f: float, mode: str, predictor: FinalLossPredictor,
) -> list[TrialOutcome]:
    """The paper's use of the predictor: train every trial to t^ = f, then finish only the
    trial whose *predicted* final loss is lowest.

    Each trial is predicted (``predictor.predict(steps, values, controls).final``; in the bench
    a :class:`hpo.predictors.CollapsePredictor` on the group's curve) from its reported points
    with t^ <= f. The rule and the accounting are :func:`replay_current_best`'s with the
    predicted final in place of the current loss: ``lockstep``, all but the lowest prediction
    stop at f; ``sequential``, a trial stops at f when its prediction is above the lowest
    prediction of the earlier trials that were kept. A stopped trial trained to the point at
    which ``current_best`` judges it (its first point at or after f).

    A trial the predictor declines (``ValueError``, e.g. too few points after the warmup) or
    predicts as not finite is kept and runs to its end, as a user of the rule would do with a
    run it cannot rank; it sets no bar for later trials in ``sequential`` mode.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")
    return _keep_lowest_at_f(group, f, mode, [_predicted_at(t, f, predictor)
                                              for t in group.trials])


def _predicted_at(t: BenchTrial, f: float, predictor: FinalLossPredictor) -> float | None:
    """The trial's predicted final loss from its points with t^ <= f; ``None`` when the
    predictor declines (``ValueError``) or predicts a value that is not finite."""
    seen = t.steps / t.total_steps <= f + 1e-12
    if not seen.any():
        return None
    try:
        final = float(predictor.predict(t.steps[seen], t.values[seen], t.controls).final)
    except ValueError:
        return None
    return final if math.isfinite(final) else None


def replay_oracle(group: BenchGroup, f: float, mode: str) -> list[TrialOutcome]:
    """A reference, not a method: stopping with the *true* final losses known at t^ = f.

    ``lockstep``: every trial but the true best stops at f (the issue's budget). ``sequential``:
    a trial stops at f when its final loss is worse than that of an earlier trial (the best
    any rule can do when trials arrive one by one: a trial better than all before it must run
    to the end, since a better one may never come). Steps at f are the first reported step at
    or after f.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")

    def stop_at(t: BenchTrial) -> TrialOutcome:
        k = min(int(np.searchsorted(t.steps / t.total_steps, f - 1e-12)), t.steps.size - 1)
        return TrialOutcome(True, float(t.steps[k]), float(t.values[k]))

    best = group.best
    if mode == "lockstep":
        return [TrialOutcome(False, t.total_steps, t.final) if i == best else stop_at(t)
                for i, t in enumerate(group.trials)]
    outcomes, best_so_far = [], math.inf
    for t in group.trials:
        if t.final > best_so_far:
            outcomes.append(stop_at(t))
        else:
            best_so_far = t.final
            outcomes.append(TrialOutcome(False, t.total_steps, t.final))
    return outcomes


def optuna_methods(
    curve: Any | None,
    collapse_kwargs: Mapping[str, Any] | None = None,
    knobs: bool = True,
) -> dict[str, tuple[Callable[[BenchGroup], Any], bool, str]]:
    """Name -> (pruner factory per group, needs controls, knob label) of the Optuna methods.

    The main entry of each method is its plain name; ``knobs`` adds entries named
    ``"<name>@<knob>"`` that sweep its aggressiveness (warmup fraction, minimum resource,
    patience, margin) for the regret-against-compute curve. Step-valued settings are fractions
    of the group's ``total_steps`` (all trials of a group share it).
    """

    def steps(g: BenchGroup, frac: float) -> int:
        return max(1, int(round(frac * g.trials[0].total_steps)))

    ck = dict(collapse_kwargs or {})
    out: dict[str, tuple[Callable[[BenchGroup], Any], bool, str]] = {}

    def collapse(**extra: Any) -> Callable[[BenchGroup], Any]:
        kw = {**ck, **extra}
        return lambda g: collapse_pruner(curve_for(curve, g), **kw)

    out["collapse"] = (collapse(), True, "default")
    out["MedianPruner"] = (lambda g: op.MedianPruner(n_startup_trials=1), False, "warmup=0")
    out["PercentilePruner(25)"] = (
        lambda g: op.PercentilePruner(25.0, n_startup_trials=1), False, "warmup=0")
    out["SuccessiveHalvingPruner"] = (
        lambda g: op.SuccessiveHalvingPruner(min_resource=steps(g, 0.1), reduction_factor=3),
        False, "min_resource=0.1")
    out["HyperbandPruner"] = (
        lambda g: op.HyperbandPruner(min_resource=steps(g, 0.1),
                                     max_resource=g.trials[0].total_steps, reduction_factor=3),
        False, "min_resource=0.1")
    out["PatientPruner(MedianPruner)"] = (
        lambda g: op.PatientPruner(op.MedianPruner(n_startup_trials=1), patience=3), False,
        "patience=3")
    out["NopPruner"] = (lambda g: op.NopPruner(), False, "-")
    if knobs:
        for w in (0.1, 0.2, 0.3, 0.5):
            out[f"MedianPruner@warmup={w}"] = (
                lambda g, w=w: op.MedianPruner(n_startup_trials=1, n_warmup_steps=steps(g, w)),
                False, f"warmup={w}")
            out[f"PercentilePruner(25)@warmup={w}"] = (
                lambda g, w=w: op.PercentilePruner(25.0, n_startup_trials=1,
                                                   n_warmup_steps=steps(g, w)),
                False, f"warmup={w}")
        for r in (0.05, 0.2, 0.3):
            out[f"SuccessiveHalvingPruner@min_resource={r}"] = (
                lambda g, r=r: op.SuccessiveHalvingPruner(min_resource=steps(g, r),
                                                          reduction_factor=3),
                False, f"min_resource={r}")
            out[f"HyperbandPruner@min_resource={r}"] = (
                lambda g, r=r: op.HyperbandPruner(min_resource=steps(g, r),
                                                  max_resource=g.trials[0].total_steps,
                                                  reduction_factor=3),
                False, f"min_resource={r}")
        for p in (1, 10, 30):
            out[f"PatientPruner(MedianPruner)@patience={p}"] = (
                lambda g, p=p: op.PatientPruner(op.MedianPruner(n_startup_trials=1),
                                                patience=p),
                False, f"patience={p}")
    return out


def ray_methods(
    curve: Any | None,
    collapse_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Callable[[BenchGroup], Any]]:
    """Name -> scheduler factory per group of the Ray Tune methods. Progress is reported as
    ``t1000`` = 1000 t^ (the schedulers' ``time_attr``), so that one setting fits every
    group."""
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler, MedianStoppingRule

    from hpo.pruning import CollapseScheduler

    ck = dict(collapse_kwargs or {})

    def collapse(g: BenchGroup) -> Any:
        controls = [t.controls for t in g.trials]
        return CollapseScheduler(reference=curve_for(curve, g), time_attr="step",
                                 controls=lambda config: controls[config["trial"]], **ck)

    return {
        "collapse": collapse,
        "ASHAScheduler": lambda g: ASHAScheduler(time_attr="t1000", max_t=1000,
                                                 grace_period=100, reduction_factor=3),
        "HyperBandScheduler": lambda g: HyperBandScheduler(time_attr="t1000", max_t=1000,
                                                           reduction_factor=3),
        "MedianStoppingRule": lambda g: MedianStoppingRule(time_attr="t1000",
                                                           grace_period=100,
                                                           min_samples_required=2),
    }


def _ray_trainable(group: BenchGroup, pause_s: float) -> type:
    """A class trainable replaying the group's trials, one reported point per ``step()``;
    it checkpoints its position so that a paused trial resumes where it stopped."""
    from ray import tune

    data = [(t.steps.tolist(), t.values.tolist(), t.final, t.total_steps) for t in group.trials]

    class Replay(tune.Trainable):
        def setup(self, config: dict[str, Any]) -> None:
            self.idx = int(config["trial"])
            self.k = 0

        def step(self) -> dict[str, Any]:
            steps, values, final, total = data[self.idx]
            k = self.k
            self.k += 1
            if pause_s:
                time.sleep(pause_s)
            done = self.k >= len(steps)
            return {"loss": final if done else values[k], "step": float(steps[k]),
                    "t1000": 1000.0 * steps[k] / total, "trial": self.idx,
                    "done": done}

        def reset_config(self, new_config: dict[str, Any]) -> bool:
            self.setup(new_config)
            return True

        def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
            with open(os.path.join(checkpoint_dir, "k.json"), "w") as f:
                json.dump({"k": self.k}, f)
            return None  # type: ignore[return-value]

        def load_checkpoint(self, checkpoint: Any) -> None:
            path = checkpoint if isinstance(checkpoint, str) else checkpoint.path
            with open(os.path.join(path, "k.json")) as f:
                self.k = int(json.load(f)["k"])

    return Replay


def replay_ray(
    group: BenchGroup, scheduler: Any, mode: str, storage: str, pause_s: float = 0.0
) -> list[TrialOutcome]:
    """Replay a group through one real ``Tuner.fit`` (Ray must be initialised).

    ``lockstep``: all trials at once (each with 1 / n of a CPU; a short ``pause_s`` per report
    keeps them close to lockstep); ``sequential``: ``max_concurrent_trials=1`` in the group's
    order. A trial whose last result is not its last point was stopped.
    """
    from ray import tune
    from ray.tune import Callback

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")
    n = len(group.trials)
    trained: dict[int, float] = {i: 0.0 for i in range(n)}
    last: dict[int, tuple[int, float]] = {}

    class Count(Callback):
        """Steps trained per trial: the furthest step each trial reported."""

        def on_trial_result(self, iteration: int, trials: list, trial: Any,
                            result: dict, **info: Any) -> None:
            i = int(result["trial"])
            trained[i] = max(trained[i], float(result["step"]))
            last[i] = (int(result.get("training_iteration", 0)), float(result["loss"]))

    trainable = tune.with_resources(_ray_trainable(group, pause_s),
                                    {"cpu": 1.0 / n if mode == "lockstep" else 1.0})
    tuner = tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(list(range(n)))},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=scheduler,
            max_concurrent_trials=n if mode == "lockstep" else 1, reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            storage_path=storage, name=f"bench-{abs(hash(group.name))}", verbose=0,
            log_to_file=False, callbacks=[Count()],
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0),
        ),
    )
    tuner.fit()
    outcomes = []
    for i, t in enumerate(group.trials):
        it, value = last.get(i, (0, float("nan")))
        finished = it >= t.steps.size
        outcomes.append(TrialOutcome(not finished, trained[i], t.final if finished else value))
    return outcomes


def run_bench(
    groups: Sequence[BenchGroup],
    curve: Any | None,
    modes: Iterable[str] = MODES,
    collapse_kwargs: Mapping[str, Any] | None = None,
    collapse_variants: Mapping[str, Mapping[str, Any]] | None = None,
    ray: bool = True,
    knobs: bool = True,
    current_best: Sequence[float] = BASELINE_FRACTIONS,
    ray_pause_s: float = 0.01,
    log: Callable[[str], None] | None = None,
    shadow: bool = True,
) -> dict[str, Any]:
    """Every method on every group in every mode; returns the JSON-ready result.

    ``{"modes": {mode: {"methods": {name: summary + {"per_group": [...], "knob": ...}},
    "comparison": compare_to_goal(...)}}, "budget_t0.2": mean budget}``. Ray methods are
    named ``"<name>"`` and our scheduler ``"collapse (ray)"``; ``collapse_variants`` adds
    Optuna collapse entries ``"collapse@<name>"`` with other settings (the aggressiveness
    curve). Per f in ``current_best``: ``"current_best@<f>"`` and, with a ``curve``,
    ``"predicted_best@<f>"`` (:func:`replay_predicted_best`, a ``CollapsePredictor`` on the
    group's curve); both are peers.
    """
    say = log or (lambda s: None)
    modes = list(modes)
    result: dict[str, Any] = {"modes": {m: {"methods": {}} for m in modes}}
    result["budget_t0.2"] = float(np.mean([budget(g) for g in groups])) if groups else None
    result["collapse_threshold"] = float((collapse_kwargs or {}).get("threshold",
                                                                     DEFAULT_THRESHOLD))
    methods = optuna_methods(curve, collapse_kwargs, knobs)
    predictors = None if curve is None else _group_predictors(groups, curve)

    for name, kw in (collapse_variants or {}).items():
        merged = {**(collapse_kwargs or {}), **kw}
        methods[f"collapse@{name}"] = (
            lambda g, merged=merged: collapse_pruner(curve_for(curve, g), **merged), True, name)

    def record(mode: str, name: str, metrics: list[GroupMetrics], knob: str) -> None:
        entry = aggregate(metrics)
        entry["knob"] = knob
        entry["per_group"] = [m.to_dict() for m in metrics]
        result["modes"][mode]["methods"][name] = entry
        say(f"{mode:10s} {name:45s} regret mean {entry['mean_regret']:.4%} "
            f"max {entry['max_regret']:.4%} compute {entry['mean_compute']:.3f} "
            f"best stopped {entry['best_stopped']}/{entry['groups']}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pruners' fail-open warnings, once per replay

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        for mode in modes:
            metrics = [group_metrics(g, replay_oracle(g, 0.2, mode)) for g in groups]
            record(mode, "oracle@0.2", metrics, "f=0.2")
            for f in current_best:
                metrics = [group_metrics(g, replay_current_best(g, f, mode)) for g in groups]
                record(mode, f"current_best@{f:g}", metrics, f"f={f:g}")
            if predictors is not None:
                for f in current_best:
                    metrics = [group_metrics(g, replay_predicted_best(g, f, mode, p))
                               for g, p in zip(groups, predictors, strict=True)]
                    record(mode, f"predicted_best@{f:g}", metrics, f"f={f:g}")
            for name, (factory, describe, knob) in methods.items():
                metrics = [group_metrics(g, replay_optuna(g, factory, mode, describe))
                           for g in groups]
                record(mode, name, metrics, knob)
            if shadow:
                verdicts = [v for g in groups
                            for v in shadow_verdicts(g, curve, mode, collapse_kwargs)]
                thresholds = sorted({DEFAULT_THRESHOLD, *FRONTIER_THRESHOLDS})
                result["modes"][mode]["reliability"] = reliability(verdicts, thresholds)
                say(f"{mode:10s} shadow replay: {len(verdicts)} verdicts")
        if ray and groups:
            _run_ray(groups, curve, modes, collapse_kwargs, ray_pause_s, record)
    for mode in modes:
        block = result["modes"][mode]
        if mode == "sequential" and groups:
            block["floor"] = float(np.mean([sequential_floor(g) for g in groups]))
        block["comparison"] = compare_to_goal(block["methods"], block.get("floor"))
    return result


def _group_predictors(groups: Sequence[BenchGroup], curve: Any) -> list[CollapsePredictor]:
    """One ``CollapsePredictor`` per group on its curve (:func:`curve_for`); groups that share
    a curve share the predictor."""
    made: dict[int, CollapsePredictor] = {}
    out = []
    for g in groups:
        c = curve_for(curve, g)
        if id(c) not in made:
            made[id(c)] = CollapsePredictor(c)
        out.append(made[id(c)])
    return out


def _run_ray(groups: Sequence[BenchGroup], curve: Any, modes: Sequence[str],
             collapse_kwargs: Mapping[str, Any] | None, pause_s: float,
             record: Callable[[str, str, list[GroupMetrics], str], None]) -> None:
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR",
                 log_to_driver=False)
    try:
        factories = ray_methods(curve, collapse_kwargs)
        with tempfile.TemporaryDirectory(prefix="hpo_bench_ray_") as root:
            for mode in modes:
                for name, factory in factories.items():
                    metrics = [group_metrics(g, replay_ray(g, factory(g), mode, root, pause_s))
                               for g in groups]
                    label = "collapse (ray)" if name == "collapse" else name
                    record(mode, label, metrics, "default")
    finally:
        if started:
            ray.shutdown()
