"""The rule's stated probability against what happened, each source held out, in every launch
order, with and without the study's own evidence; and the tolerance chosen leave one source out.

    .venv/bin/python benchmarks/study_calibration.py benchmarks/results/study_calibration

Every target of every source (``benchmarks/results/prior/rows.csv.gz``: each target predicted
from its proxies at t^ 0.1-0.5, its final known) is replayed through the product's rule
(:func:`hpo.pruning.judge`, :func:`hpo.pruning.study_rescale`) with the pair prior fitted
without its source (``benchmarks/results/prior/without_<source>.json``). The trials of a sweep
group are judged at each checkpoint:

* ``lockstep``: the sweep launched at once; each running trial meets every other running one.
* ``sequential``: one trial after another in the recorded order; each trial meets the trials
  finished before it (their predictions at the same checkpoint and their finals), which
  also rescale the law (the study's evidence).
* ``resampled``: ``--resample`` random sub-sweeps of each group (at least 3 trials) in random
  order, one after another.

Each mode runs twice: ``study`` (the shipped rule: the prior, rescaled by the study's finished
pairs) and ``prior`` (the prior alone, the study's evidence ignored). Per source and mode:
compute (the fraction of the sweep trained; a trial stopped at t^ f trained f), mean / max
regret of the best trial kept, bests stopped, ``oracle@0.2`` (every loser stopped at 0.2; in
sequential order, every trial worse than an earlier one) and ``predicted best@0.2`` (the
paper's rule: the lowest prediction at 0.2 goes on); a shadow replay (threshold 0) gives
every verdict's stated probability and outcome: the reliability table, its calibration error
and, in sequential order, the calibration error by the number of finished trials the verdict
had. Judged only at the checkpoints (the product also re-judges between them): a faster
replay than ``hpo bench``, which replays the same sweeps through real studies.

The tolerance and threshold grid gives the frontier; the default tolerance is chosen leave one
source out: for each source, the largest tolerance whose replay on every other source adds at
most 0.2% to the max regret of tolerance 0 in every mode, at the default threshold.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hpo.bench.reliability import reliability
from hpo.predictors.prior import PairPrior, load_pair_prior
from hpo.pruning import (
    DEFAULT_THRESHOLD,
    NO_RESCALE,
    Competitor,
    Estimate,
    StudyRescale,
    judge,
    study_rescale,
)

ROOT = Path(__file__).resolve().parents[1]
PRIORS = ROOT / "benchmarks" / "results" / "prior"
CHECKPOINTS = (0.1, 0.2, 0.3, 0.4, 0.5)
HOLDOUT = {"cpu_quickstart": "cpu", "cpu_sweep": "cpu", "cpu_sweep_w64": "cpu"}
SOURCES = ("lr_scheduling", "multipowerlaw", "nanochat", "marin", "cpu_quickstart",
           "cpu_sweep", "cpu_sweep_w64")
TOLERANCES = (0.0, 0.001, 0.002, 0.005, 0.01)
THRESHOLDS = (0.005, 0.01, 0.02, 0.05, 0.1)
#: a tolerance may add at most this to the max regret of tolerance 0 (the issue's regret goal)
MAX_ADDED_REGRET = 0.002
#: bins of the number of finished trials a sequential verdict had
FINISHED_BINS = ((0, 1), (2, 3), (4, 7), (8, 10_000))
Z80 = 1.2815515655446004


@dataclass
class Trial:
    """One target: its final, its LR and tau, its estimate at each checkpoint it was
    predicted at."""

    key: str
    final: float
    estimates: dict[float, Estimate] = field(default_factory=dict)


def estimates(rows: pd.DataFrame, prior: PairPrior) -> list[list[Trial]]:
    """The sweep groups of ``rows`` (one source, predictions without the LR covariate) as
    trials with the product's estimates: the 80% interval of the row's half-width, the pair
    side of ``prior`` from the row's evidence."""
    groups = []
    for _, g in rows.groupby(["group", "family"], dropna=False, sort=False):
        trials = []
        for run_id, t in g.groupby("run_id", sort=False):
            trial = Trial(str(run_id), float(t["final"].iloc[0]))
            for r in t.itertuples():
                if not (isinstance(r.pred, float) and math.isfinite(r.pred)):
                    continue
                evidence = {"log_halfwidth": math.log(max(r.half, 1e-6)),
                            "inv_points": r.inv_points, "t_hat": r.t_hat,
                            "extrapolation": r.extrapolation, "transfer": r.transfer,
                            "steep": r.steep, "log_proxy_scale": r.log_proxy_scale}
                lo, hi = r.pred * math.exp(-r.half), r.pred * math.exp(r.half)
                lr = r.lr if math.isfinite(r.lr) else 0.0
                tau = r.tau if math.isfinite(r.tau) else 0.0
                trial.estimates[round(float(r.f), 2)] = Estimate(
                    float(r.pred), lo, hi, float(r.t_hat), pair_scale=prior.side_scale(evidence),
                    pair_dof=prior.dof, lr=float(lr), tau=float(tau),
                    distance_slope=prior.distance_slope)
            trials.append(trial)
        if len(trials) >= 2:
            groups.append(trials)
    return groups


@dataclass
class Replay:
    """The outcome of one replayed sweep."""

    compute: float
    regret: float
    best_stopped: bool
    oracle: float
    predicted_best: tuple[float, float]  # compute, regret
    verdicts: list[dict] = field(default_factory=list)


def replay(trials: Sequence[Trial], mode: str, threshold: float, tolerance: float,
           use_study: bool) -> Replay:
    """The rule on one sweep in ``mode`` (``lockstep`` or ``sequential``, in the given
    order). Verdicts: each judged trial's lowest stated probability per checkpoint, its
    outcome (``won``: it ended more than ``tolerance`` below that competitor) and the
    finished trials it had."""
    stopped: dict[int, float] = {}
    verdicts: list[dict] = []
    cache: dict[tuple, StudyRescale] = {}

    def verdict(i: int, cp: float, comps: list[tuple[int, Competitor]], fitted: StudyRescale,
                n_finished: int) -> bool:
        me = trials[i].estimates[cp]
        v = judge(me, [c for _, c in comps], threshold, tolerance=tolerance,
                  rescale=fitted)
        j = next(k for k, c in comps if c is v.against)
        won = trials[i].final < trials[j].final * (1 - tolerance)
        verdicts.append({"probability": float(v.probability), "won": bool(won),
                         "finished": n_finished})
        return v.stop

    if mode == "sequential":
        finished: list[int] = []
        for i in range(len(trials)):
            for cp in CHECKPOINTS:
                if cp not in trials[i].estimates:
                    continue
                done = [k for k in finished if cp in trials[k].estimates]
                comps = [(k, Competitor(k, k, trials[k].estimates[cp], trials[k].final))
                         for k in done]
                if not comps:
                    continue
                fitted = NO_RESCALE
                if use_study:
                    key = (cp, tuple(done))
                    if key not in cache:
                        cache[key] = study_rescale(
                            [(trials[k].estimates[cp], trials[k].final) for k in done])
                    fitted = cache[key]
                if verdict(i, cp, comps, fitted, len(done)):
                    stopped[i] = cp
                    break
            if i not in stopped:
                finished.append(i)
    else:
        alive = set(range(len(trials)))
        for cp in CHECKPOINTS:
            for i in range(len(trials)):
                if i not in alive or cp not in trials[i].estimates:
                    continue
                comps = [(k, Competitor(k, k, trials[k].estimates[cp])) for k in sorted(alive)
                         if k != i and cp in trials[k].estimates]
                if comps and verdict(i, cp, comps, NO_RESCALE, 0):
                    stopped[i] = cp
                    alive.discard(i)
    finals = np.array([t.final for t in trials])
    kept = [i for i in range(len(trials)) if i not in stopped]
    return Replay(sum(stopped.get(i, 1.0) for i in range(len(trials))) / len(trials),
                  float(finals[kept].min() / finals.min() - 1), int(finals.argmin()) in stopped,
                  oracle(finals, mode), predicted_best(trials, mode), verdicts)


def oracle(finals: np.ndarray, mode: str, f: float = 0.2) -> float:
    """Compute of stopping every loser at t^ ``f`` with the finals known (sequential: every
    trial worse than an earlier one)."""
    if mode == "lockstep":
        return (1 + f * (finals.size - 1)) / finals.size
    spent, best = 0.0, math.inf
    for x in finals:
        spent += f if x > best else 1.0
        best = min(best, x)
    return spent / finals.size


def predicted_best(trials: Sequence[Trial], mode: str, f: float = 0.2) -> tuple[float, float]:
    """The paper's rule at t^ ``f``: the lowest prediction goes on (sequential: a trial goes
    on when its prediction is below every earlier kept one's); a trial without a prediction
    goes on. (compute, regret)."""
    finals = np.array([t.final for t in trials])
    pred = [t.estimates[f].value if f in t.estimates else None for t in trials]
    keep = np.zeros(len(trials), bool)
    if mode == "lockstep":
        scored = [i for i, p in enumerate(pred) if p is not None]
        for i, p in enumerate(pred):
            keep[i] = p is None
        if scored:
            keep[min(scored, key=lambda i: pred[i])] = True
    else:
        bar = math.inf
        for i, p in enumerate(pred):
            keep[i] = p is None or p <= bar
            if p is not None and keep[i]:
                bar = p
    spent = float(np.where(keep, 1.0, f).mean())
    return spent, float(finals[keep].min() / finals.min() - 1)


def run_source(groups: list[list[Trial]], mode: str, threshold: float, tolerance: float,
               use_study: bool, resample: int, seed: int = 0) -> list[Replay]:
    """Every group of a source in ``mode`` (``lockstep``, ``sequential`` or ``resampled``)."""
    rng = np.random.default_rng(seed)
    out = []
    for g in groups:
        if mode != "resampled":
            out.append(replay(g, mode, threshold, tolerance, use_study))
            continue
        for _ in range(resample):
            if len(g) < 3:
                break
            k = int(rng.integers(3, len(g) + 1))
            sub = [g[i] for i in rng.permutation(len(g))[:k]]
            out.append(replay(sub, "sequential", threshold, tolerance, use_study))
    return out


def summary(replays: list[Replay], threshold: float) -> dict:
    """The numbers of one (source, mode, rule) cell."""
    verdicts = [v for r in replays for v in r.verdicts]
    table = reliability(verdicts, thresholds=(threshold,))
    tail = table["tail"][0]
    n = tail["n"]
    allowed = threshold + 2 * math.sqrt(threshold * (1 - threshold) / n) if n else None
    by_finished = {}
    for lo, hi in FINISHED_BINS:
        sub = [v for v in verdicts if lo <= v["finished"] <= hi]
        if sub:
            by_finished[f"{lo}-{hi}" if hi < 10_000 else f"{lo}+"] = (
                reliability(sub)["calibration_error"], len(sub))
    regret = [r.regret for r in replays]
    return {"sweeps": len(replays), "compute": float(np.mean([r.compute for r in replays])),
            "oracle": float(np.mean([r.oracle for r in replays])),
            "mean_regret": float(np.mean(regret)), "max_regret": float(np.max(regret)),
            "best_stopped": int(sum(r.best_stopped for r in replays)),
            "predicted_best": (float(np.mean([r.predicted_best[0] for r in replays])),
                               float(np.mean([r.predicted_best[1] for r in replays])),
                               float(np.max([r.predicted_best[1] for r in replays]))),
            "verdicts": len(verdicts), "calibration_error": table["calibration_error"],
            "wrong": tail["wrong"], "below": n, "allowed_rate": allowed,
            "bins": [(b["stated"], b["observed"], b["n"]) for b in table["bins"] if b["n"]],
            "by_finished": by_finished}


def load(rows_path: Path) -> dict[str, list[list[Trial]]]:
    """Each source's groups, with the prior fitted without it."""
    rows = pd.read_csv(rows_path)
    rows = rows[~rows["lr_covariate"].astype(bool)]
    out = {}
    for src in SOURCES:
        prior = load_pair_prior(PRIORS / f"without_{HOLDOUT.get(src, src)}.json")
        out[src] = estimates(rows[rows["source"] == src], prior)
    return out


MODES = ("lockstep", "sequential", "resampled")


def grid(data: dict, resample: int) -> dict:
    """Every (source, mode, rule, tolerance, threshold) cell."""
    cells = {}
    for src, groups in data.items():
        for mode in MODES:
            for use_study in (True, False):
                if mode == "lockstep" and not use_study:
                    continue  # nothing finishes in lockstep: the two rules are one
                for tol in TOLERANCES:
                    shadow = run_source(groups, mode, 0.0, tol, use_study, resample)
                    for thr in THRESHOLDS:
                        reps = run_source(groups, mode, thr, tol, use_study, resample)
                        cell = summary(reps, thr)
                        s = summary(shadow, thr)
                        cell.update({k: s[k] for k in ("verdicts", "calibration_error",
                                                        "wrong", "below", "allowed_rate",
                                                        "bins", "by_finished")})
                        cells[(src, mode, "study" if use_study else "prior", tol, thr)] = cell
                print(f"{src} {mode} done", file=sys.stderr, flush=True)
    return cells


def choose_tolerance(cells: dict) -> dict[str, float]:
    """For each source held out, the largest tolerance whose replay at the default threshold
    adds at most ``MAX_ADDED_REGRET`` to the max regret of tolerance 0, in every mode on every
    other source."""
    holdouts = sorted({HOLDOUT.get(s, s) for s in SOURCES})

    def regret(s: str, m: str, t: float) -> float:
        return cells[(s, m, "study", t, DEFAULT_THRESHOLD)]["max_regret"]

    out = {}
    for h in holdouts:
        others = [s for s in SOURCES if HOLDOUT.get(s, s) != h]
        ok = [t for t in TOLERANCES
              if all(regret(s, m, t) <= regret(s, m, 0.0) + MAX_ADDED_REGRET
                     for s in others for m in MODES)]
        out[h] = max(ok)
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.3f}%"


def write(cells: dict, out: Path, command: str) -> None:
    """``README.md`` (the tables), ``cells.json`` and the plot of calibration error against
    the finished trials."""
    chosen = choose_tolerance(cells)
    lines = ["# The study's own evidence: calibration and compute, each source held out", "",
             "    " + command, "", (__doc__ or "").split("\n\n", 1)[1].strip(), ""]
    lines += ["## Tolerance, chosen leave one source out", "",
              "| held out | tolerance chosen on the others |", "|---|---|"]
    lines += [f"| {h} | {t:g} |" for h, t in chosen.items()]
    lines += [""]
    for tol in sorted({0.0, *chosen.values()}):
        lines += [f"## Each source and mode at threshold {DEFAULT_THRESHOLD:g}, tolerance "
                  f"{tol:g}", "",
                  "Compute, mean / max regret, bests stopped (of the sweeps); beside it the "
                  "same with the prior alone, oracle@0.2 and predicted best@0.2 (compute, "
                  "mean / max regret).", "",
                  "| source | mode | sweeps | study's evidence | prior alone | oracle@0.2 | "
                  "x oracle | predicted best@0.2 |", "|---|---|---|---|---|---|---|---|"]
        for src in SOURCES:
            for mode in MODES:
                c = cells[(src, mode, "study", tol, DEFAULT_THRESHOLD)]
                p = cells.get((src, mode, "prior", tol, DEFAULT_THRESHOLD))
                if mode == "lockstep":
                    p = c
                prior_txt = "-" if p is None else (
                    f"{p['compute']:.3f}, {_pct(p['mean_regret'])} / {_pct(p['max_regret'])}, "
                    f"{p['best_stopped']}")
                pb = c["predicted_best"]
                lines.append(
                    f"| {src} | {mode} | {c['sweeps']} | {c['compute']:.3f}, "
                    f"{_pct(c['mean_regret'])} / {_pct(c['max_regret'])}, {c['best_stopped']} "
                    f"| {prior_txt} | {c['oracle']:.3f} | {c['compute'] / c['oracle']:.2f} | "
                    f"{pb[0]:.3f}, {_pct(pb[1])} / {_pct(pb[2])} |")
        lines += [""]
        lines += [f"### Reliability (shadow replays, tolerance {tol:g})", "",
                  "Verdicts below the threshold that came true all the same (wrong / n, and "
                  "the rate allowed: the threshold plus twice its binomial error), the "
                  "calibration error, and each bin of 20 or more verdicts: stated -> observed "
                  "(n).", "",
                  "| source | mode | rule | verdicts | wrong / n below 0.02 | allowed | "
                  "calibration error | bins |", "|---|---|---|---|---|---|---|---|"]
        for src in SOURCES:
            for mode in MODES:
                for rule in ("study", "prior"):
                    if mode == "lockstep" and rule == "prior":
                        continue
                    c = cells[(src, mode, rule, tol, DEFAULT_THRESHOLD)]
                    bins = "; ".join(f"{s:.1%} -> {o:.1%} ({n})" for s, o, n in c["bins"]
                                     if n >= 20)
                    ce = c["calibration_error"]
                    al = c["allowed_rate"]
                    lines.append(
                        f"| {src} | {mode} | {rule} | {c['verdicts']} | {c['wrong']} / "
                        f"{c['below']} | {'-' if al is None else f'{al:.1%}'} | "
                        f"{'-' if ce is None else f'{ce:.3f}'} | {bins or '-'} |")
        lines += [""]
    lines += ["## Calibration error by the finished trials a verdict had (sequential and "
              "resampled, tolerance 0)", "",
              "| source | mode | rule | " + " | ".join(
                  f"{lo}-{hi}" if hi < 10_000 else f"{lo}+" for lo, hi in FINISHED_BINS)
              + " |", "|---|---|---|" + "---|" * len(FINISHED_BINS)]
    for src in SOURCES:
        for mode in ("sequential", "resampled"):
            for rule in ("study", "prior"):
                c = cells[(src, mode, rule, 0.0, DEFAULT_THRESHOLD)]
                vals = []
                for lo, hi in FINISHED_BINS:
                    k = f"{lo}-{hi}" if hi < 10_000 else f"{lo}+"
                    v = c["by_finished"].get(k)
                    vals.append("-" if v is None or v[0] is None else f"{v[0]:.3f} ({v[1]})")
                lines.append(f"| {src} | {mode} | {rule} | " + " | ".join(vals) + " |")
    lines += ["", "## The frontier: compute and mean / max regret over tolerance x threshold "
              "(the study's evidence)", ""]
    for mode in MODES:
        lines += [f"### {mode}", "", "| tolerance | threshold | " + " | ".join(SOURCES) + " |",
                  "|---|---|" + "---|" * len(SOURCES)]
        for tol in TOLERANCES:
            for thr in THRESHOLDS:
                row = []
                for src in SOURCES:
                    c = cells[(src, mode, "study", tol, thr)]
                    row.append(f"{c['compute']:.3f}, {_pct(c['mean_regret'])} / "
                               f"{_pct(c['max_regret'])}")
                lines.append(f"| {tol:g} | {thr:g} | " + " | ".join(row) + " |")
        lines += [""]
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text("\n".join(lines) + "\n")
    (out / "cells.json").write_text(json.dumps(
        {"|".join(map(str, k)): v for k, v in cells.items()}, indent=1, default=float))
    _plot(cells, out / "calibration_by_finished.png")


def _plot(cells: dict, path: Path) -> None:
    """Calibration error against the finished trials (sequential), per source and rule."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    keys = [f"{lo}-{hi}" if hi < 10_000 else f"{lo}+" for lo, hi in FINISHED_BINS]
    for ax, rule in zip(axes, ("prior", "study"), strict=True):
        for src in SOURCES:
            c = cells[(src, "resampled", rule, 0.0, DEFAULT_THRESHOLD)]["by_finished"]
            ys = [c.get(k, (None, 0))[0] for k in keys]
            xs = [i for i, y in enumerate(ys) if y is not None]
            ax.plot(xs, [ys[i] for i in xs], marker="o", label=src)
        ax.axhline(0.05, color="grey", ls=":", lw=1)
        ax.set_xticks(range(len(keys)), keys)
        ax.set_xlabel("finished trials the verdict had")
        ax.set_title({"prior": "prior alone", "study": "with the study's finished pairs"}[rule])
    axes[0].set_ylabel("calibration error (resampled, sequential order)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None, printer: Callable[[str], None] = print) -> None:
    """``study_calibration.py OUT [--resample K]``."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for README.md, cells.json and the plot")
    ap.add_argument("--rows", type=Path, default=PRIORS / "rows.csv.gz",
                    help="the prior's rows (benchmarks/pair_prior.py rows)")
    ap.add_argument("--resample", type=int, default=4,
                    help="random sub-sweeps per group in the resampled mode")
    args = ap.parse_args(argv)
    cells = grid(load(args.rows), args.resample)
    command = (".venv/bin/python benchmarks/study_calibration.py "
               f"{args.out} --resample {args.resample}")
    write(cells, args.out, command)
    printer(f"wrote {args.out / 'README.md'}")


if __name__ == "__main__":
    main()
