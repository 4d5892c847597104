"""The bench's accounting, pure: compute, regret and whether the best trial was stopped, per method
and group; the sequential floor; the goal and each peer against our rows.

* compute: steps trained / steps of the full sweep; a stopped trial trained up to the step of
  its last report, a finished one all its ``total_steps``;
* the chosen configuration: the best *finished* trial (when every trial was stopped, the one
  with the best last reported value);
* regret: (L_final(chosen) - L_final(best)) / L_final(best), L_final the recorded final loss;
* best stopped: whether the group's true best trial was stopped.

``oracle@0.2`` is a reference, not a method: stopping with the true final losses known at t^ = 0.2
(:func:`hpo.bench.replay_oracle`); in ``sequential`` mode it is the least compute any rule that
keeps the best can spend in that trial order when it judges at t^ = 0.2.

The *sequential floor* (:func:`sequential_floor`) is a bound, not a replay: in ``sequential``
mode a rule decides on a trial from that trial and the ones before it, so it must finish every
trial that is better than all earlier ones by more than the allowed regret (a sweep could end
with it). Those trials' steps over the sweep's are the least compute of any such rule with that
max regret; where the floor exceeds the budget, no method meets the goal in that order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpo.bench.data import BenchGroup

__all__ = [
    "TrialOutcome", "GroupMetrics", "group_metrics", "aggregate", "sequential_floor",
    "compare_to_goal", "MODES", "GOAL_ORACLE_FACTOR", "GOAL_MAX_REGRET", "RAY_METHODS",
    "base_name", "is_ours",
]


MODES = ("lockstep", "sequential")
# the goal, per launch mode: compute at most this many times what the oracle that stops every
# loser at t^ 0.2 spends in that mode, at max regret at most GOAL_MAX_REGRET (a fraction)
GOAL_ORACLE_FACTOR = 1.2
GOAL_MAX_REGRET = 0.002


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


def aggregate(metrics: Sequence[GroupMetrics]) -> dict[str, Any]:
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


RAY_METHODS = ("ASHAScheduler", "HyperBandScheduler", "MedianStoppingRule", "collapse (ray)")

def base_name(name: str) -> str:
    return name.split("@", 1)[0]


def is_ours(name: str) -> bool:
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
    ours = sorted((n for n in rows if is_ours(n)), key=lambda n: rows[n]["mean_compute"])
    oracle = rows.get("oracle@0.2")
    budget_f = None if oracle is None else GOAL_ORACLE_FACTOR * oracle["mean_compute"]

    def within(m: Mapping[str, Any], mean_regret: float, max_regret: float,
               compute: float) -> bool:
        return (m["mean_regret"] <= mean_regret + 1e-12 and m["max_regret"] <= max_regret + 1e-12
                and m["mean_compute"] <= compute + 1e-12)

    def affordable(m: Mapping[str, Any]) -> bool:
        return budget_f is not None and m["mean_compute"] <= budget_f + 1e-12 and (
            m["max_regret"] <= GOAL_MAX_REGRET + 1e-12)

    peer_names = [n for n in rows if not is_ours(n) and not n.startswith("oracle")]
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
