"""The predictor a study's own evidence favours: each candidate's held-out errors on the proxies
choose, per prefix fraction, which candidate predicts.

Every candidate carries a *calibration*: the signed log errors of its predictions of proxies it
did not learn from, at a grid of prefix fractions (the collapse predictor: each proxy from the
curve refitted without its fold; the twin: each proxy from its twin of another size; a per-curve
peer such as the power-law ensemble: each proxy on its own). :class:`ChosenPredictor` ranks the
candidates at the prefix's t^ by the median absolute error of that evidence (interpolated
linearly in t^ between the fractions, held flat outside; a candidate with fewer than
``min_errors`` errors at every fraction does not rank) and predicts with the best one that
predicts the run, with that candidate's interval: one code path for every source, no switch
chosen by hand.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from hpo.predictors.predict import LEVEL, FinalLossPredictor, Prediction, halfwidth_from_errors
from hpo.predictors.schedules import Controls

__all__ = ["ChosenPredictor", "held_out_scale", "MIN_ERRORS"]

#: a candidate ranks at a fraction where its calibration holds at least this many errors
MIN_ERRORS = 3


def held_out_scale(calibration: Mapping[str, Any] | None, t_hat: float,
                   min_errors: int = MIN_ERRORS) -> float:
    """The median absolute held-out log error of a calibration at ``t_hat``
    (:func:`~hpo.predictors.predict.halfwidth_from_errors` at level 0.5: interpolated between
    its fractions with at least ``min_errors`` errors, held flat outside); ``inf`` without
    one."""
    if not calibration:
        return math.inf
    try:
        return halfwidth_from_errors(calibration, float(t_hat), 0.5, min_errors)
    except ValueError:
        return math.inf


class ChosenPredictor(FinalLossPredictor):
    """Predict with the candidate whose held-out errors on the proxies are smallest at the
    prefix's t^ (module docstring); a candidate that declines the run (a twin without a twin)
    passes to the next. ``candidates`` maps a name to a calibrated predictor; the
    prediction's ``method`` is ``chosen:<name>``. ``ValueError`` when every ranked candidate
    declines, or none has a calibration."""

    name = "chosen"
    min_points = 1

    def __init__(self, candidates: Mapping[str, FinalLossPredictor], level: float = LEVEL,
                 min_errors: int = MIN_ERRORS) -> None:
        super().__init__(level=level)
        if not candidates:
            raise ValueError("ChosenPredictor needs at least one candidate")
        self.candidates = dict(candidates)
        self.min_errors = min_errors

    def ranking(self, t_hat: float) -> list[tuple[str, float]]:
        """``(name, median |held-out error|)`` of the candidates that rank at ``t_hat``, best
        first."""
        scores = [(name, held_out_scale(c.calibration, t_hat, self.min_errors))
                  for name, c in self.candidates.items()]
        return sorted([s for s in scores if math.isfinite(s[1])], key=lambda s: s[1])

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        _, _, t = self._prepare(steps, losses, controls)
        ranked = self.ranking(float(t[-1]))
        if not ranked:
            raise ValueError("chosen: no candidate has held-out errors on the proxies")
        reasons = []
        for name, _ in ranked:
            try:
                pred = self.candidates[name].predict(steps, losses, controls)
            except ValueError as exc:
                reasons.append(f"{name}: {exc}")
                continue
            return dataclasses.replace(pred, method=f"{self.name}:{name}")
        raise ValueError("chosen: every candidate declined (" + "; ".join(reasons) + ")")
