"""The collapse pruning rule: pure numbers, no optuna or ray (its sentence:
:mod:`hpo.pruning._sentence`).

One sentence: *at each checkpoint a trial stops when the probability that it ends more than
``tolerance`` below its strongest competitor is below ``threshold``.*

The probability is a statement about the order of two trials, so it is computed from the
*pair law* (:class:`hpo.predictors.pairs.PairErrorLaw`), not from two intervals:

* Two predictions made at the same progress err together (same data, family, schedule), and
  what is left in their log ratio, the pair error ``d``, follows the pair prior
  (:mod:`hpo.predictors.prior`), learned on every source's targets: ``d ~ s t_nu``, a
  Student-t with ``nu`` degrees of freedom and scale ``s = max(s_T, s_C) exp(c dist(T, C))``
  (each estimate's ``pair_scale``: its side of the prior, from the evidence its prediction
  had; ``dist`` the larger |log ratio| of the two trials' LRs and taus, ``c`` the prior's
  ``distance_slope``: settings further apart share less of their errors).
* ``P(T beats C) = P(log final_T < log(final_C + margin))`` (``margin`` in objective units, 0
  by default), with
  ``log(final_T / final_C) = log(pred_T / pred_C) - d``. The competitor's prediction is its
  latest one (a running trial at the same checkpoint or a later one), or, for a finished
  competitor, its prediction from the judged checkpoint: the finished trial's known final
  adds nothing the ratio does not already hold. A finished competitor without a prediction
  there (one that finished before the judge could predict, as a self-calibrating study's
  first trials) shares no error with the judged trial: it is compared on its final through
  the judged trial's whole error, its interval read as a normal. A predictor without a pair
  law gives each estimate a normal of its interval, independent of the others': a pair's
  scale is then ``sqrt(2)`` times the wider.
* **Never wider than independence.** Two predictions can share less of their errors, never less
  than nothing: a pair's law is at most as wide, at the interval's level, as the two intervals
  read as independent normals (:func:`pair_law`). Settings far apart in a random or TPE
  search meet this bound instead of a widening that grows without end.
* **The study re-estimates the law** (:func:`study_rescale`): every pair of finished trials
  with predictions at the judged checkpoint is a realized pair error (both finals known).
  Their Student-t likelihood moves the law's log-scale by ``a`` and its growth with the
  settings' distance by ``b`` (:func:`hpo.predictors.pairs.fit_study_rescale`: the prior
  counts as two trials, the m finished trials as m - 1 observations). A study whose
  predictions order its trials better than the corpus did narrows its law; one that orders
  them worse widens it; the distance term learns how fast sharing fades at the distances the
  study has. The tail (the prior's degrees of freedom) stays: a few finished trials measure a
  scale, not how often a pair errs far (a law made lighter-tailed by its finished trials
  stopped best trials in sequential order that the prior's tail keeps).
* **Tolerance.** With ``tolerance`` (relative), the event is "T ends more than ``tolerance``
  below C": ``log final_T < log final_C + log(1 - tolerance)``. Near-ties, which a user rarely
  cares to separate, then no longer keep a trial alive.
* The strongest competitor is the one T is least likely to beat.

Which trials compete, when trials are judged and what fails open is :mod:`hpo.pruning._judge`'s.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import stdtrit

from hpo.predictors.pairs import PairErrorLaw, fit_study_rescale, normal_scale
from hpo.predictors.predict import LEVEL, Prediction
from hpo.predictors.prior import setting_distance as prior_setting_distance
from hpo.pruning._predict import finite_or_none

__all__ = [
    "Estimate",
    "Competitor",
    "Verdict",
    "StudyRescale",
    "NO_RESCALE",
    "beat_probability",
    "pair_law",
    "study_rescale",
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
    # the study's shared error removed (log): value and interval = the predictor's divided by
    # exp(shift), learned from ``shift_trials`` finished trials (hpo.predictors.shift)
    shift: float = 0.0
    shift_trials: int = 0

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
    def predicted(self) -> float:
        """The predictor's own value, before the study's shift: what two predictions of one
        study share their errors in (the pair law reads these)."""
        return self.value * math.exp(self.shift) if self.shift else self.value

    @property
    def has_pair_law(self) -> bool:
        """Whether the predictor gave this estimate a side of a measured pair law."""
        return PairErrorLaw.measured(self.pair_scale)

    def pair(self, sign: float) -> PairErrorLaw:
        """This estimate's side of the pair law (:meth:`PairErrorLaw.side`, the interval's
        half-width computed only where it is needed): without one, the interval read as a
        normal error independent of the competitor's."""
        half = 0.0 if self.has_pair_law else self.halfwidth(sign)
        return PairErrorLaw.side(self.pair_scale, self.pair_dof, half, self.level)

    @classmethod
    def of(cls, pred: Prediction, t_hat: float, sign: float = 1.0) -> Estimate:
        """The estimate of the predictor's ``pred`` (a loss, ``sign``: -1 where the objective is
        the negated loss) at progress ``t_hat``: the one conversion from a prediction to what
        the rule reads. The interval is widened to hold the value; a widening below 1, a
        non-positive pair scale, LR or tau read as none. :data:`NON_FINITE` when the value or
        the interval is not finite or not positive."""
        final, lower, upper = float(pred.final), float(pred.lower), float(pred.upper)
        if not all(math.isfinite(x) for x in (final, lower, upper)) or min(final, lower) <= 0:
            return cls.failed(NON_FINITE, t_hat,
                              f"prediction {final:.4g} [{lower:.4g}, {upper:.4g}]")
        lower, upper = min(lower, final), max(upper, final)
        if sign < 0:
            final, lower, upper = -final, -upper, -lower
        widening, lr, tau = float(pred.widening), float(pred.lr), float(pred.tau)
        scale = float(pred.pair_scale)
        return cls(final, lower, upper, float(t_hat), float(pred.level),
                   widening=widening if widening >= 1 else 1.0,
                   pair_scale=scale if scale > 0 else 0.0, pair_dof=float(pred.pair_dof),
                   lr=lr if lr > 0 else 0.0, tau=tau if tau > 0 else 0.0,
                   distance_slope=float(pred.distance_slope))

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
                "distance_slope": float(self.distance_slope), "shift": float(self.shift),
                "shift_trials": int(self.shift_trials)}

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
                   float(data.get("distance_slope") or 0.0), float(data.get("shift") or 0.0),
                   int(data.get("shift_trials") or 0))


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


#: at most this many pairs of finished trials enter :func:`study_rescale` (evenly spaced in
#: the list of all pairs beyond it): the fit's cost stays flat in a study of thousands
MAX_STUDY_PAIRS = 2000


def evenly_spaced(n: int, most: int = MAX_STUDY_PAIRS) -> list[int]:
    """Indices of at most ``most`` of ``n`` items, evenly spaced (all of them when ``n`` is no
    more): how the study's pairs are thinned, so that a fit on them costs the same in a study
    of thousands."""
    if n <= most:
        return list(range(n))
    step = n / most
    return [int(k * step) for k in range(most)]


@dataclass(frozen=True)
class StudyRescale:
    """How a study's finished trials rescale the pair law at one checkpoint
    (:func:`study_rescale`): its scale times ``exp(log_scale + distance_slope x dist)`` for
    settings ``dist`` apart; ``trials`` and ``pairs`` the evidence."""

    log_scale: float = 0.0
    distance_slope: float = 0.0
    trials: int = 0
    pairs: int = 0

    def factor(self, dist: float) -> float:
        """The scale's factor for settings ``dist`` apart."""
        if self.log_scale == 0.0 and self.distance_slope == 0.0:
            return 1.0
        return math.exp(self.log_scale + self.distance_slope * dist)


#: no rescaling: the prior's law as it is
NO_RESCALE = StudyRescale()


def study_rescale(finished: Sequence[tuple[Estimate, float]], sign: float = 1.0
                  ) -> StudyRescale:
    """How the study's finished trials rescale the pair law (module docstring).

    ``finished`` holds each finished trial's estimate at the judged checkpoint and its final
    value. Every pair of them with a measured pair law gives a realized pair error ``d =
    log(pred_i / final_i) - log(pred_j / final_j)`` on its law (:func:`pair_law`);
    :func:`hpo.predictors.pairs.fit_study_rescale` fits the rescaling on them, the m trials
    counting as m - 1 observations. :data:`NO_RESCALE` with fewer than two such trials or a
    normal law (infinite dof: nothing to learn)."""
    done = [(est, math.log(sign * est.predicted / (sign * final))) for est, final in finished
            if est.has_pair_law and sign * est.predicted > 0 and sign * final > 0]
    m = len(done)
    if m < 2 or not math.isfinite(min(est.pair_dof for est, _ in done)):
        return NO_RESCALE
    index = [(i, j) for i in range(m) for j in range(i + 1, m)]
    index = [index[k] for k in evenly_spaced(len(index))]
    d, scale, dist = [], [], []
    dof = math.inf
    for i, j in index:
        (a, ea), (b, eb) = done[i], done[j]
        law = pair_law(a, b, sign)
        d.append(ea - eb)
        scale.append(law.scale)
        dist.append(setting_distance(a, b))
        dof = min(dof, law.dof)
    ls, slope = fit_study_rescale(np.asarray(d), np.asarray(scale), np.asarray(dist), dof,
                                  n_eff=m - 1)
    return StudyRescale(ls, slope, m, len(index))


def pair_law(me: Estimate, theirs: Estimate, sign: float = 1.0) -> PairErrorLaw:
    """The law of the pair error of two estimates made at the same checkpoint: the wider of
    their sides (:meth:`Estimate.pair`) widened for their settings' distance
    (:func:`distance_widening`), at most as wide at ``level`` as their intervals read as
    independent normals (module docstring)."""
    law = me.pair(sign).combine(theirs.pair(sign)).rescaled(distance_widening(me, theirs))
    if not (me.has_pair_law or theirs.has_pair_law):
        return law
    both = math.hypot(me.halfwidth(sign), theirs.halfwidth(sign))
    q = float(stdtrit(law.dof, 0.5 + me.level / 2)) if math.isfinite(law.dof) else None
    if q is None or not math.isfinite(both) or not q > 0:
        return law
    return PairErrorLaw(min(law.scale, both / q), law.dof)


def beat_probability(
    me: Estimate, other: Competitor, sign: float = 1.0, margin: float = 0.0,
    rescale: StudyRescale = NO_RESCALE, tolerance: float = 0.0,
) -> float:
    """P(the final loss of ``me`` < (that of ``other`` + ``margin``) x (1 - ``tolerance``))
    under the pair law.

    ``sign`` is +1 for minimize, -1 for maximize (values are negated losses); ``rescale`` the
    study's rescaling of the law (:func:`study_rescale`). Losses must be positive
    (``ValueError`` otherwise). The rule reads each prediction as the predictor made it
    (``Estimate.predicted``, before the study's shift): its pair law and intervals were
    measured on those."""
    loss = sign * me.predicted
    if not loss > 0:
        raise ValueError(f"losses must be positive, got a prediction of {loss}")
    below = -math.log1p(-tolerance) if tolerance > 0 else 0.0
    theirs = other.estimate
    paired = theirs is not None and theirs.usable and sign * theirs.value > 0
    if other.final is not None and not (paired and me.has_pair_law):
        # against a known final without the competitor's prediction to share its error: the
        # judged trial's whole error, its interval read as a normal
        bar = sign * other.final + margin
        if bar <= 0:
            raise ValueError(f"losses must be positive, got a competitor's end of {bar}")
        return PairErrorLaw(me.sigma(sign)).sf(math.log(loss / bar) + below)
    if not paired:
        raise ValueError("a competitor needs a final value or a usable estimate")
    assert theirs is not None
    pred_me, pred_o = loss, sign * theirs.predicted
    end_o = sign * other.final if other.final is not None else sign * theirs.value
    # log(final_me / final_o) = log(pred_me / pred_o) - d; the judged trial ends better when
    # d > log(pred_me / pred_o) - log(1 + margin / end_o) - log(1 - tolerance)
    z = (math.log(pred_me / pred_o) - math.log1p(margin / end_o) + below) \
        if end_o > 0 and pred_o > 0 else -math.inf
    law = pair_law(me, theirs, sign)
    return law.rescaled(rescale.factor(setting_distance(me, theirs))).sf(z)


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
    rescale: StudyRescale = NO_RESCALE,
    tolerance: float = 0.0,
) -> Verdict:
    """Stop ``me`` when its probability to end more than ``tolerance`` below its strongest
    competitor is below ``threshold`` (a usable estimate; the competitors alive, each with a
    final value or a usable estimate; ``rescale`` from :func:`study_rescale`)."""
    if not competitors:
        return Verdict(False, NO_COMPETITOR)
    probs = [beat_probability(me, c, sign, margin, rescale, tolerance) for c in competitors]
    i = min(range(len(probs)), key=probs.__getitem__)
    p = probs[i]
    return Verdict(p < threshold, STOP if p < threshold else KEEP, p, competitors[i])


def _dof_out(dof: float) -> float | None:
    """Degrees of freedom for JSON (``None``: infinite, a normal law)."""
    return float(dof) if math.isfinite(dof) else None
