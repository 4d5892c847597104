"""Replay the real 124M LR sweeps of lr_scheduling.csv.gz through a real local Ray Tune run.

One ``Tuner`` per sweep (group), every run of the sweep a trial, all running at once (as a grid
sweep would): each trial reports the run's training loss point by point with
``tune.report({"loss": loss, "step": step})``, paced so that a run takes ``--seconds-per-run``
of wall time; its last report carries the run's final loss (the smoothed end of the curve, as
a final evaluation would). ``CollapseScheduler`` (reference curve fitted on the 33M-93M
proxies, ``time_attr="step"``, controls from the trial's config) stops trials. Prints, per
group, the compute used, whether the group's best run was kept, and the regret.

    .venv/bin/python benchmarks/replay_ray.py [--seconds-per-run 6] [--margin 0] [--no-debias]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import _replay

os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def _train(config: dict, curves: list, seconds_per_run: float) -> None:
    from ray import tune

    steps, losses, final = curves[config["arm"]]
    pause = seconds_per_run / max(len(steps), 1)
    for i, (step, loss) in enumerate(zip(steps, losses, strict=True)):
        value = final if i == len(steps) - 1 else float(loss)
        tune.report({"loss": value, "step": float(step)})
        time.sleep(pause)


def replay_group(
    group: str, arms: list[_replay.Arm], curve: object, args: argparse.Namespace, root: str
) -> _replay.GroupResult:
    from ray import tune

    from hpo import CollapseScheduler

    controls = [a.run.controls for a in arms]
    scheduler = CollapseScheduler(
        reference=curve,
        time_attr="step",
        controls=lambda config: controls[config["arm"]],
        margin=args.margin,
        debias=not args.no_debias,
        checkpoints=tuple(args.checkpoints),
        level=args.level,
        extrapolation_inflation=args.extrapolation_inflation,
    )
    curves = [(a.run.steps.tolist(), a.run.losses.tolist(), a.final) for a in arms]
    trainable = tune.with_resources(
        tune.with_parameters(_train, curves=curves, seconds_per_run=args.seconds_per_run),
        {"cpu": 1.0 / len(arms)},
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"arm": tune.grid_search(list(range(len(arms))))},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler),
        run_config=tune.RunConfig(
            storage_path=root, name=group.replace(":", "_"), verbose=0, log_to_file=False
        ),
    )
    results = tuner.fit()
    by_arm = {r.config["arm"]: r for r in results}
    state = scheduler.state_dict()["trials"]
    stopped_ids = {k for k, rec in state.items() if rec["status"] == "stopped"}
    stopped, last = [], []
    for i, arm in enumerate(arms):
        r = by_arm[i]
        is_stopped = r.metrics.get("trial_id") in stopped_ids
        stopped.append(is_stopped)
        step = float(r.metrics.get("step", 0.0))
        last.append(step if is_stopped else float(arm.run.controls.total_steps))
    finals = [by_arm[i].metrics["loss"] for i in range(len(arms)) if not stopped[i]]
    return _replay.group_result(group, arms, last, stopped, min(finals))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _replay.add_replay_args(parser, "scheduler")
    parser.add_argument(
        "--seconds-per-run", type=float, default=6.0, help="wall time of one replayed run"
    )
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs given to ray.init")
    parser.add_argument("--groups", nargs="*", default=None, help="only these groups")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import ray

    t0 = time.time()
    curve, groups = _replay.load_testbed(
        args.data, args.curve_cache, args.min_arms, "file", args.split
    )
    if args.groups:
        groups = {g: a for g, a in groups.items() if any(s in g for s in args.groups)}
    ray.init(
        address="local",  # a new local Ray, even where `ray start` left a cluster
        num_cpus=args.num_cpus,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(_replay.ROOT)}},
    )
    with tempfile.TemporaryDirectory(prefix="collapse_ray_replay_") as root:
        results = [replay_group(g, arms, curve, args, root) for g, arms in groups.items()]
    ray.shutdown()
    _replay.print_results(
        f"Ray Tune + CollapseScheduler, all arms at once, margin={args.margin}, "
        f"debias={not args.no_debias}, level={args.level}, "
        f"extrapolation_inflation={args.extrapolation_inflation}, checkpoints={args.checkpoints} "
        f"({time.time() - t0:.0f} s)",
        results,
    )


if __name__ == "__main__":
    main()
