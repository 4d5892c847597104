"""Leave-one-source-out choice of the default predictor's settings.

    .venv/bin/python benchmarks/choose_default.py CANDIDATES.json

Reads the per-target output of ``benchmarks/corpus_candidates.py`` (raw intervals: the
calibrated half-width alone). Each choice is made on three sources and checked on the fourth,
for each of the four:

* the point predictor: the candidate with the smallest error on the three (the median over
  them of each source's median |error|, averaged over t^ 0.1 / 0.2 / 0.3);
* the interval: half-width = scale x calibrated half-width x (1 + widening x d), with d the
  target's extrapolation beyond its family's proxies' ranges (the ``extrapolation`` of each
  per-target row, ``hpo.predictors.predict.extrapolation``);
  (scale, widening) is the grid point whose coverage on the three sources is nearest to the
  70-90% band (the summed distance outside it over sources and fractions).

The last row makes both choices on all four sources: what ships (a scale of 1, which the
predictor does not carry as a constant, and ``hpo.predictors.predict.EXTRAPOLATION_WIDENING``).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpo.predictors.predict import EXTRAPOLATION_WIDENING  # noqa: E402

LABELS = ("0.1", "0.2", "0.3")
SCALES = np.round(np.exp(np.linspace(math.log(0.5), math.log(8.0), 25)), 3)
WIDENINGS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
BAND = (0.7, 0.9)


def load(path: str) -> dict[str, dict]:
    """Per source: method -> label -> array of (log error, raw half-width, extrapolation d)."""
    data = json.loads(Path(path).read_text())["sources"]
    out = {}
    for name, res in data.items():
        table: dict[str, dict[str, list]] = {}
        for row in res["per_target"]:
            for method, by_lab in row["predictions"].items():
                for lab, p in by_lab.items():
                    if "log_err" in p:
                        table.setdefault(method, {}).setdefault(lab, []).append(
                            (p["log_err"], p["half"], row["extrapolation"]))
        out[name] = {m: {lab: np.asarray(v, dtype=float) for lab, v in by.items()}
                     for m, by in table.items()}
    return out


def point_score(src: dict, method: str) -> float:
    if method not in src or any(lab not in src[method] for lab in LABELS):
        return math.inf
    return float(np.mean([np.median(np.abs(np.expm1(src[method][lab][:, 0])))
                          for lab in LABELS]))


def coverages(src: dict, method: str, scale: float, widen: float) -> list[float]:
    out = []
    for lab in LABELS:
        a = src.get(method, {}).get(lab)
        if a is not None and a.size:
            out.append(float(np.mean(np.abs(a[:, 0]) <= scale * a[:, 1] * (1 + widen * a[:, 2]))))
    return out


def band_gap(covs: list[float]) -> float:
    return float(sum(max(0.0, BAND[0] - c) + max(0.0, c - BAND[1]) for c in covs))


def choose(data: dict, names: list[str]) -> tuple[str, float, float]:
    methods = sorted({m for n in names for m in data[n] if m.startswith(("auto", "plain",
                                                                          "stretch"))})
    best = min(methods, key=lambda m: np.median([point_score(data[n], m) for n in names]))
    grid = [(sum(band_gap(coverages(data[n], best, s, w)) for n in names), w, s)
            for s in SCALES for w in WIDENINGS]
    _, widen, scale = min(grid)
    return best, float(scale), float(widen)


def row(src: dict, method: str, scale: float, widen: float) -> str:
    cells = []
    for lab, cov in zip(LABELS, coverages(src, method, scale, widen), strict=False):
        a = src[method][lab]
        e = np.abs(np.expm1(a[:, 0]))
        cells.append(f"{100 * np.median(e):.2f} / {100 * np.max(e):.1f} / {100 * cov:.0f}%")
    return " | ".join(cells)


def main(path: str) -> int:
    data = load(path)
    names = list(data)
    print("| held out | point predictor | scale | widening | t^ 0.1: median / max / covered "
          "| t^ 0.2 | t^ 0.3 |")
    print("|---|---|---|---|---|---|---|")
    for held in names:
        method, scale, widen = choose(data, [n for n in names if n != held])
        print(f"| {held} | {method} | {scale:.2f} | {widen:g} | "
              f"{row(data[held], method, scale, widen)} |")
    method, scale, widen = choose(data, names)
    print(f"\nchosen on all four: {method}, scale {scale:.2f}, widening {widen:g} "
          f"(shipped: scale 1, widening {EXTRAPOLATION_WIDENING:g})")
    for n in names:
        print(f"  {n}: {row(data[n], method, scale, widen)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
