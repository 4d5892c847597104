"""Peer final-loss predictors behind the :class:`~predictors.predict.FinalLossPredictor` interface.

* :class:`LastValuePredictor` - the paper's "current best": the last (trailing-smoothed) value.
* :class:`PowerLawEnsemblePredictor` - schedule-blind parametric extrapolation over steps in the
  style of Domhan et al. 2015: several saturating families fitted to the prefix by least squares
  and averaged with BIC weights (a point-estimate stand-in for their MCMC ensemble).
* :class:`AnnealingLawPredictor` - schedule-aware per-curve fit on the prefix, the LR-annealing
  law of Tissue et al. 2024: L = L0 + A S1^-alpha - C S2 (S1 the LR area, S2 the annealing area
  with momentum ``decay`` per step).
* :class:`TwinPredictor` - the collapse premise at its plainest: the proxy run at the target's
  own settings, its normalized curve read as the target's.

The first three learn nothing from other runs; calibrate their intervals on proxies with
:func:`hpo.predictors.calibrate.calibrate_predictor` (each is calibrated the same way for a fair
comparison). The twin calibrates itself on its proxies (:meth:`TwinPredictor.calibrate`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
from scipy.optimize import least_squares
from scipy.signal import lfilter

from hpo.predictors.calibrate import prefix_errors
from hpo.predictors.curves import schedule_distance, schedule_shape
from hpo.predictors.io import RunCurve
from hpo.predictors.normalize import final_loss_estimate, moving_average, normalize_curve
from hpo.predictors.predict import LEVEL, FinalLossPredictor, Prediction, align_final_loss
from hpo.predictors.schedules import Controls
from hpo.predictors.twins import find_twin

__all__ = [
    "LastValuePredictor",
    "PowerLawEnsemblePredictor",
    "AnnealingLawPredictor",
    "TwinPredictor",
    "annealing_areas",
]


class LastValuePredictor(FinalLossPredictor):
    """The last value of the prefix, smoothed by a trailing average over ``window`` of t^."""

    name = "last_value"
    min_points = 1

    def __init__(self, level: float = LEVEL, inflation: float = 1.0, window: float = 0.01) -> None:
        super().__init__(level=level, inflation=inflation)
        self.window = window

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        s, v, t = self._prepare(steps, losses, controls)
        final = float(moving_average(t, v, self.window)[-1])
        return self._interval(final, float(t[-1]))


# family name -> (function of (x, params), initial params, lower bounds, upper bounds)
def _pow3(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    c, a, alpha = p
    return c + a * x ** (-alpha)


def _pow4(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    c, a, b, alpha = p
    return c + a * (x + b) ** (-alpha)


def _exp3(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    c, a, b = p
    return c + a * np.exp(-b * x)


def _logpower(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    a, b, c = p
    return a / (1.0 + (x / math.exp(b)) ** c)


_FAMILIES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "pow3": _pow3,
    "pow4": _pow4,
    "exp3": _exp3,
    "logpower": _logpower,
}


def _family_fits(x: np.ndarray, y: np.ndarray) -> list[tuple[str, np.ndarray, float, int]]:
    """Least-squares fits of each family: (name, params, sse, n_params)."""
    ymin, ymax = float(y.min()), float(y.max())
    span = max(ymax - ymin, 1e-6)
    specs = {
        "pow3": (_pow3, [ymin - span, span, 0.5], [0.0, 0.0, 0.01], [ymin, np.inf, 5.0]),
        "pow4": (_pow4, [ymin - span, span, 0.01, 0.5], [0.0, 0.0, 0.0, 0.01],
                 [ymin, np.inf, 1.0, 5.0]),
        "exp3": (_exp3, [ymin - 0.2 * span, span, 1.0 / max(x[-1], 1e-3)], [0.0, 0.0, 1e-3],
                 [ymin, np.inf, 1e4]),
        "logpower": (_logpower, [ymax * 1.5, math.log(max(x[0], 1e-4)), 0.3],
                     [ymin, -20.0, 0.01], [100 * ymax, 5.0, 5.0]),
    }
    out = []
    for name, (fn, p0, lo, hi) in specs.items():
        p0 = np.clip(np.asarray(p0, float), np.asarray(lo, float) + 1e-9,
                     np.where(np.isfinite(hi), np.asarray(hi, float) - 1e-9, np.inf))
        try:
            with np.errstate(all="ignore"):
                res = least_squares(lambda p, fn=fn: fn(x, p) - y, p0, bounds=(lo, hi),
                                    max_nfev=100, ftol=1e-10, xtol=1e-10)
        except (ValueError, FloatingPointError):
            continue
        if not np.all(np.isfinite(res.fun)):
            continue
        out.append((name, res.x, float(np.sum(res.fun**2)), len(p0)))
    return out


class PowerLawEnsemblePredictor(FinalLossPredictor):
    """Schedule-blind ensemble of saturating families over t^ (pow3, pow4, exp3, log-power).

    Fitted on the prefix points with t^ >= ``skip`` x (last t^) (dropping the initial transient);
    families are averaged at t^ = 1 with weights exp(-BIC / 2).
    """

    name = "power_law_ensemble"
    min_points = 5

    def __init__(self, level: float = LEVEL, inflation: float = 1.0, skip: float = 0.2) -> None:
        super().__init__(level=level, inflation=inflation)
        self.skip = skip

    def _fit(self, steps: np.ndarray, losses: np.ndarray, controls: Controls):
        s, v, t = self._prepare(steps, losses, controls)
        sel = t >= self.skip * t[-1]
        if sel.sum() < self.min_points:
            sel = np.zeros_like(sel)
            sel[-self.min_points:] = True
        x, y = t[sel], v[sel]
        x = np.maximum(x, 1e-4)
        fits = _family_fits(x, y)
        if not fits:
            raise ValueError("power_law_ensemble: every family failed to fit the prefix")
        n = x.size
        bic = np.array([n * math.log(max(sse / n, 1e-300)) + k * math.log(n)
                        for _, _, sse, k in fits])
        w = np.exp(-(bic - bic.min()) / 2)
        return fits, w / w.sum(), float(t[-1])

    def _eval(self, fits, w, xs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            vals = np.array([_FAMILIES[name](np.maximum(xs, 1e-4), p) for name, p, _, _ in fits])
        return w @ vals

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        fits, w, t_last = self._fit(steps, losses, controls)
        final = float(self._eval(fits, w, np.ones(1))[0])
        if not np.isfinite(final) or final <= 0:
            raise ValueError("power_law_ensemble: the extrapolation is not a positive number")
        return self._interval(final, t_last)

    def predict_curve(self, steps, losses, controls, t_hat):
        fits, w, _ = self._fit(steps, losses, controls)
        t = np.asarray(t_hat, dtype=float)
        return self._eval(fits, w, t) / self._eval(fits, w, np.ones(1))[0]


def annealing_areas(eta: np.ndarray, decay: float = 0.999) -> tuple[np.ndarray, np.ndarray]:
    """Tissue et al. areas at every step for an LR ``eta`` given at every step 0..T.

    S1[i] = sum_{k<=i} eta[k] (forward area); m[i] = decay m[i-1] + (eta[i-1] - eta[i]) (the
    annealing momentum), S2[i] = sum_{k<=i} m[k] (annealing area). Both divided by T.
    """
    e = np.asarray(eta, dtype=float)
    total = max(e.size - 1, 1)
    s1 = np.cumsum(e) / total
    drop = np.concatenate([[0.0], e[:-1] - e[1:]])
    # warmup increases are not annealing
    peak = int(np.argmax(e))
    drop[: peak + 1] = 0.0
    m = lfilter([1.0], [1.0, -decay], drop)
    s2 = np.cumsum(m) / total
    return s1, s2


class AnnealingLawPredictor(FinalLossPredictor):
    """Per-curve fit of L = L0 + A S1^-alpha - C S2 (Tissue et al. 2024) on the prefix.

    S1, S2 from the run's schedule (``controls.eta`` at every step). Fitted on t^ >=
    ``skip`` x (last t^); C gets a weak ridge ``c_ridge`` so that it stays near 0 when the prefix
    has seen no annealing (the law cannot learn C from a prefix without LR decay).
    """

    name = "annealing_law"
    min_points = 5

    def __init__(
        self, level: float = LEVEL, inflation: float = 1.0, skip: float = 0.2,
        decay: float = 0.999, c_ridge: float = 1e-3,
    ) -> None:
        super().__init__(level=level, inflation=inflation)
        self.skip = skip
        self.decay = decay
        self.c_ridge = c_ridge

    def _fit(self, steps, losses, controls: Controls):
        s, v, t = self._prepare(steps, losses, controls)
        grid = np.arange(controls.total_steps + 1) / controls.total_steps
        s1, s2 = annealing_areas(controls.eta(grid), self.decay)
        sel = (t >= self.skip * t[-1]) & (s > 0)
        if sel.sum() < self.min_points:
            raise ValueError(f"annealing_law: need {self.min_points} points after the start")
        idx = s[sel].astype(int)
        x1, x2, y = np.maximum(s1[idx], 1e-9), s2[idx], v[sel]
        ymin, span = float(y.min()), float(max(np.ptp(y), 1e-6))

        def resid(p):
            l0, a, alpha, c = p
            r = l0 + a * x1 ** (-alpha) - c * x2 - y
            return np.concatenate([r, [self.c_ridge * c]])

        best = None
        for alpha0 in (0.3, 0.7):
            p0 = [max(ymin - span, 1e-3), span * x1[0] ** alpha0 / 2, alpha0, 0.0]
            try:
                with np.errstate(all="ignore"):
                    res = least_squares(resid, p0, bounds=([0, 0, 0.01, 0], [ymin, np.inf, 5,
                                                                            np.inf]),
                                        max_nfev=100, ftol=1e-10, xtol=1e-10)
            except ValueError:
                continue
            if best is None or res.cost < best.cost:
                best = res
        if best is None:
            raise ValueError("annealing_law: the fit failed")
        return best.x, s1, s2, float(t[-1])

    @staticmethod
    def _curve(p, s1, s2) -> np.ndarray:
        l0, a, alpha, c = p
        return l0 + a * np.maximum(s1, 1e-9) ** (-alpha) - c * s2

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        p, s1, s2, t_last = self._fit(steps, losses, controls)
        final = float(self._curve(p, s1[-1:], s2[-1:])[0])
        if not np.isfinite(final) or final <= 0:
            raise ValueError("annealing_law: the extrapolation is not a positive number")
        return self._interval(final, t_last)

    def predict_curve(self, steps, losses, controls, t_hat):
        p, s1, s2, _ = self._fit(steps, losses, controls)
        full = self._curve(p, s1, s2)
        grid = np.arange(full.size) / (full.size - 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.interp(np.asarray(t_hat, float), grid, full) / full[-1]


class TwinPredictor(FinalLossPredictor):
    """The proxy run at the target's own settings: its normalized curve, read as the target's.

    The collapse premise without a fitted curve. A target's *twin*
    (:func:`~hpo.predictors.twins.find_twin`) is the proxy with the same schedule shape (RMS
    distance of the normalized LR over t^ in [0.1, 1] at most ``match_tol``) and the same LR
    and batch, and among those the nearest tau and TPP, then the nearest size. The
    predicted final is the target's losses over the last ``window`` of the prefix (in t^)
    aligned with the twin's normalized curve L(t^) / L_final at the same t^ (the mean of the
    log ratios, :func:`~hpo.predictors.predict.align_final_loss`). A target without a twin,
    or whose prefix ends before the twin's first point, is declined (``ValueError``).

    Its interval is calibrated on the proxies (:meth:`calibrate`), each predicted from its twin
    among the proxies of *other* sizes: as a target is predicted from smaller runs.
    """

    name = "twin"
    min_points = 1

    def __init__(
        self, proxies: list[RunCurve], level: float = LEVEL, inflation: float = 1.0,
        window: float = 0.25, match_tol: float = 0.03,
    ) -> None:
        super().__init__(level=level, inflation=inflation)
        self.window = window
        self.match_tol = match_tol
        self.proxies = [r for r in proxies
                        if r.complete and r.steps.size >= 3 and r.controls.has_schedule]
        self._controls = [r.controls for r in self.proxies]
        self._shapes = np.array([schedule_shape(c) for c in self._controls])
        self._curves = [
            (r.t_hat, normalize_curve(r.t_hat, r.losses,
                                      final=final_loss_estimate(r.t_hat, r.losses, at=1.0)))
            for r in self.proxies]

    def twin(self, controls: Controls, other_size_than: float | None = None) -> int | None:
        """The index in ``proxies`` of ``controls``' twin, or ``None``; with
        ``other_size_than``, only proxies of another ``n_params`` count."""
        if not self.proxies or not controls.has_schedule:
            return None
        near = schedule_distance(self._shapes, schedule_shape(controls)) <= self.match_tol
        twin = find_twin(controls, self._controls, np.flatnonzero(near), other_size_than)
        return None if twin is None else twin[0]

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        return self._predict(steps, losses, controls, None)

    def _predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls,
                 other_size_than: float | None) -> Prediction:
        s, v, t = self._prepare(steps, losses, controls)
        i = self.twin(controls, other_size_than)
        if i is None:
            raise ValueError("twin: no proxy ran this run's schedule and settings")
        tt, curve = self._curves[i]
        sel = (t >= t[-1] * (1 - self.window)) & (t >= tt[0])
        if not sel.any():
            raise ValueError(f"twin: the prefix (t^ <= {t[-1]:.3g}) ends before the twin's "
                             f"first point (t^ {tt[0]:.3g})")
        final = align_final_loss(v[sel], np.interp(t[sel], tt, curve))
        return self._interval(final, float(t[-1]))

    def calibrate(self, fractions: list[float]) -> dict:
        """Signed log errors log(predicted / true) of each proxy's prefixes at ``fractions``,
        predicted from its twin among the proxies of other sizes (``None`` where it has none),
        returned and, where some fraction has 2 of them, kept as the interval's calibration."""
        per_run = [prefix_errors(_FromOtherSizes(self, r.controls.n_params), r, fractions)
                   for r in self.proxies]
        errors = [[e[j] for e in per_run] for j in range(len(fractions))]
        cal = {"fractions": list(fractions), "errors": errors,
               "method": "twins among the proxies of other sizes"}
        enough = any(sum(e is not None for e in errs) >= 2 for errs in errors)
        self.calibration = cal if enough else None
        return cal


class _FromOtherSizes:
    """A twin predictor that reads only proxies of another size than ``n_params``: what
    :meth:`TwinPredictor.calibrate` predicts each proxy with."""

    def __init__(self, twin: TwinPredictor, n_params: float | None) -> None:
        self._twin, self._n_params = twin, n_params

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        return self._twin._predict(steps, losses, controls, self._n_params)
