"""``hpo bench``: replay recorded sweeps through real pruners and schedulers, side by side.

Each run of a group is one trial of that group's sweep; a trial reports its recorded training
loss point by point (``trial.report(loss, step)`` / ``tune.report``) and stopping it stops its
replay. A trial that runs to the end returns the run's final loss (the smoothed end of its
curve, :func:`predictors.final_loss_estimate`).

Two launch modes:

* ``lockstep``: the sweep launched at once; every trial reports its k-th point before any
  reports its (k+1)-th.
* ``sequential``: one trial after another in a fixed order (``study.optimize(n_jobs=1)``).

Accounting (pure, :func:`group_metrics`), per method and group:

* compute: steps trained / steps of the full sweep; a stopped trial trained up to the step of
  its last report, a finished one all its ``total_steps``;
* the chosen configuration: the best *finished* trial (when every trial was stopped, the one
  with the best last reported value);
* regret: (L_final(chosen) - L_final(best)) / L_final(best), L_final the recorded final loss;
* best stopped: whether the group's true best trial was stopped.

``oracle@0.2`` is a reference, not a method: stopping with the true final losses known at
t^ = 0.2 (:func:`replay_oracle`); in ``sequential`` mode it is the least compute any rule that
keeps the best can spend in that trial order when it judges at t^ = 0.2.

The *sequential floor* (:func:`sequential_floor`) is a bound, not a replay: in ``sequential``
mode a rule decides on a trial from that trial and the ones before it, so it must finish every
trial that is better than all earlier ones by more than the allowed regret (a sweep could end
with it). Those trials' steps over the sweep's are the least compute of any such rule with that
max regret; where the floor exceeds the budget, no method meets the goal in that order.

Optuna and the "current best" baseline replay in-process (ask/tell with the real pruner
objects); Ray Tune methods run real ``Tuner.fit`` calls (one per group, class trainables that
checkpoint their position so HyperBand can pause and resume them).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "BenchTrial",
    "BenchGroup",
    "TrialOutcome",
    "GroupMetrics",
    "MODES",
    "group_metrics",
    "summarize",
    "load_groups",
    "resample_groups",
    "fit_proxy_curves",
    "curve_for",
    "collapse_knobs",
    "replay_optuna",
    "replay_current_best",
    "replay_oracle",
    "sequential_floor",
    "replay_ray",
    "optuna_methods",
    "ray_methods",
    "run_bench",
    "GOAL_ORACLE_FACTOR",
    "GOAL_MAX_REGRET",
    "compare_to_goal",
    "format_table",
    "format_explanations",
    "plot_tradeoff",
]

MODES = ("lockstep", "sequential")
# the goal, per launch mode: compute at most this many times what the oracle that stops every
# loser at t^ 0.2 spends in that mode, at max regret at most GOAL_MAX_REGRET (a fraction)
GOAL_ORACLE_FACTOR = 1.2
GOAL_MAX_REGRET = 0.002


# --------------------------------------------------------------------------- data
@dataclass(frozen=True)
class BenchTrial:
    """One recorded run replayed as a trial: the points it reports and its final loss."""

    run_id: str
    steps: np.ndarray  # reported optimizer steps, increasing, all <= total_steps
    values: np.ndarray  # reported losses
    final: float  # the run's final loss (what a finished trial returns)
    total_steps: int
    controls: Any = None  # predictors.Controls (for the collapse methods)
    config: Mapping[str, Any] = field(default_factory=dict)  # hyperparameters, for display


@dataclass(frozen=True)
class BenchGroup:
    """A sweep: trials that compete for one best configuration, in launch order."""

    name: str
    trials: tuple[BenchTrial, ...]
    # the optimizer family (the curve format's ``optimizer`` where a file mixes several; ""
    # otherwise): its proxies give the group's universal curve
    family: str = ""

    @property
    def best(self) -> int:
        """Index of the trial with the lowest final loss."""
        return int(np.argmin([t.final for t in self.trials]))


@dataclass(frozen=True)
class TrialOutcome:
    """What a method did to one trial: stopped or not, and how many steps it trained."""

    stopped: bool
    steps_trained: float
    last_value: float = float("nan")
    # the pruner's latest verdict on the trial in one sentence (collapse methods; else "")
    reason: str = ""


@dataclass(frozen=True)
class GroupMetrics:
    """One method on one group (see the module docstring for the definitions)."""

    group: str
    compute: float
    regret: float
    best_stopped: bool
    chosen: int
    n_stopped: int
    n_trials: int
    # per trial: the pruner's latest verdict (collapse methods), for ``hpo bench --explain``
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "compute": self.compute,
            "regret": self.regret,
            "best_stopped": self.best_stopped,
            "chosen": self.chosen,
            "n_stopped": self.n_stopped,
            "n_trials": self.n_trials,
            **({"reasons": list(self.reasons)} if any(self.reasons) else {}),
        }


def group_metrics(group: BenchGroup, outcomes: Sequence[TrialOutcome]) -> GroupMetrics:
    """Compute used, regret of the chosen trial and whether the true best was stopped.

    ``outcomes[i]`` belongs to ``group.trials[i]``. A finished trial counts all its
    ``total_steps``; a stopped one ``steps_trained`` (clipped to ``[0, total_steps]``).
    """
    if len(outcomes) != len(group.trials):
        raise ValueError(
            f"one outcome per trial: {len(group.trials)} trials, but got {len(outcomes)}"
        )
    used = 0.0
    total = 0.0
    for trial, out in zip(group.trials, outcomes, strict=True):
        total += trial.total_steps
        used += min(max(out.steps_trained, 0.0), trial.total_steps) if out.stopped else (
            trial.total_steps
        )
    finals = np.array([t.final for t in group.trials], dtype=float)
    finished = [i for i, o in enumerate(outcomes) if not o.stopped]
    if finished:
        chosen = min(finished, key=lambda i: finals[i])
    else:  # every trial stopped: the best last reported value is the pick
        last = [o.last_value if math.isfinite(o.last_value) else math.inf for o in outcomes]
        chosen = int(np.argmin(last))
    best = group.best
    return GroupMetrics(
        group=group.name,
        compute=used / total if total > 0 else float("nan"),
        regret=float((finals[chosen] - finals[best]) / finals[best]),
        best_stopped=bool(outcomes[best].stopped),
        chosen=int(chosen),
        n_stopped=int(sum(o.stopped for o in outcomes)),
        n_trials=len(outcomes),
        reasons=tuple(o.reason for o in outcomes),
    )


def summarize(metrics: Sequence[GroupMetrics]) -> dict[str, Any]:
    """Mean and max regret, mean compute, groups whose best was stopped, number of groups."""
    if not metrics:
        return {"mean_regret": None, "max_regret": None, "mean_compute": None,
                "best_stopped": 0, "groups": 0}
    regrets = np.array([m.regret for m in metrics], dtype=float)
    return {
        "mean_regret": float(regrets.mean()),
        "max_regret": float(regrets.max()),
        "mean_compute": float(np.mean([m.compute for m in metrics])),
        "best_stopped": int(sum(m.best_stopped for m in metrics)),
        "groups": len(metrics),
    }


def budget(group: BenchGroup, f: float = 0.2) -> float:
    """Compute of stopping every losing trial at t^ = f: (1 + f (n - 1)) / n of the sweep
    (for trials of equal length; otherwise the best runs fully, the others to f)."""
    total = sum(t.total_steps for t in group.trials)
    best = group.best
    used = sum(
        t.total_steps if i == best else f * t.total_steps for i, t in enumerate(group.trials)
    )
    return used / total


def _subsample(steps: np.ndarray, values: np.ndarray, total: int, max_points: int,
               keep: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points, evenly spaced in index, always keeping the last point
    and the first point at or after each fraction in ``keep``."""
    n = steps.size
    if n <= max_points:
        return steps, values
    idx = set(np.unique(np.linspace(0, n - 1, max_points).round().astype(int)).tolist())
    for f in keep:
        j = int(np.searchsorted(steps, f * total - 1e-9))
        if j < n:
            idx.add(j)
    sel = np.array(sorted(idx))
    return steps[sel], values[sel]


def load_groups(
    frame: Any,
    group_cols: Sequence[str] = ("group",),
    proxy_max_params: float | None = None,
    min_trials: int = 2,
    max_points: int = 400,
    keep_fractions: Sequence[float] = (0.1, 0.2, 0.3),
    order: str = "file",
    split: str = "train",
    max_groups: int | None = None,
    seed: int = 0,
) -> list[BenchGroup]:
    """The target sweeps of a curve-format frame: runs with ``n_params > proxy_max_params``,
    grouped by ``group_cols`` (groups of fewer than ``min_trials`` runs dropped), the ``split``
    rows (``train`` or ``val``), complete runs only (a run whose last point is before 90% of
    its steps is left out). Where the ``optimizer`` column names several optimizers, each
    group carries its family (:attr:`BenchGroup.family`). ``max_groups``: a random sample of
    that many groups (drawn with ``seed``, kept in file order).

    ``order``: trials in file order (``file``), ascending or descending ``peak_lr`` (``lr``,
    ``reverse``).
    """
    from predictors.io import runs_from_frame
    from predictors.normalize import final_loss_estimate

    df = frame
    missing = [c for c in group_cols if c not in df.columns]
    if missing:
        raise ValueError(f"group column(s) not in the curves: {', '.join(missing)}")
    if proxy_max_params is not None:
        df = df[df["n_params"] > proxy_max_params]
    keys = df[list(group_cols)].astype(str).agg(":".join, axis=1)
    df = df.assign(_bench_group=keys)
    if order not in ("file", "lr", "reverse"):
        raise ValueError(f"order must be file, lr or reverse, but got {order=}")
    groups: dict[str, list[BenchTrial]] = {}
    families: dict[str, str] = {}
    mixed = _mixed_optimizers(frame)
    for run in runs_from_frame(df, split=split, min_points=3):
        total = int(run.controls.total_steps)
        if run.steps[-1] < 0.9 * total:
            continue
        final = float(final_loss_estimate(run.t_hat, run.losses, at=1.0))
        steps, values = _subsample(run.steps, run.losses, total, max_points, keep_fractions)
        row = df.loc[df["run_id"] == run.run_id].iloc[0]
        name = str(row["_bench_group"])
        family = _family_of(row, mixed)
        cfg = {"peak_lr": run.controls.peak_lr, "tau": run.controls.tau,
               "schedule": run.controls.schedule}
        groups.setdefault(name, []).append(
            BenchTrial(run.run_id, steps.astype(float), values.astype(float), final, total,
                       run.controls, cfg)
        )
        families[name] = family
    out = []
    for name, trials in groups.items():
        if len(trials) < min_trials:
            continue
        if order == "lr":
            trials.sort(key=lambda t: (t.controls.peak_lr or 0.0, t.run_id))
        elif order == "reverse":
            trials.sort(key=lambda t: (-(t.controls.peak_lr or 0.0), t.run_id))
        out.append(BenchGroup(name, tuple(trials), families[name]))
    if max_groups is not None and len(out) > max_groups:
        rng = np.random.default_rng(seed)
        keep = sorted(rng.choice(len(out), size=max_groups, replace=False).tolist())
        out = [out[i] for i in keep]
    return out


def _mixed_optimizers(frame: Any) -> bool:
    """Whether the frame's ``optimizer`` column names several optimizers (each a family)."""
    return "optimizer" in frame.columns and frame["optimizer"].nunique(dropna=True) > 1


def _family_of(row: Any, mixed: bool) -> str:
    """The optimizer family of one row ("" when the file has one family)."""
    if not mixed:
        return ""
    value = row.get("optimizer")
    return "?" if value is None or value != value else str(value)


def resample_groups(
    groups: Sequence[BenchGroup], per_group: int, min_size: int = 3, seed: int = 0,
) -> list[BenchGroup]:
    """Sub-sweeps of each group: ``per_group`` distinct draws of a random subset of its trials
    (of a size drawn uniformly from ``min_size`` to all of them) in a random launch order.

    A recorded sweep gives one group, and a method's zero regret on one or two groups says
    little; every sub-sweep is a sweep a user could have launched, with its own best trial and
    order, so the regret and compute over many of them show how often a method keeps the best
    and what it spends. Names are ``"<group>~<j>"``; the draws depend only on ``seed`` and
    the groups. A group with fewer than ``min_size`` trials is drawn whole, in random orders;
    fewer distinct draws than ``per_group`` are returned when the group has fewer.
    """
    if per_group < 1:
        raise ValueError(f"per_group must be >= 1, but got {per_group=}")
    if min_size < 2:
        raise ValueError(f"min_size must be >= 2, but got {min_size=}")
    rng = np.random.default_rng(seed)
    out: list[BenchGroup] = []
    for g in groups:
        n = len(g.trials)
        smallest = min(min_size, n)
        seen: set[tuple[int, ...]] = set()
        for _ in range(50 * per_group):
            if len(seen) >= per_group:
                break
            size = int(rng.integers(smallest, n + 1))
            pick = tuple(int(i) for i in rng.permutation(n)[:size])
            if pick in seen:
                continue
            seen.add(pick)
            out.append(BenchGroup(f"{g.name}~{len(seen)}", tuple(g.trials[i] for i in pick),
                                  g.family))
    return out


def fit_proxy_curves(
    frame: Any, proxy_max_params: float, split: str = "train",
    families: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The universal curve of each optimizer family (``""`` for a file of one family), fitted
    on that family's proxies only (runs with ``n_params <= P``) on their ``split`` rows.
    ``families``: only these (the groups' families); a family without proxies raises."""
    from predictors.curves import fit_universal_curve
    from predictors.io import runs_from_frame

    proxies = frame[frame["n_params"] <= proxy_max_params]
    if proxies.empty:
        raise ValueError(f"no proxy run with n_params <= {proxy_max_params:g}")
    mixed = _mixed_optimizers(frame)
    wanted = sorted(set(families)) if families is not None else (
        sorted(proxies["optimizer"].fillna("?").astype(str).unique()) if mixed else [""])
    out = {}
    for family in wanted:
        part = proxies
        if mixed:
            part = proxies[proxies["optimizer"].fillna("?").astype(str) == family]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = runs_from_frame(part, split=split) if not part.empty else []
            if not runs:
                name = f"family {family!r}: " if family else ""
                raise ValueError(f"{name}no proxy run with n_params <= {proxy_max_params:g} "
                                 f"and {split!r} rows")
            out[family] = fit_universal_curve(runs)
    return out


def curve_for(curves: Mapping[str, Any] | Any | None, group: BenchGroup) -> Any | None:
    """The universal curve a group's collapse methods use: its family's from
    :func:`fit_proxy_curves`' map (a single curve, or ``None``, serves every group)."""
    if isinstance(curves, Mapping):
        return curves[group.family]
    return curves


# --------------------------------------------------------------------------- Optuna
def collapse_knobs() -> dict[str, dict[str, Any]]:
    """The aggressiveness sweep and the ablations of ``collapse``: name -> ``CollapsePruner``
    keyword overrides, and under ``"judge"`` attributes of its :class:`hpo.pruning.Judge`.

    ``threshold T``: the one knob; ``independent``: the within-sweep error correlation off
    (rho = 0); ``no re-judging``: judged only when a checkpoint is crossed."""
    variants: dict[str, dict[str, Any]] = {
        f"threshold {t:g}": {"threshold": t} for t in (0.005, 0.01, 0.02, 0.1, 0.2)}
    variants["independent"] = {"judge": {"correlated": False}}
    variants["no re-judging"] = {"judge": {"stale_after": 0.0}}
    return variants


def collapse_pruner(curve: Any, **kwargs: Any) -> Any:
    """A ``CollapsePruner`` on ``curve`` with ``kwargs`` (a :func:`collapse_knobs` entry)."""
    from hpo.pruning._optuna import CollapsePruner

    overrides = dict(kwargs.pop("judge", {}))
    pruner = CollapsePruner(reference=curve, **kwargs)
    for name, value in overrides.items():
        setattr(pruner.judge, name, value)
    return pruner


def replay_optuna(
    group: BenchGroup, make_pruner: Callable[[BenchGroup], Any], mode: str,
    describe: bool = False,
) -> list[TrialOutcome]:
    """Replay a group through a real Optuna study (in-memory storage, ask/tell).

    ``describe``: call :func:`hpo.describe_trial` with each run's controls (the collapse
    pruner needs them). Returns one outcome per trial, in the group's order.
    """
    import optuna

    from hpo.pruning._optuna import REASON_ATTR, describe_trial

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")
    study = optuna.create_study(direction="minimize", pruner=make_pruner(group))
    n = len(group.trials)
    outcomes: list[TrialOutcome | None] = [None] * n

    def start(i: int) -> Any:
        trial = study.ask()
        trial.set_user_attr("bench_trial", i)
        if describe:
            describe_trial(trial, total_steps=group.trials[i].total_steps,
                           controls=group.trials[i].controls)
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


def replay_current_best(group: BenchGroup, f: float, mode: str) -> list[TrialOutcome]:
    """The paper's baseline: at t^ = f keep only the trial whose current loss is lowest.

    The current loss is the mean of the reported values in t^ in [0.9 f, f]. ``lockstep``:
    all trials are compared at f and all but the lowest stopped there. ``sequential``: a trial
    reaching f is stopped when its current loss is worse than the best current loss at f of
    the earlier trials that were not stopped.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, but got {mode=}")

    def at_f(t: BenchTrial) -> tuple[float, float]:
        th = t.steps / t.total_steps
        k = int(np.searchsorted(th, f - 1e-12))
        k = min(k, th.size - 1)
        win = (th >= 0.9 * f) & (th <= th[k] + 1e-12)
        cur = float(np.mean(t.values[win])) if win.any() else float(t.values[k])
        return cur, float(t.steps[k])

    cur = [at_f(t) for t in group.trials]
    outcomes = []
    if mode == "lockstep":
        keep = int(np.argmin([c for c, _ in cur]))
        for i, t in enumerate(group.trials):
            outcomes.append(TrialOutcome(False, t.total_steps, t.final) if i == keep
                            else TrialOutcome(True, cur[i][1], cur[i][0]))
        return outcomes
    best = math.inf
    for i, t in enumerate(group.trials):
        c, s = cur[i]
        if c > best:
            outcomes.append(TrialOutcome(True, s, c))
        else:
            best = c
            outcomes.append(TrialOutcome(False, t.total_steps, t.final))
    return outcomes


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


def sequential_floor(group: BenchGroup, slack: float = GOAL_MAX_REGRET) -> float:
    """The least compute (fraction of the sweep's steps) of any rule that judges the trials
    one by one in ``group``'s order and keeps the regret of every prefix of the sweep at most
    ``slack``.

    Trial k must finish when its final loss is lower than every earlier trial's by more than
    ``slack`` (``L_k (1 + slack) < min_{j<k} L_j``; the first trial always): the rule decides
    on it before any later trial has run, so it decides as it would on the sweep that ends with
    trial k, where stopping it leaves only earlier trials to choose from and a regret above
    ``slack``. The bound counts only those trials, each in full, and nothing for the others.
    """
    if slack < 0 or not math.isfinite(slack):
        raise ValueError(f"slack must be a finite number >= 0, but got {slack=}")
    total = sum(t.total_steps for t in group.trials)
    used, best = 0.0, math.inf
    for t in group.trials:
        if t.final * (1.0 + slack) < best:
            used += t.total_steps
        best = min(best, t.final)
    return used / total if total > 0 else float("nan")


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
    import optuna.pruners as op


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


# --------------------------------------------------------------------------- Ray Tune
def ray_methods(
    curve: Any | None,
    collapse_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Callable[[BenchGroup], Any]]:
    """Name -> scheduler factory per group of the Ray Tune methods. Progress is reported as
    ``t1000`` = 1000 t^ (the schedulers' ``time_attr``), so that one setting fits every
    group."""
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler, MedianStoppingRule

    from hpo.pruning._ray import CollapseScheduler

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
    import json
    import os
    import time

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


# --------------------------------------------------------------------------- the bench
def run_bench(
    groups: Sequence[BenchGroup],
    curve: Any | None,
    modes: Iterable[str] = MODES,
    collapse_kwargs: Mapping[str, Any] | None = None,
    collapse_variants: Mapping[str, Mapping[str, Any]] | None = None,
    ray: bool = True,
    knobs: bool = True,
    current_best: Sequence[float] = (0.1, 0.2, 0.3),
    ray_pause_s: float = 0.01,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every method on every group in every mode; returns the JSON-ready result.

    ``{"modes": {mode: {"methods": {name: summary + {"per_group": [...], "knob": ...}},
    "comparison": compare_to_goal(...)}}, "budget_t0.2": mean budget}``. Ray methods are
    named ``"<name>"`` and our scheduler ``"collapse (ray)"``; ``collapse_variants`` adds
    Optuna collapse entries ``"collapse@<name>"`` with other settings (the aggressiveness
    curve).
    """
    say = log or (lambda s: None)
    modes = list(modes)
    result: dict[str, Any] = {"modes": {m: {"methods": {}} for m in modes}}
    result["budget_t0.2"] = float(np.mean([budget(g) for g in groups])) if groups else None
    methods = optuna_methods(curve, collapse_kwargs, knobs)

    for name, kw in (collapse_variants or {}).items():
        merged = {**(collapse_kwargs or {}), **kw}
        methods[f"collapse@{name}"] = (
            lambda g, merged=merged: collapse_pruner(curve_for(curve, g), **merged), True, name)

    def record(mode: str, name: str, metrics: list[GroupMetrics], knob: str) -> None:
        entry = summarize(metrics)
        entry["knob"] = knob
        entry["per_group"] = [m.to_dict() for m in metrics]
        result["modes"][mode]["methods"][name] = entry
        say(f"{mode:10s} {name:45s} regret mean {entry['mean_regret']:.4%} "
            f"max {entry['max_regret']:.4%} compute {entry['mean_compute']:.3f} "
            f"best stopped {entry['best_stopped']}/{entry['groups']}")

    hpo_log = logging.getLogger("hpo")
    level = hpo_log.level
    hpo_log.setLevel(logging.ERROR)  # the pruners' fail-open warnings, once per replay
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        for mode in modes:
            metrics = [group_metrics(g, replay_oracle(g, 0.2, mode)) for g in groups]
            record(mode, "oracle@0.2", metrics, "f=0.2")
            for f in current_best:
                metrics = [group_metrics(g, replay_current_best(g, f, mode)) for g in groups]
                record(mode, f"current_best@{f:g}", metrics, f"f={f:g}")
            for name, (factory, describe, knob) in methods.items():
                metrics = [group_metrics(g, replay_optuna(g, factory, mode, describe))
                           for g in groups]
                record(mode, name, metrics, knob)
        if ray and groups:
            _run_ray(groups, curve, modes, collapse_kwargs, ray_pause_s, record)
    hpo_log.setLevel(level)
    for mode in modes:
        block = result["modes"][mode]
        if mode == "sequential" and groups:
            block["floor"] = float(np.mean([sequential_floor(g) for g in groups]))
        block["comparison"] = compare_to_goal(block["methods"], block.get("floor"))
    return result


def _run_ray(groups: Sequence[BenchGroup], curve: Any, modes: Sequence[str],
             collapse_kwargs: Mapping[str, Any] | None, pause_s: float,
             record: Callable[[str, str, list[GroupMetrics], str], None]) -> None:
    import os
    import tempfile

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


# --------------------------------------------------------------------------- output
_RAY_NAMES = ("ASHAScheduler", "HyperBandScheduler", "MedianStoppingRule", "collapse (ray)")

def _base(name: str) -> str:
    return name.split("@", 1)[0]


def _ours(name: str) -> bool:
    return name.startswith("collapse")


def compare_to_goal(methods: Mapping[str, Mapping[str, Any]],
                    floor: float | None = None) -> dict[str, Any]:
    """The goal of one mode's ``methods``, and each peer against our rows.

    The goal (``goal``): the default ``collapse`` row spends at most
    :data:`GOAL_ORACLE_FACTOR` times what ``oracle@0.2`` spends in this mode (``budget``), with
    max regret at most :data:`GOAL_MAX_REGRET`, and every peer that spends no more has a
    higher mean regret (``beaten_by``: the peers that do not, cheapest first). ``met``
    holds for all three; ``met_by`` lists our rows (the default and the knob settings) that
    meet the first two. ``floor``: the mode's least compute for any rule that keeps regret
    within the bound (:func:`sequential_floor`), with ``attainable``.

    ``peers``: for each other method (not the ``oracle``), the cheapest of our rows with no
    higher mean and max regret at no more compute (``matched_by``; ``None``: the peer wins at
    its compute). Rows with no group are ignored.
    """
    rows = {n: m for n, m in methods.items() if m.get("groups")}
    ours = sorted((n for n in rows if _ours(n)), key=lambda n: rows[n]["mean_compute"])
    oracle = rows.get("oracle@0.2")
    budget_f = None if oracle is None else GOAL_ORACLE_FACTOR * oracle["mean_compute"]

    def within(m: Mapping[str, Any], mean_regret: float, max_regret: float,
               compute: float) -> bool:
        return (m["mean_regret"] <= mean_regret + 1e-12 and m["max_regret"] <= max_regret + 1e-12
                and m["mean_compute"] <= compute + 1e-12)

    def affordable(m: Mapping[str, Any]) -> bool:
        return budget_f is not None and m["mean_compute"] <= budget_f + 1e-12 and (
            m["max_regret"] <= GOAL_MAX_REGRET + 1e-12)

    peer_names = [n for n in rows if not _ours(n) and not n.startswith("oracle")]
    default = rows.get("collapse")
    beaten_by = [] if default is None else sorted(
        (n for n in peer_names if rows[n]["mean_compute"] <= default["mean_compute"] + 1e-12
         and rows[n]["mean_regret"] <= default["mean_regret"] + 1e-12),
        key=lambda n: rows[n]["mean_compute"])
    goal = {
        "budget": budget_f, "oracle": None if oracle is None else oracle["mean_compute"],
        "factor": GOAL_ORACLE_FACTOR, "max_regret": GOAL_MAX_REGRET,
        "compute": None if default is None else default["mean_compute"],
        "beaten_by": beaten_by,
        "met": default is not None and affordable(default) and not beaten_by,
        "met_by": [n for n in ours if affordable(rows[n])],
        "floor": floor,
        "attainable": None if floor is None or budget_f is None else floor <= budget_f + 1e-12,
    }
    peers: dict[str, dict[str, Any]] = {}
    for name in peer_names:
        m = rows[name]
        match = next((n for n in ours if within(rows[n], m["mean_regret"], m["max_regret"],
                                                m["mean_compute"])), None)
        peers[name] = {"mean_compute": m["mean_compute"], "mean_regret": m["mean_regret"],
                       "max_regret": m["max_regret"], "matched_by": match,
                       "matched_compute": None if match is None else rows[match]["mean_compute"]}
    return {"goal": goal, "peers": peers}


def format_table(result: Mapping[str, Any], knobs: bool = False) -> str:
    """The per-mode table: method, mean and max regret (%), mean compute, best stopped."""
    lines = []
    for mode, block in result["modes"].items():
        oracle = block["methods"].get("oracle@0.2")
        lines.append(f"\n[{mode}]" + (f"  oracle@0.2 (every loser stopped at t^ 0.2) spends "
                                       f"{oracle['mean_compute']:.3f}" if oracle else ""))
        header = (f"{'method':<46} {'mean regret':>11} {'max regret':>10} {'compute':>8} "
                  f"{'best stopped':>12}")
        lines.append(header)
        lines.append("-" * len(header))
        for name, m in block["methods"].items():
            if not knobs and "@" in name and not name.startswith(("current_best", "oracle")):
                continue
            if m["groups"] == 0:
                continue
            lines.append(
                f"{name:<46} {m['mean_regret']:>10.3%} {m['max_regret']:>10.3%} "
                f"{m['mean_compute']:>8.3f} {m['best_stopped']:>6}/{m['groups']:<5}"
            )
        lines += _comparison_lines(block.get("comparison")
                                   or compare_to_goal(block["methods"], block.get("floor")))
    return "\n".join(lines)


def format_explanations(result: Mapping[str, Any], groups: Sequence[BenchGroup]) -> str:
    """Every stop of the default ``collapse`` row, one line per stopped trial with the
    pruner's sentence, per mode and group (``hpo bench --explain``)."""
    names = {g.name: g for g in groups}
    lines = []
    for mode, block in result["modes"].items():
        entry = block["methods"].get("collapse")
        if entry is None:
            continue
        lines.append(f"[{mode}] collapse stops:")
        for row in entry["per_group"]:
            g = names.get(row["group"])
            for i, why in enumerate(row.get("reasons", [])):
                if why.startswith("stopped"):
                    best = " (the group's best)" if g is not None and i == g.best else ""
                    run = g.trials[i].run_id if g is not None else i
                    lines.append(f"  {row['group']} trial {i} ({run}){best}: {why}")
    return "\n".join(lines)


def _comparison_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The goal line and the peers no row of ours matches, as printed under a mode's table."""
    goal = comparison["goal"]
    if goal["budget"] is None:
        return []
    out = []
    if goal["compute"] is not None:
        beaten = ", ".join(goal["beaten_by"]) or "none"
        ratio = goal["compute"] / goal["oracle"] if goal["oracle"] else float("nan")
        out.append(
            f"goal (compute <= {goal['factor']:g} x oracle@0.2 = {goal['budget']:.3f} at max "
            f"regret <= {goal['max_regret']:.1%}, every peer spending no more has higher mean "
            f"regret): {'met' if goal['met'] else 'not met'}; default spends "
            f"{goal['compute']:.3f} ({ratio:.2f} x oracle); peers spending no more at no "
            f"higher mean regret: {beaten}; our rows within the budget and regret: "
            f"{', '.join(goal['met_by']) or 'none'}")
    if goal.get("floor") is not None:
        verdict = ("within the budget" if goal.get("attainable")
                   else "above the budget: no method can meet the goal in this order")
        out.append(f"sequential floor {goal['floor']:.3f} (trials better than every earlier "
                   f"one by more than {goal['max_regret']:.1%} must finish): {verdict}")
    lost = [(n, p) for n, p in comparison["peers"].items() if p["matched_by"] is None]
    lost.sort(key=lambda x: x[1]["mean_compute"])
    out.append("peers no collapse row matches (as low mean and max regret at no more compute): "
               + (", ".join(f"{n} ({p['mean_compute']:.3f}, {p['mean_regret']:.3%} / "
                            f"{p['max_regret']:.3%})" for n, p in lost) or "none"))
    return out


def plot_tradeoff(result: Mapping[str, Any], path: str) -> None:
    """Mean regret against mean compute, one line per method over its knob, one panel per
    mode; the t^ = 0.2 budget as a vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(result["modes"])
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        families: dict[str, list[tuple[float, float]]] = {}
        for name, m in result["modes"][mode]["methods"].items():
            if m["groups"] == 0:
                continue
            fam = _base(name)
            families.setdefault(fam, []).append((m["mean_compute"], 100 * m["mean_regret"]))
        colors = plt.get_cmap("tab20").colors
        for k, (fam, pts) in enumerate(sorted(families.items())):
            pts.sort()
            xs, ys = zip(*pts, strict=True)
            ours = fam.startswith("collapse")
            style = "o-" if ours else ("s:" if fam in _RAY_NAMES else ".--")
            if fam == "oracle":
                style = "*"
            ax.plot(xs, ys, style, label=fam, lw=2.5 if ours else 1,
                    color="k" if fam == "collapse" else colors[k % len(colors)])
        if result.get("budget_t0.2") is not None:
            ax.axvline(result["budget_t0.2"], color="k", lw=0.8, ls=":",
                       label="budget: losers stopped at t^=0.2")
        ax.set_xlabel("mean compute (fraction of the full sweep)")
        ax.set_ylabel("mean regret (%)")
        ax.set_yscale("symlog", linthresh=0.05)
        ax.set_ylim(bottom=-0.002)
        ax.set_title(mode)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
