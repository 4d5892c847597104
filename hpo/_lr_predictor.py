"""A final-loss predictor for sweeps that move the base LR at a fixed tau.

The universal curve's controls are TPP, tau and the schedule (DESIGN.md section 1). On small CPU
models the LR moves the curve's shape at a fixed tau too (at width 48, TPP 20: the spread of
L / L_final between LR 0.005 and 0.01 at one tau is ~0.1, larger than between taus), so a sweep
over LR and tau needs proxies at several LRs. :class:`LRConditionedPredictor` holds one universal
curve per proxy base LR (each fitted, and leave-one-out calibrated, on the proxies of that LR,
which vary tau) and predicts a trial by interpolating the two neighbouring LR curves' predictions
linearly in log LR (clamped at the ends).

Width transfer: small models do not collapse exactly across widths, and the bias of a proxy
curve on a wider target grows with the LR (width 32 -> 48 at TPP 20: predictions ~11% high at
LR 0.02, ~2% at 0.005). :meth:`observe` records, for each finished target trial, the ratio of
its final loss to the uncorrected prediction at each checkpoint; later predictions are multiplied
by that ratio, interpolated in log LR between the LRs observed (clamped at the ends), at the
nearest checkpoint. This is the pruner's ``debias`` resolved by LR (turn the pruner's own debias
off when using it). Pure numerics (numpy and predictors); no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["LRConditionedPredictor"]


class LRConditionedPredictor:
    """``predict(steps, losses, controls)`` from per-LR universal curves.

    Args:
        curves: base LR -> fitted ``predictors.UniversalCurve`` (from proxies at that LR).
        reference: the curve fitted on all proxies; exposed as ``curve`` so the decision's
            extrapolation check sees the fitted control ranges.
        base_lr_per_peak: base LR / hidden-weight peak LR of the trials (CompleteP: m_N for
            alpha = 1); ``controls.peak_lr`` times this is a trial's base LR.
        level: interval coverage level.
    """

    name = "collapse-lr"

    def __init__(self, curves: Mapping[float, Any], reference: Any, base_lr_per_peak: float,
                 level: float = 0.8) -> None:
        from predictors.predict import CollapsePredictor

        if not curves:
            raise ValueError("curves must hold at least one LR")
        self.lrs = sorted(float(x) for x in curves)
        self.predictors = {lr: CollapsePredictor(curves[lr], level=level) for lr in self.lrs}
        self.curve = reference
        self.factor = float(base_lr_per_peak)
        self.level = level
        self.ratios: dict[float, dict[float, list[float]]] = {}  # lr -> checkpoint -> ratios

    def observe(self, base_lr: float, checkpoint: float, ratio: float) -> None:
        """Record final / uncorrected prediction of a finished trial at ``checkpoint``."""
        if math.isfinite(ratio) and ratio > 0:
            cps = self.ratios.setdefault(float(base_lr), {})
            cps.setdefault(round(float(checkpoint), 3), []).append(float(ratio))

    def correction(self, base_lr: float | None, t_hat: float) -> float:
        """The width-transfer correction at ``base_lr`` and progress ``t_hat`` (1 if none)."""
        if base_lr is None or not self.ratios:
            return 1.0
        points = []
        for lr, cps in self.ratios.items():
            cp = min(cps, key=lambda c: abs(c - t_hat))
            points.append((math.log(lr), float(np.median(np.log(cps[cp])))))
        points.sort()
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        return math.exp(float(np.interp(math.log(base_lr), xs, ys)))

    def base_lr(self, controls: Any) -> float | None:
        peak = getattr(controls, "peak_lr", None)
        return None if peak is None else float(peak) * self.factor

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Any) -> Any:
        """The corrected prediction (see :meth:`observe`)."""
        from predictors.predict import Prediction

        raw = self.predict_raw(steps, losses, controls)
        k = self.correction(self.base_lr(controls), raw.t_hat)
        if k == 1.0:
            return raw
        return Prediction(final=raw.final * k, lower=raw.lower * k, upper=raw.upper * k,
                          level=raw.level, t_hat=raw.t_hat, method=self.name)

    def predict_raw(self, steps: np.ndarray, losses: np.ndarray, controls: Any) -> Any:
        """The prediction of the per-LR proxy curves, without the width-transfer correction."""
        from predictors.predict import Prediction

        lr = self.base_lr(controls)
        if lr is None or len(self.lrs) == 1:
            return self.predictors[self.lrs[len(self.lrs) // 2]].predict(steps, losses, controls)
        x = math.log(lr)
        logs = [math.log(v) for v in self.lrs]
        if x <= logs[0]:
            return self.predictors[self.lrs[0]].predict(steps, losses, controls)
        if x >= logs[-1]:
            return self.predictors[self.lrs[-1]].predict(steps, losses, controls)
        i = int(np.searchsorted(logs, x)) - 1
        w = (x - logs[i]) / (logs[i + 1] - logs[i])
        a = self.predictors[self.lrs[i]].predict(steps, losses, controls)
        if w < 1e-9:
            return a
        b = self.predictors[self.lrs[i + 1]].predict(steps, losses, controls)

        def mix(p: float, q: float) -> float:
            return math.exp((1 - w) * math.log(p) + w * math.log(q))

        return Prediction(final=mix(a.final, b.final), lower=mix(a.lower, b.lower),
                          upper=mix(a.upper, b.upper), level=a.level, t_hat=a.t_hat,
                          method=self.name)
