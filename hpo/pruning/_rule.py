"""The collapse pruning rule: pure numbers, no optuna or ray (its sentence:
:mod:`hpo.pruning._sentence`).

One sentence: *at each checkpoint a trial stops when the probability that it ends better than
its strongest competitor (by ``margin``) is below ``threshold``.*

The probability is a statement about the order of two trials, so it is computed from the
*pair law* (:class:`hpo.predictors.pairs.PairErrorLaw`), not from two intervals:

* Two predictions made at the same progress err together (same data, family, schedule), and
  what is left in their log ratio, the pair error ``d``, follows the pair prior
  (:mod:`hpo.predictors.prior`), learned on every source's targets: ``d ~ s t_nu``, a
  Student-t with ``nu`` degrees of freedom and scale ``s = max(s_T, s_C) exp(c dist(T, C))``
  (each estimate's ``pair_scale``: its side of the prior, from the evidence its prediction
  had; ``dist`` the larger |log ratio| of the two trials' LRs and taus, ``c`` the prior's
  ``distance_slope``: settings further apart share less of their errors).
* ``P(T beats C) = P(log final_T < log(final_C + margin))``, with
  ``log(final_T / final_C) = log(pred_T / pred_C) - d``. The competitor's prediction is its
  latest one (a running trial at the same checkpoint or a later one), or, for a finished
  competitor, its prediction from the judged checkpoint: the finished trial's known final
  adds nothing the ratio does not already hold. A finished competitor without a prediction
  there (one that finished before the judge could predict, as a self-calibrating study's
  first trials) shares no error with the judged trial: it is compared on its final through
  the judged trial's whole error, its interval read as a normal. A predictor without a pair
  law gives each estimate a normal of its interval, independent of the others': a pair's
  scale is then ``sqrt(2)`` times the wider.
* **The sweep re-estimates the scale** (:func:`sweep_scale`): each finished trial's error at
  the judged checkpoint, in units of its expected spread, updates the law's scale as a
  Student-t posterior (prior: the proxies' scale, worth ``nu`` observations): ``kappa^2 =
  (nu + sum (u_i - mean u)^2) / (nu + m - 1)`` for m finished trials, with ``nu + m - 1``
  degrees of freedom. A sweep whose predictions err less than the proxies' narrows, one that
  errs more widens.
* The strongest competitor is the one T is least likely to beat.

Which trials compete, when trials are judged and what fails open is :mod:`hpo.pruning._judge`'s.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpo.predictors.pairs import PairErrorLaw, normal_scale
from hpo.predictors.predict import LEVEL
from hpo.predictors.prior import setting_distance as prior_setting_distance
from hpo.pruning._predict import finite_or_none

__all__ = [
    "Estimate",
    "Competitor",
    "Verdict",
    "beat_probability",
    "sweep_scale",
    "judge",
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
    level: float = LEVEL
    status: str = OK
    detail: str = ""
    # how much wider than the predictor's calibration the interval is (>= 1; extrapolation)
    widening: float = 1.0
    # this estimate's side of the pair law (0: none, the interval read as a normal)
    pair_scale: float = 0.0
    pair_dof: float = math.inf
    # the trial's LR and tau (0: unknown) and the law's widening per unit of their distance
    lr: float = 0.0
    tau: float = 0.0
    distance_slope: float = 0.0

    @property
    def usable(self) -> bool:
        """Whether the estimate can take part in the decision."""
        return self.status == OK and all(
            math.isfinite(x) for x in (self.value, self.lower, self.upper))

    def halfwidth(self, sign: float) -> float:
        """The wider side of the interval in log units (``sign * value`` is the loss);
        infinite where the interval reaches 0."""
        loss, lo, hi = (sign * self.value, sign * self.lower, sign * self.upper)
        lo, hi = min(lo, hi), max(lo, hi)
        return max(math.log(hi / loss), math.log(loss / lo)) if lo > 0 else math.inf

    def sigma(self, sign: float) -> float:
        """The spread of the log final loss: :meth:`halfwidth` over the normal quantile of
        the interval's level."""
        return normal_scale(self.halfwidth(sign), self.level)

    @property
    def has_pair_law(self) -> bool:
        """Whether the predictor gave this estimate a side of a measured pair law."""
        return PairErrorLaw.measured(self.pair_scale)

    def pair(self, sign: float) -> PairErrorLaw:
        """This estimate's side of the pair law (:meth:`PairErrorLaw.side`, the interval's
        half-width computed only where it is needed): without one, the interval read as a
        normal error independent of the competitor's."""
        if self.has_pair_law:
            return PairErrorLaw(self.pair_scale, self.pair_dof)
        return PairErrorLaw.from_interval(self.halfwidth(sign), self.level)

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
                "detail": self.detail, "widening": float(self.widening),
                "pair_scale": float(self.pair_scale), "pair_dof": _dof_out(self.pair_dof),
                "lr": float(self.lr), "tau": float(self.tau),
                "distance_slope": float(self.distance_slope)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        """Inverse of :meth:`to_dict`."""

        def num(x: Any) -> float:
            return float("nan") if x is None else float(x)

        return cls(num(data.get("value")), num(data.get("lower")), num(data.get("upper")),
                   float(data.get("t_hat", float("nan"))), float(data.get("level", LEVEL)),
                   str(data.get("status", OK)), str(data.get("detail", "")),
                   float(data.get("widening", 1.0)), float(data.get("pair_scale") or 0.0),
                   math.inf if data.get("pair_dof") is None else float(data["pair_dof"]),
                   float(data.get("lr") or 0.0), float(data.get("tau") or 0.0),
                   float(data.get("distance_slope") or 0.0))


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


def sweep_scale(finished: Sequence[tuple[Estimate, float]], sign: float = 1.0
                ) -> tuple[float, float]:
    """``(kappa, extra_dof)``: how the sweep's finished trials rescale the pair law.

    ``finished`` holds each finished trial's estimate at the judged checkpoint and its final
    value. Its error ``e = log(pred / final)`` in units of its expected spread
    (``pair_scale / sqrt(2)``, one trial's share of a pair's error) is ``u``; with the prior's
    degrees of freedom ``nu`` (the smallest of the estimates'), ``kappa^2 = (nu + sum (u -
    mean u)^2) / (nu + m - 1)`` and ``extra_dof = m - 1`` (module docstring). ``(1, 0)`` with
    fewer than two finished trials or a normal prior (``nu`` infinite: nothing to learn)."""
    us, dofs = [], []
    for est, final in finished:
        law = est.pair(sign)
        loss, end = sign * est.value, sign * final
        if not (loss > 0 and end > 0 and math.isfinite(law.scale) and law.scale > 0):
            continue
        us.append(math.log(loss / end) / (law.scale / math.sqrt(2.0)))
        dofs.append(law.dof)
    if len(us) < 2 or not math.isfinite(min(dofs)):
        return 1.0, 0.0
    nu = min(dofs)
    mean = sum(us) / len(us)
    ss = sum((u - mean) ** 2 for u in us)
    m = len(us)
    return math.sqrt((nu + ss) / (nu + m - 1)), float(m - 1)


def beat_probability(
    me: Estimate, other: Competitor, sign: float = 1.0, margin: float = 0.0,
    kappa: float = 1.0, extra_dof: float = 0.0,
) -> float:
    """P(the final loss of ``me`` < that of ``other`` + ``margin``) under the pair law.

    ``sign`` is +1 for minimize, -1 for maximize (values are negated losses); ``kappa`` and
    ``extra_dof`` the sweep's rescaling (:func:`sweep_scale`). Losses must be positive
    (``ValueError`` otherwise)."""
    loss = sign * me.value
    if not loss > 0:
        raise ValueError(f"losses must be positive, got a prediction of {loss}")
    theirs = other.estimate
    paired = theirs is not None and theirs.usable and sign * theirs.value > 0
    if other.final is not None and not (paired and me.has_pair_law):
        # against a known final without the competitor's prediction to share its error: the
        # judged trial's whole error, its interval read as a normal
        law = PairErrorLaw(me.sigma(sign))
        bar = sign * other.final + margin
        if bar <= 0:
            raise ValueError(f"losses must be positive, got a competitor's end of {bar}")
        z = math.log(loss / bar)
    elif paired:
        assert theirs is not None
        law = me.pair(sign).combine(theirs.pair(sign)).rescaled(distance_widening(me, theirs))
        pred_o = sign * theirs.value
        end_o = sign * other.final if other.final is not None else pred_o
        # log(final_me / final_o) = log(pred_me / pred_o) - d; beat: it is < log(1 + m / end_o)
        z = math.log(loss / pred_o) - math.log1p(margin / end_o) if end_o > 0 else -math.inf
    else:
        raise ValueError("a competitor needs a final value or a usable estimate")
    # the judged trial ends better when d > z
    return law.rescaled(kappa, extra_dof).sf(z)


def setting_distance(a: Estimate, b: Estimate) -> float:
    """How far apart two trials' settings are
    (:func:`hpo.predictors.prior.setting_distance` of their LRs and taus)."""
    return prior_setting_distance(a.lr, b.lr, a.tau, b.tau)


def distance_widening(a: Estimate, b: Estimate) -> float:
    """How much wider the pair law is for two trials :func:`setting_distance` apart:
    ``exp(slope x distance)``, the larger ``distance_slope`` of the two."""
    slope = max(a.distance_slope, b.distance_slope)
    return math.exp(slope * setting_distance(a, b)) if slope > 0 else 1.0


def judge(
    me: Estimate,
    competitors: Sequence[Competitor],
    threshold: float,
    sign: float = 1.0,
    margin: float = 0.0,
    kappa: float = 1.0,
    extra_dof: float = 0.0,
) -> Verdict:
    """Stop ``me`` when its probability to beat its strongest competitor is below
    ``threshold`` (a usable estimate; the competitors alive, each with a final value or a
    usable estimate; ``kappa`` and ``extra_dof`` from :func:`sweep_scale`)."""
    if not competitors:
        return Verdict(False, NO_COMPETITOR)
    probs = [beat_probability(me, c, sign, margin, kappa, extra_dof) for c in competitors]
    i = min(range(len(probs)), key=probs.__getitem__)
    p = probs[i]
    return Verdict(p < threshold, STOP if p < threshold else KEEP, p, competitors[i])


def _dof_out(dof: float) -> float | None:
    """Degrees of freedom for JSON (``None``: infinite, a normal law)."""
    return float(dof) if math.isfinite(dof) else None
