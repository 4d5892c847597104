"""Shared parts of the replay benchmarks: data, the proxy-fitted reference curve, groups, metrics.

The test bed (shared/data/curves/README.md): the 124M LR sweeps of ``lr_scheduling.csv.gz`` are
the targets; the runs with ``n_params <= 93M`` (33M-93M, cosine and constant schedules only) are
the proxies on which the universal curve is fitted.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hpo.pruning._judge import DEFAULT_CHECKPOINTS  # noqa: E402
from predictors.curves import fit_universal_curve, load_universal_curve  # noqa: E402
from predictors.io import RunCurve, read_curves, runs_from_frame  # noqa: E402
from predictors.normalize import final_loss_estimate  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "curves" / "lr_scheduling.csv.gz"
PROXY_MAX_PARAMS = 93.2e6
TARGET_PARAMS = (1.1e8, 1.3e8)

__all__ = [
    "ROOT",
    "DEFAULT_DATA",
    "Arm",
    "load_testbed",
    "GroupResult",
    "print_results",
]


@dataclass(frozen=True)
class Arm:
    """One run of a sweep: its curve (train split) and its true final loss."""

    run: RunCurve
    final: float

    @property
    def lr(self) -> float:
        return float(self.run.controls.peak_lr or float("nan"))


def add_replay_args(parser: argparse.ArgumentParser, who: str) -> None:
    """The options both replays share (data, curve cache, sweep size, the decision's knobs);
    ``who`` names the stopping object in the ``--margin`` help ("pruner", "scheduler")."""
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="curve file")
    parser.add_argument(
        "--curve-cache",
        type=Path,
        default=None,
        help="where the proxy-fitted reference curve is cached (JSON; default "
        "/tmp/collapse_hpo_replay_curve_SPLIT.json)",
    )
    parser.add_argument(
        "--split",
        choices=("train", "val"),
        default="train",
        help="which loss the trials report and are judged on (the proxies' curve is fitted on "
        "the same split): train (per-batch, every 50 steps) or val (every 200 steps)",
    )
    parser.add_argument("--min-arms", type=int, default=3, help="smallest sweep replayed")
    parser.add_argument("--margin", type=float, default=0.0, help=f"{who} margin (loss units)")
    parser.add_argument("--level", type=float, default=0.8, help="prediction interval level")
    parser.add_argument(
        "--extrapolation-inflation",
        type=float,
        default=2.0,
        help="interval widening outside the curve's tau range (1 = off)",
    )
    parser.add_argument("--no-debias", action="store_true", help="turn debiasing off")
    parser.add_argument(
        "--checkpoints", type=float, nargs="+", default=list(DEFAULT_CHECKPOINTS),
        help=f"t^ checkpoints (default: the pruner's, {' '.join(map(str, DEFAULT_CHECKPOINTS))})",
    )


def load_testbed(
    data: Path = DEFAULT_DATA,
    curve_cache: Path | None = None,
    min_arms: int = 3,
    order: str = "lr",
    split: str = "train",
) -> tuple[object, dict[str, list[Arm]]]:
    """The reference curve fitted on the proxies (cached as JSON) and the target groups.

    Groups of the 124M runs with at least ``min_arms`` runs; arms ordered by ``order``
    (``lr``: ascending peak LR, ``reverse``: descending, ``file``: as in the file). ``split``
    (``train`` or ``val``) is the loss replayed, the proxies' curve is fitted on the same one.
    """
    if curve_cache is None:
        curve_cache = Path(f"/tmp/collapse_hpo_replay_curve_{split}.json")
    if not data.exists():
        raise SystemExit(f"data file not found: {data}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = read_curves(data)
        curve = None
        if curve_cache is not None and curve_cache.exists():
            try:
                curve = load_universal_curve(json.loads(curve_cache.read_text()))
            except (ValueError, KeyError, TypeError):
                curve = None  # written by another version of predictors: refit
        if curve is None:
            proxies = runs_from_frame(df[df["n_params"] <= PROXY_MAX_PARAMS], split=split)
            curve = fit_universal_curve(proxies)
            if curve_cache is not None:
                curve_cache.parent.mkdir(parents=True, exist_ok=True)
                curve.to_json(curve_cache)
        lo, hi = TARGET_PARAMS
        targets = runs_from_frame(df[(df["n_params"] > lo) & (df["n_params"] < hi)], split=split)
    groups: dict[str, list[Arm]] = {}
    for r in targets:
        final = final_loss_estimate(r.t_hat, r.losses, at=1.0)
        groups.setdefault(str(r.group), []).append(Arm(r, final))
    groups = {g: arms for g, arms in groups.items() if len(arms) >= min_arms}
    for arms in groups.values():
        if order == "lr":
            arms.sort(key=lambda a: (a.lr, a.run.run_id))
        elif order == "reverse":
            arms.sort(key=lambda a: (-a.lr, a.run.run_id))
        elif order != "file":
            raise SystemExit(f"unknown order {order!r} (lr, reverse, file)")
    return curve, dict(sorted(groups.items()))


@dataclass(frozen=True)
class GroupResult:
    """Outcome of one replayed sweep."""

    group: str
    n_arms: int
    n_stopped: int
    steps_used: float
    steps_total: float
    best_kept: bool
    chosen_final: float
    true_best_final: float
    stopped_lrs: tuple[float, ...]

    @property
    def compute_used(self) -> float:
        return self.steps_used / self.steps_total

    @property
    def regret(self) -> float:
        return self.chosen_final - self.true_best_final


def group_result(
    group: str,
    arms: Sequence[Arm],
    last_steps: Sequence[float],
    stopped: Sequence[bool],
    chosen_final: float,
) -> GroupResult:
    """Metrics of one replay: compute used (steps run / steps planned), regret of the chosen
    arm (best completed) against the group's true best final loss, whether that best arm ran
    to completion."""
    finals = np.array([a.final for a in arms])
    best = int(np.argmin(finals))
    total = float(sum(a.run.controls.total_steps for a in arms))
    return GroupResult(
        group=group,
        n_arms=len(arms),
        n_stopped=int(sum(stopped)),
        steps_used=float(sum(last_steps)),
        steps_total=total,
        best_kept=not stopped[best],
        chosen_final=float(chosen_final),
        true_best_final=float(finals[best]),
        stopped_lrs=tuple(a.lr for a, s in zip(arms, stopped, strict=True) if s),
    )


def print_results(title: str, results: Sequence[GroupResult]) -> None:
    """The per-group table and the totals."""
    print(f"\n{title}")
    header = (
        f"{'group':<44} {'arms':>4} {'stop':>4} {'compute':>8} {'best kept':>9} "
        f"{'regret':>8}  stopped LRs"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        short = r.group.replace("123587328:slimpajama:", "124M:")
        lrs = ",".join(f"{x:g}" for x in r.stopped_lrs) or "-"
        print(
            f"{short:<44} {r.n_arms:>4} {r.n_stopped:>4} {r.compute_used:>7.1%} "
            f"{'yes' if r.best_kept else 'NO':>9} {r.regret:>8.4f}  {lrs}"
        )
    used = sum(r.steps_used for r in results)
    total = sum(r.steps_total for r in results)
    kept = sum(r.best_kept for r in results)
    regrets = np.array([r.regret for r in results])
    print("-" * len(header))
    print(
        f"{'all groups':<44} {sum(r.n_arms for r in results):>4} "
        f"{sum(r.n_stopped for r in results):>4} {used / total:>7.1%} "
        f"{kept:>5}/{len(results):<3} {regrets.mean():>8.4f}  (mean regret; max "
        f"{regrets.max():.4f}); compute saved {1 - used / total:.1%}"
    )
