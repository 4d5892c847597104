"""The pair prior: how large the pair error of two target predictions is, from the evidence
each prediction has at hand, learned where the truth at target scale is known.

A stop is a statement about the order of two trials' finals, so its probability comes from the
*pair error* ``d = log(pred_a / pred_b) - log(final_a / final_b)`` of two predictions made at
the same progress t^ (:mod:`hpo.predictors.pairs`). The proxies of one source measure ``d`` on
proxies predicting proxies (:func:`~hpo.predictors.pairs.fit_proxy_pair_scale`); a decision
is made on larger targets, whose finals were not seen. Every larger run of every source in the
corpus, predicted from its proxies, has its final on file: that is where ``d`` of a real
decision is measured, and the prior maps the evidence a prediction has to the size of ``d`` there:

    log s_side = c_0 + sum_k c_k x_k                  (one side: one trial's prediction)
    log s_pair = max(log s_a, log s_b) + c_dist dist(a, b)
    d / s_pair ~ Student-t(dof)

where ``dist(a, b)`` is how far apart the two settings are: the larger of |log(lr_a / lr_b)|
and |log(tau_a / tau_b)| where known (in an LR sweep at a fixed weight decay the two are
equal; a weight-decay sweep moves tau alone). Settings further apart share less of their
errors.

with the features ``x`` of :data:`FEATURES` (the proxies' own measured pair scale at t^, how far
the run lies beyond the proxies, t^, how few points the prefix has, whether a proxy ran its
schedule, whether the prefix falls more steeply than the curve). The proxies' scale is the
source's own evidence: the prior learns, across sources, how it carries to the targets.
The coefficients and ``dof`` are fitted by maximum likelihood with every source weighted
equally (:func:`fit_pair_prior`); which features pay their way is chosen leave one source out
(``benchmarks/pair_prior.py``). The fitted prior ships with the package
(``pair_prior.json``, :func:`default_prior`) and is the default of
:class:`~hpo.predictors.CollapsePredictor`; a study's finished trials then rescale it
(:func:`hpo.pruning.study_rescale`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, special

__all__ = ["PairPrior", "FEATURES", "fit_pair_prior", "default_prior", "load_pair_prior",
           "pair_log_scales", "setting_distance"]

#: the side features a prior may use (each a number per prediction):
#: ``log_proxy_scale`` log of the proxies' measured pair scale at t^ (a source without one
#: uses the prior's ``default_log_proxy_scale``), ``extrapolation`` the log distance beyond
#: the proxies' size / TPP / tau, ``t_hat``, ``inv_points`` 1 / the logged points after the
#: warmup in the prefix, ``transfer`` 1 where no proxy ran the run's schedule, ``steep`` 1
#: where the prefix falls more than ``SHAPE_SLOPE_MAX`` times as steeply as the curve,
#: ``log_halfwidth`` log of the prediction's own interval half-width (log units): the
#: proxies' absolute error at t^, widened for extrapolation
FEATURES = ("log_proxy_scale", "extrapolation", "t_hat", "inv_points", "transfer", "steep",
            "log_halfwidth")
_PATH = Path(__file__).with_name("pair_prior.json")


def setting_distance(lr_a: float, lr_b: float, tau_a: float, tau_b: float) -> float:
    """How far apart two runs' settings are: the larger |log ratio| of their LRs and of their
    taus, each where both are known (> 0); 0 where neither is."""
    out = 0.0
    for x, y in ((lr_a, lr_b), (tau_a, tau_b)):
        if x > 0 and y > 0:
            out = max(out, abs(math.log(x / y)))
    return out


@dataclass(frozen=True)
class PairPrior:
    """``log s_side = intercept + sum coef[k] x[k]``; a pair's scale is the larger side's times
    ``exp(distance_slope x dist)`` (the settings' distance); ``d / s ~ t(dof)`` (module
    docstring). Features missing from ``coef`` are not used."""

    intercept: float
    coef: Mapping[str, float] = field(default_factory=dict)
    distance_slope: float = 0.0
    dof: float = 5.0
    default_log_proxy_scale: float = math.log(0.01)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.coef) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown pair-prior feature(s) {unknown}; known: {FEATURES}")
        if not self.dof > 0:
            raise ValueError(f"dof must be > 0, but got dof={self.dof}")

    def side_scale(self, features: Mapping[str, float | None]) -> float:
        """One prediction's side of the pair scale from its ``features`` (a missing or
        non-finite ``log_proxy_scale`` reads the default; other missing features count 0)."""
        x = dict(features)
        lps = x.get("log_proxy_scale")
        if lps is None or not math.isfinite(lps):
            x["log_proxy_scale"] = self.default_log_proxy_scale
        z = self.intercept + sum(c * float(x.get(k) or 0.0) for k, c in self.coef.items())
        return math.exp(z)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (inverse: :func:`load_pair_prior`)."""
        return {"intercept": self.intercept, "coef": dict(self.coef),
                "distance_slope": self.distance_slope, "dof": self.dof,
                "default_log_proxy_scale": self.default_log_proxy_scale,
                "meta": dict(self.meta)}


def load_pair_prior(source: str | Path | Mapping[str, Any]) -> PairPrior:
    """A :class:`PairPrior` from its JSON file or dict; ``ValueError`` naming a bad field."""
    data = source if isinstance(source, Mapping) else json.loads(Path(source).read_text())
    try:
        return PairPrior(float(data["intercept"]),
                         {str(k): float(v) for k, v in (data.get("coef") or {}).items()},
                         float(data.get("distance_slope", 0.0)), float(data.get("dof", 5.0)),
                         float(data.get("default_log_proxy_scale", math.log(0.01))),
                         dict(data.get("meta") or {}))
    except KeyError as exc:
        raise ValueError(f"pair prior: missing field {exc.args[0]!r}") from None


@lru_cache(maxsize=1)
def default_prior() -> PairPrior:
    """The prior shipped with the package (``pair_prior.json``, fitted on every source)."""
    return load_pair_prior(_PATH)


def pair_log_scales(params: np.ndarray, xa: np.ndarray, xb: np.ndarray,
                    dist: np.ndarray) -> np.ndarray:
    """log s_pair of many pairs: ``params`` = (intercept, coefficients..., distance_slope),
    ``xa`` and ``xb`` the sides' (pairs, k) feature matrices, ``dist`` the settings'
    distances."""
    k = xa.shape[1]
    a = params[0] + xa @ params[1:1 + k]
    b = params[0] + xb @ params[1:1 + k]
    return np.maximum(a, b) + params[1 + k] * dist


def _t_logpdf(z: np.ndarray, dof: float) -> np.ndarray:
    return (special.gammaln((dof + 1) / 2) - special.gammaln(dof / 2)
            - 0.5 * math.log(dof * math.pi) - (dof + 1) / 2 * np.log1p(z * z / dof))


def fit_pair_prior(
    d: np.ndarray, xa: np.ndarray, xb: np.ndarray, dist: np.ndarray,
    features: Sequence[str], weights: np.ndarray | None = None, use_distance: bool = True,
    default_log_proxy_scale: float = math.log(0.01), meta: Mapping[str, Any] | None = None,
) -> PairPrior:
    """Maximum-likelihood :class:`PairPrior` of the pair errors ``d`` (one per pair) with the
    sides' features ``xa``, ``xb`` (columns in the order of ``features``), the settings'
    distances ``dist`` (used with ``use_distance``) and per-pair ``weights`` (e.g. 1 / the
    pairs of its source, so every source counts alike). ``ValueError`` on fewer than 10
    pairs."""
    d = np.asarray(d, dtype=float)
    if d.size < 10:
        raise ValueError(f"fit_pair_prior needs at least 10 pairs, but got {d.size}")
    xa, xb = np.asarray(xa, dtype=float), np.asarray(xb, dtype=float)
    dist = np.asarray(dist, dtype=float) if use_distance else np.zeros_like(d)
    w = np.ones_like(d) if weights is None else np.asarray(weights, dtype=float)
    w = w / w.sum() * d.size
    k = len(features)
    ad = np.maximum(np.abs(d), 1e-8)

    def nll(p: np.ndarray) -> float:
        ls = pair_log_scales(p[:-1], xa, xb, dist)
        dof = math.exp(p[-1])
        return -float(w @ (_t_logpdf(d / np.exp(ls), dof) - ls))

    x0 = np.zeros(k + 3)
    x0[0] = float(np.log(np.median(ad)))
    x0[-1] = math.log(5.0)
    res = optimize.minimize(nll, x0, method="Nelder-Mead",
                            options={"maxiter": 4000 * (k + 3), "xatol": 1e-5, "fatol": 1e-7,
                                     "adaptive": True})
    res = optimize.minimize(nll, res.x, method="BFGS")  # polish
    p = res.x
    coef = {f: float(c) for f, c in zip(features, p[1:1 + k], strict=True)}
    return PairPrior(float(p[0]), coef, float(p[1 + k]) if use_distance else 0.0,
                     float(min(math.exp(p[-1]), 1e4)), float(default_log_proxy_scale),
                     dict(meta or {}))
