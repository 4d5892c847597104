"""Each source's prediction table, every peer beside the collapse predictor on the same targets.

Reads what ``hpo eval-predictor --json`` wrote and prints, per source and prefix fraction, for
the collapse predictor and each peer: median / max absolute error of the final loss, 80%
coverage and pairs ordered (within-sweep pairs more than 0.2% apart), first over every target
the method predicts, then over the targets that both it and the collapse predictor predict
(a peer such as the twin predicts a subset: only there are the two comparable).

    .venv/bin/python benchmarks/peer_table.py benchmarks/results/twin/eval.json \
        --methods collapse,last_value,power_law_ensemble,annealing_law,twin
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from hpo.predictors.evaluate import pairwise_summary, summarize_errors


def summary(rows: list[dict], method: str, label: str) -> dict:
    """Median / max |error|, coverage, pairs ordered and n of ``method`` over ``rows``."""
    got = [r["predictions"][method][label] for r in rows
           if "log_err" in r["predictions"].get(method, {}).get(label, {})]
    errs = summarize_errors([math.expm1(p["log_err"]) for p in got],
                            [abs(p["log_err"]) <= p["half"] for p in got])
    pairs = pairwise_summary(rows, [method], [label])[method][label]
    return {"median": errs["median_abs_rel_err"], "max": errs["max_abs_rel_err"],
            "coverage": errs["coverage"], "pairs": pairs["order_accuracy"],
            "n_pairs": pairs["n_pairs"], "n": errs["n"]}


def cell(s: dict) -> str:
    if not s["n"]:
        return "-"
    pairs = "-" if s["pairs"] is None else f"{s['pairs']:.3f} ({s['n_pairs']})"
    return (f"{100 * s['median']:.2f} / {100 * s['max']:.1f} / {s['coverage']:.2f} / "
            f"{pairs} n {s['n']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_json", type=Path)
    ap.add_argument("--methods", default=None,
                    help="comma-separated methods to show (default: all; the first is the one "
                         "the others are compared with)")
    args = ap.parse_args()
    data = json.loads(args.eval_json.read_text())
    sources = data.get("sources") or {"source": data}
    print("Cells: median % / max % / 80% coverage / pairs ordered (pairs) n targets.\n")
    for name, res in sources.items():
        rows = res["per_target"]
        methods = args.methods.split(",") if args.methods else list(res["methods"])
        labels = list(next(iter(res["methods"].values())))
        default = methods[0] if args.methods else res.get("default_method", methods[0])
        print(f"### {name}\n")
        print("| method | targets | " + " | ".join(f"t^ {lab}" for lab in labels) + " |")
        print("|---|---|" + "---|" * len(labels))
        for m in methods:
            print(f"| {m} | all it predicts | "
                  + " | ".join(cell(summary(rows, m, lab)) for lab in labels) + " |")
        for m in methods:
            both = {lab: [r for r in rows
                          if all("log_err" in r["predictions"].get(x, {}).get(lab, {})
                                 for x in (m, default))] for lab in labels}
            if m == default or all(len(both[lab]) == summary(rows, default, lab)["n"]
                                   for lab in labels):
                continue  # the same targets as the collapse predictor's: compared above
            for x in (default, m):
                print(f"| {x} | those {m} predicts too | "
                      + " | ".join(cell(summary(both[lab], x, lab)) for lab in labels) + " |")
        print()


if __name__ == "__main__":
    main()
