"""Same-step evidence: how often the trial behind at progress t^ ends ahead, by how far behind.

Two trials of one study reach the same progress t^ with losses ``L_a`` and ``L_b``; the *gap*
``g = |log(L_a / L_b)|`` is how far the one behind trails. It *closes* when the trial behind
ends more than ``tolerance`` below the other. Curves with LR decay cross late, so the gap is not
the order of the finals (what MedianPruner assumes); how often a gap of a given size closed is
measured instead:

    logit P(close | g, t^) = a(t^) + b(t^) log g

:class:`CrossingPrior` holds ``(a, b)`` per t^ fitted on every source's sweeps pooled, and
their spread between sources (each source's own fit): a study starts from it. A study's own
finished pairs then update it (:func:`fit_crossing_law`): the maximum a posteriori of the
logistic likelihood under the prior's normal of ``(a, b)``, the pairs counting as ``n_eff``
observations in all (m finished trials: m - 1 independent differences); the probability is
averaged over the posterior's uncertainty (Laplace, the probit approximation), so a law fitted
on few pairs, or read far from the gaps it saw, stays near even odds.

This needs no curve, no tau and no schedule: only two trials' losses at the same step.
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

from hpo.predictors.normalize import final_loss_estimate

__all__ = ["CrossingPrior", "CrossingLaw", "fit_crossing_law", "fit_crossing_prior",
           "crossing_pairs", "level_at", "default_crossing_prior", "load_crossing_prior",
           "MIN_GAP"]

#: gaps below this (log ratio) are read as this: two trials at the same loss say nothing
MIN_GAP = 1e-4
_PATH = Path(__file__).with_name("crossing_prior.json")


def level_at(t_hat: np.ndarray, losses: np.ndarray, at: float) -> float | None:
    """A trial's smoothed loss at progress ``at`` from its points at t^ <= ``at``
    (:func:`~hpo.predictors.normalize.final_loss_estimate` of that prefix, the estimate of a
    curve's end); ``None`` with fewer than 3 such points or a non-positive level."""
    t = np.asarray(t_hat, dtype=float)
    y = np.asarray(losses, dtype=float)
    keep = (t <= at + 1e-9) & np.isfinite(t) & np.isfinite(y)
    if int(keep.sum()) < 3:
        return None
    level = float(final_loss_estimate(t[keep], y[keep]))
    return level if level > 0 and math.isfinite(level) else None


def crossing_pairs(levels: Sequence[float], finals: Sequence[float], tolerance: float = 0.0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of trials with ``levels`` at one t^ and their ``finals`` (all positive
    losses): ``(g, closed)``, the gap and whether the trial behind ended more than
    ``tolerance`` below the other. Pairs at the same level are left out."""
    lv = np.log(np.asarray(levels, dtype=float))
    fn = np.log(np.asarray(finals, dtype=float))
    i, j = np.triu_indices(lv.size, 1)
    gap = lv[i] - lv[j]
    keep = gap != 0
    i, j, gap = i[keep], j[keep], gap[keep]
    behind = np.where(gap > 0, i, j)
    ahead = np.where(gap > 0, j, i)
    closed = fn[behind] < fn[ahead] + math.log1p(-tolerance)
    return np.abs(gap), closed


@dataclass(frozen=True)
class CrossingLaw:
    """``logit P(close) = a + b log g`` at one t^, with the posterior covariance ``cov`` of
    ``(a, b)``."""

    a: float
    b: float
    cov: tuple[tuple[float, float], tuple[float, float]]

    def probability(self, gap: float) -> float:
        """P(a gap of ``gap`` (log ratio, > 0) closes by the end), averaged over the law's
        uncertainty (the probit approximation of the logistic-normal mean)."""
        x = math.log(max(float(gap), MIN_GAP))
        mu = self.a + self.b * x
        (caa, cab), (_, cbb) = self.cov
        var = max(caa + 2 * cab * x + cbb * x * x, 0.0)
        z = mu / math.sqrt(1.0 + math.pi * var / 8.0)
        return float(1.0 / (1.0 + math.exp(-z))) if z > -700 else 0.0


@dataclass(frozen=True)
class CrossingPrior:
    """Where a study's crossing law starts: per t^ in ``fractions`` (increasing), the pooled
    fit ``(a, b)`` and the between-source standard deviations ``(sd_a, sd_b)`` of the sources'
    own fits; read at the nearest fraction. ``meta`` says what it was fitted on."""

    fractions: tuple[float, ...]
    a: tuple[float, ...]
    b: tuple[float, ...]
    sd_a: tuple[float, ...]
    sd_b: tuple[float, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def at(self, t_hat: float) -> tuple[float, float, float, float]:
        """``(a, b, sd_a, sd_b)`` at the fraction nearest ``t_hat``."""
        i = int(np.argmin(np.abs(np.asarray(self.fractions) - float(t_hat))))
        return self.a[i], self.b[i], self.sd_a[i], self.sd_b[i]

    def law(self, t_hat: float) -> CrossingLaw:
        """The prior alone as a law (no study evidence)."""
        a, b, sa, sb = self.at(t_hat)
        return CrossingLaw(a, b, ((sa * sa, 0.0), (0.0, sb * sb)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (:func:`load_crossing_prior` reads it)."""
        return {"fractions": list(self.fractions), "a": list(self.a), "b": list(self.b),
                "sd_a": list(self.sd_a), "sd_b": list(self.sd_b), "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CrossingPrior:
        """Inverse of :meth:`to_dict`; ``ValueError`` when malformed."""
        try:
            cols = [tuple(float(x) for x in data[k]) for k in ("fractions", "a", "b", "sd_a",
                                                                 "sd_b")]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a crossing prior: {exc}") from None
        if len({len(c) for c in cols}) != 1 or not cols[0]:
            raise ValueError("a crossing prior needs one a, b, sd_a and sd_b per fraction")
        return cls(*cols, meta=dict(data.get("meta") or {}))


def _newton(x: np.ndarray, y: np.ndarray, w: np.ndarray, mean: np.ndarray,
            prec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MAP ``(a, b)`` of the weighted logistic likelihood under a normal prior (``mean``,
    precision ``prec``), and the posterior covariance (inverse Hessian)."""
    theta = mean.copy()
    X = np.column_stack([np.ones_like(x), x])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ theta, -500, 500)))
        grad = X.T @ (w * (p - y)) + prec @ (theta - mean)
        hess = (X * (w * p * (1 - p))[:, None]).T @ X + prec
        step = np.linalg.solve(hess, grad)
        theta = theta - step
        if float(np.max(np.abs(step))) < 1e-9:
            break
    p = 1.0 / (1.0 + np.exp(-np.clip(X @ theta, -500, 500)))
    hess = (X * (w * p * (1 - p))[:, None]).T @ X + prec
    return theta, np.linalg.inv(hess)


def fit_crossing_law(prior: CrossingPrior, t_hat: float, gaps: np.ndarray,
                     closed: np.ndarray, n_eff: float) -> CrossingLaw:
    """The crossing law at ``t_hat`` from ``prior`` updated by a study's pairs (``gaps`` > 0
    and whether each ``closed``), which count as ``n_eff`` observations in all (module
    docstring). Without pairs (or ``n_eff`` <= 0): the prior's law."""
    g = np.asarray(gaps, dtype=float)
    y = np.asarray(closed, dtype=float)
    ok = np.isfinite(g) & (g > 0)
    g, y = g[ok], y[ok]
    if not g.size or not n_eff > 0:
        return prior.law(t_hat)
    a, b, sa, sb = prior.at(t_hat)
    mean = np.array([a, b])
    prec = np.diag([1.0 / (sa * sa), 1.0 / (sb * sb)])
    w = np.full(g.size, float(n_eff) / g.size)
    theta, cov = _newton(np.log(np.maximum(g, MIN_GAP)), y, w, mean, prec)
    return CrossingLaw(float(theta[0]), float(theta[1]),
                       ((float(cov[0, 0]), float(cov[0, 1])),
                        (float(cov[1, 0]), float(cov[1, 1]))))


def fit_crossing_prior(
    pairs: Mapping[str, Mapping[float, tuple[np.ndarray, np.ndarray]]],
    min_sd: float = 1.0, meta: Mapping[str, Any] | None = None,
) -> CrossingPrior:
    """A crossing prior from each source's pairs: ``pairs[source][t_hat] = (gaps, closed)``.

    Per t^: the pooled fit with every source weighted equally (each source's pairs weigh 1 /
    their count), and the standard deviation of the sources' own fits (at least ``min_sd``;
    ``min_sd`` alone with one source). Sources without pairs at a t^ are skipped there."""
    fracs = sorted({float(f) for by in pairs.values() for f in by})
    out: dict[str, list[float]] = {"a": [], "b": [], "sd_a": [], "sd_b": []}
    flat = np.zeros(2)
    weak = np.diag([0.1, 0.1])  # a weak prior: a source whose pairs separate stays finite
    for f in fracs:
        xs, ys, ws, own = [], [], [], []
        for by in pairs.values():
            if f not in by:
                continue
            g, c = (np.asarray(v, dtype=float) for v in by[f])
            ok = np.isfinite(g) & (g > 0)
            g, c = g[ok], c[ok]
            if g.size < 2:
                continue
            x = np.log(np.maximum(g, MIN_GAP))
            xs.append(x)
            ys.append(c)
            ws.append(np.full(g.size, 1.0 / g.size))
            own.append(_newton(x, c, np.ones(g.size), flat, weak)[0])
        if not xs:
            continue
        theta, _ = _newton(np.concatenate(xs), np.concatenate(ys),
                           np.concatenate(ws) * len(xs), flat, weak)
        spread = np.std(np.asarray(own), axis=0, ddof=1) if len(own) > 1 else np.zeros(2)
        out["a"].append(float(theta[0]))
        out["b"].append(float(theta[1]))
        out["sd_a"].append(float(max(spread[0], min_sd)))
        out["sd_b"].append(float(max(spread[1], min_sd)))
    kept = [f for f in fracs if any(f in by for by in pairs.values())][: len(out["a"])]
    return CrossingPrior(tuple(kept), tuple(out["a"]), tuple(out["b"]), tuple(out["sd_a"]),
                         tuple(out["sd_b"]), meta=dict(meta or {}))


def load_crossing_prior(source: str | Path | Mapping[str, Any]) -> CrossingPrior:
    """A crossing prior from its JSON file or dict."""
    if isinstance(source, Mapping):
        return CrossingPrior.from_dict(source)
    return CrossingPrior.from_dict(json.loads(Path(source).read_text()))


@lru_cache(maxsize=1)
def default_crossing_prior() -> CrossingPrior:
    """The crossing prior shipped with the package (``crossing_prior.json``, made by
    ``benchmarks/crossing_prior.py`` on every source)."""
    return load_crossing_prior(_PATH)
