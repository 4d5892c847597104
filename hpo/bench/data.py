"""The recorded sweeps the bench replays: groups of runs, their resampled reports, and the
universal curves fitted on each source's proxies.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hpo.predictors import fit_universal_curve
from hpo.predictors.io import runs_from_frame
from hpo.predictors.normalize import final_loss_estimate

__all__ = [
    "BenchTrial", "BenchGroup", "budget", "load_groups", "resample_groups", "fit_proxy_curves",
    "curve_for", "family_key", "FAMILY_COLUMNS",
]

#: the curve-format columns that split a file into families, each fitted on its own proxies:
#: a study (several studies collected into one file) and an optimizer
FAMILY_COLUMNS = ("study", "optimizer")


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
    # the family (:func:`family_key`; "" for a file of one family): its proxies give the
    # group's universal curve
    family: str = ""

    @property
    def best(self) -> int:
        """Index of the trial with the lowest final loss."""
        return int(np.argmin([t.final for t in self.trials]))


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
    its steps is left out). Each group carries its family (:func:`family_key`,
    :attr:`BenchGroup.family`). ``max_groups``: a random sample of
    that many groups (drawn with ``seed``, kept in file order).

    ``order``: trials in file order (``file``), ascending or descending ``peak_lr`` (``lr``,
    ``reverse``). A run's final is its smoothed end carried to ``total_steps``
    (:func:`hpo.predictors.final_loss_estimate`); where that carry leaves the positive losses,
    the smoothed end at its last point. The runs left out for ending early are warned about,
    once, with their count.
    """
    df = frame.assign(_bench_family=family_key(frame).to_numpy())
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
    short: list[str] = []
    for run in runs_from_frame(df, split=split, min_points=3):
        total = int(run.controls.total_steps)
        if run.steps[-1] < 0.9 * total:
            short.append(f"{run.run_id} (last step {run.steps[-1]:g} of {total})")
            continue
        final = float(final_loss_estimate(run.t_hat, run.losses, at=1.0))
        if not final > 0:  # the tail's fit, carried to the planned end, left the positives
            final = float(final_loss_estimate(run.t_hat, run.losses))
            if not final > 0:
                final = float(np.median(run.losses[-3:]))
        steps, values = _subsample(run.steps, run.losses, total, max_points, keep_fractions)
        row = df.loc[df["run_id"] == run.run_id].iloc[0]
        name = str(row["_bench_group"])
        family = str(row["_bench_family"])
        cfg = {"peak_lr": run.controls.peak_lr, "tau": run.controls.tau,
               "schedule": run.controls.schedule}
        groups.setdefault(name, []).append(
            BenchTrial(run.run_id, steps.astype(float), values.astype(float), final, total,
                       run.controls, cfg)
        )
        families[name] = family
    unread = sorted({f"{t.controls.schedule!r}" for ts in groups.values() for t in ts
                     if not t.controls.has_schedule})
    if unread:
        n = sum(not t.controls.has_schedule for ts in groups.values() for t in ts)
        warnings.warn(f"{n} run(s) have a schedule the curve format cannot read "
                      f"({', '.join(unread[:3])}) and no lr column: the collapse methods "
                      "replay them without controls, judged on the same-step evidence "
                      "alone", UserWarning, stacklevel=2)
    if short:
        warnings.warn(f"{len(short)} run(s) end before 90% of their total_steps and are left "
                      f"out (incomplete runs have no final to compare): {short[0]}"
                      + (f" and {len(short) - 1} more" if len(short) > 1 else ""),
                      UserWarning, stacklevel=2)
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


def family_key(frame: Any) -> Any:
    """Each row's family, as a string Series on the frame's index: the values of the
    :data:`FAMILY_COLUMNS` that name more than one value in ``frame``, joined by ``"/"`` ("?"
    for a missing value); ``""`` on every row where none does (a file of one family)."""
    parts = [frame[c].fillna("?").astype(str) for c in FAMILY_COLUMNS
             if c in frame.columns and frame[c].nunique(dropna=True) > 1]
    if not parts:
        return pd.Series("", index=frame.index, dtype=object)
    key = parts[0]
    for part in parts[1:]:
        key = key + "/" + part
    return key


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
    """The universal curve of each family (:func:`family_key`; ``""`` for a file of one
    family), fitted on that family's proxies only (runs with ``n_params <= P``) on their
    ``split`` rows. ``families``: only these (the groups' families); a family without proxies
    raises."""
    is_proxy = frame["n_params"] <= proxy_max_params
    proxies, keys = frame[is_proxy], family_key(frame)[is_proxy]
    if proxies.empty:
        raise ValueError(f"no proxy run with n_params <= {proxy_max_params:g}")
    wanted = sorted(set(families)) if families is not None else sorted(keys.unique())
    out = {}
    for family in wanted:
        part = proxies[keys == family]
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
