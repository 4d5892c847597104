"""The tables of ``benchmarks/tpe_seeds.sh``: the TPE study (benchmarks/optuna_charlm.py) at
each sampler seed, every arm's steps, best final and regret; the best measured final against
the steps trained (``best_vs_steps.png``), the steps each arm spent to reach the no-pruner
study's best, where each arm's sampled settings concentrate, and the shadow arm's reliability.

    .venv/bin/python benchmarks/tpe_summary.py benchmarks/results/optuna_charlm/seeds

Regret is against the best final of the seed's no-pruner arm (the shadow, which trains every
trial to its end). The reliability table pools the shadow arm's stored verdicts of every seed
(one per trial and checkpoint: the first at that checkpoint, as the pruner stores it) with
their outcome: the trial ended more than the pruner's tolerance below the competitor named.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from hpo.bench.reliability import format_reliability, reliability

ARMS = {"shadow": "no pruner (shadow)", "median": "MedianPruner()",
        "collapse": "CollapsePruner(), self-calibrating",
        "collapse_reference": "CollapsePruner(reference=proxy curve)",
        "collapse_predicted": "CollapsePruner(), stopped trials hand their predicted final to "
                              "TPE"}


def main(root: Path) -> None:
    """Print the table (markdown) for the seeds under ``root``."""
    results = [json.loads(p.read_text()) for p in sorted(root.glob("seed*/optuna_charlm.json"))]
    print("# The TPE study at three sampler seeds\n")
    print("    benchmarks/tpe_seeds.sh " + str(root) + "\n")
    print((__doc__ or "").split("\n\n", 2)[2].strip() + "\n")
    print("| seed | arm | steps trained | of no pruner | trials pruned | best final | regret |")
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    wins = {a: 0 for a in ARMS}
    for res in results:
        seed = res["setup"]["sampler_seed"]
        arms = res["arms"]
        base_steps = sum(t["steps"] or 0 for t in arms["shadow"]["trials"])
        base_best = min(t["final"] for t in arms["shadow"]["trials"] if t["final"] is not None)
        median = None
        for arm, title, trials in _arms(res):
            steps = sum(t["steps"] or 0 for t in trials)
            best = min(t["final"] for t in trials if t["final"] is not None)
            pruned = sum(t["state"] == "PRUNED" or t.get("predicted_value") is not None
                         for t in trials)
            print(f"| {seed} | {title} | {steps:,} | {steps / base_steps:.1%} | {pruned} of "
                  f"{len(trials)} | {best:.4f} | {best / base_best - 1:.2%} |")
            if arm == "median":
                median = (steps, best)
            elif arm.startswith("collapse") and median is not None:
                wins[arm] += steps <= median[0] and best <= median[1] + 1e-12
        finals = {t["number"]: t["final"] for t in arms["shadow"]["trials"]}
        for t in arms["shadow"]["trials"]:
            for p in (t.get("predictions") or {}).values():
                if p.get("probability") is None or p.get("against") is None:
                    continue
                other = finals.get(int(p["against"]))
                if t["final"] is None or other is None:
                    continue
                tol = p.get("tolerance") or 0.0
                verdicts.append({"probability": p["probability"],
                                 "won": t["final"] < other * (1 - tol)})
    print()
    for arm in ("collapse", "collapse_reference", "collapse_predicted"):
        print(f"- {ARMS[arm]}: no more steps than MedianPruner at no worse a best on "
              f"{wins[arm]} of {len(results)} seeds.")
    print()
    print(_curves_table(results))
    print(_concentration_table(results))
    _plot(results, root / "best_vs_steps.png")
    print("\nThe shadow arm's stated probabilities (every seed):\n")
    print("```")
    print(format_reliability(reliability(verdicts, thresholds=(0.02, 0.05)), "shadow arm"))
    print("```")


def _arms(res: dict) -> Iterator[tuple[str, str, list[dict]]]:
    """``(arm, title, trials)`` of each arm of one seed's results that ran, in :data:`ARMS`
    order."""
    for arm, title in ARMS.items():
        trials = res["arms"].get(arm, {}).get("trials")
        if trials:
            yield arm, title, trials


def best_vs_steps(trials: list[dict]) -> tuple[list[int], list[float]]:
    """The cumulative steps trained after each trial (in trial order) and the best measured
    final so far (``inf`` before the first)."""
    steps, best, out_s, out_b = 0, math.inf, [], []
    for t in sorted(trials, key=lambda t: t["number"]):
        steps += t["steps"] or 0
        if t["final"] is not None:
            best = min(best, t["final"])
        out_s.append(steps)
        out_b.append(best)
    return out_s, out_b


def _curves_table(results: list[dict]) -> str:
    """Steps each arm trained until its best measured final first reached the no-pruner
    study's best (or came within 0.2% of it), and its best at the no-pruner study's half
    budget of steps."""
    lines = ["Steps to reach the no-pruner study's best final (within 0.2%), and the best "
             "measured final after half of the no-pruner study's steps:\n",
             "| seed | arm | steps to the no-pruner best | best after half the steps |",
             "|---|---|---|---|"]
    for res in results:
        base_s, base_b = best_vs_steps(res["arms"]["shadow"]["trials"])
        target, half = base_b[-1] * 1.002, base_s[-1] / 2
        for _, title, trials in _arms(res):
            st, bt = best_vs_steps(trials)
            reach = next((s for s, b in zip(st, bt, strict=True) if b <= target), None)
            at_half = min((b for s, b in zip(st, bt, strict=True) if s <= half),
                          default=math.inf)
            lines.append(f"| {res['setup']['sampler_seed']} | {title} | "
                         f"{'never' if reach is None else f'{reach:,}'} | "
                         f"{'-' if not math.isfinite(at_half) else f'{at_half:.4f}'} |")
    return "\n".join(lines) + "\n"


def _concentration_table(results: list[dict]) -> str:
    """Where each arm's TPE-sampled settings (after the sampler's startup trials) lie: the
    median and the interquartile range of log10 lr and log10 weight decay, and of the
    no-pruner study's best setting."""
    lines = ["Where the sampled settings concentrate (trials 10 on, TPE's own choices; median "
             "[interquartile range] of log10):\n",
             "| seed | arm | log10 lr | log10 weight decay | best measured (lr, wd) |",
             "|---|---|---|---|---|"]
    for res in results:
        for _, title, trials in _arms(res):
            late = [t for t in trials if t["number"] >= 10]
            cells = []
            for key in ("lr", "weight_decay"):
                x = np.log10([t[key] for t in late])
                q = np.quantile(x, [0.25, 0.5, 0.75]) if x.size else [math.nan] * 3
                cells.append(f"{q[1]:.2f} [{q[0]:.2f}, {q[2]:.2f}]")
            done = [t for t in trials if t["final"] is not None]
            best = min(done, key=lambda t: t["final"])
            lines.append(f"| {res['setup']['sampler_seed']} | {title} | {cells[0]} | "
                         f"{cells[1]} | ({best['lr']:.3g}, {best['weight_decay']:.3g}) |")
    return "\n".join(lines) + "\n"


def _plot(results: list[dict], path: Path) -> None:
    """The best measured final against the steps trained, one panel per seed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.6),
                             squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        for arm, title, trials in _arms(res):
            st, bt = best_vs_steps(trials)
            ok = [i for i, b in enumerate(bt) if math.isfinite(b)]
            ax.step([st[i] for i in ok], [bt[i] for i in ok], where="post",
                    label=title.split(",")[0] if arm != "collapse_predicted"
                    else "collapse, predicted final to TPE")
        ax.set_title(f"TPE seed {res['setup']['sampler_seed']}")
        ax.set_xlabel("steps trained")
    axes[0][0].set_ylabel("best measured final")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
