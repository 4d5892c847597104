"""``hpo bench``: collapse pruning against every peer, replayed on recorded curves.

``hpo bench --curves FILE... [--group-col group] [--proxy-max-params P] [--json OUT]
[--plot OUT.png]`` replays each target run (n_params > P) as a trial of its group's sweep through
real Optuna studies and real Ray Tune runs, in the ``lockstep`` and ``sequential`` launch modes,
and prints per method the mean and max regret, the mean compute and how often the best trial was
stopped. The accounting lives in :mod:`hpo.bench.metrics`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hpo._errors import UsageError
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
    p.add_argument("--curves", nargs="+", required=True, metavar="FILE",
                   help="curve files (CSV, CSV.gz or Parquet in the curve format)")
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
    p.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON")
    p.add_argument("--plot", default=None, metavar="OUT.png",
                   help="regret against compute, one line per method over its knob")
    p.add_argument("--explain", action="store_true",
                   help="print the collapse pruner's verdict on every trial it stopped, one "
                        "sentence each, per mode and group")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Validate, replay, print the table; returns 0."""
    from hpo import bench
    from hpo.predictors.prior import load_pair_prior
    from hpo.pruning import DEFAULT_CHECKPOINTS

    for path in args.curves:
        if not Path(path).exists():
            raise UsageError(f"--curves: file not found: {path!r}")
    if args.min_trials < 2:
        raise UsageError(f"--min-trials must be >= 2, but got --min-trials={args.min_trials}")
    if args.resample < 0:
        raise UsageError(f"--resample must be >= 0, but got --resample={args.resample}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, but got --seed={args.seed}")
    if args.max_points < 10:
        raise UsageError(f"--max-points must be >= 10, but got --max-points={args.max_points}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in bench.MODES]
    if not modes or bad:
        raise UsageError(f"--modes: expected lockstep and/or sequential, got {args.modes!r}")
    checkpoints = list(DEFAULT_CHECKPOINTS)
    if args.checkpoints is not None:
        checkpoints, _ = parse_fractions("--checkpoints", args.checkpoints)
    if any(b <= a for a, b in zip(checkpoints[:-1], checkpoints[1:], strict=True)):
        raise UsageError(f"--checkpoints: must be strictly increasing, got {args.checkpoints!r}")
    if args.max_groups is not None and args.max_groups < 1:
        raise UsageError(f"--max-groups must be >= 1, but got --max-groups={args.max_groups}")
    proxy_max = (parse_count("--proxy-max-params", args.proxy_max_params)
                 if args.proxy_max_params is not None else None)
    group_cols = [c.strip() for c in args.group_col.split(",") if c.strip()]
    if not group_cols:
        raise UsageError(f"--group-col: expected column names, got {args.group_col!r}")

    prior = None
    if args.prior is not None:
        try:
            prior = load_pair_prior(args.prior)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--prior: {exc}") from None

    t0 = time.time()
    frame = read_split("--curves", args.curves, args.split)
    missing = [c for c in group_cols if c not in frame.columns]
    if missing:
        raise UsageError(f"--group-col: no column {missing[0]!r} in the curves "
                         f"(--group-col={args.group_col!r})")
    groups = bench.load_groups(frame, group_cols, proxy_max, args.min_trials, args.max_points,
                                checkpoints + [0.3], args.order, args.split,
                                args.max_groups, args.seed)
    if not groups:
        raise UsageError(f"--curves: no group of >= {args.min_trials} complete target runs "
                         f"(--proxy-max-params={args.proxy_max_params!r}, "
                         f"--group-col={args.group_col!r})")
    recorded = len(groups)
    resampled = None
    if args.resample:
        groups = bench.resample_groups(groups, args.resample, seed=args.seed)
        resampled = {"per_group": args.resample, "seed": args.seed, "recorded_groups": recorded}
    curve = None
    if proxy_max is not None:
        try:
            curve = bench.fit_proxy_curves(frame, proxy_max, args.split,
                                            {g.family for g in groups})
        except ValueError as exc:
            raise UsageError(f"--proxy-max-params: {exc}") from None
    families = sorted(f for f in (curve or {}) if f)
    calibration = (f"universal curve fitted on proxies (n_params <= {proxy_max:g})"
                   + (f", one per optimizer ({', '.join(families)})" if families else "")
                   if curve is not None else "self-calibrating on each study's finished trials")
    collapse_kwargs: dict = {"checkpoints": tuple(checkpoints)}
    if prior is not None:
        collapse_kwargs["prior"] = prior
    variants = bench.collapse_knobs()
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    result = bench.run_bench(
        groups, curve, modes=modes, collapse_kwargs=collapse_kwargs,
        collapse_variants=variants, ray=not args.no_ray,
        knobs=not args.no_knobs, log=log,
    )
    result["setup"] = {
        "curves": [str(p) for p in args.curves], "group_col": group_cols,
        "proxy_max_params": proxy_max, "collapse_calibration": calibration,
        "order": args.order, "split": args.split, "resample": resampled,
        "max_points": args.max_points,
        "checkpoints": checkpoints, "max_groups": args.max_groups, "prior": args.prior,
        "groups": {g.name: [t.run_id for t in g.trials] for g in groups},
        "seconds": time.time() - t0,
    }
    order = "random (each sub-sweep)" if resampled else args.order
    drawn = (f" ({args.resample} random sub-sweeps of each of {recorded} recorded groups, "
             f"seed {args.seed})" if resampled else "")
    print(f"hpo bench: {len(groups)} groups{drawn}, {sum(len(g.trials) for g in groups)} "
          f"trials; collapse: {calibration}; order={order}; split={args.split}")
    print(bench.format_table(result, knobs=args.all_rows))
    for mode in modes:
        table = result["modes"][mode].get("reliability")
        if table is not None:
            print(bench.format_reliability(table, mode))
    if args.explain:
        print(bench.format_explanations(result, groups))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        bench.plot_tradeoff(result, args.plot)
        print(f"wrote {args.plot}")
    return 0
