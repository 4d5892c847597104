"""The rule's threshold and the pair law's widening, chosen leave one source out.

Reads the ``hpo bench`` JSON of each source (``benchmarks/bench_sources.sh``: recorded groups
and resampled sub-sweeps, lockstep and sequential) for each candidate widening K of the pair
scale per log unit of extrapolation (``predictors.predict.PAIR_WIDENING``; one folder of
bench results per candidate, made with ``benchmarks/pair_widening.py K bench ...``), and, for
each source held out, picks the (K, threshold) of the frontier (``collapse`` at the default
and ``collapse@threshold T``) that spends the least on the other sources' recorded groups
(mean compute over both modes) among those *safe* on every other source's recorded groups, in
both modes (every candidate has the recorded groups; the resampled sub-sweeps are reported at
the choice):

* max regret at most ``GOAL_MAX_REGRET`` (0.2%), and
* honest in the tail it acts on: in the shadow replay (``reliability``), the verdicts below
  the threshold ended below their competitor at most at the threshold's rate plus twice its
  binomial error, ``T + 2 sqrt(T (1 - T) / n)``.

It then shows the held-out source at that choice beside what the choice made on all four
sources gives there (the in-sample row), with the oracle's compute and the cheapest peer at max
regret <= 0.2%, and every candidate's frontier.

    .venv/bin/python benchmarks/choose_threshold.py 2=benchmarks/results/bench \
        1=benchmarks/results/bench/widening_1 0.5=benchmarks/results/bench/widening_0.5
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from hpo.bench import GOAL_MAX_REGRET
from hpo.bench.knobs import FRONTIER_THRESHOLDS
from hpo.pruning import DEFAULT_THRESHOLD

SOURCES = ("lr_scheduling", "multipowerlaw", "nanochat", "marin")
TABLES = ("", "_resampled")
MODES = ("lockstep", "sequential")


def _rows(result: dict[str, Any], mode: str) -> dict[float, dict[str, Any]]:
    """threshold -> the collapse row of that threshold in ``mode`` (the plain ``collapse``
    row at the threshold the bench ran as its default)."""
    methods = result["modes"][mode]["methods"]
    out = {float(name.split()[-1]): row for name, row in methods.items()
           if name.startswith("collapse@threshold ")}
    default = result.get("collapse_threshold")
    if default is None:  # the one threshold of the grid without a row of its own
        default = min({DEFAULT_THRESHOLD, *FRONTIER_THRESHOLDS} - set(out))
    out[float(default)] = methods["collapse"]
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
    """Safe on ``source``'s recorded groups, both modes (module docstring)."""
    for table in TABLES[:1]:
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


def spend(results: dict[str, dict[str, Any]], sources: list[str], threshold: float) -> float:
    """Mean compute at ``threshold`` over the recorded groups of ``sources``, both modes."""
    vals = [_rows(res, mode)[threshold]["mean_compute"]
            for s in sources for table in TABLES[:1] if (res := results.get(s + table))
            for mode in MODES]
    return sum(vals) / len(vals)


def choose(candidates: dict[float, dict[str, dict[str, Any]]], sources: list[str]
           ) -> tuple[float, float] | None:
    """The (K, threshold) safe on every source of ``sources`` that spends least there (ties:
    the larger K, then the smaller threshold: the cautious one)."""
    options = []
    for k, results in candidates.items():
        if not all(s in results for s in sources):
            continue
        first = results[sources[0]]
        for t in sorted(_rows(first, "lockstep")):
            if all(safe(results, s, t) for s in sources):
                options.append((spend(results, sources, t), -k, t))
    if not options:
        return None
    _, neg_k, t = min(options)
    return -neg_k, t


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
    p.add_argument("candidates", nargs="+", metavar="K=DIR",
                   help="a pair widening K and the folder of its hpo bench JSON files")
    args = p.parse_args()
    candidates: dict[float, dict[str, dict[str, Any]]] = {}
    for spec in args.candidates:
        k, _, folder = spec.partition("=")
        results = {}
        for s in SOURCES:
            for table in TABLES:
                path = Path(folder) / f"{s}{table}.json"
                if path.exists():
                    results[s + table] = json.loads(path.read_text())
        candidates[float(k)] = results
    sources = [s for s in SOURCES if any(s + t in r for r in candidates.values() for t in TABLES)]
    everywhere = choose(candidates, sources)
    print(f"chosen on all {len(sources)} sources (in-sample): pair widening K, threshold = "
          f"{everywhere}")
    print()
    print("| held out | table | mode | K, threshold chosen on the others | compute | "
          "mean / max regret | below it: wrong / n | in-sample choice: compute, max regret | "
          "oracle@0.2 | cheapest peer at max regret <= 0.2% |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in sources:
        chosen = choose(candidates, [o for o in sources if o != s])
        for table in TABLES:
            for mode in MODES:
                res = (candidates[chosen[0]] if chosen else {}).get(s + table)
                ref = next((r[s + table] for r in candidates.values() if s + table in r), None)
                if ref is None:
                    continue
                oracle = ref["modes"][mode]["methods"]["oracle@0.2"]["mean_compute"]
                inside = None
                if everywhere is not None and s + table in candidates[everywhere[0]]:
                    inside = _rows(candidates[everywhere[0]][s + table], mode)[everywhere[1]]
                ins = (f"{inside['mean_compute']:.3f}, {inside['max_regret']:.3%}"
                       if inside else "-")
                if chosen is None or res is None:
                    cells = ["none safe" if chosen is None else f"{chosen[0]:g}, {chosen[1]:g}",
                             "-", "-", "-"]
                else:
                    row, tail = _rows(res, mode)[chosen[1]], _tail(res, mode, chosen[1])
                    cells = [f"{chosen[0]:g}, {chosen[1]:g}", f"{row['mean_compute']:.3f}",
                             f"{row['mean_regret']:.3%} / {row['max_regret']:.3%}",
                             "-" if tail is None else f"{tail['wrong']} / {tail['n']}"]
                print(f"| {s} | {'resampled' if table else 'recorded'} | {mode} | "
                      + " | ".join(cells) + f" | {ins} | {oracle:.3f} | "
                      f"{_cheapest_peer(ref, mode)} |")
    print()
    for k, results in sorted(candidates.items()):
        print(f"frontier at K = {k:g}: compute / max regret, verdicts below it wrong / n")
        for key, res in results.items():
            for mode in MODES:
                cells = []
                for t, r in sorted(_rows(res, mode).items()):
                    tail = _tail(res, mode, t)
                    w = "" if tail is None else f" ({tail['wrong']}/{tail['n']})"
                    cells.append(f"{t:g}: {r['mean_compute']:.3f} / {r['max_regret']:.2%}{w}")
                print(f"  {key:26s} {mode:10s} " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
