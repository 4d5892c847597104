"""The predictor each study's proxies choose (``chosen``) beside every candidate, on every
source's held-out targets.

    .venv/bin/python benchmarks/chosen_table.py benchmarks/results/chosen   # about 15 min

For each source (the four shared ones and the three CPU sweeps, as ``benchmarks/twin_term.py``
reads them; at most ``--max-targets`` targets, seeded) the candidates of
:data:`hpo.predictors.evaluate.CHOSEN_CANDIDATES` are fitted on the source's proxies and predict
its targets at t^ 0.1 / 0.2 / 0.3; ``chosen`` (:class:`hpo.predictors.chosen.ChosenPredictor`)
predicts with the candidate whose held-out errors on those proxies are smallest at the prefix's
t^ (the candidates fitted once, shared). Nothing is chosen across sources: the choice is each
source's own proxies', so every row is held out by construction.

Per source and fraction: each method's median / max absolute error, 80% coverage and pairs
ordered (within-sweep pairs more than 0.2% apart) over the targets it predicts; ``chosen``'s
median beside the best single candidate's on the same targets; how often ``chosen`` used each
candidate. Writes ``table.md`` and ``chosen.json``.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from twin_term import FRACTIONS, command_line, sources  # noqa: E402

from hpo.predictors.chosen import ChosenPredictor  # noqa: E402
from hpo.predictors.evaluate import (  # noqa: E402
    CHOSEN_CANDIDATES,
    candidate_makers,
    evaluate_predictors,
    summarize_errors,
)


def methods() -> dict:
    """The candidates, each fitted once per family, and ``chosen`` over the fitted ones."""
    fitted: dict[str, object] = {}
    makers = candidate_makers()

    def candidate(name: str):
        def make(proxies, fractions, level):
            fitted[name] = makers[name](proxies, fractions, level)
            return fitted[name]
        return make

    def chosen(proxies, fractions, level):
        return ChosenPredictor({n: fitted[n] for n in CHOSEN_CANDIDATES if n in fitted},
                               level=level)

    out = {name: candidate(name) for name in CHOSEN_CANDIDATES}
    out["chosen"] = chosen
    return out


def median_on(rows: list[dict], method: str, lab: str, targets: set[str]) -> float | None:
    """``method``'s median |error| over ``targets``."""
    errs = [math.expm1(r["predictions"][method][lab]["log_err"]) for r in rows
            if r["run_id"] in targets and "log_err" in r["predictions"][method][lab]]
    return summarize_errors(errs, [True] * len(errs))["median_abs_rel_err"] if errs else None


def main() -> None:
    args = command_line(__doc__)
    names = [*CHOSEN_CANDIDATES, "chosen"]
    lines = ["# The predictor each study's proxies choose, beside every candidate", "",
             "    .venv/bin/python benchmarks/chosen_table.py benchmarks/results/chosen", "",
             "Per source and t^: median / max |error| of the final, 80% coverage, pairs "
             "ordered; n targets. `chosen vs best` is chosen's median beside the best single "
             "candidate's on the targets chosen predicts; `used` counts the candidate chosen "
             "predicted with.", ""]
    out: dict[str, dict] = {}
    for src in sources():
        res = evaluate_predictors(src.frame, src.proxy_max_params, FRACTIONS, src.split,
                                  methods=methods(), max_targets=args.max_targets)
        rows = res["per_target"]
        lines += [f"## {src.name}", "",
                  "| t^ | " + " | ".join(names) + " | chosen vs best | used |",
                  "|---" * (len(names) + 3) + "|"]
        out[src.name] = {}
        for f in FRACTIONS:
            lab = f"{f:g}"
            cells = []
            for m in names:
                s = res["methods"][m][lab]
                pairs = res["pairwise"][m][lab]["order_accuracy"]
                cells.append("-" if not s["n"] else (
                    f"{100 * s['median_abs_rel_err']:.2f} / {100 * s['max_abs_rel_err']:.1f} / "
                    f"{s['coverage']:.2f} / {'-' if pairs is None else f'{pairs:.2f}'} "
                    f"n {s['n']}"))
            mine = {r["run_id"] for r in rows if "log_err" in r["predictions"]["chosen"][lab]}
            singles = {m: median_on(rows, m, lab, mine) for m in CHOSEN_CANDIDATES}
            singles = {m: v for m, v in singles.items() if v is not None and all(
                "log_err" in r["predictions"][m][lab] for r in rows if r["run_id"] in mine)}
            best = min(singles, key=singles.get) if singles else None
            used = Counter(r["predictions"]["chosen"][lab].get("by", "?").split(":")[-1]
                           for r in rows if "log_err" in r["predictions"]["chosen"][lab])
            chosen_med = median_on(rows, "chosen", lab, mine)
            versus = ("-" if best is None or chosen_med is None else
                      f"{100 * chosen_med:.2f} vs {100 * singles[best]:.2f} ({best})")
            lines.append(f"| {lab} | " + " | ".join(cells) + f" | {versus} | "
                         + ", ".join(f"{k} {v}" for k, v in used.most_common()) + " |")
            out[src.name][lab] = {"methods": {m: res["methods"][m][lab] for m in names},
                                  "pairs": {m: res["pairwise"][m][lab] for m in names},
                                  "best_single": best, "used": dict(used)}
        lines.append("")
        print("\n".join(lines[-6:]), flush=True)
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    (args.out / "chosen.json").write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
