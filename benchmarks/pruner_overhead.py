"""Latency of ``trial.should_prune()`` with CollapsePruner beside optuna's MedianPruner.

Both run in the same process on the same SQLite file (one study each), over the same synthetic
trials: ``--trials`` trials (default 200) of ``--reports`` reports each (default 100, so
total_steps = 100 and the default checkpoints t^ = 0.1, ..., 0.5 fall at steps 10, ..., 50). The
CollapsePruner uses a real reference curve (``hpo.predictors.fit_universal_curve`` on synthetic
proxies shaped by the paper's form) and the real collapse predictor. Trials act on the decisions
(a pruned trial stops reporting). Prints the median, mean, 90th percentile and maximum latency
of ``should_prune`` (all calls; for CollapsePruner also split into calls at a checkpoint and
between checkpoints) and of ``trial.report`` for scale.

    .venv/bin/python benchmarks/pruner_overhead.py [--trials 200] [--reports 100]
"""

from __future__ import annotations

import argparse
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


def _run(study: optuna.Study, curves: list[tuple[float, np.ndarray]], total: int) -> dict:
    prune_all, prune_cp, prune_between, report = [], [], [], []
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
            t0 = time.perf_counter()
            trial.report(float(losses[step - 1]), step)
            t1 = time.perf_counter()
            should = trial.should_prune()
            t2 = time.perf_counter()
            report.append(t1 - t0)
            prune_all.append(t2 - t1)
            (prune_cp if step in checkpoints else prune_between).append(t2 - t1)
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
        "between": prune_between,
        "report": report,
        "pruned": n_pruned,
    }


def _row(name: str, xs: list[float]) -> str:
    a = np.asarray(xs) * 1e3
    stats = (np.median(a), a.mean(), np.percentile(a, 90), a.max())
    return f"{name:<44} {a.size:>7} " + " ".join(f"{x:>9.3f}" for x in stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="trials per study")
    parser.add_argument("--reports", type=int, default=100, help="reports per trial (= T)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    total = args.reports
    rng = np.random.default_rng(1)
    curves = []
    for _ in range(args.trials):
        tau = float(np.exp(rng.uniform(np.log(0.1), np.log(0.8))))
        final = float(3.0 + 0.3 * (np.log(tau / 0.25)) ** 2 + 0.01 * rng.standard_normal())
        curves.append((tau, _synthetic(final, tau, total, rng)))
    reference = _reference(total)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'overhead.db'}"
        out = {}
        t0 = time.time()
        for name, pruner in (
            ("MedianPruner", optuna.pruners.MedianPruner()),
            ("CollapsePruner", CollapsePruner(reference=reference)),
        ):
            study = optuna.create_study(storage=url, study_name=name, pruner=pruner)
            start = time.time()
            out[name] = _run(study, curves, total)
            out[name]["wall"] = time.time() - start
    print(
        f"\nshould_prune latency, SQLite, {args.trials} trials x {args.reports} reports "
        f"(ms; {time.time() - t0:.0f} s in all)"
    )
    header = f"{'':<44} {'calls':>7} {'median':>9} {'mean':>9} {'p90':>9} {'max':>9}"
    print(header)
    print("-" * len(header))
    for name in ("MedianPruner", "CollapsePruner"):
        r = out[name]
        print(_row(f"{name}.should_prune (all calls)", r["all"]))
        if name == "CollapsePruner":
            print(_row("  at a checkpoint (predicts once)", r["checkpoint"]))
            print(_row("  between checkpoints", r["between"]))
        print(_row("  trial.report (same study, for scale)", r["report"]))
        print(f"  pruned {r['pruned']} of {args.trials} trials; study wall time {r['wall']:.1f} s")


if __name__ == "__main__":
    main()
