"""The README's Optuna example, as pasted, beside Optuna's pruners, with every stop trained to
its end: what each stop stated and what came true.

    .venv/bin/python benchmarks/readme_example.py benchmarks/results/readme_example [--seeds 0 1 2]

The example's code is read from the README (its first ``python`` block under "The pruner in
your Optuna study"). The ``collapse`` arm runs that block exactly as pasted (sampler seed 0,
30 trials); with ``--seeds``, also at other sampler seeds (the block with ``seed=0`` replaced).
Every other arm runs the same objective and sampler with another pruner: ``none``
(``NopPruner``), ``median`` (``MedianPruner()``), ``percentile25`` (``PercentilePruner(25)``),
``hyperband`` (``HyperbandPruner()``) and ``sha`` (``SuccessiveHalvingPruner()``), each with
its defaults.

Every stopped trial is then trained to its end with the same parameters
(``optuna.trial.FixedTrial``, the same objective): its true final. A collapse stop states
"P(this trial ends more than ``tolerance`` below trial C) = p"; it is *wrong* when its true
final is more than ``tolerance`` below C's true final (C's measured value, or its own true
final where C was stopped too). For every arm: the fraction of the steps trained, the best
measured value, the stops, and the stops whose true final beats the arm's best (those that
cost the study its best). For the collapse arm, the stops stated below the threshold that were
wrong against the allowance (threshold + 2 binomial standard errors) and the reliability
table of every stop and every shadow verdict of a ``threshold=0`` run (each verdict's stated
p against its outcome, all trials trained to the end).

Writes ``results.json`` and ``README.md`` tables to OUT_DIR and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna

from hpo import CollapsePruner
from hpo.bench.reliability import reliability
from hpo.pruning import DEFAULT_THRESHOLD, DEFAULT_TOLERANCE, Record, trial_records

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def example_code(readme: Path = README) -> str:
    """The README's Optuna example: its first ``python`` block under "The pruner in your
    Optuna study"."""
    text = readme.read_text()
    start = text.index("## The pruner in your Optuna study")
    m = re.search(r"```python\n(.*?)```", text[start:], re.S)
    if m is None:
        raise ValueError("no python block under 'The pruner in your Optuna study'")
    return m.group(1)


def objective_of(code: str) -> tuple[Callable[[Any], float], int, int]:
    """``(objective, T, n_trials)`` of the example: its code up to the study."""
    head = code[: code.index("optuna.logging.set_verbosity")]
    ns: dict[str, Any] = {}
    exec(compile(head, "README example", "exec"), ns)
    n_trials = int(re.search(r"n_trials=(\d+)", code).group(1))
    return ns["objective"], int(ns["T"]), n_trials


def run_pasted(code: str, seed: int) -> optuna.study.Study:
    """The example as pasted (its sampler seed replaced by ``seed``), its output discarded."""
    code = code.replace("TPESampler(seed=0)", f"TPESampler(seed={seed})")
    ns: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "README example", "exec"), ns)
    return ns["study"]


def run_arm(objective: Callable[[Any], float], pruner: Any, seed: int,
            n_trials: int) -> optuna.study.Study:
    """The example's objective under ``pruner``, TPE with ``seed``."""
    # a fixed name: HyperbandPruner assigns brackets by a hash of the study name
    study = optuna.create_study(pruner=pruner, sampler=optuna.samplers.TPESampler(seed=seed),
                                study_name=f"readme-example-{seed}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.optimize(objective, n_trials=n_trials)
    return study


def true_final(objective: Callable[[Any], float], params: Mapping[str, Any]) -> float:
    """The final of a trial with ``params`` trained to its end."""
    return float(objective(optuna.trial.FixedTrial(dict(params))))


def stopped(t: optuna.trial.FrozenTrial, T: int) -> bool:
    """Whether the trial ended before its last step."""
    steps = t.intermediate_values
    return bool(steps) and max(steps) < T


def verdicts(t: optuna.trial.FrozenTrial) -> list[Record]:
    """The collapse records stored on a trial, by checkpoint."""
    return sorted(trial_records(t).values(), key=lambda r: r.checkpoint)


def summarize(study: optuna.study.Study, objective: Callable[[Any], float], T: int,
              n_trials: int, finals: dict[tuple, float]) -> dict[str, Any]:
    """An arm's steps, best, stops and each collapse verdict with its outcome."""
    trials = study.trials

    def final_of(t: optuna.trial.FrozenTrial) -> float:
        key = tuple(sorted(t.params.items()))
        if key not in finals:
            finals[key] = (float(t.value) if not stopped(t, T) and t.value is not None
                           else true_final(objective, t.params))
        return finals[key]

    truth = {t.number: final_of(t) for t in trials}
    measured = [t.value for t in trials if t.value is not None and not stopped(t, T)]
    best = min(measured)
    steps = sum(max(t.intermediate_values) for t in trials if t.intermediate_values)
    stops = [t for t in trials if stopped(t, T)]
    rows = []
    for t in trials:
        for rec in verdicts(t):
            if rec.probability is None or rec.against is None:
                continue
            c = rec.against.label
            bar = truth[int(c)] * (1 - (rec.tolerance or 0.0))
            rows.append({"trial": t.number, "checkpoint": rec.checkpoint,
                         "p": float(rec.probability), "stop": rec.stop,
                         "against": int(c), "final": truth[t.number],
                         "against_final": truth[int(c)], "came_true": truth[t.number] < bar,
                         "same_step": None if rec.same_step is None
                         else rec.same_step.probability,
                         "explanation": rec.explanation})
    return {
        "steps": steps / (n_trials * T), "best": best, "best_trial_truth": min(truth.values()),
        "stops": len(stops),
        "stops_beating_best": sum(truth[t.number] < best for t in stops),
        "verdicts": rows, "truth": truth,
    }


def collapse_stop_table(arms: Mapping[str, dict[str, Any]], threshold: float) -> list[str]:
    """Stops stated below the threshold and how many came true."""
    lines = [f"| arm | seed | stops stated below {threshold} | came true | allowed |",
             "|---|---|---|---|---|"]
    for name, res in arms.items():
        stops = [v for v in res["verdicts"] if v["stop"]]
        # a trial's stop is its last stopping verdict
        last: dict[int, dict[str, Any]] = {}
        for v in stops:
            last[v["trial"]] = v
        below = [v for v in last.values() if v["p"] < threshold]
        n = len(below)
        wrong = sum(v["came_true"] for v in below)
        allowed = threshold + 2 * math.sqrt(threshold * (1 - threshold) / n) if n else float("nan")
        lines.append(f"| {name} | {res['seed']} | {n} | {wrong} | {allowed:.1%} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    code = example_code()
    objective, T, n_trials = objective_of(code)
    peers: dict[str, Callable[[], Any]] = {
        "none": optuna.pruners.NopPruner,
        "median": optuna.pruners.MedianPruner,
        "percentile25": lambda: optuna.pruners.PercentilePruner(25.0),
        "hyperband": optuna.pruners.HyperbandPruner,
        "sha": optuna.pruners.SuccessiveHalvingPruner,
    }
    results: dict[str, dict[str, Any]] = {}
    for seed in args.seeds:
        finals: dict[tuple, float] = {}
        t0 = time.perf_counter()
        res = summarize(run_pasted(code, seed), objective, T, n_trials, finals)
        res["seconds"] = time.perf_counter() - t0
        results[f"collapse/{seed}"] = {**res, "seed": seed, "arm": "collapse"}
        shadow = run_arm(objective, CollapsePruner(threshold=0.0), seed, n_trials)
        results[f"shadow/{seed}"] = {**summarize(shadow, objective, T, n_trials, finals),
                                     "seed": seed, "arm": "shadow"}
        for name, make in peers.items():
            res = summarize(run_arm(objective, make(), seed, n_trials), objective, T,
                            n_trials, finals)
            results[f"{name}/{seed}"] = {**res, "seed": seed, "arm": name}
    lines = ["# The README's Optuna example, every stop trained to its end", "",
             "    .venv/bin/python benchmarks/readme_example.py "
             f"benchmarks/results/readme_example --seeds {' '.join(map(str, args.seeds))}", "",
             "Seed 0 is the README's example as pasted. Steps: the fraction of 30 x T steps "
             "trained; best: the best measured final; stops that beat it: stopped trials "
             "whose final, trained to the end, is below the arm's best.", "",
             "| arm | seed | steps | best | stops | stops that beat its best |",
             "|---|---|---|---|---|---|"]
    for res in results.values():
        lines.append(f"| {res['arm']} | {res['seed']} | {res['steps']:.3f} | {res['best']:.4f} "
                     f"| {res['stops']} | {res['stops_beating_best']} |")
    lines += ["", "## Collapse stops against what came true", ""]
    lines += collapse_stop_table({k: v for k, v in results.items() if v["arm"] == "collapse"},
                                 DEFAULT_THRESHOLD)
    verdict_rows = [v for k, r in results.items() if r["arm"] in ("collapse", "shadow")
                    for v in r["verdicts"]]
    if verdict_rows:
        table = reliability([{"probability": v["p"], "won": v["came_true"]}
                             for v in verdict_rows])
        lines += ["", "## Reliability of every collapse verdict (the collapse and shadow arms)",
                  "", "| stated | observed | n |", "|---|---|---|"]
        for row in table["bins"]:
            if row["n"]:
                lines.append(f"| {row['stated']:.3f} | {row['observed']:.3f} | {row['n']} |")
        lines.append(f"\ncalibration error {table['calibration_error']:.3f} over "
                     f"{len(verdict_rows)} verdicts (tolerance {DEFAULT_TOLERANCE}).")
        same = [v for v in verdict_rows if v["same_step"] is not None]
        table = reliability([{"probability": v["same_step"], "won": v["came_true"]}
                             for v in same])
        lines += ["", "## The same-step evidence recorded beside the same verdicts", "",
                  "The crossing law's chance of the same event against the same competitor "
                  "(record field `same_step`).", "",
                  "| stated | observed | n |", "|---|---|---|"]
        for row in table["bins"]:
            if row["n"]:
                lines.append(f"| {row['stated']:.3f} | {row['observed']:.3f} | {row['n']} |")
        lines.append(f"\ncalibration error {table['calibration_error']:.3f} over "
                     f"{len(same)} verdicts.")
    text = "\n".join(lines) + "\n"
    (args.out / "README.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
