"""A study at a lab's size: 1,000 replayed trials, 8 worker processes, one storage.

Each trial replays a synthetic curve of ``pruner_overhead.py`` (the paper's form, its tau drawn
per trial, 0.3% noise, ``--reports`` reports; no training) through ``CollapsePruner`` with a
real reference curve. ``--workers`` processes share the study on ``--storage`` (PostgreSQL for
the lab's case) and take the trials in order from a shared counter. Every ``should_prune`` call
is timed, and every event (a report with its decision, a trial's end) is stamped.

Then one process replays the same events in the order they were stamped, on a fresh study of
the same storage, and the two runs' decisions are compared event by event: the pruner's answer
depends on the order in which the trials' reports reach the storage, not on which process
sent them. Where they differ, the table says how often.

    .venv/bin/python benchmarks/replay_study.py --storage postgresql://USER@HOST:PORT/DB \
        --trials 1000 --workers 8 --out benchmarks/results/replay_study.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna  # noqa: E402
from pruner_overhead import _curves, _reference  # noqa: E402

from hpo import CollapsePruner, describe_trial  # noqa: E402

INDEX_ATTR = "replay_index"


def _describe(trial: optuna.trial.Trial, index: int, tau: float, total: int) -> None:
    describe_trial(trial, total_steps=total, tau=tau, tpp=20.0, schedule="linear",
                   warmup_steps=total // 20)
    trial.set_user_attr(INDEX_ATTR, index)


def _worker(storage: str, name: str, reference: str, total: int, n_trials: int,
            counter, lock, out: str) -> None:
    """Take trials in order from ``counter`` until ``n_trials`` are taken; write the events and
    latencies to ``out`` (JSON)."""
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    curves = _curves(n_trials, total)
    study = optuna.load_study(study_name=name, storage=storage,
                              pruner=CollapsePruner(reference=reference))
    events, latency = [], []
    while True:
        with lock:
            index = counter.value
            counter.value += 1
        if index >= n_trials:
            break
        tau, losses = curves[index]
        trial = study.ask()
        _describe(trial, index, tau, total)
        pruned = False
        for step in range(1, total + 1):
            trial.report(float(losses[step - 1]), step)
            stamp = time.time_ns()
            t0 = time.perf_counter()
            pruned = trial.should_prune()
            latency.append((index, time.perf_counter() - t0))
            events.append((stamp, index, step, bool(pruned)))
            if pruned:
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, float(losses[-1]))
        events.append((time.time_ns(), index, -1, pruned))  # the trial's end
    Path(out).write_text(json.dumps({"events": events, "latency": latency}))


def parallel(storage: str, reference: str, total: int, n_trials: int, workers: int,
             tmp: Path) -> tuple[list, list, float]:
    """The study with ``workers`` processes: (events, latencies, wall seconds)."""
    name = f"replay-parallel-{int(time.time())}"
    optuna.create_study(study_name=name, storage=storage)
    ctx = mp.get_context("spawn")
    counter, lock = ctx.Value("i", 0), ctx.Lock()
    outs = [str(tmp / f"worker{i}.json") for i in range(workers)]
    procs = [ctx.Process(target=_worker, args=(storage, name, reference, total, n_trials,
                                               counter, lock, out)) for out in outs]
    t0 = time.time()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.time() - t0
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a worker failed: exit codes {[p.exitcode for p in procs]}")
    events, latency = [], []
    for out in outs:
        data = json.loads(Path(out).read_text())
        events += [tuple(e) for e in data["events"]]
        latency += [tuple(x) for x in data["latency"]]
    return sorted(events), latency, wall


def sequential(storage: str, reference: str, total: int, n_trials: int,
               events: list) -> dict[tuple[int, int], bool]:
    """One process replaying ``events`` in their stamped order: each report's decision."""
    curves = _curves(n_trials, total)
    name = f"replay-sequential-{int(time.time())}"
    study = optuna.create_study(study_name=name, storage=storage,
                                pruner=CollapsePruner(reference=reference))
    open_trials: dict[int, optuna.trial.Trial] = {}
    decisions = {}
    for _, index, step, pruned in events:
        tau, losses = curves[index]
        if step == -1:
            trial = open_trials.pop(index)
            if pruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, float(losses[-1]))
            continue
        if index not in open_trials:
            open_trials[index] = study.ask()
            _describe(open_trials[index], index, tau, total)
        trial = open_trials[index]
        trial.report(float(losses[step - 1]), step)
        decisions[(index, step)] = bool(trial.should_prune())
    return decisions


def _ms(xs: list[float]) -> tuple[float, float, float]:
    a = np.asarray(xs) * 1e3
    return float(np.median(a)), float(a.mean()), float(np.percentile(a, 90))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True, help="Optuna storage URL (PostgreSQL)")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--reports", type=int, default=100, help="reports per trial (= T)")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    total = args.reports
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        reference = str(tmp / "reference.json")
        _reference(total).to_json(reference)
        events, latency, wall = parallel(args.storage, reference, total, args.trials,
                                         args.workers, tmp)
        t0 = time.time()
        replayed = sequential(args.storage, reference, total, args.trials, events)
        seq_wall = time.time() - t0
    decided = {(i, s): p for _, i, s, p in events if s != -1}
    differ = sorted(k for k, p in decided.items() if replayed.get(k) != p)
    pruned = sum(1 for _, _, s, p in events if s == -1 and p)
    kind = args.storage.split(":", 1)[0].split("+", 1)[0]
    shown = [("postgresql://..." if a.startswith("postgresql") else a) for a in sys.argv[1:]]
    command = " ".join([".venv/bin/python", "benchmarks/replay_study.py", *shown])
    lines = [f"# A study of {args.trials} replayed trials on {args.workers} workers", "",
             f"    {command}", "",
             f"{args.trials} trials x {total} reports, {args.workers} worker processes on one "
             f"{kind} storage, {os.cpu_count()} cores: {wall:.0f} s; {pruned} trials "
             f"stopped. One process replaying the same events in their order: {seq_wall:.0f} s.",
             "", "`should_prune` latency by trial (ms), in order of the trials' start:", "",
             "| trials | calls | median | mean | p90 |", "|---|---|---|---|---|"]
    step = max(1, args.trials // 10)
    for lo in range(0, args.trials, step):
        xs = [dt for i, dt in latency if lo <= i < lo + step]
        if xs:
            med, mean, p90 = _ms(xs)
            lines.append(f"| {lo + 1}-{lo + step} | {len(xs)} | {med:.2f} | {mean:.2f} | "
                         f"{p90:.2f} |")
    lines += ["", f"Decisions: {len(decided)} reports judged by the {args.workers} workers; the "
              f"single-process replay of the same order gives the same decision on "
              f"{len(decided) - len(differ)} of them"
              + (f" and differs on {len(differ)} (first: trial {differ[0][0]}, step "
                 f"{differ[0][1]}). The stamp is taken between a report and its decision; "
                 "another worker's report or verdict that reaches the storage in that gap is "
                 "seen by the parallel decision and not by the replayed one, or the other way "
                 "round." if differ else ".")]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
