"""Tests on the real curves in ../shared/data/curves (skipped where that folder is absent)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from hpo.predictors import evaluate_predictors, read_curves, runs_from_frame

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CURVES = SHARED / "data" / "curves"


def _need(name: str) -> Path:
    path = CURVES / name
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    return path


@pytest.fixture(scope="module")
def mpl():
    return read_curves(_need("multipowerlaw.csv.gz"))


def test_read_lr_scheduling_controls():
    df = read_curves(_need("lr_scheduling.csv.gz"))
    runs = runs_from_frame(df, split="val")
    assert len(runs) == 86 and all(r.complete for r in runs)
    r = next(r for r in runs if r.controls.schedule == "wsd:linear:0.2" or
             r.controls.schedule.startswith("wsd"))
    # TPP and tau are derived; the exact schedule comes from the lr column
    assert r.controls.tpp is not None and r.controls.tau is not None
    assert r.controls.lr_schedule is not None
    assert r.controls.eta(np.array([0.5]))[0] <= 1.0


def test_read_multipowerlaw_has_unknown_tau(mpl):
    runs = runs_from_frame(mpl)
    assert len(runs) == 27
    assert all(r.controls.tau is None and r.controls.tpp is None for r in runs)
    # the published curves start at step 2160; the schedule ramps up before it
    assert all(r.steps[0] >= 2160 for r in runs)


def test_collapse_beats_last_value_on_multipowerlaw(mpl):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate_predictors(mpl, 150e6, (0.2,), forms=("default",),
                                  peers=("last_value",))
    collapse, last = res["methods"]["collapse"]["0.2"], res["methods"]["last_value"]["0.2"]
    assert collapse["n"] == 9
    # the universal curve with the size trend predicts the 400M final losses closely
    assert collapse["median_abs_rel_err"] < 0.005
    assert collapse["max_abs_rel_err"] < 0.02
    assert collapse["median_abs_rel_err"] < last["median_abs_rel_err"]
    assert any("tau unknown" in n for n in res["notes"])
