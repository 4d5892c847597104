"""How well a study's predictions of its trials' final losses turned out."""

from __future__ import annotations

from typing import Any


def prediction_accuracy(rows: list[dict[str, Any]],
                        verification: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """How well the trials' final losses were predicted (at each trial's latest checkpoint):
    against the final value of completed trials, the ``--verify`` value of stopped ones, or the
    full sweep's value of the same params. ``{"n", "inside", "median_abs_err",
    "max_abs_err"}`` (relative errors) and a ``per_trial`` list; n 0 when nothing is known."""
    verified = {v["trial"]: v["actual"] for v in verification or []}
    per = []
    for r in rows:
        truth = r["value"] if r["state"] == "complete" else verified.get(
            r["trial"], r.get("full_sweep_value"))
        if truth is None or r.get("predicted") is None:
            continue
        itv = r.get("interval")
        per.append({"trial": r["trial"], "predicted": r["predicted"], "actual": truth,
                    "rel_err": r["predicted"] / truth - 1,
                    "inside": None if not itv else bool(itv[0] <= truth <= itv[1])})
    errs = sorted(abs(p["rel_err"]) for p in per)
    return {
        "n": len(per),
        "inside": sum(1 for p in per if p["inside"]),
        "median_abs_err": (errs[len(errs) // 2] if len(errs) % 2 else
                           0.5 * (errs[len(errs) // 2 - 1] + errs[len(errs) // 2])) if errs
        else None,
        "max_abs_err": errs[-1] if errs else None,
        "per_trial": per,
    }
