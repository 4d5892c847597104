"""One markdown table from the JSON files of ``benchmarks/bench_sources.sh``: per source and
launch mode, the collapse default beside oracle@0.2, the goal line of ``hpo bench`` (recomputed
with the current goal) and the peers that spend no more at no higher mean regret.

    .venv/bin/python benchmarks/bench_summary.py DIR [--rows] [--before DIR]

``--rows`` adds every collapse knob row (threshold sweep, ablations) of each table;
``--before DIR`` prints instead one row per table and mode: the collapse default of DIR beside
that of the other directory, oracle@0.2, and the cheapest peer with max regret <= 0.2%;
``--reliability`` prints instead the shadow replays' reliability per table and mode: the
verdicts below the default threshold and below a few others (wrong / n), the calibration error
(count-weighted mean |stated - observed| over the bins; recomputed from the bins for files
written before it was stored), and the stated and observed rates of every bin of 20 or more
verdicts.

``--peers`` prints instead, per table and mode, the collapse default beside oracle@0.2,
HyperbandPruner and predicted / current best at t^ 0.2 (compute, mean / max regret, best
stopped).

    .venv/bin/python benchmarks/bench_summary.py DIR [--rows] [--before DIR] [--reliability]
        [--peers]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hpo.bench import calibration_error, compare_to_goal

ORDER = ("lr_scheduling", "multipowerlaw", "nanochat", "marin")


def _cell(m: dict) -> str:
    return f"{m['mean_regret']:.3%} / {m['max_regret']:.3%} at {m['mean_compute']:.3f}"


def summary_lines(directory: Path, rows: bool = False) -> list[str]:
    """The table's lines for every ``*.json`` in ``directory``."""
    files = sorted(directory.glob("*.json"),
                   key=lambda p: (next((i for i, s in enumerate(ORDER) if p.stem.startswith(s)),
                                       len(ORDER)), p.stem))
    out = ["| table | mode | groups | collapse: mean / max regret at compute | oracle@0.2 | "
           "x oracle | goal | peers spending no more at no higher mean regret |",
           "|---|---|---|---|---|---|---|---|"]
    for path in files:
        data = json.loads(path.read_text())
        for mode, block in data["modes"].items():
            methods = block["methods"]
            if "collapse" not in methods:
                continue
            goal = compare_to_goal(methods, block.get("floor"))["goal"]
            ours = methods["collapse"]
            beaten = ", ".join(f"{n} ({_cell(methods[n])})" for n in goal["beaten_by"]) or "none"
            out.append(f"| {path.stem} | {mode} | {ours['groups']} | {_cell(ours)} | "
                       f"{goal['oracle']:.3f} | {ours['mean_compute'] / goal['oracle']:.2f} | "
                       f"{'met' if goal['met'] else 'not met'} | {beaten} |")
            if rows:
                for name, m in methods.items():
                    if name.startswith("collapse@"):
                        out.append(f"| | {mode} | | {name}: {_cell(m)} | | "
                                   f"{m['mean_compute'] / goal['oracle']:.2f} | | |")
    return out


def compare(after: Path, before: Path) -> list[str]:
    """Before / after per table and mode, with the oracle and the cheapest peer within the
    regret bound."""
    from hpo.bench import GOAL_MAX_REGRET

    out = ["| table | mode | before: mean / max regret at compute | after | oracle@0.2 | "
           "after / oracle | cheapest peer with max regret <= 0.2% |",
           "|---|---|---|---|---|---|---|"]
    for path in sorted(after.glob("*.json"), key=lambda p: (
            next((i for i, s in enumerate(ORDER) if p.stem.startswith(s)), len(ORDER)), p.stem)):
        new = json.loads(path.read_text())
        old_path = before / path.name
        old = json.loads(old_path.read_text()) if old_path.exists() else {"modes": {}}
        for mode, block in new["modes"].items():
            methods = block["methods"]
            ours = methods["collapse"]
            oracle = methods["oracle@0.2"]["mean_compute"]
            prev = old["modes"].get(mode, {}).get("methods", {}).get("collapse")
            peers = [(m["mean_compute"], n) for n, m in methods.items()
                     if not n.startswith(("collapse", "oracle"))
                     and m["max_regret"] <= GOAL_MAX_REGRET + 1e-12]
            peer = min(peers) if peers else None
            peer_cell = (f"{peer[1]}: {_cell(methods[peer[1]])}" if peer else "none")
            out.append(f"| {path.stem} | {mode} | {_cell(prev) if prev else '-'} | "
                       f"{_cell(ours)} | {oracle:.3f} | {ours['mean_compute'] / oracle:.2f} | "
                       f"{peer_cell} |")
    return out


PEERS = ("oracle@0.2", "HyperbandPruner", "predicted_best@0.2", "current_best@0.2")


def peer_lines(directory: Path) -> list[str]:
    """Per table and mode, the collapse default beside oracle@0.2, HyperbandPruner and the
    paper's two rules at t^ 0.2 (predicted best, current best): compute, mean / max regret,
    best stopped."""
    def cell(m: dict | None) -> str:
        if m is None:
            return "-"
        return (f"{m['mean_compute']:.3f}, {m['mean_regret']:.3%} / {m['max_regret']:.3%}, "
                f"{m['best_stopped']}")

    out = ["| table | mode | groups | collapse | " + " | ".join(PEERS) + " |",
           "|---|---|---|---|" + "---|" * len(PEERS)]
    for path in sorted(directory.glob("*.json"), key=lambda p: (
            next((i for i, s in enumerate(ORDER) if p.stem.startswith(s)), len(ORDER)), p.stem)):
        data = json.loads(path.read_text())
        for mode, block in data["modes"].items():
            methods = block["methods"]
            if "collapse" not in methods:
                continue
            out.append(f"| {path.stem} | {mode} | {methods['collapse']['groups']} | "
                       f"{cell(methods['collapse'])} | "
                       + " | ".join(cell(methods.get(n)) for n in PEERS) + " |")
    return out


def reliability_lines(directory: Path, below: tuple[float, ...] = (0.01, 0.02, 0.05, 0.2)
                      ) -> list[str]:
    """The shadow replays' reliability, one row per table and mode."""
    out = ["| table | mode | verdicts | " + " | ".join(f"below {t:g}: wrong / n" for t in below)
           + " | calibration error | bins of >= 20 verdicts: stated -> observed |",
           "|---|---|---|" + "---|" * len(below) + "---|---|"]
    for path in sorted(directory.glob("*.json"), key=lambda p: (
            next((i for i, s in enumerate(ORDER) if p.stem.startswith(s)), len(ORDER)), p.stem)):
        data = json.loads(path.read_text())
        for mode, block in data["modes"].items():
            table = block.get("reliability")
            if table is None:
                continue
            tails = {round(t["threshold"], 9): t for t in table["tail"]}
            cells = []
            for t in below:
                row = tails.get(round(t, 9))
                cells.append("-" if row is None else f"{row['wrong']} / {row['n']}")
            bins = "; ".join(f"{b['stated']:.1%} -> {b['observed']:.1%} ({b['n']})"
                             for b in table["bins"] if b["n"] >= 20)
            ce = table.get("calibration_error", calibration_error(table["bins"]))
            out.append(f"| {path.stem} | {mode} | {table['verdicts']} | " + " | ".join(cells)
                       + f" | {'-' if ce is None else f'{ce:.3g}'} | {bins or '-'} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--rows", action="store_true", help="add every collapse knob row")
    parser.add_argument("--before", type=Path, default=None,
                        help="a directory of the same tables to compare with")
    parser.add_argument("--reliability", action="store_true",
                        help="the shadow replays' reliability instead")
    parser.add_argument("--peers", action="store_true",
                        help="the collapse default beside oracle@0.2, HyperbandPruner and "
                             "predicted / current best at t^ 0.2 instead")
    args = parser.parse_args()
    if args.peers:
        lines = peer_lines(args.directory)
    elif args.reliability:
        lines = reliability_lines(args.directory)
    elif args.before:
        lines = compare(args.directory, args.before)
    else:
        lines = summary_lines(args.directory, args.rows)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
