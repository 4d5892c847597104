"""The pair law: how far the predicted log ratio of two trials' finals is from the true one.

A sweep's decision is about order: does trial a end below trial b? Its evidence is the
predicted log ratio ``r = log(pred_a / pred_b)`` of two predictions made at the same progress
t^. Most of a prediction's error is shared by the trials of one sweep (same data, family and
schedule) and cancels in ``r``; what is left, the *pair error* ``d = r - log(final_a /
final_b) = e_a - e_b`` (``e`` a prediction's signed log error), is what the decision must
know.

:func:`fit_pair_law` measures it on the cross-fitted calibration of a universal curve
(``calibration["runs"]``, each proxy predicted by a fit that never saw its sweep group, see
:func:`hpo.predictors.calibrate.calibrate_curve`): at each calibrated fraction, ``d`` of
every pair of proxies from one sweep group. Where fewer than ``MIN_PAIRS`` such pairs exist
(proxies that ran no sweep), every pair of proxies is used instead: errors of different
settings share less, so that reading is the cautious one. The pairs' errors are read as a
Student-t law (heavy tails: a stop at probability 0.005 is a statement about its 99.5%
quantile, which a normal law read off the bulk understates): a scale per fraction (the
median absolute pair error, times one factor) and one number of degrees of freedom, both
fitted by maximum likelihood on all fractions' pairs pooled, the degrees of freedom at most
the number of independent pair errors the proxies give (a scale measured on few pairs is
itself uncertain).

A target beyond the proxies' ranges has its pair scale widened as its interval is
(``Prediction.widening``; :class:`hpo.predictors.CollapsePredictor`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

__all__ = ["PairLaw", "fit_pair_law", "pair_errors", "pair_scale_from_interval", "MIN_PAIRS"]

#: fewer within-sweep pairs than this at a fraction: every pair of proxies is used there
MIN_PAIRS = 3


@dataclass(frozen=True)
class PairLaw:
    """``d / scale(t^) ~ Student-t(dof)`` for the pair error ``d`` of two predictions made at
    progress t^ (both inside the proxies' ranges). ``scales`` per ``fractions`` (increasing),
    interpolated linearly in t^ and held flat outside; ``n_pairs`` the pairs measured."""

    fractions: tuple[float, ...]
    scales: tuple[float, ...]
    dof: float
    n_pairs: int = 0
    within_sweep: bool = True

    def scale(self, t_hat: float) -> float:
        """The pair error's scale for predictions made at ``t_hat``."""
        return float(np.interp(float(t_hat), self.fractions, self.scales))

    def sf(self, z: float, dof: float | None = None) -> float:
        """P(d / scale > z) under the law (``dof`` overrides the law's)."""
        return float(stats.t.sf(z, self.dof if dof is None else dof))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (inverse: ``PairLaw(**d)`` after tuple conversion)."""
        return {"fractions": list(self.fractions), "scales": list(self.scales),
                "dof": self.dof, "n_pairs": self.n_pairs, "within_sweep": self.within_sweep}


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


def fit_pair_law(calibration: Mapping[str, Any] | None) -> PairLaw | None:
    """The pair law measured on a calibration's cross-fitted proxies (module docstring), or
    ``None`` where no fraction has ``MIN_PAIRS`` pairs of any kind."""
    if not calibration or not calibration.get("runs"):
        return None
    fractions = [float(f) for f in calibration["fractions"]]
    within = any(pair_errors(calibration, i).size >= MIN_PAIRS for i in range(len(fractions)))
    kept_f, mads, pooled = [], [], []
    independent = 0
    for i, f in enumerate(fractions):
        d = pair_errors(calibration, i, within_sweep=within)
        if d.size < MIN_PAIRS:
            continue
        mad = float(np.median(np.abs(d)))
        if not mad > 0:
            continue
        kept_f.append(f)
        mads.append(mad)
        pooled.append(np.concatenate([d, -d]) / mad)  # symmetric: either order of a pair
        independent = max(independent, _independent_pairs(calibration, i, within))
    if not kept_f:
        return None
    z = np.concatenate(pooled)
    fitted, factor = _fit_t(z)
    dof = float(min(fitted, max(independent, 1)))
    if dof < fitted:  # the scale at the dof kept
        factor = _fit_scale(z, dof)
    return PairLaw(tuple(kept_f), tuple(factor * m for m in mads), dof,
                   int(z.size // 2), within)


def _independent_pairs(calibration: Mapping[str, Any], index: int, within: bool) -> int:
    """How many independent pair errors the proxies give at ``index``: per sweep group of n
    proxies with an error, n - 1."""
    counts: dict[Any, int] = {}
    for k, r in enumerate(calibration["runs"]):
        e = r["errors"][index] if index < len(r["errors"]) else None
        if e is None:
            continue
        key = (r.get("group") if r.get("group") is not None else f"run:{k}") if within \
            else "all"
        counts[key] = counts.get(key, 0) + 1
    return sum(n - 1 for n in counts.values())


def _fit_t(z: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood (dof, scale) of a centred Student-t on ``z``."""

    def nll(params: np.ndarray) -> float:
        log_dof, log_scale = params
        return -float(np.sum(stats.t.logpdf(z, math.exp(log_dof), scale=math.exp(log_scale))))

    res = optimize.minimize(nll, np.array([math.log(5.0), 0.0]), method="Nelder-Mead",
                            options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 400})
    log_dof, log_scale = res.x
    return float(min(math.exp(log_dof), 1e6)), float(math.exp(log_scale))


def _fit_scale(z: np.ndarray, dof: float) -> float:
    """Maximum-likelihood scale of a centred Student-t with ``dof`` on ``z``."""
    res = optimize.minimize_scalar(
        lambda ls: -float(np.sum(stats.t.logpdf(z, dof, scale=math.exp(ls)))),
        bounds=(-10.0, 10.0), method="bounded")
    return float(math.exp(res.x))


def pair_scale_from_interval(half: float, level: float) -> float:
    """The pair scale of two independent predictions whose intervals have log half-width
    ``half`` at ``level``: sqrt(2) x ``half`` over the normal quantile (no pair law known)."""
    return math.sqrt(2.0) * half / float(stats.norm.ppf(0.5 + level / 2))

