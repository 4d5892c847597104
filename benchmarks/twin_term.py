"""How near a twin must be for the universal curve to follow it, and whether the curve gets a
trend in size, each chosen leave one source out.

The empirical curve carries a target's twin (the proxy nearest its LR, batch, tau and TPP,
:mod:`hpo.predictors.twins`) with the weight w = exp(-d^2 / 2 width^2), d the settings'
distance in log units: log lhat moves w of the way to the twin's own normalized curve. For
each source (the four shared ones and the CPU sweeps `hpo run` records), every target is
predicted at t^ 0.1 / 0.2 / 0.3 with each width of ``WIDTHS`` (0: no twin term; one fitted,
calibrated curve per family, its width switched) beside the twin peer and the raw loss. The
width for each source held out is the one with the smallest mean log median error over the
other sources (a scale-free score: Marin's errors are 100x multipowerlaw's). The same score
decides the size trend (``size_trend``: log n_params beside TPP in the empirical curve, where
the proxies span sizes) against the curve without it (``collapse``, the default).

    .venv/bin/python benchmarks/twin_term.py benchmarks/results/twin   # about 10 min

Writes ``twin_term.json`` (every source, method and fraction; the choices) and ``eval.json``
(every prediction, for ``benchmarks/peer_table.py``) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _sources import load_sources  # noqa: E402

from hpo.predictors import read_curves  # noqa: E402
from hpo.predictors.calibrate import fit_universal_curve  # noqa: E402
from hpo.predictors.evaluate import Source, default_methods, evaluate_predictors  # noqa: E402
from hpo.predictors.predict import CollapsePredictor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (0.0, 0.1, 0.2, 0.4, 0.8)
FRACTIONS = (0.1, 0.2, 0.3)
#: the CPU sweeps `hpo run` recorded: file, proxy threshold; held out together
CPU = {"cpu_quickstart": ("quickstart_family.csv.gz", 5e4),
       "cpu_sweep": ("cpu_sweep.csv.gz", 2e4),
       "cpu_sweep_w64": ("cpu_sweep_w64.csv.gz", 5e4)}
HOLDOUT = {name: "cpu" for name in CPU}


def sources() -> list[Source]:
    """The shared sources and the CPU sweeps."""
    out = load_sources()
    for name, (file, proxy_max) in CPU.items():
        out.append(Source(name, read_curves(ROOT / "benchmarks" / "data" / file), proxy_max,
                          "train"))
    return out


def weighted_methods() -> dict:
    """One collapse method per twin width, sharing each family's fitted curve."""
    cache: dict[int, object] = {}

    def make(w: float):
        def build(proxies, fractions, level):
            key = id(proxies)
            if key not in cache:
                cache.clear()
                cache[key] = fit_universal_curve(proxies)
            curve = cache[key]
            pred = CollapsePredictor(curve, level=level)
            pred.curve = _Weighted(curve, w)
            return pred
        return build

    # the product's default first: width 0, no size trend
    methods = {_name(w): make(w) for w in WIDTHS}
    methods["size_trend"] = _size_trend
    methods.update(default_methods(forms=(), peers=True))
    return methods


def _name(width: float) -> str:
    return "collapse" if width == 0 else f"twin_width={width:g}"


def _size_trend(proxies, fractions, level):
    """The collapse predictor on a curve with a trend in log size beside TPP."""
    return CollapsePredictor(fit_universal_curve(proxies, size_trend=True), level=level)


class _Weighted:
    """A fitted hybrid curve read with another twin width (the fit itself is shared)."""

    def __init__(self, curve, width: float) -> None:
        self._curve, self._width = curve, width

    def __getattr__(self, name):
        return getattr(self._curve, name)

    def _with_width(self, method: str, *args):
        emp = self._curve.empirical
        saved, emp.twin_width = emp.twin_width, self._width
        try:
            return getattr(self._curve, method)(*args)
        finally:
            emp.twin_width = saved

    def predict(self, t_hat, controls):
        return self._with_width("predict", t_hat, controls)

    def twin_weight(self, controls):
        return self._with_width("twin_weight", controls)


def choose(table: dict, candidates: list[str]) -> dict:
    """Per held-out group: the candidate method with the smallest mean log median error over
    the other sources."""
    groups = sorted({HOLDOUT.get(s, s) for s in table})
    out = {}
    for held in groups:
        score = {}
        for m in candidates:
            logs = [math.log(max(table[s][m][f"{f:g}"]["median"], 1e-5))
                    for s in table if HOLDOUT.get(s, s) != held for f in FRACTIONS
                    if table[s][m][f"{f:g}"]["median"] is not None]
            score[m] = float(np.mean(logs))
        out[held] = {"choice": min(score, key=score.get), "scores": score}
    return out


def command_line(doc: str) -> argparse.Namespace:
    """``OUT [--max-targets N]`` of a prediction table's script (``doc``: its docstring); OUT
    is created."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-targets", type=int, default=60)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def main() -> None:
    args = command_line(__doc__)
    table: dict[str, dict] = {}
    results: dict[str, dict] = {}
    for src in sources():
        res = results[src.name] = evaluate_predictors(
            src.frame, src.proxy_max_params, FRACTIONS, src.split, methods=weighted_methods(),
            max_targets=args.max_targets)
        table[src.name] = {
            m: {lab: {"median": s["median_abs_rel_err"], "max": s["max_abs_rel_err"],
                      "coverage": s["coverage"], "n": s["n"],
                      "pairs": res["pairwise"][m][lab]["order_accuracy"],
                      "n_pairs": res["pairwise"][m][lab]["n_pairs"]}
                for lab, s in by.items()}
            for m, by in res["methods"].items()}
        print(f"== {src.name}", flush=True)
        for m, by in table[src.name].items():
            cells = [f"{_pct(c['median'])} / {_pct(c['max'])} / "
                     f"{'-' if c['pairs'] is None else format(c['pairs'], '.3f')} (n {c['n']})"
                     for c in by.values()]
            print(f"{m:18s} " + " | ".join(cells), flush=True)
    chosen = {"twin_width": choose(table, [_name(w) for w in WIDTHS]),
              "size_trend": choose(table, ["collapse", "size_trend"])}
    for what, by in chosen.items():
        print(f"== leave one source out: {what} chosen on the other sources")
        for held, c in by.items():
            scores = ", ".join(f"{m}: {v:.3f}" for m, v in c["scores"].items())
            print(f"{held:14s} {c['choice']:16s} (mean log median error elsewhere: {scores})")
    (args.out / "twin_term.json").write_text(json.dumps(
        {"table": table, "chosen": chosen}, indent=1))
    # every prediction, for benchmarks/peer_table.py
    (args.out / "eval.json").write_text(json.dumps({"sources": results}))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


if __name__ == "__main__":
    main()
