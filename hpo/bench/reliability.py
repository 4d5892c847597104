"""How honest the collapse rule's probability is: a shadow replay and its reliability table.

A stop at threshold 0.05 says "this trial has less than a 5% chance to end below that
competitor". The shadow replay (:func:`hpo.bench.replay.shadow_verdicts`) checks such
statements the way a forecaster is checked: each group is replayed through a real Optuna study
with ``CollapsePruner(threshold=0)``, which stops nothing and records every verdict, so every
trial runs to its end and every statement meets its outcome. Per trial and checkpoint the
verdict kept is the one with the lowest stated probability (the one that would have stopped it
first, at any threshold above it), and its outcome is whether the trial's final ended below its
strongest competitor's (the competitor that verdict named).

:func:`reliability` bins the stated probabilities and sets the observed rate beside the mean
stated one, with counts and a one-sided 95% upper bound on the rate (Clopper-Pearson); its
``tail`` rows say, for each threshold, how often the verdicts below it were wrong, and its
``calibration_error`` (:func:`calibration_error`) sums the table up in one number: the
count-weighted mean over the bins of |mean stated - observed|.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

__all__ = ["reliability", "calibration_error", "format_reliability", "RELIABILITY_BINS"]

#: edges of the stated-probability bins of the reliability table
RELIABILITY_BINS = (0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 1.0)


def _upper(k: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound of a rate seen k times in n."""
    return 1.0 if k >= n else float(stats.beta.ppf(0.95, k + 1, n - k))


def calibration_error(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The count-weighted mean over the bins ``rows`` (a :func:`reliability` table's
    ``"bins"``) of |mean stated probability - observed frequency|: every bin with at least
    one verdict counts, weighted by its ``n``. 0 when every bin's stated rate is its observed
    one; ``None`` when no bin holds a verdict."""
    filled = [r for r in rows if r["n"]]
    n = sum(r["n"] for r in filled)
    if not n:
        return None
    return sum(r["n"] * abs(r["stated"] - r["observed"]) for r in filled) / n


def reliability(
    verdicts: Sequence[Mapping[str, Any]], thresholds: Sequence[float] = (),
    bins: Sequence[float] = RELIABILITY_BINS,
) -> dict[str, Any]:
    """The reliability table of ``verdicts`` (:func:`hpo.bench.replay.shadow_verdicts`): per bin
    of stated probability, ``n``, the mean stated probability, the observed rate and its
    95% upper bound; per threshold, the verdicts below it (``n``, ``wrong``: the trial
    ended below its competitor all the same, ``rate``, ``upper``); ``calibration_error``
    over the bins (:func:`calibration_error`; ``None`` without verdicts)."""
    rows = []
    for lo, hi in zip(bins[:-1], bins[1:], strict=True):
        inside = [v for v in verdicts if lo <= v["probability"] < hi or (
            hi == bins[-1] and v["probability"] == hi)]
        n, k = len(inside), sum(bool(v["won"]) for v in inside)
        rows.append({"bin": [lo, hi], "n": n,
                     "stated": sum(v["probability"] for v in inside) / n if n else None,
                     "observed": k / n if n else None, "upper": _upper(k, n) if n else None})
    tail = []
    for thr in thresholds:
        below = [v for v in verdicts if v["probability"] < thr]
        n, k = len(below), sum(bool(v["won"]) for v in below)
        tail.append({"threshold": float(thr), "n": n, "wrong": k,
                     "rate": k / n if n else None, "upper": _upper(k, n) if n else None})
    return {"bins": rows, "tail": tail, "verdicts": len(verdicts),
            "calibration_error": calibration_error(rows)}


def format_reliability(table: Mapping[str, Any], title: str = "") -> str:
    """The reliability table as text: the bins with a verdict, the verdicts below each
    threshold and the calibration error (computed from the bins for a table without one)."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}" if x >= 0.001 or x == 0 else f"{x:.1e}"

    lines = [f"reliability{': ' + title if title else ''} ({table['verdicts']} verdicts; "
             "stated: the chance to end below the strongest competitor, observed: how often "
             "it did)",
             f"  {'stated in':>16s} {'n':>6s} {'mean stated':>12s} {'observed':>9s} "
             f"{'95% upper':>9s}"]
    for r in table["bins"]:
        if not r["n"]:
            continue
        lo, hi = r["bin"]
        lines.append(f"  [{lo:<6g}, {hi:<6g}) {r['n']:6d} {pct(r['stated']):>12s} "
                     f"{pct(r['observed']):>9s} {pct(r['upper']):>9s}")
    for t in table["tail"]:
        lines.append(f"  below {t['threshold']:<6g}: {t['wrong']} of {t['n']} ended below their "
                     f"competitor ({pct(t['rate'])}, 95% upper {pct(t['upper'])})")
    ce = table.get("calibration_error", calibration_error(table["bins"]))
    lines.append("  calibration error (count-weighted mean |stated - observed| over bins): "
                 + ("-" if ce is None else f"{ce:.3g}"))
    return "\n".join(lines)
