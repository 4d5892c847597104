"""The study's shared error (``hpo.predictors.shift``): its constants chosen leave one source
out, and what it does to each source's predictions.

Usage: .venv/bin/python benchmarks/study_shift.py OUT_DIR [--collect]

``--collect`` predicts every target of every source (the four shared sources, the two CPU
sweeps and the quickstart family) from its proxies at t^ 0.1 / 0.2 / 0.3 with the default
predictor (``hpo.predictors.evaluate.evaluate_predictors``) and writes each target's signed log
error and interval half-width to ``OUT_DIR/errors.json``. Without it the file is read.

Then each sweep (a source's group of targets) is replayed one target after another: target i
is shifted by :func:`hpo.predictors.shift.study_shift` of the errors of the targets before it
(the trials that finished first), its interval with it (the same width). ``(tau, sd)`` are
chosen on a grid (``tau = 0``: no shift) for each source from the other sources (each weighted
equally: the mean over sources and checkpoints of the log median absolute error), and the
held-out source is scored with them. ``OUT_DIR/README.md``: per source and checkpoint the
median absolute error, the mean signed error and the 80% coverage without and with the shift,
and the constants chosen without it; and the grid's score on every source (the shipped
constants: the grid point that scores best on all of them).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sources import load_sources  # noqa: E402

from hpo.predictors import read_curves  # noqa: E402
from hpo.predictors.evaluate import evaluate_predictors, shifted_summary  # noqa: E402
from hpo.predictors.shift import SHIFT_SD, SHIFT_TAU  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("0.1", "0.2", "0.3")
TAUS = (0.0, 0.02, 0.05, 0.1, 0.2)
SDS = (0.02, 0.03, 0.05)
#: the CPU sources: file, proxy threshold (as benchmarks/twin_term.py)
CPU = {"cpu_sweep": ("cpu_sweep.csv.gz", 2e4), "cpu_sweep_w64": ("cpu_sweep_w64.csv.gz", 5e4),
       "quickstart": ("quickstart_family.csv.gz", 5e4)}


def collect() -> dict[str, list[dict]]:
    """Every target's signed log error and half-width per checkpoint, by source."""
    sources = [(s.name, s.frame, s.proxy_max_params, s.split) for s in load_sources()]
    sources += [(name, read_curves(ROOT / "benchmarks" / "data" / file), pmax, "train")
                for name, (file, pmax) in CPU.items()]
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, frame, pmax, split in sources:
            res = evaluate_predictors(frame, pmax, (0.1, 0.2, 0.3), split, peers=False)
            method = res["default_method"]
            out[name] = [{"group": row["group"], "run": row["run_id"],
                          "err": {lab: p.get("log_err") for lab, p in
                                  row["predictions"][method].items()},
                          "half": {lab: p.get("half") for lab, p in
                                   row["predictions"][method].items()}}
                         for row in res["per_target"]]
            print(f"{name}: {len(out[name])} targets", file=sys.stderr, flush=True)
    return out


def replay(rows: list[dict], label: str, tau: float, sd: float) -> dict[str, float]:
    """Each sweep one target after another, shifted by those before it
    (:func:`hpo.predictors.evaluate.shifted_summary`): median |error|, mean signed error and
    coverage with and without the shift, over the same targets."""
    per_target = [{"group": r["group"],
                   "predictions": {"default": {lab: {"log_err": r["err"].get(lab),
                                                     "half": r["half"].get(lab)}
                                               for lab in LABELS}}} for r in rows]
    moved = shifted_summary(per_target, ["default"], [label], tau, sd)["default"][label]
    if not moved["n"]:
        return {}
    kept = shifted_summary(per_target, ["default"], [label], 0.0, sd)["default"][label]
    return {"n": moved["n"], "median": moved["median_abs_rel_err"],
            "median_raw": kept["median_abs_rel_err"], "signed": moved["signed"],
            "signed_raw": moved["signed_raw"], "coverage": moved["coverage"],
            "coverage_raw": kept["coverage"]}


def score(data: dict[str, list[dict]], names: list[str], tau: float, sd: float) -> float:
    """Mean over ``names`` and checkpoints of the log median absolute error with the shift."""
    vals = [np.log(max(res["median"], 1e-6)) for n in names for lab in LABELS
            for res in [replay(data[n], lab, tau, sd)] if res]
    return float(np.mean(vals))


def choose(data: dict[str, list[dict]], names: list[str]) -> tuple[float, float]:
    """The grid point that scores best on ``names``."""
    grid = [(t, s) for t in TAUS for s in SDS if t > 0] + [(0.0, SDS[0])]
    return min(grid, key=lambda ts: score(data, names, *ts))


def report(data: dict[str, list[dict]]) -> str:
    """The README (module docstring)."""
    names = list(data)
    lines = ["# The study's shared error, each source held out", "",
             "    .venv/bin/python benchmarks/study_shift.py benchmarks/results/shift --collect",
             "",
             "Each sweep replayed one target after another; a target is shifted by the errors "
             "of the targets before it (its first target is not, and is not counted). Median "
             "|error| and mean signed error of the final (log), 80% coverage; raw: the "
             "predictor's own; shifted: with `(tau, sd)` chosen without the source.", "",
             "| source | t^ | targets | tau, sd chosen | median raw / shifted | signed raw / "
             "shifted | coverage raw / shifted |", "|---|---|---|---|---|---|---|"]
    for held in names:
        tau, sd = choose(data, [n for n in names if n != held])
        for lab in LABELS:
            r = replay(data[held], lab, tau, sd)
            if not r:
                continue
            lines.append(f"| {held} | {lab} | {r['n']} | {tau:g}, {sd:g} | "
                         f"{r['median_raw']:.2%} / {r['median']:.2%} | "
                         f"{r['signed_raw']:+.2%} / {r['signed']:+.2%} | "
                         f"{r['coverage_raw']:.2f} / {r['coverage']:.2f} |")
    best = choose(data, names)
    lines += ["", f"On every source the grid's best is tau={best[0]:g}, sd={best[1]:g}; the "
              f"shipped constants are tau={SHIFT_TAU:g}, sd={SHIFT_SD:g}.", "",
              "## The grid on every source (mean log median |error|; lower is better)", "",
              "| tau \\ sd | " + " | ".join(f"{s:g}" for s in SDS) + " |",
              "|---|" + "---|" * len(SDS)]
    for t in TAUS:
        lines.append(f"| {t:g} | " + " | ".join(f"{score(data, names, t, s):.3f}" for s in SDS)
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    if "--collect" in argv:
        (out / "errors.json").write_text(json.dumps(collect()))
    data = json.loads((out / "errors.json").read_text())
    text = report(data)
    (out / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
