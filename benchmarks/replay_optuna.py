"""Replay the real 124M LR sweeps of lr_scheduling.csv.gz through a real Optuna study.

One study per sweep (group), one trial per run, run after run (ascending LR by default; or all
at once with ``--parallel``, one thread per run, reports paced in wall time): each
trial calls ``describe_trial`` with the run's controls and reports the run's training loss point
by point with ``trial.report(loss, step)``; ``CollapsePruner`` (reference curve fitted on the
33M-93M proxies) decides through ``trial.should_prune()``. A completed trial returns the run's
true final loss. Prints, per group, the compute used (steps run / steps planned), whether the
group's best run was kept, and the regret (final loss of the study's best trial minus the
group's best final loss).

    .venv/bin/python benchmarks/replay_optuna.py [--order lr|reverse|file] [--margin 0]
        [--no-debias] [--storage sqlite:///replay.db] [--parallel]
"""

from __future__ import annotations

import argparse
import time
import warnings

import _replay
import optuna

from hpo import CollapsePruner, describe_trial


def replay_group(
    group: str,
    arms: list[_replay.Arm],
    curve: object,
    args: argparse.Namespace,
) -> _replay.GroupResult:
    if args.pruner == "median":
        # the peers' rule: compare the value seen now with the other trials' at the same step
        pruner: optuna.pruners.BasePruner = optuna.pruners.MedianPruner(
            n_startup_trials=1, n_warmup_steps=0
        )
    else:
        pruner = _collapse_pruner(curve, args)
    study = optuna.create_study(
        study_name=f"replay-{group}-{time.time_ns()}",
        storage=args.storage,
        direction="minimize",
        pruner=pruner,
    )
    return _replay_study(study, group, arms, args)


def _collapse_pruner(curve: object, args: argparse.Namespace) -> CollapsePruner:
    return CollapsePruner(
        reference=curve,
        margin=args.margin,
        debias=not args.no_debias,
        checkpoints=tuple(args.checkpoints),
        level=args.level,
        extrapolation_inflation=args.extrapolation_inflation,
    )


def _replay_study(
    study: optuna.Study, group: str, arms: list[_replay.Arm], args: argparse.Namespace
) -> _replay.GroupResult:
    def objective(trial: optuna.Trial) -> float:
        arm = arms[trial.number]
        trial.set_user_attr("run_id", arm.run.run_id)
        trial.suggest_float("lr", arm.lr, arm.lr)
        describe_trial(trial, total_steps=arm.run.controls.total_steps, controls=arm.run.controls)
        pause = args.seconds_per_run / len(arm.run.steps) if args.parallel else 0.0
        for step, loss in zip(arm.run.steps, arm.run.losses, strict=True):
            trial.report(float(loss), int(step))
            if trial.should_prune():
                raise optuna.TrialPruned()
            if pause:
                time.sleep(pause)
        return arm.final

    n_jobs = len(arms) if args.parallel else 1
    study.optimize(objective, n_trials=len(arms), n_jobs=n_jobs)
    trials = sorted(study.trials, key=lambda t: t.number)
    stopped = [t.state == optuna.trial.TrialState.PRUNED for t in trials]
    last = [float(t.last_step or 0) for t in trials]
    # a completed trial ran to its last logged step; count it as the whole run
    last = [
        last[i] if stopped[i] else float(arms[i].run.controls.total_steps)
        for i in range(len(arms))
    ]
    return _replay.group_result(group, arms, last, stopped, study.best_value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _replay.add_replay_args(parser, "pruner")
    parser.add_argument("--order", default="lr", help="trial order: lr, reverse or file")
    parser.add_argument("--storage", default=None, help="Optuna storage URL (default memory)")
    parser.add_argument(
        "--pruner",
        choices=("collapse", "median"),
        default="collapse",
        help="CollapsePruner, or optuna's MedianPruner as the baseline",
    )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run all arms of a sweep at once (n_jobs threads, paced by --seconds-per-run)",
    )
    parser.add_argument(
        "--seconds-per-run", type=float, default=4.0, help="wall time of one run with --parallel"
    )
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    t0 = time.time()
    curve, groups = _replay.load_testbed(
        args.data, args.curve_cache, args.min_arms, args.order, args.split
    )
    results = [replay_group(g, arms, curve, args) for g, arms in groups.items()]
    _replay.print_results(
        f"Optuna + {'MedianPruner' if args.pruner == 'median' else 'CollapsePruner'}, "
        f"{'all arms at once' if args.parallel else 'one run after another'}, "
        f"split={args.split}, order={args.order}, margin={args.margin}, "
        f"debias={not args.no_debias}, level={args.level}, "
        f"extrapolation_inflation={args.extrapolation_inflation}, checkpoints={args.checkpoints} "
        f"({time.time() - t0:.0f} s)",
        results,
    )


if __name__ == "__main__":
    main()
