"""``hpo run``, ``hpo validate`` and ``hpo submit``: the end-to-end study from one YAML file.

torch, optuna and ray load only when a command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo._extras import install_hint
from hpo.cli._flags import hidden_alias
from hpo.study.folder import needed_extras
from hpo.study.schema import Study, missing_data

__all__ = ["add_parser", "run_run", "run_validate", "run_submit"]

_RUN_DESCRIPTION = """\
Run a study: train the proxies (reused when already trained), fit the universal curve, run the
sweep with the study's sampler and collapse pruning, and write to the output folder: study.db,
curves.csv.gz, universal_curve.json, summary.json and report.md with plots. Running the same
command again resumes the study: finished proxies and trials are kept; an interrupted proxy or
trial continues from its last checkpoint (a trial as a new Optuna trial with the same parameters;
checkpoints are written about ten times per run, and without one it starts from step 0). The
study file is validated first; every error is listed with its path, exit code 2.

--no-prune runs the full sweep (no proxies, no pruning) into <output>/full_sweep, the baseline
the pruned study's summary compares its choice and compute with.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``run``, ``validate`` and ``submit``."""
    p = subparsers.add_parser("run", help="run a study (proxies, universal curve, pruned sweep, "
                                          "report); rerun to resume",
                              description=_RUN_DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", help="the study YAML file")
    p.add_argument("--output", default=None,
                   help="output folder (default: the study's output, else runs/<name>)")
    p.add_argument("--storage", default=None,
                   help="Optuna storage URL (default: sqlite:///<output>/study.db)")
    p.add_argument("--address", default=None,
                   help="Ray cluster address (ray://HOST:10001 or HOST:6379); implies "
                        "backend ray")
    p.add_argument("--no-prune", action="store_true",
                   help="full sweep without pruning (and without proxies) into "
                        "<output>/full_sweep: the baseline to compare with")
    p.add_argument("--verify", action="store_true",
                   help="after the sweep, train every stopped trial to the end and record its "
                        "actual final loss against the prediction")
    p.add_argument("--trials", type=int, default=None,
                   help="override budget.trials (finished trials wanted)")
    p.add_argument("--no-report", action="store_true", help="skip report.md and the plots")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="train the proxies and run the sweep in N processes on the study's "
                        "storage (local backend; default: the study's workers, else 1); each "
                        "trial runs once")
    p.add_argument("--inject", default=None, metavar="KIND@T",
                   help="break one trial on purpose with a fault of `hpo train --inject` (the "
                        "study's diagnose.inject), to see the residual monitor catch it; give "
                        "its own --output")
    p.add_argument("--inject-trial", type=int, default=None, metavar="N",
                   help="the trial --inject breaks (the study's diagnose.inject_trial, "
                        "default 0)")
    p.add_argument("--worker", action="store_true",
                   help="join a running `hpo run` of this study (this shell or another "
                        "machine, same storage and output folder): run its trials, no summary")
    p.set_defaults(func=run_run)

    v = subparsers.add_parser("validate", help="check a study file (every error with its path) "
                                               "and what it needs to run; trains nothing",
                              description="Validate a study YAML file: unknown keys, wrong "
                                          "types, out-of-range values, inconsistent settings, "
                                          "a missing data source or reference file and an "
                                          "unreachable storage are all reported at once, each "
                                          "with its path; then an unreachable ray.address "
                                          "(backend ray). Exit code 2 if any. hpo run checks "
                                          "the same before it trains.")
    v.add_argument("study", help="the study YAML file")
    v.add_argument("--show", action="store_true",
                   help="print the resolved study (every default filled in) as JSON")
    v.set_defaults(func=run_validate)

    s = subparsers.add_parser("submit", help="submit a study as a Ray job (working dir "
                                             "uploaded) to a cluster's dashboard address",
                              description="Submit `hpo run STUDY` as a Ray job with the current "
                                          "folder as the job's working dir, to the cluster "
                                          "whose job-submission (dashboard) address "
                                          "--dashboard gives. The job runs with backend ray "
                                          "on that cluster.")
    s.add_argument("study", help="the study YAML file (inside --working-dir)")
    dashboard = s.add_argument(
        "--dashboard", default=None, metavar="URL",
        help="Ray's job-submission (dashboard) address of the cluster, e.g. "
             "http://127.0.0.1:8265; required (not the ray://HOST:10001 client address "
             "that hpo run --address takes)")
    hidden_alias(s, "--address", dashboard)  # its old spelling
    s.add_argument("--working-dir", default=".",
                   help="folder uploaded as the job's working dir (default: .)")
    s.add_argument("--output", default=None,
                   help="output folder on the cluster (default: the study's, relative to the "
                        "job's working dir); give a path on shared storage to keep results")
    s.add_argument("--python", default="python",
                   help="the Python on the cluster that has collapse-hpo installed "
                        "(default: python on the cluster's PATH)")
    s.add_argument("--no-wait", action="store_true",
                   help="return after submitting (default: follow the logs until it ends)")
    s.add_argument("--timeout", type=float, default=None,
                   help="give up waiting after this many seconds (the job keeps running)")
    s.set_defaults(func=run_submit)
    return p


#: the study fields a flag of ``hpo run`` / ``hpo validate`` replaces: an error in a value
#: given by a flag names the flag
_FLAG_FIELDS = {"output": "--output", "storage": "--storage", "diagnose.inject": "--inject",
                "diagnose.inject_trial": "--inject-trial"}


@contextlib.contextmanager
def _named_by_flags(args: argparse.Namespace) -> Iterator[None]:
    """Re-raise a :class:`~hpo.study.schema.StudyError` with each error of a value that a flag
    gave named by the flag (``--storage: cannot reach ...``), not by its YAML path."""
    from hpo.study.schema import StudyError

    given = {path: flag for path, flag in _FLAG_FIELDS.items()
             if getattr(args, flag[2:].replace("-", "_"), None) is not None}
    try:
        yield
    except StudyError as exc:
        if not any(path in given for path, _ in exc.errors):
            raise
        raise StudyError(exc.source, [(given.get(path, path), msg)
                                      for path, msg in exc.errors]) from None


def _load(args: argparse.Namespace, no_prune: bool = False) -> Any:
    with _named_by_flags(args):
        return _load_study(args, no_prune)


def _load_study(args: argparse.Namespace, no_prune: bool) -> Any:
    from hpo.study.schema import load_study

    overrides: dict[str, Any] = {"output": getattr(args, "output", None),
                                 "storage": getattr(args, "storage", None)}
    if getattr(args, "address", None):
        overrides["backend"] = "ray"
    for key in ("inject", "inject_trial"):
        if getattr(args, key, None) is not None:
            overrides[f"diagnose.{key}"] = getattr(args, key)
    study = load_study(args.study, overrides)
    if getattr(args, "trials", None) is not None:
        if args.trials < 1:
            raise UsageError(f"--trials: must be >= 1, got {args.trials!r}")
        study.budget["trials"] = args.trials
    if no_prune:
        study = full_sweep_study(study, explicit_output=args.output is not None)
    return study


def full_sweep_study(study: Study, explicit_output: bool = False) -> Study:
    """The study's full-sweep baseline: output ``<output>/full_sweep`` (unless given), its own
    Optuna study name when the storage is shared."""
    changes: dict[str, Any] = {}
    if not explicit_output:
        default_storage = f"sqlite:///{study.output / 'study.db'}"
        changes["output"] = study.output / "full_sweep"
        if study.storage == default_storage:
            changes["storage"] = f"sqlite:///{changes['output'] / 'study.db'}"
        else:
            changes["name"] = f"{study.name}-full-sweep"
    new: Study = dataclasses.replace(study, **changes)
    new.pruner = {**study.pruner, "enabled": False}
    return new


def run_validate(args: argparse.Namespace) -> int:
    """Everything ``hpo run`` checks before it trains (a :class:`~hpo.study.schema.StudyError` or
    :class:`UsageError` is bad input: the CLI prints it, exit code 2)."""
    from hpo._net import mask_password
    from hpo.study.folder import check_before_run
    from hpo.study.plan import plan_proxies

    study = _load(args)
    with _named_by_flags(args):
        check_before_run(study, study.ray.get("address"), "ray.address", data=False)
    if args.show:
        print(json.dumps(study.to_dict(), indent=1))
        return 0
    proxies = plan_proxies(study)
    print(f"{args.study}: ok. study {study.name!r}: {len(proxies)} proxies, "
          f"{study.budget['trials']} trials over {', '.join(study.search)} "
          f"({study.sampler['type']} sampler), backend {study.backend}, output {study.output}, "
          f"storage {mask_password(study.storage)}")
    why = missing_data(study)
    if why is not None:
        print(f"note: hpo run reads data.source, which is not on this machine: {why}")
    for module, extra in needed_extras(study):
        print(f"note: for hpo run, {install_hint(module, extra)}")
    return 0


def run_run(args: argparse.Namespace) -> int:
    from hpo.study.runner import StudyRunner

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers: must be >= 1, got {args.workers!r}")
    if args.worker and (args.workers not in (None, 1) or args.verify):
        raise UsageError("--worker: a worker joins a running study; --workers and --verify "
                         "belong to the coordinating hpo run")
    study = _load(args, no_prune=args.no_prune)
    workers = args.workers or study.workers

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    command = [sys.executable, "-m", "hpo", "run", args.study, "--worker"]
    for flag, value in (("--output", args.output), ("--storage", args.storage),
                        ("--trials", args.trials)):
        if value is not None:
            command += [flag, str(value)]
    command += [f for f, on in (("--no-prune", args.no_prune), ("--quiet", args.quiet)) if on]
    runner = StudyRunner(study, progress, prune=not args.no_prune, verify=args.verify,
                         address=args.address, report=not args.no_report,
                         workers=workers, worker_command=command)
    if args.worker:
        from hpo.study.runner import COORDINATOR_ENV, StorageLost

        try:
            runner.run_worker()
        except StorageLost:
            if os.environ.get(COORDINATOR_ENV):
                return 2  # the coordinating hpo run, on the same storage, says it once
            raise
        return 0
    t0 = time.monotonic()
    with _named_by_flags(args):
        summary = runner.run()
    print(format_summary(summary, study.output, time.monotonic() - t0))
    return 0


def format_summary(summary: dict[str, Any], output: Path, seconds: float) -> str:
    """The one-screen summary printed at the end of ``hpo run``."""
    from hpo.study.trials import params_text

    lines = ["", f"== study {summary['study']} ({summary['mode']}, {summary['backend']}) "
                 f"done in {seconds / 60:.1f} min =="]
    t = summary["trials"]
    lines.append(f"trials: {t['complete']} completed, {t['stopped']} stopped early, "
                 f"{t['failed_or_interrupted']} failed or interrupted")
    best = summary.get("best")
    if best:
        lines.append(f"best: trial {best['trial']} {params_text(best['params'])} "
                     f"final loss {best['loss']:.4f}")
    else:
        lines.append("best: no completed trial")
    c = summary["compute"]
    if c["full_sweep"]:
        lines.append(f"compute: sweep used {c['sweep_used']:.3g} FLOPs of a full sweep's "
                     f"{c['full_sweep']:.3g}: saved {100 * c['saved_fraction']:.0f}%")
        if c["proxies"]:
            lines.append(f"         with the proxies ({c['proxies']:.3g} FLOPs, reusable for "
                         f"the family): saved {100 * c['saved_fraction_with_proxies']:.0f}%")
    cmp_ = summary.get("comparison")
    if cmp_:
        ref = cmp_["full_sweep_best"]
        verdict = "YES, the same choice" if cmp_["same_choice"] else "NO, a different choice"
        lines.append(f"vs full sweep ({cmp_['source']}): {verdict}; full sweep best "
                     f"{params_text(ref['params'])} final loss {ref['loss']:.4f}")
    elif summary["mode"] == "collapse pruning":
        lines.append("vs full sweep: not run yet (hpo run STUDY --no-prune writes "
                     "<output>/full_sweep)")
    vfb = summary.get("verified_full_sweep_best")
    if vfb:
        same = best is not None and vfb["trial"] == best["trial"]
        lines.append(f"verified (stopped trials trained to the end): the full sweep's best is "
                     f"trial {vfb['trial']} ({vfb['loss']:.4f}): "
                     f"{'the same choice' if same else 'a different choice'}")
    level = summary.get("interval_level")
    itv = "interval" if level is None else f"{100 * level:.0f}% interval"
    acc = summary.get("predictions") or {}
    if acc.get("n"):
        lines.append(f"predictions: {acc['inside']} of {acc['n']} trials ended inside their "
                     f"{itv}; error median {100 * acc['median_abs_err']:.1f}%, max "
                     f"{100 * acc['max_abs_err']:.1f}%")
    table = summary.get("trial_table") or []
    if table:
        full = any(r.get("full_sweep_value") is not None for r in table)
        lines.append("trial  state      ended at t^  value    "
                     + f"predicted final ({itv})".ljust(32)
                     + ("full sweep  " if full else "") + "params")
        for r in table:
            pred = "" if r["predicted"] is None else f"{r['predicted']:.4f}"
            if r["interval"]:
                pred += f" [{r['interval'][0]:.4f}, {r['interval'][1]:.4f}]"
            value = "" if r["value"] is None else f"{r['value']:.4f}"
            ref = r.get("full_sweep_value")
            ref_text = (f"{ref:<10.4f}  " if ref is not None else " " * 12) if full else ""
            lines.append(f"{r['trial']:>5}  {r['state']:<9}  {r['t_hat_end']:>11.2f}  "
                         f"{value:<7}  {pred:<30}  {ref_text}{params_text(r['params'])}")
        lines.append("(value: a stopped trial's last reported loss, as Optuna keeps it; "
                     "predicted: at the latest checkpoint)")
    lines.append(f"output: {output} (summary.json, report.md, curves.csv.gz, study.db)")
    return "\n".join(lines)


def run_submit(args: argparse.Namespace) -> int:
    if args.dashboard is None:
        raise UsageError("--dashboard: required, the cluster's job-submission (dashboard) "
                         "address, e.g. --dashboard http://127.0.0.1:8265")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout: must be > 0, got {args.timeout!r}")
    study = _load(argparse.Namespace(study=args.study, output=args.output))
    from hpo.study.ray_backend import submit_study

    return submit_study(study, args.study, args.dashboard, working_dir=args.working_dir,
                        wait=not args.no_wait, timeout=args.timeout, output=args.output,
                        python=args.python, where="--dashboard")
