"""Latency of ``trial.should_prune()`` with CollapsePruner beside optuna's MedianPruner.

For each number of trials in ``--trials`` (default 200), both pruners run in the same process
on one new SQLite file (one study each, MedianPruner first), over the same synthetic trials of
``--reports`` reports each (default 100, so total_steps = 100 and the default checkpoints
t^ = 0.1, ..., 0.5 fall at steps 10, ..., 50). The CollapsePruner uses a real reference curve
(``hpo.predictors.fit_universal_curve`` on synthetic proxies shaped by the paper's form) and the
real collapse predictor. Trials act on the decisions (a pruned trial stops reporting). Prints
the median, mean, 90th percentile and maximum latency of ``should_prune`` (all calls; for
CollapsePruner also split into calls at a checkpoint, calls between checkpoints that judged the
trial again, and calls with nothing due, told apart by its ``on_verdict`` observer) and of
``trial.report`` for scale; ``--out`` also writes them as a markdown table, with the command.

The SQLite file lies in ``--dir`` (default: the system's temporary directory). Every write to
SQLite is a commit, whose cost is the disk's (an fsync); MedianPruner writes nothing, while
CollapsePruner stores its verdicts, so a directory in memory (``--dir /dev/shm``) shows the
pruners' own cost and one on disk adds the disk's.

    .venv/bin/python benchmarks/pruner_overhead.py [--trials 200 1000] [--reports 100] \
        [--dir /dev/shm] [--out benchmarks/results/pruner_overhead.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from hpo import DEFAULT_CHECKPOINTS, CollapsePruner, describe_trial  # noqa: E402

#: CollapsePruner's calls by kind: key in ``_run``'s result, label
_KINDS = (("checkpoint", "at a checkpoint (predicts once)"),
          ("rejudge", "between checkpoints, judged again"),
          ("idle", "between checkpoints, nothing due"))


def _synthetic(final: float, tau: float, total: int, rng: np.random.Generator) -> np.ndarray:
    from hpo.predictors.curves import paper_g
    from hpo.predictors.schedules import Controls

    c = Controls(total_steps=total, tpp=20.0, tau=tau, schedule="linear", warmup_steps=total // 20)
    t = np.maximum(np.arange(1, total + 1) / total, 1e-3)
    b, q = 0.3 * tau**0.5, 0.6
    g = paper_g(t, c.eta(t), b, q) / paper_g(np.ones(1), c.eta(np.ones(1)), b, q)[0]
    return final * g * (1 + 0.003 * rng.standard_normal(t.size))


def _reference(total: int) -> object:
    from hpo.predictors import fit_universal_curve
    from hpo.predictors.io import RunCurve
    from hpo.predictors.schedules import Controls

    rng = np.random.default_rng(0)
    runs = []
    for i, tau in enumerate((0.1, 0.2, 0.4, 0.8)):
        c = Controls(
            total_steps=total, tpp=20.0, tau=tau, schedule="linear", warmup_steps=total // 20
        )
        losses = _synthetic(3.0, tau, total, rng)
        runs.append(RunCurve(f"proxy{i}", np.arange(1.0, total + 1), losses, c))
    return fit_universal_curve(runs)


def _run(study: optuna.Study, curves: list[tuple[float, np.ndarray]], total: int,
         verdicts: list | None = None) -> dict:
    """Latencies of every call; ``verdicts``: the list the pruner's ``on_verdict`` appends to
    (a call between checkpoints that adds to it judged the trial again)."""
    prune_all, prune_cp, prune_rejudge, prune_idle, report = [], [], [], [], []
    checkpoints = {int(round(f * total)) for f in DEFAULT_CHECKPOINTS}
    for tau, losses in curves:
        trial = study.ask()
        describe_trial(
            trial,
            total_steps=total,
            tau=tau,
            tpp=20.0,
            schedule="linear",
            warmup_steps=total // 20,
        )
        pruned = False
        for step in range(1, total + 1):
            seen = len(verdicts) if verdicts is not None else 0
            t0 = time.perf_counter()
            trial.report(float(losses[step - 1]), step)
            t1 = time.perf_counter()
            should = trial.should_prune()
            t2 = time.perf_counter()
            report.append(t1 - t0)
            prune_all.append(t2 - t1)
            judged = verdicts is not None and len(verdicts) > seen
            kind = prune_cp if step in checkpoints else prune_rejudge if judged else prune_idle
            kind.append(t2 - t1)
            if should:
                pruned = True
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, float(losses[-1]))
    n_pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    return {
        "all": prune_all,
        "checkpoint": prune_cp,
        "rejudge": prune_rejudge,
        "idle": prune_idle,
        "report": report,
        "pruned": n_pruned,
    }


def _stats(xs: list[float]) -> tuple[float, float, float, float]:
    """(median, mean, p90, max) of latencies in seconds, in ms."""
    a = np.asarray(xs) * 1e3
    return float(np.median(a)), float(a.mean()), float(np.percentile(a, 90)), float(a.max())


def _row(name: str, xs: list[float]) -> str:
    return f"{name:<44} {len(xs):>7} " + " ".join(f"{x:>9.3f}" for x in _stats(xs))


def _curves(n_trials: int, total: int) -> list[tuple[float, np.ndarray]]:
    """The same ``(tau, losses)`` trials for both pruners: finals near 3.0 for tau near 0.25."""
    rng = np.random.default_rng(1)
    curves = []
    for _ in range(n_trials):
        tau = float(np.exp(rng.uniform(np.log(0.1), np.log(0.8))))
        final = float(3.0 + 0.3 * (np.log(tau / 0.25)) ** 2 + 0.01 * rng.standard_normal())
        curves.append((tau, _synthetic(final, tau, total, rng)))
    return curves


def _measure(n_trials: int, total: int, reference: object, where: str | None) -> dict:
    """Both pruners over the same ``n_trials`` trials, on one new SQLite file in ``where``."""
    curves = _curves(n_trials, total)
    out: dict = {"load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        url = f"sqlite:///{Path(tmp) / 'overhead.db'}"
        verdicts: list = []
        for name, pruner, seen in (
            ("MedianPruner", optuna.pruners.MedianPruner(), None),
            ("CollapsePruner", CollapsePruner(
                reference=reference, on_verdict=lambda label, record: verdicts.append(label)),
             verdicts),
        ):
            study = optuna.create_study(storage=url, study_name=name, pruner=pruner)
            start = time.time()
            out[name] = _run(study, curves, total, seen)
            out[name]["wall"] = time.time() - start
    return out


def _print(n_trials: int, total: int, out: dict, seconds: float) -> None:
    print(
        f"\nshould_prune latency, SQLite, {n_trials} trials x {total} reports "
        f"(ms; {seconds:.0f} s in all)"
    )
    header = f"{'':<44} {'calls':>7} {'median':>9} {'mean':>9} {'p90':>9} {'max':>9}"
    print(header)
    print("-" * len(header))
    for name in ("MedianPruner", "CollapsePruner"):
        r = out[name]
        print(_row(f"{name}.should_prune (all calls)", r["all"]))
        if name == "CollapsePruner":
            for kind, label in _KINDS:
                if r[kind]:
                    print(_row(f"  {label}", r[kind]))
        print(_row("  trial.report (same study, for scale)", r["report"]))
        print(f"  pruned {r['pruned']} of {n_trials} trials; study wall time {r['wall']:.1f} s")


def _markdown(results: dict[int, dict], total: int, where: str) -> str:
    """The table of ``results`` (by number of trials), with the command that made it."""
    command = " ".join([".venv/bin/python", "benchmarks/pruner_overhead.py", *sys.argv[1:]])
    lines = [
        "# should_prune overhead",
        "",
        f"    {command}",
        "",
        f"SQLite in `{where}`, {total} reports per trial, both pruners in one process on one "
        "file, over the same trials (latencies in ms; ratio: CollapsePruner over MedianPruner "
        "in the same run).",
        "",
        "| trials | pruner | calls | median | mean | p90 | max | pruned | study wall (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    load = ", ".join(f"{out['load']:.1f} ({n} trials)" for n, out in results.items())
    for n_trials, out in results.items():
        for name in ("MedianPruner", "CollapsePruner"):
            r = out[name]
            med, mean, p90, top = _stats(r["all"])
            lines.append(f"| {n_trials} | {name} | {len(r['all'])} | {med:.2f} | {mean:.2f} | "
                         f"{p90:.2f} | {top:.1f} | {r['pruned']} | {r['wall']:.0f} |")
        (_, m_mean, m_p90, _), (_, c_mean, c_p90, _) = (
            _stats(out[name]["all"]) for name in ("MedianPruner", "CollapsePruner"))
        lines.append(f"| {n_trials} | ratio | | | {c_mean / m_mean:.2f} | {c_p90 / m_p90:.2f} "
                     "| | | |")
    lines += ["", "Per call, MedianPruner reads the study (Optuna's storage reads again its "
              "unfinished and new trials) and writes nothing. CollapsePruner decides from the "
              "trial's own records (read once per trial, at its first checkpoint) whether a "
              "judgment is due: at a checkpoint, and at each re-judging slot (every 0.02 of "
              "progress) for 0.1 after the prediction. Only then does it read the study, once, "
              "and judge. It writes the verdict (the record and its sentence; at a checkpoint "
              "also the prediction, its interval and t^: one SQLite transaction, one commit) "
              "when it is the first at its checkpoint or changes its decision or reason; a "
              "re-judgment that repeats the verdict writes nothing. Its other calls read and "
              "write nothing.",
              "", f"The machine's 1-minute load average as each run started: {load}, on "
              f"{os.cpu_count()} cores.",
              "", "CollapsePruner's calls by kind (ms):", "",
              "| trials | kind | calls | median | mean | p90 | max |",
              "|---|---|---|---|---|---|---|"]
    for n_trials, out in results.items():
        r = out["CollapsePruner"]
        for kind, label in _KINDS:
            if not r[kind]:
                continue
            med, mean, p90, top = _stats(r[kind])
            lines.append(f"| {n_trials} | {label} | {len(r[kind])} | {med:.2f} | {mean:.2f} | "
                         f"{p90:.2f} | {top:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[200],
                        help="trials per study; several numbers: one run for each")
    parser.add_argument("--reports", type=int, default=100, help="reports per trial (= T)")
    parser.add_argument("--dir", default=None,
                        help="directory of the SQLite file (default: the temporary directory)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the results as a markdown table to this file")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    total = args.reports
    reference = _reference(total)
    results = {}
    for n_trials in args.trials:
        t0 = time.time()
        results[n_trials] = _measure(n_trials, total, reference, args.dir)
        _print(n_trials, total, results[n_trials], time.time() - t0)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(_markdown(results, total, args.dir or tempfile.gettempdir()))


if __name__ == "__main__":
    main()
