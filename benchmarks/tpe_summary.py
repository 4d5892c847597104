"""One table of ``benchmarks/tpe_seeds.sh``: the TPE study (benchmarks/optuna_charlm.py) at
each sampler seed, every arm's steps, best final and regret, and the shadow arm's reliability.

    .venv/bin/python benchmarks/tpe_summary.py benchmarks/results/optuna_charlm/seeds

Regret is against the best final of the seed's no-pruner arm (the shadow, which trains every
trial to its end). The reliability table pools the shadow arm's stored verdicts of every seed
(one per trial and checkpoint: the first at that checkpoint, as the pruner stores it) with
their outcome: the trial ended more than the pruner's tolerance below the competitor named.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hpo.bench.reliability import format_reliability, reliability

ARMS = {"shadow": "no pruner (shadow)", "median": "MedianPruner()",
        "collapse": "CollapsePruner(), self-calibrating",
        "collapse_reference": "CollapsePruner(reference=proxy curve)"}


def main(root: Path) -> None:
    """Print the table (markdown) for the seeds under ``root``."""
    runs = sorted(p for p in root.glob("seed*/optuna_charlm.json"))
    print("# The TPE study at three sampler seeds\n")
    print("    benchmarks/tpe_seeds.sh " + str(root) + "\n")
    print((__doc__ or "").split("\n\n", 2)[2].strip() + "\n")
    print("| seed | arm | steps trained | of no pruner | trials pruned | best final | regret |")
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    wins = {a: 0 for a in ARMS}
    for path in runs:
        res = json.loads(path.read_text())
        seed = res["setup"]["sampler_seed"]
        arms = res["arms"]
        base_steps = sum(t["steps"] or 0 for t in arms["shadow"]["trials"])
        base_best = min(t["final"] for t in arms["shadow"]["trials"] if t["final"] is not None)
        median = None
        for arm, title in ARMS.items():
            if arm not in arms:
                continue
            trials = arms[arm]["trials"]
            steps = sum(t["steps"] or 0 for t in trials)
            best = min(t["final"] for t in trials if t["final"] is not None)
            pruned = sum(t["state"] == "PRUNED" for t in trials)
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
    for arm in ("collapse", "collapse_reference"):
        print(f"- {ARMS[arm]}: no more steps than MedianPruner at no worse a best on "
              f"{wins[arm]} of {len(runs)} seeds.")
    print("\nThe shadow arm's stated probabilities (every seed):\n")
    print("```")
    print(format_reliability(reliability(verdicts, thresholds=(0.02, 0.05)), "shadow arm"))
    print("```")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
