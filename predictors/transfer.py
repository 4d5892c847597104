"""Per-setting shape transfer: a run's final loss from a smaller proxy that ran its setting.

The collapse ("Scaling with Collapse", Bergsma et al. 2025): with the recipe fixed (TPP, tau,
schedule, and under CompleteP the same base LR), L(t^) / L_final is one curve across model sizes.
The universal curve models that shape over all proxies as a function of the controls; where a proxy
ran the run's own setting at a smaller size (its *counterpart*), the counterpart's own shape is the
direct estimate. The run's points over the last ``window`` of t^ (0.05) are aligned with the
counterpart's smoothed curve by one factor, which carries the counterpart's final loss over:

    log L_final = mean over the window of [log L(t) - log L_cp(t)] + log L_cp_final

with cp the counterpart at the largest proxy size below the run (the geometric mean over its
runs there, e.g. seeds). Aligning over a window rather than comparing one point averages the
per-batch noise of training losses down without lagging the estimate.

On our CPU sweeps (LR x tau at TPP 20 and 40, widths 16-64) the log-ratio of two targets'
predictions is off by at most 0.10-0.12 at t^ = 0.2 and 0.06-0.07 at t^ = 0.5 this way, where
the universal curve's is off by up to 0.14-0.21 and 0.11-0.14 (``benchmarks/goal_bounds.py``):
the LR moves the shape at a fixed tau, which the universal curve does not see. On the
multipowerlaw schedules (400M from 25M and 100M proxies) the universal curve is the tighter one
(0.007 against 0.010 at t^ = 0.2).

Calibration (leave-one-size-out, ``TransferPredictor.calibration``): every proxy with a
counterpart at a smaller size is predicted from it at ``FRACTIONS``; the signed errors
log(prediction / final) give the interval (the ``level`` quantile of |error| at the largest
fraction not after t^, symmetric in log) and, through :func:`predictors.paired_tolerance`, the
paired rule's tolerance. Pure numerics (numpy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from predictors.io import RunCurve
from predictors.normalize import final_loss_estimate, smooth_curve
from predictors.predict import Prediction, _close_or_unknown
from predictors.schedules import Controls

__all__ = ["TransferPredictor", "same_setting", "FRACTIONS"]

# prefix fractions at which the proxies are predicted for the calibration (as the universal
# curve's calibration)
FRACTIONS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def same_setting(a: Controls, b: Controls, rel_tol: float = 0.01) -> bool:
    """Whether two runs ran one setting (at any size): the same schedule name, TPP and tau
    (within ``rel_tol``; where one side does not know TPP, the same total_steps), and the
    same LR: ``base_lr`` where both know it, else ``peak_lr``. False when neither LR is
    known on both sides (the setting cannot be told)."""
    if (a.schedule or None) != (b.schedule or None):
        return False
    tpp = _close_or_unknown(a.tpp, b.tpp, rel_tol)
    if tpp is False or (tpp is None and a.total_steps != b.total_steps):
        return False
    if _close_or_unknown(a.tau, b.tau, rel_tol) is False:
        return False
    lr = _close_or_unknown(a.base_lr, b.base_lr, rel_tol)
    if lr is None:
        lr = _close_or_unknown(a.peak_lr, b.peak_lr, rel_tol)
    return bool(lr)


class TransferPredictor:
    """``predict(steps, losses, controls)`` from the counterpart proxy's shape (module
    docstring).

    Args:
        proxies: the proxy runs (``predictors.RunCurve``, complete curves; ``controls`` with
            ``n_params`` and the setting's fields).
        level: the interval's coverage level, in (0, 1).
        window: the last stretch of t^ whose points are aligned with the counterpart (> 0).
        rel_tol: relative tolerance of :func:`same_setting`.

    ``predict`` raises ``ValueError`` when no proxy ran the setting at a smaller size, when
    the counterpart's curve starts after t^, or when nothing calibrates the interval (no proxy
    has a counterpart itself): the decision then fails open for that trial.
    """

    name = "collapse-transfer"

    def __init__(self, proxies: Sequence[RunCurve], level: float = 0.8, window: float = 0.05,
                 rel_tol: float = 0.01) -> None:
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), but got {level=}")
        if not window > 0:
            raise ValueError(f"window must be > 0, but got {window=}")
        self.proxies = [p for p in proxies if p.controls.n_params is not None and p.steps.size]
        if not self.proxies:
            raise ValueError("no proxy run with n_params and points")
        self.level = float(level)
        self.window = float(window)
        self.rel_tol = float(rel_tol)
        self._finals = {p.run_id: float(final_loss_estimate(p.t_hat, p.losses, at=1.0))
                        for p in self.proxies}
        self._smooth = {p.run_id: (p.t_hat, smooth_curve(p.t_hat, p.losses))
                        for p in self.proxies}
        if any(not np.all(s > 0) or f <= 0 for (_, s), f in
               zip(self._smooth.values(), self._finals.values(), strict=True)):
            raise ValueError("proxy losses must be > 0")
        self.calibration = self._calibrate()
        self._quantiles = self._interval_quantiles()

    # ------------------------------------------------------------------ counterparts
    def counterparts(self, controls: Controls) -> list[RunCurve]:
        """The proxies that ran ``controls``' setting at the largest size below its
        ``n_params`` (at any size when it is unknown); empty when none did."""
        size = controls.n_params
        found = [p for p in self.proxies
                 if (size is None or p.controls.n_params < size * (1 - 1e-9))
                 and same_setting(p.controls, controls, self.rel_tol)]
        if not found:
            return []
        top = max(p.controls.n_params for p in found)
        return [p for p in found if p.controls.n_params == top]

    def _point(self, steps: np.ndarray, losses: np.ndarray, controls: Controls,
               cps: Sequence[RunCurve]) -> tuple[float, float]:
        """(predicted final, t^) from the points reported so far; NaN when not possible.

        The run's points in the last ``window`` of t^ are aligned with each counterpart's
        smoothed curve by one factor (the mean log-ratio), which carries its final loss over."""
        t = np.asarray(steps, dtype=float) / controls.total_steps
        y = np.asarray(losses, dtype=float)
        ok = np.isfinite(t) & np.isfinite(y) & (y > 0)
        t, y = t[ok], y[ok]
        if t.size == 0:
            return math.nan, math.nan
        t_hat = float(t.max())
        near = t >= t_hat - self.window - 1e-12
        logs = []
        for p in cps:
            pt, smooth = self._smooth[p.run_id]
            use = near & (t >= pt[0]) & (t <= pt[-1])
            if not use.any():
                continue
            shift = float(np.mean(np.log(y[use]) - np.log(np.interp(t[use], pt, smooth))))
            logs.append(shift + math.log(self._finals[p.run_id]))
        if not logs:
            return math.nan, t_hat
        return math.exp(float(np.mean(logs))), t_hat

    # ------------------------------------------------------------------ calibration
    def _calibrate(self) -> dict[str, Any]:
        """Each proxy with a counterpart predicted from it at ``FRACTIONS``: ``{"fractions",
        "method", "runs": [{"run_id", "group", "n_params", "total_steps", "tpp", "tau",
        "errors"}]}``, errors log(prediction / final) (``None`` where no prediction)."""
        runs = []
        for p in self.proxies:
            cps = self.counterparts(p.controls)
            if not cps:
                continue
            errors: list[float | None] = []
            for f in FRACTIONS:
                keep = p.t_hat <= f + 1e-12
                pred, _ = self._point(p.steps[keep], p.losses[keep], p.controls, cps)
                final = self._finals[p.run_id]
                errors.append(math.log(pred / final) if math.isfinite(pred) and pred > 0
                              else None)
            c = p.controls
            runs.append({"run_id": p.run_id, "group": p.group, "n_params": c.n_params,
                         "total_steps": c.total_steps, "tpp": c.tpp, "tau": c.tau,
                         "errors": errors})
        return {"fractions": list(FRACTIONS), "method": "leave-one-size-out shape transfer",
                "runs": runs}

    def _interval_quantiles(self) -> list[float | None]:
        out: list[float | None] = []
        for i in range(len(FRACTIONS)):
            errs = [abs(r["errors"][i]) for r in self.calibration["runs"]
                    if r["errors"][i] is not None]
            out.append(float(np.quantile(errs, self.level)) if errs else None)
        return out

    def _half_width(self, t_hat: float) -> float:
        """The interval's half width in log at ``t_hat``: the quantile at the largest
        calibrated fraction not after it (the first one before the first fraction)."""
        idx = [i for i, f in enumerate(FRACTIONS) if f <= t_hat + 1e-9
               and self._quantiles[i] is not None]
        if not idx:
            idx = [i for i, q in enumerate(self._quantiles) if q is not None][:1]
        if not idx:
            raise ValueError("nothing calibrates the interval: no proxy has a counterpart "
                             "at a smaller size")
        return float(self._quantiles[idx[-1]])

    # ------------------------------------------------------------------ predict
    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        """The final loss of a run from its points so far (``ValueError`` when it cannot)."""
        cps = self.counterparts(controls)
        if not cps:
            raise ValueError("no proxy ran this setting (schedule, TPP, tau, LR) at a "
                             "smaller size")
        final, t_hat = self._point(steps, losses, controls, cps)
        if not math.isfinite(final):
            raise ValueError(f"no transfer at t^={t_hat:.3g}: the counterpart's curve or the "
                             "run's points do not reach it")
        h = self._half_width(t_hat)
        return Prediction(final=final, lower=final * math.exp(-h), upper=final * math.exp(h),
                          level=self.level, t_hat=t_hat, method=self.name)
