"""The chosen predictor: the candidate with the smallest held-out errors on the proxies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpo.predictors import Controls
from hpo.predictors.chosen import ChosenPredictor, held_out_scale
from hpo.predictors.predict import FinalLossPredictor, Prediction

CONTROLS = Controls(total_steps=100, tpp=20.0, tau=0.2, schedule="linear")
STEPS = np.arange(1, 31, dtype=float)
LOSSES = 3.0 - STEPS / 100


class Fixed(FinalLossPredictor):
    """Predicts ``value``; its calibration has held-out errors ``errs`` at t^ 0.1 and 0.3
    (``None``: no calibration); ``declines`` raises instead."""

    name = "fixed"
    min_points = 1

    def __init__(self, value: float, errs: tuple[list[float], list[float]] | None,
                 declines: bool = False) -> None:
        super().__init__()
        self.value, self.declines = value, declines
        self.calibration = None if errs is None else {"fractions": [0.1, 0.3],
                                                       "errors": list(errs)}

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        if self.declines:
            raise ValueError("fixed: declines this run")
        return Prediction(self.value, self.value * 0.9, self.value * 1.1, 0.8, 0.3, self.name)


def test_held_out_scale_interpolates_the_median_error_between_fractions() -> None:
    cal = {"fractions": [0.1, 0.3], "errors": [[0.1, -0.1, 0.1], [0.02, -0.02, 0.04]]}
    assert held_out_scale(cal, 0.1) == pytest.approx(0.1)
    assert held_out_scale(cal, 0.2) == pytest.approx(0.06)
    assert held_out_scale(cal, 0.9) == pytest.approx(0.02)  # held flat outside
    # too few errors at every fraction, or no calibration: it does not rank
    assert held_out_scale(cal, 0.2, min_errors=4) == math.inf
    assert held_out_scale(None, 0.2) == math.inf


def test_the_candidate_with_the_smaller_held_out_error_predicts_at_each_t_hat() -> None:
    # a is better early, b better late: each predicts where its evidence is better
    a = Fixed(2.0, ([0.01, 0.01, 0.01], [0.2, 0.2, 0.2]))
    b = Fixed(2.5, ([0.1, 0.1, 0.1], [0.05, 0.05, 0.05]))
    chosen = ChosenPredictor({"a": a, "b": b})
    early = chosen.predict(STEPS[:10], LOSSES[:10], CONTROLS)
    late = chosen.predict(STEPS, LOSSES, CONTROLS)
    assert (early.method, early.final) == ("chosen:a", 2.0)
    assert (late.method, late.final) == ("chosen:b", 2.5)
    assert [n for n, _ in chosen.ranking(0.3)] == ["b", "a"]


def test_a_candidate_that_declines_passes_to_the_next_and_one_without_evidence_never_ranks(
        ) -> None:
    best = Fixed(2.0, ([0.01] * 3, [0.01] * 3), declines=True)
    next_ = Fixed(2.5, ([0.1] * 3, [0.1] * 3))
    unranked = Fixed(9.0, None)
    chosen = ChosenPredictor({"best": best, "next": next_, "none": unranked})
    assert chosen.predict(STEPS, LOSSES, CONTROLS).method == "chosen:next"
    assert [n for n, _ in chosen.ranking(0.3)] == ["best", "next"]
    with pytest.raises(ValueError, match="every candidate declined"):
        ChosenPredictor({"best": best}).predict(STEPS, LOSSES, CONTROLS)
    with pytest.raises(ValueError, match="no candidate has held-out errors"):
        ChosenPredictor({"none": unranked}).predict(STEPS, LOSSES, CONTROLS)
