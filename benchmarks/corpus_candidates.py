"""Candidate settings of the default predictor on every source of the corpus (per-target JSON).

    .venv/bin/python benchmarks/corpus_candidates.py OUT.json [--max-targets N]

Fits each family's universal curve once and evaluates every candidate on it, so that
``benchmarks/choose_default.py`` can make each choice by leave-one-source-out.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hpo.predictors.predict as _predict  # noqa: E402
from benchmarks._sources import SOURCES, load_sources  # noqa: E402
from hpo.predictors import fit_universal_curve  # noqa: E402
from hpo.predictors.evaluate import (  # noqa: E402
    default_methods,
    evaluate_predictors,
    median_over_sources,
)
from hpo.predictors.predict import CollapsePredictor  # noqa: E402

# the candidates' raw intervals: the calibrated half-width alone; choose_default.py chooses
# the scale and the extrapolation widening
_predict.EXTRAPOLATION_WIDENING = 0.0

_FITTED: dict[tuple[int, str], object] = {}


def _curve(proxies, form):
    key = (id(proxies), form)
    if key not in _FITTED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _FITTED[key] = fit_universal_curve(proxies, form=form)
    return _FITTED[key]


def collapse(form="hybrid", **kw):
    def make(proxies, fractions, level):
        return CollapsePredictor(_curve(proxies, form), level=level, **kw)
    return make


CANDIDATES = {
    "auto": collapse(),
    "plain": collapse(align_from=0.5, stretch=None),
    "stretch1": collapse(align_from=0.25, stretch=1.0),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--max-targets", type=int, default=80)
    ap.add_argument("--only", default=None, help="comma-separated source names")
    ap.add_argument("--peers", action="store_true", help="also the annealing_law peer")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(SOURCES)
    methods = dict(CANDIDATES)
    if args.peers:
        methods.update(default_methods(forms=(), peers=("annealing_law",)))
    results = {}
    for src in load_sources(names):
        res = results[src.name] = evaluate_predictors(
            src.frame, src.proxy_max_params, (0.1, 0.2, 0.3), split=src.split,
            methods=methods, max_targets=args.max_targets, seed=0)
        print(src.name, f"fit {res['fit_seconds']:.1f}s predict {res['predict_ms']:.1f}ms",
              flush=True)
        for m, by in res["methods"].items():
            print(f"  {m:<20}", "  ".join(
                f"{lab}: {_p(s['median_abs_rel_err'])}/{_p(s['max_abs_rel_err'])} "
                f"cov {_p(s['coverage'])} n{s['n']}" for lab, s in by.items()), flush=True)
    result = {"sources": results, "median_over_sources": median_over_sources(results)}
    Path(args.out).write_text(json.dumps(result, default=float) + "\n")
    return 0


def _p(x):
    return "-" if x is None else f"{100 * x:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
