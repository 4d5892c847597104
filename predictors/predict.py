"""Final-loss prediction from a partial curve, with a calibrated predictive interval.

The collapse predictor ("Scaling with Collapse", Bergsma et al. 2025): given the prefix of a run,
its controls and a universal curve lhat, the predicted final loss is the divisor L_final that best
aligns L(t) / L_final with lhat over the observed stretch; least squares on logs gives the closed
form log L_final = mean(log L - log lhat) over the alignment window (:func:`align_final_loss`).

Intervals: every predictor may carry a *calibration*, the signed log errors
log(predicted / true) of its predictions on the proxy runs at a grid of prefix fractions
(leave-one-out for the collapse predictor: the curve is refitted without the run it predicts).
The interval at level p is predicted * exp(+-q), with q the p-quantile of the *absolute*
errors, interpolated linearly in t^, times ``inflation``: it holds the truth with probability
p wherever the errors are drawn as on the proxies, and it is symmetric in log because the sign
of the proxies' errors does not carry over to larger runs (on the shared lr_scheduling data the
proxies' predictions of new schedules are mostly too low, the 124M runs' too high; an interval
shaped by the proxies' skew lost 4 of 13 best arms there; ``predictors/README.md``). Without
a calibration the interval is ``final * exp(+-default_halfwidth * (1 - t^))`` and a warning
says so.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hpo.predictors.normalize import check_curve
from hpo.predictors.pairs import ProxyPairScale, fit_proxy_pair_scale, pair_scale_from_interval
from hpo.predictors.prior import PairPrior, default_prior
from hpo.predictors.schedules import Controls

if TYPE_CHECKING:
    from hpo.predictors.curves import UniversalCurve

__all__ = [
    "Prediction",
    "FinalLossPredictor",
    "CollapsePredictor",
    "align_final_loss",
    "halfwidth_from_errors",
    "extrapolation",
    "SHAPE_SLOPE_MAX",
    "LEVEL",
]



@dataclass(frozen=True)
class Prediction:
    """A predicted final loss with a predictive interval [lower, upper] at ``level``.

    ``t_hat`` is the fraction of training seen; ``method`` names the predictor; ``widening``
    how much wider than its calibration the interval is (1 + ``EXTRAPOLATION_WIDENING`` x d
    for a run beyond the proxies' ranges, 1 inside them). ``pair_scale``, ``pair_dof``,
    ``lr``, ``tau`` and ``distance_slope`` are this prediction's side of the pair prior
    (:mod:`hpo.predictors.prior`): the error of the log ratio of two predictions made at the
    same t^ is ``max(pair_scale_a, pair_scale_b) x exp(distance_slope x dist)`` (``dist`` the
    larger |log ratio| of the two runs' LRs and taus) times a Student-t with ``pair_dof``
    degrees of freedom (``inf``: normal); ``pair_scale`` 0: no pair law, the interval read as a
    normal error independent of the other prediction's. ``evidence`` holds the
    prior's features of this prediction (:data:`hpo.predictors.prior.FEATURES`).
    """

    final: float
    lower: float
    upper: float
    level: float
    t_hat: float
    method: str
    widening: float = 1.0
    pair_scale: float = 0.0  # 0: no measured pair law
    pair_dof: float = math.inf
    lr: float = 0.0  # the run's base LR (its peak LR where it has none); 0: unknown
    tau: float = 0.0  # the run's tau; 0: unknown
    distance_slope: float = 0.0
    evidence: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        out = {k: getattr(self, k) for k in ("final", "lower", "upper", "level", "t_hat",
                                              "method", "widening", "pair_scale", "pair_dof",
                                              "lr", "tau", "distance_slope")}
        out["evidence"] = dict(self.evidence)
        return out


def align_final_loss(
    losses: np.ndarray, lhat: np.ndarray, weights: np.ndarray | None = None
) -> float:
    """The L_final minimizing sum w (log L - log L_final - log lhat)^2: a weighted mean of logs."""
    y = np.log(np.asarray(losses, dtype=float)) - np.log(np.asarray(lhat, dtype=float))
    if weights is None:
        return float(math.exp(np.mean(y)))
    w = np.asarray(weights, dtype=float)
    return float(math.exp(np.sum(w * y) / np.sum(w)))


def stretch_final_loss(
    losses: np.ndarray, lhat: np.ndarray, shrink: float, keep: float = 1.0
) -> float:
    """L_final of the fit log L = log L_final + (1 + k) log lhat, with k shrunk toward 0.

    A per-run correction of the universal shape: the run's excess over its final loss is the
    reference's raised to 1 + k (k = 0 is plain alignment, :func:`align_final_loss`). k is the
    least-squares slope of the centred log L - log lhat on the centred log lhat over the window,
    divided by 1 + ``shrink`` and times ``keep``, and 1 + k is kept within ``STRETCH_BOUNDS``.
    """
    x = np.log(np.asarray(lhat, dtype=float))
    y = np.log(np.asarray(losses, dtype=float))
    xc, yc = x - x.mean(), y - y.mean()
    sxx = float(xc @ xc)
    k = keep * float(xc @ (yc - xc)) / sxx / (1 + shrink) if sxx > 0 else 0.0
    # the excess keeps its sign and stays within a factor 4 of the reference's (in log)
    k = min(max(k, STRETCH_BOUNDS[0] - 1), STRETCH_BOUNDS[1] - 1)
    return float(math.exp(y.mean() - (1 + k) * x.mean()))


#: the level of every predictive interval: 80% is wide enough to be stable on a handful of
#: proxies (its quantile sits inside the errors, not at their extreme) and narrow enough to
#: show what a prediction can tell apart; the pruner's tail comes from the pair law, not from it
LEVEL = 0.8
#: range of the exponent 1 + k of :func:`stretch_final_loss`
STRETCH_BOUNDS = (0.25, 4.0)
#: a prefix falling more than this many times as steeply (in log) as the universal curve over
#: the alignment window is predicted by plain alignment and flagged ``steep`` for the pair
#: prior (:func:`shape_slope`): 2 is above every slope of a proxy's prefix against the curve
#: refitted without it (t^ 0.1-0.3; largest: 1.20 on multipowerlaw, 1.43 / 1.36 on
#: lr_scheduling train / val, 1.91 on the noisy CPU sweep), so beyond it the proxies'
#: calibration does not describe the run
SHAPE_SLOPE_MAX = 2.0
#: the collapse predictor's interval: the calibrated half-width widened by this factor per log
#: unit of extrapolation (:class:`CollapsePredictor`); chosen across the shared sources by
#: coverage, with a scale on the calibrated half-width that came out at 1
#: (benchmarks/choose_default.py)
EXTRAPOLATION_WIDENING = 2.0
#: the collapse predictor needs this many logged points after the warmup (fewer points earn a
#: wider pair scale through the prior's ``inv_points``)
MIN_POINTS = 2
#: fewer points in the window than this: plain alignment (k has no leverage)
STRETCH_MIN_POINTS = 5

#: CollapsePredictor settings compared by leave-one-out on the proxies (calibrate.calibrate_curve):
#: plain alignment over the last half of the prefix, or the stretch correction over the last
#: three quarters with shrinkage 0.5, 1 or 3
PREDICTOR_CANDIDATES: tuple[dict[str, Any], ...] = (
    {"align_from": 0.5, "stretch": None},
    {"align_from": 0.25, "stretch": 0.5},
    {"align_from": 0.25, "stretch": 1.0},
    {"align_from": 0.25, "stretch": 3.0},
)


def halfwidth_from_errors(calibration: Mapping[str, Any], t_hat: float, level: float,
                          min_errors: int = 2) -> float:
    """The ``level``-quantile of the absolute log errors for a prefix ending at ``t_hat``.

    ``calibration`` holds ``fractions`` (increasing) and ``errors`` (one list of signed log
    errors log(predicted / true) per fraction; ``None`` entries skipped). The quantile is taken
    at each fraction with at least ``min_errors`` errors, interpolated linearly in t^ and held
    flat outside. ``ValueError`` when no fraction has that many errors.
    """
    fracs = np.asarray(calibration["fractions"], dtype=float)
    qs, ok = [], []
    for f, errs in zip(fracs, calibration["errors"], strict=False):
        e = np.asarray([x for x in errs if x is not None and np.isfinite(x)], dtype=float)
        if e.size >= min_errors:
            qs.append(float(np.quantile(np.abs(e), level)))
            ok.append(f)
    if not ok:
        raise ValueError(f"calibration holds fewer than {min_errors} errors at every fraction")
    return float(np.interp(t_hat, ok, qs))


class FinalLossPredictor(ABC):
    """Predicts a run's final loss from a prefix of its curve.

    Contract: ``predict(steps, losses, controls)`` takes the logged steps (any order; duplicates
    averaged) and losses of one run so far and returns a :class:`Prediction` at ``self.level``;
    it raises ``ValueError`` with a clear message when it cannot predict (too few points,
    non-finite or non-positive losses, a step beyond ``controls.total_steps``, missing controls).
    """

    name = "abstract"
    min_points = 3

    def __init__(self, level: float = LEVEL, inflation: float = 1.0) -> None:
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), but got {level=}")
        if inflation <= 0:
            raise ValueError(f"inflation must be > 0, but got {inflation=}")
        self.level = level
        self.inflation = inflation
        self.calibration: dict[str, Any] | None = None
        self.default_halfwidth = 0.05
        self._warned = False

    @abstractmethod
    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        """Predicted final loss with an interval; ``ValueError`` when it cannot predict."""

    def predict_curve(
        self, steps: np.ndarray, losses: np.ndarray, controls: Controls, t_hat: np.ndarray
    ) -> np.ndarray | None:
        """The predicted normalized curve L(t^) / L(1) at ``t_hat``, or ``None`` if the method
        has no curve."""
        return None

    def _prepare(
        self, steps: np.ndarray, losses: np.ndarray, controls: Controls
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, v = check_curve(steps, losses, self.min_points, controls.total_steps)
        return s, v, s / controls.total_steps

    def _interval(self, final: float, t_hat: float, scale: float = 1.0) -> Prediction:
        """The prediction ``final`` with its interval at ``t_hat``: half-width (log units)
        from the predictor's calibration, times ``scale``; its side of a pair law read from the
        interval (:meth:`_interval_from`)."""
        return self._interval_from(self.calibration, final, t_hat, scale)

    def _interval_from(self, calibration: Mapping[str, Any] | None, final: float,
                       t_hat: float, scale: float = 1.0) -> Prediction:
        """:meth:`_interval` with the held-out errors of ``calibration`` (``None``: the
        default interval, warned about once)."""
        if calibration is not None:
            half = halfwidth_from_errors(calibration, t_hat, self.level)
        else:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"{self.name}: no calibration; using a default interval of "
                    f"+-{self.default_halfwidth:.0%} x (1 - t^)",
                    UserWarning,
                    stacklevel=3,
                )
            half = self.default_halfwidth * (1 - t_hat)
        k = self.inflation * scale
        return Prediction(
            final=final,
            lower=final * math.exp(-k * half),
            upper=final * math.exp(k * half),
            level=self.level,
            t_hat=t_hat,
            method=self.name,
            widening=float(scale),
            # without a pair law, two predictions' errors are independent normals of their
            # intervals
            pair_scale=pair_scale_from_interval(k * half, self.level),
        )


def alignment_window(
    t_hat: np.ndarray, align_from: float, t_floor: float = 0.02, min_points: int = 2
) -> np.ndarray:
    """Mask of the prefix points used for alignment: t^ >= ``align_from`` x (last t^) and
    t^ >= ``t_floor``, widened to the last ``min_points`` usable points if fewer.

    Raises ``ValueError`` when no point has t^ >= ``t_floor``.
    """
    t = np.asarray(t_hat, dtype=float)
    usable = t >= t_floor
    if usable.sum() < 1:
        raise ValueError(f"collapse: no logged point at t^ >= {t_floor} (last t^ = {t[-1]:.3g})")
    sel = usable & (t >= align_from * t[-1])
    if sel.sum() < min_points:
        sel = np.zeros_like(usable)
        sel[np.flatnonzero(usable)[-min_points:]] = True
    return sel


def shape_slope(losses: np.ndarray, lhat: np.ndarray) -> float | None:
    """The least-squares slope of log L on log lhat over the window (about 1 when the run
    follows the universal curve); ``None`` under ``STRETCH_MIN_POINTS`` points or on a flat
    lhat. :class:`CollapsePredictor` refuses to predict when it is above
    ``SHAPE_SLOPE_MAX``: the reference there does not describe the run (e.g. a flat
    extrapolated reference against a steeply falling prefix, or a run diverging), and an
    aligned or stretched divisor would be far off with an interval that does not know it.
    (A run flatter than the reference is the divergence guard's case,
    :func:`making_progress`.)"""
    fit = _log_slope_fit(losses, lhat)
    return None if fit is None else fit[0]


def _log_slope_fit(losses: np.ndarray, lhat: np.ndarray) -> tuple[float, float] | None:
    """(slope, its standard error) of the least-squares fit of log L on log lhat; ``None``
    under ``STRETCH_MIN_POINTS`` points or on a flat lhat."""
    x = np.log(np.asarray(lhat, dtype=float))
    y = np.log(np.asarray(losses, dtype=float))
    if x.size < STRETCH_MIN_POINTS:
        return None
    xc = x - x.mean()
    sxx = float(xc @ xc)
    if sxx <= 1e-12:
        return None
    slope = float(xc @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * xc
    return slope, math.sqrt(float(resid @ resid) / max(x.size - 2, 1) / sxx)


def making_progress(losses: np.ndarray, lhat: np.ndarray, min_ratio: float = 0.1) -> bool:
    """Whether the losses fall with the reference over the window: ``False`` only when the
    least-squares slope of log L on log lhat is *clearly* below ``min_ratio`` (a healthy run has
    about 1; a diverged or stuck run about 0 or below), i.e. even the slope plus two standard
    errors is below it. Per-batch noise on a flat stretch of the reference (the stable phase of
    a WSD schedule) gives slopes of any sign with a wide error, and does not count as stuck.
    ``True`` when the window is too short or lhat is flat to judge."""
    fit = _log_slope_fit(losses, lhat)
    if fit is None:
        return True
    slope, stderr = fit
    return slope + 2.0 * stderr >= min_ratio


def despike(losses: np.ndarray) -> np.ndarray:
    """The losses with each inner point replaced by the median of it and its two neighbours:
    an isolated spike (a bad batch, an eval hiccup) is removed, a monotone stretch is left as
    it is, and the two ends are kept."""
    v = np.asarray(losses, dtype=float)
    if v.size < 3:
        return v.copy()
    out = v.copy()
    out[1:-1] = np.median(np.stack([v[:-2], v[1:-1], v[2:]]), axis=0)
    return out


def collapse_final(
    losses: np.ndarray, lhat: np.ndarray, stretch: float | None, twin: float = 0.0
) -> float:
    """The predicted final loss from the window's losses and lhat: plain alignment, or the
    stretch correction with shrinkage ``stretch`` (on at least ``STRETCH_MIN_POINTS``), its
    exponent times 1 - ``twin`` (the share of lhat that is the run's twin, whose curve already
    has the run's shape: :meth:`~hpo.predictors.curves.UniversalCurve.twin_weight`)."""
    lhat = np.asarray(lhat, dtype=float)
    if not np.all(np.isfinite(lhat)) or np.any(lhat <= 0):
        raise ValueError("collapse: the universal curve is not finite and positive on the prefix")
    if stretch is None or lhat.size < STRETCH_MIN_POINTS:
        return align_final_loss(losses, lhat)
    return stretch_final_loss(losses, lhat, stretch, keep=1.0 - twin)


class CollapsePredictor(FinalLossPredictor):
    """Align the prefix with the universal curve; the divisor is the predicted final loss.

    The alignment window is the last ``1 - align_from`` of the observed prefix in t^ (at least
    ``min_points`` points, never t^ < ``t_floor``), weighted equally in log space. With
    ``stretch`` (a shrinkage, see :func:`stretch_final_loss`) the shape gets a per-run power
    correction; ``None`` is plain alignment. By default (``align_from=None``,
    ``stretch="auto"``) both come from ``curve.calibration["predictor"]``: per prefix fraction,
    the setting of ``PREDICTOR_CANDIDATES`` that predicted the held-out proxies best
    (:func:`~hpo.predictors.calibrate.calibrate_curve`). An isolated spike in the prefix is
    removed first (:func:`despike`).

    The interval's log half-width is the ``level``-quantile of the proxies' held-out absolute
    errors at the prefix's t^, x (1 + ``EXTRAPOLATION_WIDENING`` x d), where d
    (:func:`extrapolation`) is how far, in log units, the run's size, TPP and tau lie beyond
    the proxies' ranges: a target twice the largest proxy's size has d = log 2.

    The prediction's side of the pair law comes from ``prior`` (:mod:`hpo.predictors.prior`;
    default: the prior shipped with the package) applied to its evidence
    (:data:`~hpo.predictors.prior.FEATURES`, in ``Prediction.evidence``): its interval's
    half-width, the points after the warmup, the proxies' own pair error at t^
    (:attr:`proxy_pair_scale`), d, t^, whether a proxy ran the schedule and whether the prefix is
    steeper than the curve; the prior uses those it was fitted on.

    It predicts every prefix with ``MIN_POINTS`` logged points after the warmup (``ValueError``
    with the reason otherwise, as for a warmup-only prefix; a pruner then fails open). A prefix
    falling far more steeply than the curve (:func:`shape_slope` above ``SHAPE_SLOPE_MAX``)
    is predicted by plain alignment and flagged ``steep``: the prior gives it the pair error
    such predictions had at target scale.
    """

    name = "collapse"
    min_points = 2

    def __init__(
        self,
        curve: UniversalCurve,
        level: float = LEVEL,
        inflation: float = 1.0,
        align_from: float | None = None,
        t_floor: float = 0.02,
        stretch: float | None | str = "auto",
        divergence_guard: bool = True,
        prior: PairPrior | None = None,
    ) -> None:
        super().__init__(level=level, inflation=inflation)
        self.curve = curve
        self._align_from = align_from
        self._stretch = stretch
        self.t_floor = t_floor
        self.divergence_guard = divergence_guard
        self.prior = default_prior() if prior is None else prior
        self.calibration = curve.calibration
        self._proxy_pair_scale: ProxyPairScale | None | bool = False  # False: not measured yet

    @property
    def proxy_pair_scale(self) -> ProxyPairScale | None:
        """The pair errors measured on the curve's cross-fitted proxies
        (:func:`~hpo.predictors.pairs.fit_proxy_pair_scale`); ``None`` without them."""
        if self._proxy_pair_scale is False:
            self._proxy_pair_scale = fit_proxy_pair_scale(self.curve.calibration)
        return self._proxy_pair_scale  # type: ignore[return-value]

    def settings(self, t_hat: float, transfer: bool = False) -> tuple[float, float | None]:
        """(align_from, stretch) used for a prefix ending at ``t_hat``: the values given, else
        the leave-one-out choice of the calibration fraction nearest to ``t_hat`` (for a run
        whose schedule no proxy ran, with ``transfer``, the choice for new schedules)."""
        chosen = dict(PREDICTOR_CANDIDATES[0])
        cal = self.curve.calibration or {}
        sel = cal.get("predictor_transfer" if transfer else "predictor") or cal.get("predictor")
        if sel is not None:
            i = int(np.argmin(np.abs(np.asarray(cal["fractions"], dtype=float) - t_hat)))
            chosen = sel["candidates"][sel["choice"][i]]
        align_from = chosen["align_from"] if self._align_from is None else self._align_from
        stretch = chosen["stretch"] if self._stretch == "auto" else self._stretch
        return float(align_from), None if stretch is None else float(stretch)

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Controls) -> Prediction:
        s, v, t = self._prepare(steps, losses, controls)
        v = despike(v)
        warm = (controls.warmup_steps or 0.0) / controls.total_steps
        n_after = int(np.sum((t >= self.t_floor) & (t > warm)))
        if n_after < MIN_POINTS:
            raise ValueError(
                f"collapse: {n_after} logged point(s) after the warmup in the prefix (t^ "
                f"<= {t[-1]:.3g}); need {MIN_POINTS} to predict"
            )
        transfer = self._transfers(controls)
        align_from, stretch = self.settings(float(t[-1]), transfer)
        sel = alignment_window(t, align_from, self.t_floor, self.min_points)
        lhat = self.curve.predict(t[sel], controls)
        steep = False
        if self.divergence_guard and not making_progress(v[sel], lhat):
            # the run has stopped following any falling curve (diverged or stuck): it will not
            # recover the drop the reference predicts; its current level is the best guess
            final = float(np.mean(v[sel][-3:]))
        else:
            follows = shape_slope(v[sel], lhat)
            steep = follows is not None and follows > SHAPE_SLOPE_MAX
            final = collapse_final(v[sel], lhat, None if steep else stretch,
                                   self.curve.twin_weight(controls))
        cal = self.curve.calibration
        if cal is not None and "errors_transfer" in cal and transfer:
            cal = {"fractions": cal["fractions"], "errors": cal["errors_transfer"]}
        d = extrapolation(self.curve.ranges, controls)
        pred = self._interval_from(cal, final, float(t[-1]),
                                   scale=1 + EXTRAPOLATION_WIDENING * d)
        law = self.proxy_pair_scale
        evidence = {
            "log_proxy_scale": math.log(law.scale(pred.t_hat)) if law is not None else None,
            "extrapolation": d, "t_hat": pred.t_hat, "inv_points": 1.0 / n_after,
            "transfer": float(transfer), "steep": float(steep),
            "log_halfwidth": math.log(max(math.log(pred.upper / pred.final), 1e-6)),
        }
        lr = controls.base_lr or controls.peak_lr
        return dataclasses.replace(
            pred, pair_scale=self.prior.side_scale(evidence) * self.inflation,
            pair_dof=self.prior.dof, lr=float(lr) if lr else 0.0, tau=float(controls.tau or 0.0),
            distance_slope=self.prior.distance_slope, evidence=evidence)

    def _transfers(self, controls: Controls) -> bool:
        empirical = getattr(self.curve, "empirical", None)
        return empirical is not None and empirical.matches(controls).size == 0

    def predict_curve(
        self, steps: np.ndarray, losses: np.ndarray, controls: Controls, t_hat: np.ndarray
    ) -> np.ndarray | None:
        return self.curve.predict(np.asarray(t_hat, dtype=float), controls)


def extrapolation(ranges: Mapping[str, Sequence[float]], controls: Controls) -> float:
    """How far ``controls`` lie beyond the proxies' ``ranges`` (a curve's ``ranges``), in log
    units: log(n_params / the largest proxy's) where larger, plus, for TPP and tau, the log
    distance outside the proxies' range. 0 for a run inside every range; unknown values
    count 0."""
    d = 0.0
    n, top = controls.n_params, (ranges.get("n_params") or [None, None])[1]
    if n and top:
        d += max(0.0, math.log(n / top))
    for name in ("tpp", "tau"):
        v, rng = getattr(controls, name), ranges.get(name)
        if v and rng and rng[0] > 0:
            x = math.log(v)
            d += max(0.0, math.log(rng[0]) - x, x - math.log(rng[1]))
    return d
