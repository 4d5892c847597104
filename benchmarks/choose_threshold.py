"""The rule's one number, chosen leave one source out, and the frontier it sits on.

Reads the ``hpo bench`` JSON of each source (``benchmarks/bench_sources.sh``: recorded groups
and resampled sub-sweeps, lockstep and sequential) and, for each source held out, picks the
largest threshold of the frontier (``collapse`` at the default and ``collapse@threshold T``)
that is *safe* on every other source, in both modes and on both tables:

* max regret at most ``GOAL_MAX_REGRET`` (0.2%), and
* honest in the tail it acts on: in the shadow replay (``reliability``), the verdicts below
  the threshold ended below their competitor at most at the threshold's rate plus twice its
  binomial error, ``T + 2 sqrt(T (1 - T) / n)``.

It then shows the held-out source at that threshold beside what the threshold chosen on all
four sources gives there (the in-sample row), with the oracle's compute and the cheapest peer
at max regret <= 0.2%, and the frontier of every source.

    .venv/bin/python benchmarks/choose_threshold.py benchmarks/results/bench
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from hpo.bench import GOAL_MAX_REGRET
from hpo.pruning import DEFAULT_THRESHOLD

SOURCES = ("lr_scheduling", "multipowerlaw", "nanochat", "marin")
TABLES = ("", "_resampled")
MODES = ("lockstep", "sequential")


def _rows(result: dict[str, Any], mode: str) -> dict[float, dict[str, Any]]:
    """threshold -> the collapse row of that threshold in ``mode``."""
    methods = result["modes"][mode]["methods"]
    out = {DEFAULT_THRESHOLD: methods["collapse"]}
    for name, row in methods.items():
        if name.startswith("collapse@threshold "):
            out[float(name.split()[-1])] = row
    return out


def _tail(result: dict[str, Any], mode: str, threshold: float) -> dict[str, Any] | None:
    for row in (result["modes"][mode].get("reliability") or {}).get("tail", []):
        if math.isclose(row["threshold"], threshold):
            return row
    return None


def honest(tail: dict[str, Any] | None, threshold: float) -> bool:
    """Whether the verdicts below ``threshold`` were wrong at most at its rate (plus twice its
    binomial error); no verdict below it is honest."""
    if tail is None or not tail["n"]:
        return True
    n = tail["n"]
    return tail["wrong"] / n <= threshold + 2 * math.sqrt(threshold * (1 - threshold) / n)


def safe(results: dict[str, dict[str, Any]], source: str, threshold: float) -> bool:
    """Safe on ``source``: both tables, both modes (module docstring)."""
    for table in TABLES:
        res = results.get(source + table)
        if res is None:
            continue
        for mode in MODES:
            row = _rows(res, mode).get(threshold)
            if row is None or row["max_regret"] > GOAL_MAX_REGRET + 1e-12:
                return False
            if not honest(_tail(res, mode, threshold), threshold):
                return False
    return True


def choose(results: dict[str, dict[str, Any]], sources: list[str]) -> float | None:
    """The largest threshold safe on every source of ``sources``."""
    thresholds = sorted(_rows(results[sources[0]], "lockstep"))
    ok = [t for t in thresholds if all(safe(results, s, t) for s in sources)]
    return max(ok) if ok else None


def _cheapest_peer(result: dict[str, Any], mode: str) -> str:
    best = None
    for name, row in result["modes"][mode]["methods"].items():
        if name.startswith("collapse") or name.startswith("oracle"):
            continue
        if row["max_regret"] <= GOAL_MAX_REGRET + 1e-12 and (
                best is None or row["mean_compute"] < best[1]["mean_compute"]):
            best = (name, row)
    return "-" if best is None else f"{best[0]} {best[1]['mean_compute']:.3f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("bench_dir", help="folder of the hpo bench JSON files")
    args = p.parse_args()
    results = {}
    for s in SOURCES:
        for table in TABLES:
            path = Path(args.bench_dir) / f"{s}{table}.json"
            if path.exists():
                results[s + table] = json.loads(path.read_text())
    sources = [s for s in SOURCES if s in results]
    everywhere = choose(results, sources)
    print(f"threshold chosen on all {len(sources)} sources (in-sample): {everywhere}")
    print()
    print("| held out | table | mode | chosen on the others | compute | mean / max regret | "
          "below it: wrong / n | in-sample threshold: compute, max regret | oracle@0.2 | "
          "cheapest peer at max regret <= 0.2% |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in sources:
        chosen = choose(results, [o for o in sources if o != s])
        for table in TABLES:
            res = results.get(s + table)
            if res is None:
                continue
            for mode in MODES:
                rows = _rows(res, mode)
                oracle = res["modes"][mode]["methods"]["oracle@0.2"]["mean_compute"]
                inside = rows.get(everywhere) if everywhere is not None else None
                ins = (f"{inside['mean_compute']:.3f}, {inside['max_regret']:.3%}"
                       if inside else "-")
                if chosen is None:
                    cells = ["none safe", "-", "-", "-"]
                else:
                    row, tail = rows[chosen], _tail(res, mode, chosen)
                    cells = [f"{chosen:g}", f"{row['mean_compute']:.3f}",
                             f"{row['mean_regret']:.3%} / {row['max_regret']:.3%}",
                             "-" if tail is None else f"{tail['wrong']} / {tail['n']}"]
                print(f"| {s} | {'resampled' if table else 'recorded'} | {mode} | "
                      + " | ".join(cells) + f" | {ins} | {oracle:.3f} | "
                      f"{_cheapest_peer(res, mode)} |")
    print()
    print("frontier: compute / max regret per threshold (rows: source, table, mode)")
    for key, res in results.items():
        for mode in MODES:
            rows = _rows(res, mode)
            cells = [f"{t:g}: {r['mean_compute']:.3f} / {r['max_regret']:.2%}"
                     for t, r in sorted(rows.items())]
            print(f"  {key:26s} {mode:10s} " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
