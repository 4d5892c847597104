"""``LRConditionedPredictor``: one universal curve per proxy LR, log-LR interpolation, and the
per-LR width-transfer correction learned from finished trials."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from hpo._lr_predictor import LRConditionedPredictor
from predictors import fit_universal_curve, runs_from_frame
from tests.predictors._synth import make_run

# two LRs whose curves differ in shape at the same tau (as on small CPU models)
SHAPES = {0.01: (0.3, 0.5, 1.2, -0.2), 0.04: (0.9, 0.5, 1.2, -0.2)}


def _runs(lr: float, steps: tuple[int, ...] = (800, 1000, 1250), final: float = 3.0):
    frames = [make_run(f"lr{lr}-T{t}", 1e5, t, lr, 20.0, params=SHAPES[lr], final=final)
              for t in steps]
    return runs_from_frame(frames)


@pytest.fixture(scope="module")
def predictor() -> LRConditionedPredictor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curves = {lr: fit_universal_curve(_runs(lr)) for lr in SHAPES}
        everything = fit_universal_curve(_runs(0.01) + _runs(0.04))
    return LRConditionedPredictor(curves, everything, base_lr_per_peak=1.0)


def _prefix(run, frac: float):
    keep = run.t_hat <= frac
    return run.steps[keep], run.losses[keep], run.controls


@pytest.mark.parametrize("lr", [0.01, 0.04])
def test_each_lr_is_predicted_by_its_own_curve(predictor: LRConditionedPredictor,
                                                lr: float) -> None:
    run = _runs(lr, steps=(1100,), final=2.5)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = predictor.predict(*_prefix(run, 0.3))
        other = predictor.predictors[0.04 if lr == 0.01 else 0.01].predict(*_prefix(run, 0.3))
    # its own LR's curve is accurate; the other LR's curve is not
    assert pred.final == pytest.approx(2.5, rel=0.01)
    assert abs(other.final / 2.5 - 1) > 3 * abs(pred.final / 2.5 - 1)


def test_between_lrs_interpolates_in_log_lr(predictor: LRConditionedPredictor) -> None:
    run = _runs(0.01, steps=(1100,))[0]
    steps, losses, controls = _prefix(run, 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = predictor.predictors[0.01].predict(steps, losses, controls).final
        b = predictor.predictors[0.04].predict(steps, losses, controls).final
        mid = predictor.predict(steps, losses, controls.with_(peak_lr=0.02)).final
    # 0.02 is halfway between 0.01 and 0.04 in log LR: the geometric mean of the two
    assert mid == pytest.approx(np.sqrt(a * b), rel=1e-9)


def test_observed_ratio_corrects_later_predictions(predictor: LRConditionedPredictor) -> None:
    run = _runs(0.04, steps=(1100,))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = predictor.predict(*_prefix(run, 0.3))
        predictor.observe(0.04, 0.3, 0.9)
        corrected = predictor.predict(*_prefix(run, 0.3))
        uncorrected = predictor.predict_raw(*_prefix(run, 0.3))
    predictor.ratios.clear()
    # the finished trial's ratio final / prediction scales the whole interval
    assert corrected.final == pytest.approx(0.9 * raw.final)
    assert corrected.lower == pytest.approx(0.9 * raw.lower)
    assert uncorrected.final == pytest.approx(raw.final)
