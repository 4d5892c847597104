"""The collapse pruning rule: pure numbers, no optuna or ray.

One sentence: *at each checkpoint a trial stops when the probability that it ends better than
its strongest competitor (by ``margin``) is below ``threshold``.*

* A trial's final loss is predicted with a calibrated interval (``hpo.predictors``); read as a
  log-normal, the interval gives a spread ``sigma`` in log units (:meth:`Estimate.sigma`).
* Prediction errors of trials of one sweep are correlated (they share the model, the data and
  most of the recipe). Within the calibrated spread ``s0`` the correlation ``rho`` is measured
  on the proxies' held-out log errors within their sweeps
  (:func:`hpo.predictors.error_correlation`).
  The interval of a run beyond the proxies' ranges is wider (``Estimate.widening``); that extra
  variance comes from the extrapolation, and two trials share as much of it as the less
  extrapolated one has: ``cov = rho s0_a s0_b + min(extra_a, extra_b)``, ``extra = s^2 - s0^2``.
  Trials of one sweep extrapolated alike (a size beyond the proxies') thus compare within their
  calibrated spread, while a trial extrapolated alone (a tau outside the proxies' range) keeps
  its extra spread to itself.
* Against a finished competitor C (final value known), the judged trial T's log final is
  normal, conditioned on C's own error at the same checkpoint (a shared bias): its mean moves
  by ``cov / s_C^2`` times that error, its variance is ``s_T^2 - cov^2 / s_C^2``; when C has
  no prediction from that checkpoint, it is T's prediction with spread ``s_T``.
* Against a running competitor, the log ratio of the two finals is normal around the ratio of
  the predictions, with variance ``s_T^2 + s_C^2 - 2 cov``.
* The strongest competitor is the one T is least likely to beat; ``P(T beats C)`` is
  ``P(final_T < final_C + margin)`` (losses; ``margin`` in objective units).

Which trials compete, when trials are judged and what fails open is :mod:`hpo.pruning._judge`'s.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy.stats import norm

from hpo.pruning._predict import finite_or_none

__all__ = [
    "Estimate",
    "Competitor",
    "Verdict",
    "beat_probability",
    "covariance",
    "judge",
    "explain",
    "OK",
    "DIVERGED",
    "STOP",
    "KEEP",
]

# status of a prediction attempt (also the causes the adapters warn about once)
OK = "ok"
MISSING_CONTROLS = "missing_controls"
FIT_FAILED = "fit_failed"
NON_FINITE = "non_finite_prediction"
DIVERGED = "diverged"
UNCALIBRATED = "uncalibrated"

# verdict reasons
STOP = "unlikely_to_win"
KEEP = "may_win"
STARTUP = "startup"
NO_COMPETITOR = "no_competitor"
NO_ESTIMATE = "no_estimate"
LAST_REPORT = "last_report"


@dataclass(frozen=True)
class Estimate:
    """A trial's predicted final value at one checkpoint, in objective units.

    ``lower <= value <= upper`` is the predictor's interval at coverage ``level``; ``t_hat``
    the progress it was made at; ``status`` is ``"ok"`` or why there is no prediction (then
    the numbers are NaN and ``detail`` says more).
    """

    value: float
    lower: float
    upper: float
    t_hat: float
    level: float = 0.8
    status: str = OK
    detail: str = ""
    # how much wider than the predictor's calibration the interval is (>= 1; extrapolation)
    widening: float = 1.0

    @property
    def usable(self) -> bool:
        """Whether the estimate can take part in the decision."""
        return self.status == OK and all(
            math.isfinite(x) for x in (self.value, self.lower, self.upper))

    def sigma(self, sign: float) -> float:
        """The spread of the log final loss (``sign * value`` is the loss): the wider side of
        the interval in log units over the normal quantile of its level."""
        loss, lo, hi = (sign * self.value, sign * self.lower, sign * self.upper)
        lo, hi = min(lo, hi), max(lo, hi)
        half = max(math.log(hi / loss), math.log(loss / lo)) if lo > 0 else math.inf
        return half / norm.ppf(0.5 + self.level / 2)

    @classmethod
    def failed(cls, status: str, t_hat: float, detail: str = "") -> Estimate:
        """No usable estimate, for the reason ``status``."""
        nan = float("nan")
        return cls(nan, nan, nan, float(t_hat), status=status, detail=detail)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as ``None``), the inverse of :meth:`from_dict`."""
        num = finite_or_none
        return {"value": num(self.value), "lower": num(self.lower), "upper": num(self.upper),
                "t_hat": float(self.t_hat), "level": float(self.level), "status": self.status,
                "detail": self.detail, "widening": float(self.widening)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        """Inverse of :meth:`to_dict`."""

        def num(x: Any) -> float:
            return float("nan") if x is None else float(x)

        return cls(num(data.get("value")), num(data.get("lower")), num(data.get("upper")),
                   float(data.get("t_hat", float("nan"))), float(data.get("level", 0.8)),
                   str(data.get("status", OK)), str(data.get("detail", "")),
                   float(data.get("widening", 1.0)))


@dataclass(frozen=True)
class Competitor:
    """Another alive trial as the judged one sees it: ``final`` when it finished (and
    ``estimate``, its prediction from the judged checkpoint, when it has one), else its latest
    ``estimate``. ``label`` names it in explanations."""

    key: Hashable
    label: Any
    estimate: Estimate | None = None
    final: float | None = None


@dataclass(frozen=True)
class Verdict:
    """The outcome for one judged trial: ``stop``, the ``reason`` code, the probability that
    it beats its strongest competitor and that competitor."""

    stop: bool
    reason: str
    probability: float | None = None
    against: Competitor | None = None


def covariance(a: Estimate, b: Estimate, rho: float, sign: float = 1.0) -> float:
    """The covariance of two trials' log prediction errors: ``rho`` times their calibrated
    spreads, plus the extrapolation variance both have (the smaller of the two)."""
    s_a, s_b = a.sigma(sign), b.sigma(sign)
    c_a, c_b = s_a / max(a.widening, 1.0), s_b / max(b.widening, 1.0)
    return rho * c_a * c_b + min(s_a * s_a - c_a * c_a, s_b * s_b - c_b * c_b)


def beat_probability(
    me: Estimate, other: Competitor, rho: float, sign: float = 1.0, margin: float = 0.0
) -> float:
    """P(the final loss of ``me`` < that of ``other`` + ``margin``) under the module's model.

    ``sign`` is +1 for minimize, -1 for maximize (values are negated losses); ``rho`` in
    [0, 1) the correlation of two trials' calibrated log prediction errors. Losses must be
    positive (``ValueError`` otherwise)."""
    loss = sign * me.value
    if not loss > 0:
        raise ValueError(f"losses must be positive, got a prediction of {loss}")
    s_me = me.sigma(sign)
    theirs = other.estimate
    if other.final is not None:
        bar = sign * other.final + margin
        mean, var = math.log(loss), s_me * s_me
        if theirs is not None and theirs.usable and sign * theirs.value > 0:
            s_o = theirs.sigma(sign)
            if s_o > 0 and math.isfinite(s_o):
                cov = covariance(me, theirs, rho, sign)
                error = math.log(sign * other.final) - math.log(sign * theirs.value)
                mean += cov / (s_o * s_o) * error
                var -= cov * cov / (s_o * s_o)
    else:
        assert theirs is not None
        # log(final_me / final_other) ~ N(log(pred_me / pred_other), var)
        bar = sign * theirs.value + margin
        mean = math.log(loss)
        s_o = theirs.sigma(sign)
        var = s_me * s_me + s_o * s_o - 2.0 * covariance(me, theirs, rho, sign)
    if bar <= 0:
        raise ValueError(f"losses must be positive, got a competitor's end of {bar}")
    z = math.log(bar) - mean
    sd = math.sqrt(max(var, 0.0))
    if not sd > 0:
        return 1.0 if z > 0 else 0.0
    return float(norm.cdf(z / sd))


def judge(
    me: Estimate,
    competitors: Sequence[Competitor],
    rho: float,
    threshold: float,
    sign: float = 1.0,
    margin: float = 0.0,
) -> Verdict:
    """Stop ``me`` when its probability to beat its strongest competitor is below
    ``threshold`` (a usable estimate; the competitors alive, each with a final value or a
    usable estimate)."""
    if not competitors:
        return Verdict(False, NO_COMPETITOR)
    probs = [beat_probability(me, c, rho, sign, margin) for c in competitors]
    i = min(range(len(probs)), key=probs.__getitem__)
    p = probs[i]
    return Verdict(p < threshold, STOP if p < threshold else KEEP, p, competitors[i])


def explain(record: Mapping[str, Any]) -> str:
    """One sentence, with its numbers, on a verdict as the judge stores it."""
    est = Estimate.from_dict(record.get("estimate") or {})
    stop = bool(record.get("stop"))
    verb = "stopped" if stop else "kept"
    at = f" at t^ {est.t_hat:.2f}" if math.isfinite(est.t_hat) else ""
    now = record.get("t_hat")
    if isinstance(now, (int, float)) and math.isfinite(est.t_hat) and now > est.t_hat + 1e-3:
        at = f" at t^ {now:.2f} (predicted at t^ {est.t_hat:.2f})"
    pred = (f"predicted {est.value:.4g} [{est.lower:.4g}, {est.upper:.4g}]" if est.usable
            else "")
    reason = record.get("reason")
    against = record.get("against") or {}
    who = f"trial {against.get('label')}"
    p = record.get("probability")
    if reason in (STOP, KEEP) and isinstance(p, (int, float)):
        if against.get("final") is not None:
            theirs = f"its final {against['final']:.4g}"
        else:
            o = Estimate.from_dict(against.get("estimate") or {})
            theirs = f"{o.value:.4g} [{o.lower:.4g}, {o.upper:.4g}]"
        chance = f"{p:.1%}" if p >= 0.001 else f"{p:.1e}"
        bar = record.get("threshold")
        rule = (f", below the threshold {bar:g}" if stop else f", not below {bar:g}") \
            if isinstance(bar, (int, float)) else ""
        return f"{verb}{at}: {chance} chance to end below {who}{rule} ({pred} against {theirs})"
    if reason == DIVERGED:
        return f"{verb}{at}: its latest value is not finite (diverged)"
    if reason == NO_ESTIMATE:
        detail = est.detail or est.status
        return f"{verb}{at}: no prediction ({detail}); a trial is never stopped without one"
    if reason == STARTUP:
        return (f"{verb}{at}: {pred}; no stop until {record.get('needed')} trials have a "
                f"prediction or a final value ({record.get('have')} so far)")
    if reason == NO_COMPETITOR:
        return f"{verb}{at}: {pred}; no other trial to compare with yet"
    if reason == LAST_REPORT:
        return f"{verb}{at}: {pred}; at its last report, stopping saves nothing"
    return f"{verb}{at}: {pred or reason}"
