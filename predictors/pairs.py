"""The pair errors of a source's proxies: how far the predicted log ratio of two proxies'
finals is from the true one.

A sweep's decision is about order: does trial a end below trial b? Its evidence is the
predicted log ratio ``r = log(pred_a / pred_b)`` of two predictions made at the same progress
t^. Most of a prediction's error is shared by the trials of one sweep (same data, family and
schedule) and cancels in ``r``; what is left, the *pair error* ``d = r - log(final_a /
final_b) = e_a - e_b`` (``e`` a prediction's signed log error), is what the decision must
know.

:func:`fit_proxy_pair_scale` measures it on the cross-fitted calibration of a universal curve
(``calibration["runs"]``, each proxy predicted by a fit that never saw its sweep group, see
:func:`hpo.predictors.calibrate.calibrate_curve`): at each calibrated fraction, the median
``|d|`` of every pair of proxies from one sweep group. Where fewer than ``MIN_PAIRS`` such
pairs exist (proxies that ran no sweep), every pair of proxies is used instead. This is the
source's own evidence; how it carries to targets beyond the proxies (and the law's tail) is
the pair prior's (:mod:`hpo.predictors.prior`), learned where the targets' finals are known.

:class:`PairErrorLaw` is the law of one pair's ``d`` as the decision uses it: ``d = scale x t``
with ``t`` a Student-t of ``dof`` degrees of freedom. Each prediction brings its side of it
(:meth:`PairErrorLaw.side`: the pair prior's scale, or its interval read as a normal), and a
pair's law is the wider scale of its two sides with the smaller dof
(:meth:`PairErrorLaw.combine`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats
from scipy.special import ndtri, stdtr

__all__ = ["ProxyPairScale", "PairErrorLaw", "fit_proxy_pair_scale", "pair_errors",
           "pair_scale_from_interval", "normal_scale", "fit_study_rescale", "MIN_PAIRS",
           "PRIOR_TRIALS"]

#: fewer within-sweep pairs than this at a fraction: every pair of proxies is used there
MIN_PAIRS = 3
#: how many finished trials the pair prior counts as when a study's own pair errors rescale it
#: (:func:`fit_study_rescale`): a log-scale prior of standard deviation 1 / sqrt(2 x this), the
#: spread of a log scale estimated from that many observations
PRIOR_TRIALS = 2.0


@dataclass(frozen=True)
class ProxyPairScale:
    """What the proxies measured of the pair error: their median absolute pair error
    ``scales`` per ``fractions`` (increasing), one feature of the pair prior's evidence (the
    law a decision reads is :class:`PairErrorLaw`), interpolated linearly in t^ and held flat
    outside; ``n_pairs`` the pairs measured, ``within_sweep`` whether they are pairs of one
    sweep group."""

    fractions: tuple[float, ...]
    scales: tuple[float, ...]
    n_pairs: int = 0
    within_sweep: bool = True

    def scale(self, t_hat: float) -> float:
        """The proxies' median |pair error| for predictions made at ``t_hat``."""
        return float(np.interp(float(t_hat), self.fractions, self.scales))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (inverse: ``ProxyPairScale(**d)`` after tuple conversion)."""
        return {"fractions": list(self.fractions), "scales": list(self.scales),
                "n_pairs": self.n_pairs, "within_sweep": self.within_sweep}


def pair_errors(
    calibration: Mapping[str, Any] | None, index: int, within_sweep: bool = True
) -> np.ndarray:
    """Pair errors ``e_i - e_j`` of the calibration's proxies at fraction ``index``: of every
    pair of proxies sharing a ``group`` (``within_sweep``; a proxy without a group is a sweep
    of its own), else of every pair. Empty without per-run errors."""
    runs = list((calibration or {}).get("runs") or [])
    by: dict[Any, list[float]] = {}
    for k, r in enumerate(runs):
        e = r["errors"][index] if index < len(r["errors"]) else None
        if e is None or not math.isfinite(e):
            continue
        key = (r.get("group") if r.get("group") is not None else f"run:{k}") \
            if within_sweep else "all"
        by.setdefault(key, []).append(float(e))
    d = [a - b for g in by.values() for a, b in itertools.combinations(g, 2)]
    return np.asarray(d, dtype=float)


def fit_proxy_pair_scale(calibration: Mapping[str, Any] | None) -> ProxyPairScale | None:
    """The proxies' pair errors on a calibration's cross-fitted runs (module docstring), or
    ``None`` where no fraction has ``MIN_PAIRS`` pairs of any kind."""
    if not calibration or not calibration.get("runs"):
        return None
    fractions = [float(f) for f in calibration["fractions"]]
    within = any(pair_errors(calibration, i).size >= MIN_PAIRS for i in range(len(fractions)))
    kept_f, mads = [], []
    n_pairs = 0
    for i, f in enumerate(fractions):
        d = pair_errors(calibration, i, within_sweep=within)
        if d.size < MIN_PAIRS:
            continue
        mad = float(np.median(np.abs(d)))
        if not mad > 0:
            continue
        kept_f.append(f)
        mads.append(mad)
        n_pairs += int(d.size)
    if not kept_f:
        return None
    return ProxyPairScale(tuple(kept_f), tuple(mads), n_pairs, within)


def normal_scale(half: float, level: float) -> float:
    """The scale of a normal whose central interval at ``level`` has half-width ``half``:
    ``half`` over the normal quantile of ``0.5 + level / 2``."""
    return half / _normal_quantile(level)


def _normal_quantile(level: float) -> float:
    """The normal quantile of ``0.5 + level / 2`` (``scipy.special.ndtri``, the number
    ``scipy.stats.norm.ppf`` gives, without its per-call argument handling)."""
    return float(ndtri(0.5 + level / 2))


@dataclass(frozen=True)
class PairErrorLaw:
    """The law of a pair error ``d`` (module docstring): ``d = scale x t``, ``t`` a Student-t
    with ``dof`` degrees of freedom (infinite: a normal). A ``scale`` that is not positive
    puts all of ``d`` at 0."""

    scale: float
    dof: float = math.inf

    @classmethod
    def from_interval(cls, half: float, level: float) -> PairErrorLaw:
        """Two independent predictions whose intervals have log half-width ``half`` at
        ``level``, each read as a normal: a normal of scale sqrt(2) x ``half`` over the normal
        quantile (no pair law known)."""
        return cls(math.sqrt(2.0) * half / _normal_quantile(level))

    @staticmethod
    def measured(scale: float) -> bool:
        """Whether ``scale`` is a measured side of a pair law (finite and > 0; 0, NaN or
        infinity: none)."""
        return math.isfinite(scale) and scale > 0

    @classmethod
    def side(cls, scale: float, dof: float, half: float, level: float) -> PairErrorLaw:
        """One prediction's side of a pair's law: its ``scale`` and ``dof`` where they are
        :meth:`measured`, else its interval (log half-width ``half`` at ``level``) read as
        a normal independent of the other side's (:meth:`from_interval`)."""
        if cls.measured(scale):
            return cls(scale, dof)
        return cls.from_interval(half, level)

    def combine(self, other: PairErrorLaw) -> PairErrorLaw:
        """The law of a pair from its two sides: the wider scale, the smaller dof."""
        return PairErrorLaw(max(self.scale, other.scale), min(self.dof, other.dof))

    def rescaled(self, factor: float) -> PairErrorLaw:
        """The scale times ``factor``, the same tail."""
        if factor == 1.0:  # the same law (the rule's common case)
            return self
        return PairErrorLaw(self.scale * factor, self.dof)

    def sf(self, x: float) -> float:
        """P(d > x): ``scipy.stats.t.sf(x / scale, dof)``, the same number without its
        per-call argument handling, which costs forty times the function on a scalar (the
        rule calls it once per competitor). Without a positive scale: 1 for x < 0, else 0."""
        if not self.scale > 0:
            return 1.0 if x < 0 else 0.0
        return float(stdtr(self.dof, -(x / self.scale)))

    def cdf(self, x: float) -> float:
        """P(d <= x): ``scipy.stats.t.cdf(x / scale, dof)``. Without a positive scale: 1 for
        x >= 0, else 0."""
        if not self.scale > 0:
            return 1.0 if x >= 0 else 0.0
        return float(stdtr(self.dof, x / self.scale))

    def halfwidth(self, level: float) -> float:
        """The half-width of the central interval of ``d`` at ``level``."""
        return self.scale * float(stats.t.ppf(0.5 + level / 2, self.dof))


def pair_scale_from_interval(half: float, level: float) -> float:
    """The pair scale of two independent predictions whose intervals have log half-width
    ``half`` at ``level`` (:meth:`PairErrorLaw.from_interval`)."""
    return PairErrorLaw.from_interval(half, level).scale


def fit_study_rescale(
    d: np.ndarray, scale: np.ndarray, dist: np.ndarray, dof: float, n_eff: float,
    prior_trials: float = PRIOR_TRIALS,
) -> tuple[float, float]:
    """How a study's own realized pair errors rescale the pair law: ``(a, b)``, the maximum a
    posteriori of ``d / (scale exp(a + b dist)) ~ t_dof``.

    ``d`` are realized pair errors (both finals known), ``scale`` each pair's law as the prior
    gives it, ``dist`` the distance of the pair's settings: ``a`` moves the law's scale, ``b``
    its growth with the distance. The pairs' log-likelihood counts as ``n_eff`` observations in
    all (m finished trials make m - 1 independent differences, however many pairs are formed),
    and ``a`` and ``b`` each have a normal prior at 0 of standard deviation
    ``1 / sqrt(2 prior_trials)``: the prior is worth ``prior_trials`` trials, and the study's
    evidence takes over as its finished trials accumulate. The Student-t likelihood is robust:
    one far-off pair does not widen the law as a sum of squares would. ``(0, 0)`` without a
    pair or with a normal law (infinite ``dof``)."""
    d, scale, dist = (np.asarray(x, dtype=float) for x in (d, scale, dist))
    ok = np.isfinite(d) & np.isfinite(scale) & (scale > 0) & np.isfinite(dist)
    d, scale, dist = d[ok], scale[ok], dist[ok]
    if not d.size or not math.isfinite(dof) or not n_eff > 0:
        return 0.0, 0.0
    w = float(n_eff) / d.size
    prec = 2.0 * prior_trials
    ls0 = np.log(scale)
    # no spread of distances: the slope is not identified, only the scale moves
    free_b = float(np.ptp(dist)) > 1e-9

    def nll(theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = theta[0], theta[1] if free_b else 0.0
        z = d / np.exp(ls0 + a + b * dist)
        q = z * z / dof
        # -log-likelihood per pair: (dof + 1) / 2 log(1 + z^2 / dof) + log s
        f = w * float(np.sum((dof + 1) / 2 * np.log1p(q) + a + b * dist))
        g = w * (1.0 - (dof + 1) * q / (1.0 + q))  # d/d(log s) per pair
        grad = [float(np.sum(g)) + prec * a]
        f += prec * a * a / 2
        if free_b:
            grad.append(float(np.sum(g * dist)) + prec * b)
            f += prec * b * b / 2
        return f, np.asarray(grad)

    res = optimize.minimize(nll, np.zeros(2 if free_b else 1), jac=True, method="L-BFGS-B")
    a = float(res.x[0])
    b = float(res.x[1]) if free_b else 0.0
    return (a, b) if math.isfinite(a) and math.isfinite(b) else (0.0, 0.0)
