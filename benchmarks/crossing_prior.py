"""The crossing prior (same-step evidence), fitted on every source and with each held out, and
its calibration on the source it never saw, one trial after another.

    .venv/bin/python benchmarks/crossing_prior.py benchmarks/results/crossing

Every sweep group of the four shared sources (every run of a group, its train or val split as
``_sources.py`` reads it) and of the CPU sweeps (``benchmarks/data``: the two CPU sweeps and the
quickstart family, held out together as ``cpu``) gives, at t^ 0.1-0.5, every pair's gap at t^
and whether the trial behind ended more than the default tolerance below the other
(:func:`hpo.predictors.crossings.crossing_pairs`, levels by
:func:`hpo.predictors.crossings.level_at`). :func:`fit_crossing_prior` fits the prior on all
sources (``predictors/crossing_prior.json``, shipped) and without each
(``without_<source>.json`` in OUT).

Then each source is replayed one trial after another with the prior fitted without it: trial
k meets the k earlier (finished) trials; at each t^ where it is behind one of them, the law
fitted on the earlier trials' pairs (:func:`fit_crossing_law`, n_eff = k - 1) states the
probability that it ends more than the tolerance below that one, and the outcome is known.
The reliability table of those statements, per source: the calibration error and the
statements below 0.02 that came true.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _sources import load_sources  # noqa: E402

from hpo.bench.data import load_groups  # noqa: E402
from hpo.bench.reliability import reliability  # noqa: E402
from hpo.predictors import read_curves  # noqa: E402
from hpo.predictors.crossings import (  # noqa: E402
    crossing_pairs,
    fit_crossing_law,
    fit_crossing_prior,
    level_at,
)
from hpo.pruning import DEFAULT_TOLERANCE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5)
CPU = ("cpu_sweep", "cpu_sweep_w64", "quickstart_family")


def source_groups() -> dict[str, list]:
    """Each source's sweep groups (every run, proxies included: a sweep is a sweep)."""
    out: dict[str, list] = {}
    for s in load_sources():
        out[s.name] = load_groups(s.frame, split=s.split, max_points=400)
    out["cpu"] = [g for name in CPU
                  for g in load_groups(read_curves(ROOT / "benchmarks" / "data"
                                                   / f"{name}.csv.gz"))]
    return out


def levels(group) -> dict[float, list[float | None]]:
    """Each trial's level at each fraction."""
    return {f: [level_at(t.steps / t.total_steps, t.values, f) for t in group.trials]
            for f in FRACTIONS}


def pairs_of(groups, tol: float) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """A source's pairs per fraction, every group pooled."""
    out: dict[float, tuple[list, list]] = {f: ([], []) for f in FRACTIONS}
    for g in groups:
        lv = levels(g)
        for f in FRACTIONS:
            keep = [i for i, x in enumerate(lv[f]) if x is not None]
            if len(keep) < 2:
                continue
            gap, closed = crossing_pairs([lv[f][i] for i in keep],
                                         [g.trials[i].final for i in keep], tol)
            out[f][0].extend(gap.tolist())
            out[f][1].extend(closed.tolist())
    return {f: (np.asarray(a), np.asarray(b, dtype=bool)) for f, (a, b) in out.items() if a}


def sequential(groups, prior, tol: float) -> list[dict]:
    """Every statement of a one-trial-after-another replay (module docstring)."""
    rows = []
    for g in groups:
        lv = levels(g)
        finals = [t.final for t in g.trials]
        for k in range(1, len(g.trials)):
            for f in FRACTIONS:
                earlier = [i for i in range(k) if lv[f][i] is not None]
                if lv[f][k] is None or not earlier:
                    continue
                if len(earlier) >= 2:
                    gap, closed = crossing_pairs([lv[f][i] for i in earlier],
                                                 [finals[i] for i in earlier], tol)
                    law = fit_crossing_law(prior, f, gap, closed, len(earlier) - 1)
                else:
                    law = prior.law(f)
                for j in earlier:
                    g_kj = math.log(lv[f][k] / lv[f][j])
                    if g_kj <= 0:
                        continue
                    p = law.probability(g_kj)
                    won = finals[k] < finals[j] * (1 - tol)
                    rows.append({"probability": p, "won": bool(won)})
    return rows


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:])[0])
    out.mkdir(parents=True, exist_ok=True)
    tol = DEFAULT_TOLERANCE
    groups = source_groups()
    pairs = {name: pairs_of(gs, tol) for name, gs in groups.items()}
    shipped = fit_crossing_prior(pairs, meta={
        "fitted_on": sorted(pairs), "tolerance": tol,
        "made_by": "benchmarks/crossing_prior.py benchmarks/results/crossing"})
    (ROOT / "predictors" / "crossing_prior.json").write_text(
        json.dumps(shipped.to_dict(), indent=1) + "\n")
    lines = ["# The crossing prior and its calibration on each source held out", "",
             "    .venv/bin/python benchmarks/crossing_prior.py benchmarks/results/crossing", "",
             "logit P(the trial behind at t^ ends more than 0.2% below the other) = a + b log "
             "gap. Shipped prior (every source):", "",
             "| t^ | a | b | sd a | sd b | P(close) at gap 1% / 5% / 20% |",
             "|---|---|---|---|---|---|"]
    for f in shipped.fractions:
        law = shipped.law(f)
        a, b, sa, sb = shipped.at(f)
        probs = " / ".join(f"{law.probability(x):.3f}" for x in (0.01, 0.05, 0.2))
        lines.append(f"| {f:g} | {a:.2f} | {b:.2f} | {sa:.2f} | {sb:.2f} | {probs} |")
    lines += ["", "## One trial after another, the prior fitted without the source", "",
              "Each statement: a trial behind an earlier (finished) one at t^, the law fitted "
              "on the earlier trials' pairs. Below 0.02: statements and how many came true "
              "(allowed: 0.02 + 2 binomial standard errors).", "",
              "| source | statements | calibration error | below 0.02 | came true | allowed |",
              "|---|---|---|---|---|---|"]
    for name in pairs:
        prior = fit_crossing_prior({k: v for k, v in pairs.items() if k != name},
                                   meta={"without": name})
        (out / f"without_{name}.json").write_text(json.dumps(prior.to_dict(), indent=1) + "\n")
        rows = sequential(groups[name], prior, tol)
        table = reliability(rows, thresholds=(0.02,))
        tail = table["tail"][0]
        n = tail["n"]
        allowed = 0.02 + 2 * math.sqrt(0.02 * 0.98 / n) if n else float("nan")
        ce = table["calibration_error"]
        lines.append(f"| {name} | {len(rows)} | {ce:.3f} | {n} | {tail['wrong']} | "
                     f"{allowed:.1%} |")
    text = "\n".join(lines) + "\n"
    (out / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
