"""``benchmarks/optuna_charlm.py``: its quick version end to end (the JSON's shape, the no-pruner
arm trains every step) and its summary on hand-made trials."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import optuna_charlm as oc

REPO = Path(__file__).resolve().parents[2]


def _trial(final: float | None, lower: float, upper: float, raw: float, steps: int = 100,
           state: str = "COMPLETE") -> dict:
    pred = {"value": (lower + upper) / 2, "lower": lower, "upper": upper}
    return {"number": 0, "state": state, "final": final, "steps": steps, "total_steps": 100,
            "has_interval": True, "lr": 0.01, "weight_decay": 0.1, "tau": 1.0,
            "predictions": {"0.2": pred, "0.3": pred}, "raw_loss": {"0.2": raw, "0.3": raw}}


def test_coverage_counts_complete_trials_whose_interval_holds_the_final() -> None:
    trials = [_trial(3.0, 2.9, 3.1, 4.0), _trial(3.5, 2.9, 3.1, 4.1),
              _trial(None, 2.0, 4.0, 4.2, steps=30, state="PRUNED")]
    cov = oc.coverage(trials)
    assert {k: cov["0.2"][k] for k in ("n", "covered", "fraction")} == {
        "n": 2, "covered": 1, "fraction": 0.5}
    # log(3.0 / 3.0) and log(3.0 / 3.5): the median of the two
    assert cov["0.2"]["median_log_error"] == pytest.approx(0.5 * math.log(3.0 / 3.5))
    assert cov["0.1"] == {"n": 0, "covered": 0, "fraction": None, "median_log_error": None}
    assert cov["all"]["n"] == 4 and cov["all"]["covered"] == 2


def test_spearman_ranks_predictions_and_raw_losses_against_the_finals() -> None:
    trials = [_trial(f, f - 0.1, f + 0.1, raw) for f, raw in
              ((3.0, 4.3), (3.1, 4.2), (3.2, 4.1), (3.3, 4.0))]
    got = oc.spearman(trials)
    assert got["0.2"]["n"] == 4
    assert got["0.2"]["prediction"] == pytest.approx(1.0)
    assert got["0.2"]["raw_loss"] == pytest.approx(-1.0)


@pytest.mark.slow
def test_quick_run_writes_the_json_and_the_shadow_arm_trains_every_step(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "benchmarks/optuna_charlm.py", str(tmp_path),
                           "--quick"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads((tmp_path / oc.JSON_NAME).read_text())
    assert set(got["arms"]) == set(got["summary"]) == set(oc.ARMS)
    assert got["command"].endswith("--quick")
    assert (tmp_path / oc.TABLES_NAME).read_text().startswith("| arm |")
    n, total = oc.QUICK.trials, got["trial_recipe"]["total_steps"]
    assert len(got["proxies"]["proxies"]) == len(oc.QUICK.proxy_widths) * len(
        oc.QUICK.proxy_settings)
    for arm in oc.ARMS:
        s = got["summary"][arm]
        assert s["trials"] == len(got["arms"][arm]["trials"]) == n
        assert s["complete"] + s["pruned"] + s["failed"] == n
        assert set(s["coverage"]) == {*(f"{c:g}" for c in got["checkpoints"]), "all"}
        assert 0 < s["steps"] <= n * total
    shadow = got["summary"]["shadow"]
    # the shadow arm stops nothing: every trial trains all its steps
    assert shadow["pruned"] == 0 and shadow["steps"] == shadow["planned_steps"] == n * total
    assert shadow["steps_fraction"] == 1.0
    assert set(shadow["spearman"]) == {"0.2", "0.3"}
    # the self-calibrating shadow predicts once it has 3 finished trials; the reference arm at once
    with_cp = [t for t in got["arms"]["shadow"]["trials"] if t["predictions"].get("0.1", {})
               .get("value") is not None]
    assert [t["number"] for t in with_cp] == list(range(3, n))
    assert got["summary"]["collapse_reference"]["with_predictions"] == n
