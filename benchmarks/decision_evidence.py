"""The curve's chance and the same-step chance of every shadow verdict, on every source, and
how one decision from both would have read them, each source held out from the fit.

Usage: .venv/bin/python benchmarks/decision_evidence.py OUT_DIR [--collect]

``--collect`` replays every source one trial after another through a real Optuna study with
``CollapsePruner(threshold=0)`` (stops nothing, records every verdict), both without proxies
(self-calibrating, as ``benchmarks/bench_sources.sh``'s ``*_selfcal`` tables) and with the
source's proxies (its recorded groups), each with the pair prior and the crossing prior fitted
without it; the README example's shadow arms (``benchmarks/results/readme_example``) join as
one more source. It writes ``OUT_DIR/verdicts.json``: per verdict the curve's chance, the
same-step chance recorded beside it and whether the trial ended below its competitor.

Without ``--collect`` it reads that file and writes ``OUT_DIR/README.md``: for each way to
decide (the curve alone, the same step alone, the larger of the two, and a logistic stack
``logit p = a + b logit p_curve + c logit p_same`` fitted with every source but the one it is
scored on, each source weighted equally), per source and calibration: the calibration error,
the verdicts stated below 0.02 and how many of them came true.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sources import curves_dir  # noqa: E402

from hpo import bench  # noqa: E402
from hpo.bench.reliability import reliability  # noqa: E402
from hpo.predictors import read_curves  # noqa: E402
from hpo.predictors.crossings import load_crossing_prior  # noqa: E402
from hpo.predictors.prior import load_pair_prior  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: source -> (file, load_groups keywords without proxies, proxy_max_params or None)
SETUPS = {
    "lr_scheduling": ("lr_scheduling.csv.gz", {"split": "val"}, 94e6),
    "multipowerlaw": ("multipowerlaw.csv.gz",
                      {"group_cols": ("n_params", "total_steps"), "min_trials": 2}, 1.5e8),
    "nanochat": ("nanochat.csv.gz", {"min_trials": 4, "max_groups": 12}, 1e8),
    "marin": ("marin.csv.gz", {"split": "val", "min_trials": 4, "max_groups": 12}, 1.5e8),
    "cpu": (str(ROOT / "benchmarks" / "data" / "cpu_sweep.csv.gz"), {}, None),
}
THRESHOLD = 0.02
EPS = 1e-6


def collect_source(name: str) -> list[dict]:
    """Every shadow verdict of ``name``, sequential, without and with proxies."""
    file, kw, proxy_max = SETUPS[name]
    path = Path(file) if Path(file).is_absolute() else curves_dir() / file
    frame = read_curves(path)
    # the priors that never saw it
    kwargs = {"prior": load_pair_prior(RESULTS / "prior" / f"without_{name}.json"),
              "crossing_prior": load_crossing_prior(RESULTS / "crossing"
                                                    / f"without_{name}.json")}
    cps = sorted({0.1, 0.2, 0.3, *bench.BASELINE_FRACTIONS})
    rows = []
    runs = [("selfcal", bench.load_groups(frame, keep_fractions=cps, **kw), None)]
    if proxy_max is not None:
        kw_p = {k: v for k, v in kw.items() if k != "max_groups"}
        kw_p["max_groups"] = kw.get("max_groups")
        groups = bench.load_groups(frame, proxy_max_params=proxy_max, keep_fractions=cps,
                                   **kw_p)
        curve = bench.fit_proxy_curves(frame, proxy_max, kw.get("split", "train"),
                                       {g.family for g in groups})
        runs.append(("proxies", groups, curve))
    for calib, groups, curve in runs:
        for g in groups:
            for v in bench.shadow_verdicts(g, curve, "sequential", kwargs):
                rows.append({"source": name, "calibration": calib, "group": g.name, **v})
        print(f"{name} {calib}: {sum(r['calibration'] == calib for r in rows)} verdicts",
              file=sys.stderr, flush=True)
    return rows


def readme_rows() -> list[dict]:
    """The README example's shadow-arm verdicts (one source: ``readme``)."""
    res = json.loads((RESULTS / "readme_example" / "results.json").read_text())
    return [{"source": "readme", "calibration": "selfcal", "group": k, "trial": v["trial"],
             "checkpoint": v["checkpoint"], "probability": v["p"], "against": v["against"],
             "same_step": v["same_step"], "won": bool(v["came_true"])}
            for k, r in res.items() if r["arm"] == "shadow" for v in r["verdicts"]]


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), ``p`` kept inside [EPS, 1 - EPS]."""
    p = np.clip(p, EPS, 1 - EPS)
    return np.log(p / (1 - p))


def fit_stack(rows: list[dict]) -> np.ndarray:
    """``(a, b, c)`` of the logistic stack on ``rows``, each source weighted equally
    (a small ridge toward b = 1, c = 0: the curve alone)."""
    from scipy.optimize import minimize

    x1 = logit(np.array([r["probability"] for r in rows]))
    x2 = logit(np.array([r["same_step"] for r in rows]))
    y = np.array([r["won"] for r in rows], dtype=float)
    src = [r["source"] for r in rows]
    counts = {s: src.count(s) for s in set(src)}
    w = np.array([1.0 / counts[s] for s in src])
    w /= w.sum()

    def loss(theta: np.ndarray) -> float:
        z = theta[0] + theta[1] * x1 + theta[2] * x2
        ll = y * -np.logaddexp(0, -z) + (1 - y) * -np.logaddexp(0, z)
        return float(-(w * ll).sum() + 1e-3 * ((theta[1] - 1) ** 2 + theta[2] ** 2))

    return minimize(loss, np.array([0.0, 1.0, 0.0]), method="Nelder-Mead",
                    options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000}).x


def decide(rows: list[dict], how: str, theta: np.ndarray | None = None) -> list[float]:
    """The chance each way ``how`` states for ``rows`` (``theta``: the stack's)."""
    pc = np.array([r["probability"] for r in rows])
    ps = np.array([r["same_step"] for r in rows])
    if how == "curve":
        return pc.tolist()
    if how == "same_step":
        return ps.tolist()
    if how == "larger":
        return np.maximum(pc, ps).tolist()
    z = theta[0] + theta[1] * logit(pc) + theta[2] * logit(ps)
    return (1 / (1 + np.exp(-z))).tolist()


def score(rows: list[dict], p: list[float]) -> dict:
    """Calibration error and the verdicts below :data:`THRESHOLD` of chances ``p``."""
    stated = [{"probability": q, "won": r["won"]} for q, r in zip(p, rows, strict=True)]
    table = reliability(stated, [THRESHOLD])
    tail = table["tail"][0]
    return {"n": len(rows), "ce": table["calibration_error"], "below": tail["n"],
            "wrong": tail["wrong"]}


def report(rows: list[dict]) -> str:
    """The README: every way to decide, per source and calibration, the stack held out."""
    rows = [r for r in rows if r["same_step"] is not None]
    lines = ["# One decision from the curve and the same step: each way, each source held out",
             "", "    .venv/bin/python benchmarks/decision_evidence.py "
             "benchmarks/results/decision --collect", "",
             "Every shadow verdict of a one-trial-after-another replay (threshold 0), without "
             "proxies (selfcal) and with the source's proxies; the README example's shadow "
             "arms as the source `readme`. CE: calibration error (count-weighted |stated - "
             "observed|); below 0.02: verdicts stated below 0.02, and how many came true. "
             "The stack is fitted on every other source (both calibrations, each source "
             "weighted equally).", "",
             "| source | calibration | verdicts | curve CE | same step CE | larger CE | "
             "stack CE | curve below / wrong | same step | larger | stack | stack (a, b, c) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    sources = sorted({r["source"] for r in rows})
    for s in sources:
        theta = fit_stack([r for r in rows if r["source"] != s])
        for calib in ("selfcal", "proxies"):
            mine = [r for r in rows if r["source"] == s and r["calibration"] == calib]
            if not mine:
                continue
            sc = {h: score(mine, decide(mine, h, theta))
                  for h in ("curve", "same_step", "larger", "stack")}
            lines.append(
                f"| {s} | {calib} | {len(mine)} | "
                + " | ".join(f"{sc[h]['ce']:.3f}" for h in sc) + " | "
                + " | ".join(f"{sc[h]['below']} / {sc[h]['wrong']}" for h in sc)
                + f" | {theta[0]:.2f}, {theta[1]:.2f}, {theta[2]:.2f} |")
    theta = fit_stack(rows)
    lines += ["", f"Stack on every source: a={theta[0]:.3f}, b={theta[1]:.3f}, "
              f"c={theta[2]:.3f}.", ""] + boldness()
    return "\n".join(lines) + "\n"


def boldness() -> list[str]:
    """How low the same-step chance can go: the shipped crossing law at t^ 0.2 after m finished
    trials whose curves never cross (levels spread evenly over a 50% range, every pair kept
    its order), at gaps of 1-50%."""
    from hpo.predictors.crossings import default_crossing_prior, fit_crossing_law

    gaps_at = (0.01, 0.05, 0.2, 0.5)
    out = ["## How bold the same step can be",
           "",
           "The shipped crossing law at t^ 0.2 after m finished trials of a study whose curves "
           "never cross (levels evenly over a 50% range, no pair closed): its chance that a "
           "gap closes.", "",
           "| m | " + " | ".join(f"gap {g:.0%}" for g in gaps_at) + " |",
           "|---|" + "---|" * len(gaps_at)]
    prior = default_crossing_prior()
    for m in (5, 10, 20, 40):
        level = np.linspace(0.0, 0.5, m)
        gap = np.array([level[j] - level[i] for i in range(m) for j in range(i + 1, m)])
        law = fit_crossing_law(prior, 0.2, gap, np.zeros(gap.size, dtype=bool), m - 1)
        out.append(f"| {m} | " + " | ".join(f"{law.probability(g):.3f}" for g in gaps_at)
                   + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    if "--collect" in argv:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        rows = readme_rows()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in SETUPS:
                rows += collect_source(name)
        (out / "verdicts.json").write_text(json.dumps(rows))
    rows = json.loads((out / "verdicts.json").read_text())
    text = report(rows)
    (out / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
