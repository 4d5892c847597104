"""``hpo bench``: collapse pruning against every peer, replayed on recorded curves.

``hpo bench CURVES... [--group-col group] [--proxy-max-params P] [--json OUT|-]
[--plot OUT.png]`` replays each target run (n_params > P) as a trial of its group's sweep through
real Optuna studies and real Ray Tune runs, in the ``lockstep`` and ``sequential`` launch modes,
and prints per method the mean and max regret, the mean compute and how often the best trial was
stopped. The accounting lives in :mod:`hpo.bench.metrics`. The old ``--curves FILE...`` still
works.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo.cli._flags import (
    add_curves,
    add_json,
    curve_files,
    human_stream,
    json_path,
    output_path,
    write_json,
)
from hpo.cli.curves import parse_count, parse_fractions, read_split

__all__ = ["add_parser", "run"]

_DESCRIPTION = """\
Replay recorded loss curves as trials (each run of a group is one trial of that group's sweep;
stopping a trial stops its replay) through real Optuna studies (ask/tell with the real pruners)
and real Ray Tune runs, in two launch modes: lockstep (every trial reports step k before any
reports step k+1) and sequential (one trial after another, in --order).

Methods: collapse (CollapsePruner / CollapseScheduler; universal curve fitted on the proxies,
runs with n_params <= --proxy-max-params, or, without it, self-calibrating on each study's
finished trials), Optuna's Median, Percentile(25), SuccessiveHalving, Hyperband, Patient(Median)
and Nop pruners, Ray Tune's ASHA, HyperBand and MedianStoppingRule, "current best at t^=f"
and, with proxies, "predicted best at t^=f" (train all to f, finish the lowest prediction).

Per method and group: compute used (steps trained / steps of the full sweep), regret of the
chosen configuration (best finished trial) relative to the group's best final loss, whether the
true best was stopped. Step-valued peer settings are fractions of the group's total_steps.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand; its ``func`` is :func:`run`."""
    p = subparsers.add_parser(
        "bench", help="collapse pruning against Optuna pruners and Ray Tune schedulers",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_curves(p, "curve files (CSV, CSV.gz or Parquet in the curve format)")
    p.add_argument("--group-col", default="group",
                   help="column(s) that define a sweep, comma-separated, e.g. "
                        "n_params,total_steps (default: group)")
    p.add_argument("--proxy-max-params", default=None,
                   help="runs with n_params <= P are proxies (the universal curve is fitted on "
                        "them); the others are the targets. Without it: self-calibrating mode "
                        "on every run")
    p.add_argument("--min-trials", type=int, default=3,
                   help="smallest group replayed (default: 3)")
    p.add_argument("--order", default="file", choices=("file", "lr", "reverse"),
                   help="trial order in a group: as in the file, ascending or descending "
                        "peak LR (default: file)")
    p.add_argument("--resample", type=int, default=0, metavar="K",
                   help="replay K random sub-sweeps of each group instead of the group (a "
                        "random subset of at least 3 of its trials, in a random order that "
                        "replaces --order; default: 0, the groups as recorded)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the --resample draws (default: 0)")
    p.add_argument("--split", default="train", choices=("train", "val"),
                   help="which loss the trials report and are judged on, for targets and "
                        "proxies alike (default: train)")
    p.add_argument("--modes", default="lockstep,sequential",
                   help="launch modes, comma-separated (default: lockstep,sequential)")
    p.add_argument("--max-points", type=int, default=200,
                   help="reports per trial at most (evenly subsampled; default: 200)")
    p.add_argument("--checkpoints", default=None,
                   help="collapse checkpoints t^, comma-separated (default: the pruner's)")
    p.add_argument("--prior", default=None, metavar="FILE",
                   help="the collapse pruner's pair prior (JSON, as benchmarks/pair_prior.py "
                        "writes; default: the one shipped with the package)")
    p.add_argument("--max-groups", type=int, default=None, metavar="N",
                   help="replay a random sample of N recorded groups (drawn with --seed; "
                        "default: all)")
    p.add_argument("--no-ray", action="store_true", help="skip the Ray Tune methods")
    p.add_argument("--no-knobs", action="store_true",
                   help="only each peer's main setting (no aggressiveness sweep; the collapse "
                        "rule's threshold frontier stays)")
    p.add_argument("--all-rows", action="store_true",
                   help="print the knob settings in the table too")
    add_json(p, "the results", note=", and the tables to stderr")
    p.add_argument("--plot", default=None, metavar="OUT.png",
                   help="regret against compute, one line per method over its knob")
    p.add_argument("--explain", action="store_true",
                   help="print the collapse pruner's verdict on every trial it stopped, one "
                        "sentence each, per mode and group")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)
    return p


@dataclass(frozen=True)
class _Checked:
    """The flags of one ``hpo bench``, parsed and checked before any curve is read."""

    curves: list[str]  # the curve files
    json: Path | str | None  # where --json writes ("-": stdout), None without it
    plot: Path | None  # where --plot writes, None without it
    modes: list[str]  # launch modes, in the order given
    checkpoints: list[float]  # the collapse checkpoints t^
    proxy_max: float | None  # runs with n_params <= this are proxies; None: self-calibrating
    group_cols: list[str]  # the columns that define a sweep
    prior: Any  # the loaded --prior (a PairPrior), None for the shipped one


@dataclass
class _Sweeps:
    """The groups to replay and the proxies' universal curve, read from ``--curves``."""

    groups: list[Any]  # hpo.bench.BenchGroup, resampled when --resample is given
    recorded: int  # groups recorded in the files (before any resampling)
    resampled: dict[str, Any] | None  # the --resample settings, None without it
    curve: Any  # the universal curve(s) fitted on the proxies, None without --proxy-max-params
    calibration: str  # how the collapse pruner is calibrated, in words


def run(args: argparse.Namespace) -> int:
    """Validate, replay, print the table; returns 0."""
    checked = _check_args(args)
    t0 = time.time()
    sweeps = _read_sweeps(args, checked)
    result = _replay(args, checked, sweeps)
    result["setup"] = _setup(args, checked, sweeps, seconds=time.time() - t0)
    _report(args, checked, sweeps, result)
    return 0


def _check_args(args: argparse.Namespace) -> _Checked:
    """The flags that need no curves, parsed and checked; raises :class:`UsageError` naming
    the first bad flag and its value."""
    from hpo import bench

    curves = curve_files(args)
    for path in curves:
        if not Path(path).exists():
            raise UsageError(f"CURVES: file not found: {path!r}")
    if args.min_trials < 2:
        raise UsageError(f"--min-trials: must be >= 2, got {args.min_trials!r}")
    if args.resample < 0:
        raise UsageError(f"--resample: must be >= 0, got {args.resample!r}")
    if args.seed < 0:
        raise UsageError(f"--seed: must be >= 0, got {args.seed!r}")
    if args.max_points < 10:
        raise UsageError(f"--max-points: must be >= 10, got {args.max_points!r}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in bench.MODES]
    if not modes or bad:
        raise UsageError(f"--modes: expected lockstep and/or sequential, got {args.modes!r}")
    checkpoints = _checkpoints(args.checkpoints)
    if args.max_groups is not None and args.max_groups < 1:
        raise UsageError(f"--max-groups: must be >= 1, got {args.max_groups!r}")
    proxy_max = (parse_count("--proxy-max-params", args.proxy_max_params)
                 if args.proxy_max_params is not None else None)
    group_cols = [c.strip() for c in args.group_col.split(",") if c.strip()]
    if not group_cols:
        raise UsageError(f"--group-col: expected column names, got {args.group_col!r}")
    json_target = json_path(args.json, make_parents=True, inputs=curves)
    plot = (None if args.plot is None
            else output_path("--plot", args.plot, make_parents=True, inputs=curves))
    return _Checked(curves=curves, json=json_target, plot=plot, modes=modes,
                    checkpoints=checkpoints, proxy_max=proxy_max, group_cols=group_cols,
                    prior=_load_prior(args.prior))


def _checkpoints(text: str | None) -> list[float]:
    """The ``--checkpoints`` given (the pruner's default without it), checked by the pruner's
    own rule: :meth:`hpo.pruning.PrunerSettings.check_field`."""
    from hpo.pruning import DEFAULT_CHECKPOINTS, PrunerSettings

    if text is None:
        return list(DEFAULT_CHECKPOINTS)
    checkpoints, _ = parse_fractions("--checkpoints", text)
    why = PrunerSettings.check_field("checkpoints", checkpoints)
    if why is not None:
        raise UsageError(f"--checkpoints: {why}")
    return checkpoints


def _load_prior(path: str | None) -> Any:
    """The pair prior of ``--prior`` (``None`` without it: the shipped one)."""
    from hpo.predictors.prior import load_pair_prior

    if path is None:
        return None
    try:
        return load_pair_prior(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--prior: {exc}") from None


def _read_sweeps(args: argparse.Namespace, checked: _Checked) -> _Sweeps:
    """Read the curve files into the groups to replay (resampled with ``--resample``) and fit the
    proxies' universal curve (with ``--proxy-max-params``); raises :class:`UsageError` when
    the files have no such column or group, or the proxies no curve."""
    from hpo import bench

    frame = read_split("CURVES", checked.curves, args.split)
    missing = [c for c in checked.group_cols if c not in frame.columns]
    if missing:
        raise UsageError(f"--group-col: no column {missing[0]!r} in the curves "
                         f"(--group-col={args.group_col!r})")
    if checked.proxy_max is not None:
        if "n_params" not in frame.columns:
            raise UsageError(f"--proxy-max-params: the curves have no n_params column "
                             f"(--proxy-max-params={args.proxy_max_params!r})")
        if not (frame["n_params"] > checked.proxy_max).any():
            raise UsageError(f"--proxy-max-params: every run has n_params <= "
                             f"{args.proxy_max_params!r}: all are proxies, no target is left "
                             "to replay")
    try:
        groups = bench.load_groups(
            frame, checked.group_cols, checked.proxy_max, args.min_trials, args.max_points,
            # the points where the collapse rule and the baselines judge
            sorted({*checked.checkpoints, *bench.BASELINE_FRACTIONS}),
            args.order, args.split, args.max_groups, args.seed)
    except ValueError as exc:  # what the files hold (no complete run, a bad step)
        raise UsageError(f"CURVES: {exc}") from None
    if not groups:
        raise UsageError(f"CURVES: no group of >= {args.min_trials} complete target runs "
                         f"(--proxy-max-params={args.proxy_max_params!r}, "
                         f"--group-col={args.group_col!r})")
    recorded = len(groups)
    resampled = None
    if args.resample:
        groups = bench.resample_groups(groups, args.resample, seed=args.seed)
        resampled = {"per_group": args.resample, "seed": args.seed, "recorded_groups": recorded}
    curve = None
    if checked.proxy_max is not None:
        try:
            curve = bench.fit_proxy_curves(frame, checked.proxy_max, args.split,
                                            {g.family for g in groups})
        except ValueError as exc:
            raise UsageError(f"--proxy-max-params: {exc}") from None
    return _Sweeps(groups=groups, recorded=recorded, resampled=resampled, curve=curve,
                   calibration=_calibration(curve, checked.proxy_max))


def _calibration(curve: Any, proxy_max: float | None) -> str:
    """How the collapse pruner is calibrated, in words, for the header line and the JSON."""
    if curve is None:
        return "self-calibrating on each study's finished trials"
    families = sorted(f for f in curve if f)
    return (f"universal curve fitted on proxies (n_params <= {proxy_max:g})"
            + (f", one per optimizer ({', '.join(families)})" if families else ""))


def _replay(args: argparse.Namespace, checked: _Checked, sweeps: _Sweeps) -> dict[str, Any]:
    """Replay every group through every method and launch mode: the result of
    :func:`hpo.bench.run_bench`."""
    from hpo import bench

    collapse_kwargs: dict[str, Any] = {"checkpoints": tuple(checked.checkpoints)}
    if checked.prior is not None:
        collapse_kwargs["prior"] = checked.prior
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    return bench.run_bench(
        sweeps.groups, sweeps.curve, modes=checked.modes, collapse_kwargs=collapse_kwargs,
        collapse_variants=bench.collapse_knobs(), ray=not args.no_ray,
        knobs=not args.no_knobs, log=log,
    )


def _setup(args: argparse.Namespace, checked: _Checked, sweeps: _Sweeps,
           seconds: float) -> dict[str, Any]:
    """The ``setup`` entry of the JSON: what was replayed, and how."""
    return {
        "curves": [str(p) for p in checked.curves], "group_col": checked.group_cols,
        "proxy_max_params": checked.proxy_max, "collapse_calibration": sweeps.calibration,
        "order": args.order, "split": args.split, "resample": sweeps.resampled,
        "max_points": args.max_points,
        "checkpoints": checked.checkpoints, "max_groups": args.max_groups, "prior": args.prior,
        "groups": {g.name: [t.run_id for t in g.trials] for g in sweeps.groups},
        "seconds": seconds,
    }


def _report(args: argparse.Namespace, checked: _Checked, sweeps: _Sweeps,
            result: dict[str, Any]) -> None:
    """Print the header line and the tables (reliability and ``--explain`` too); write
    ``--json`` and ``--plot``."""
    from hpo import bench

    groups = sweeps.groups
    order = "random (each sub-sweep)" if sweeps.resampled else args.order
    drawn = (f" ({args.resample} random sub-sweeps of each of {sweeps.recorded} recorded "
             f"groups, seed {args.seed})" if sweeps.resampled else "")
    out = human_stream(checked.json)
    print(f"hpo bench: {len(groups)} groups{drawn}, {sum(len(g.trials) for g in groups)} "
          f"trials; collapse: {sweeps.calibration}; order={order}; split={args.split}", file=out)
    print(bench.format_table(result, knobs=args.all_rows), file=out)
    for mode in checked.modes:
        table = result["modes"][mode].get("reliability")
        if table is not None:
            print(bench.format_reliability(table, mode), file=out)
    if args.explain:
        print(bench.format_explanations(result, groups), file=out)
    if checked.json is not None:
        write_json(checked.json, result, indent=1)
    if checked.plot is not None:
        checked.plot.parent.mkdir(parents=True, exist_ok=True)
        bench.plot_tradeoff(result, str(checked.plot))
        print(f"wrote {checked.plot}", file=out)
