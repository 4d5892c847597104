"""Tiny fake predictors for the adapter tests (the real ones are used in the integration tests)."""

from __future__ import annotations

import numpy as np

from hpo.predictors import Prediction


def _prediction(final: float, lower: float, upper: float) -> Prediction:
    """A prediction with an 80% interval and nothing else."""
    return Prediction(final, lower, upper, 0.8, 0.0, "fake")


class LastValuePredictor:
    """Predicts the last reported loss plus ``bias``, +- ``half``; counts its calls."""

    def __init__(self, half: float = 0.1, bias: float = 0.0) -> None:
        self.half = half
        self.bias = bias
        self.calls = 0

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: object) -> Prediction:
        self.calls += 1
        last = float(np.asarray(losses)[-1]) + self.bias
        return _prediction(last, last - self.half, last + self.half)


class FailingPredictor:
    """Always raises, as a predictor that cannot fit does."""

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: object) -> Prediction:
        raise ValueError("cannot predict this curve")


class LinearDropPredictor:
    """Knows the fake curves' shape ``final + drop * (1 - t^)``: predicts ``final`` +- ``half``."""

    def __init__(self, drop: float = 0.5, half: float = 0.05) -> None:
        self.drop = drop
        self.half = half

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: object) -> Prediction:
        t_hat = float(np.asarray(steps)[-1]) / controls.total_steps  # type: ignore[attr-defined]
        final = float(np.asarray(losses)[-1]) - self.drop * (1.0 - t_hat)
        return _prediction(final, final - self.half, final + self.half)


def synthetic_losses(final: float, tau: float, total: int = 100) -> np.ndarray:
    """A loss curve at steps 0..total-1 shaped by the paper's form (linear decay to zero, 5
    warmup steps, b grows with tau), ending near ``final``."""
    from hpo.predictors.curves import paper_g
    from hpo.predictors.schedules import Controls

    c = Controls(total_steps=total, tpp=20.0, tau=tau, schedule="linear", warmup_steps=5)
    t = np.maximum(np.arange(total) / total, 1e-3)
    g = paper_g(t, c.eta(t), 0.3 * tau**0.5, 0.6)
    g1 = paper_g(np.ones(1), c.eta(np.ones(1)), 0.3 * tau**0.5, 0.6)[0]
    return final * g / g1
