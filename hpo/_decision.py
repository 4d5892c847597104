"""The one early-stopping decision that the Optuna pruner and the Ray Tune scheduler share.

Pure functions over numpy arrays and small dataclasses; no optuna or ray import. The adapters
(:mod:`hpo._pruner`, :mod:`hpo._ray_scheduler`) keep the per-trial state where their framework
wants it and call :func:`estimate_at_checkpoint` and :func:`dominated` (or :func:`decide`, which
does both from raw curves).

The rule (``direction="minimize"``; ``"maximize"`` mirrors it):

* A trial is judged only when its progress t^ = step / total_steps has crossed a checkpoint
  (default t^ in {0.1, 0.2, 0.3, 0.4, 0.5}, ``DEFAULT_CHECKPOINTS``); the prediction made
  there uses every point reported so far.
* Each judged trial has an *estimate* of its final value: the predictor's interval
  ``[lower, upper]`` at the checkpoint; a finished trial's final value counts as exact
  (``lower == upper == value``).
* The *best pessimistic end* is the smallest ``upper`` among the other alive trials: completed
  ones, and running ones whose latest prediction was made at the judged trial's checkpoint or a
  later one (a trial that lags behind, with a less informed prediction, never stops one that
  is ahead; pruned trials do not count).
* A running trial is stopped when ``lower > best_upper + margin``.
* Re-judging (``rejudge_every``): between checkpoints, and after the last one until the trial
  ends, a trial that was not stopped is judged again each time its progress advances by
  ``rejudge_every`` (default 0.02): its latest estimate (re-debiased) against the competitors'
  current ones, with no new prediction. So a trial is stopped when a competitor that lagged
  behind catches up or finishes, not only when it crosses a checkpoint itself.
* Debiasing (``debias=True``; off by default): a running trial's interval is multiplied by the
  median ratio final / predicted of the finished trials at the same checkpoint
  (:func:`debias_factor`), so a bias the predictor shares over the sweep does not count against
  predictions compared with exact values. Finished trials whose prediction was extrapolated do
  not enter the ratio. Off by default: on the bench's 14 tables it never lowered regret, it cost
  compute in four sequential ones, and in a Ray lockstep run on lr_scheduling two arms that
  finished first, predicted 6% and 12% low, raised a lagging best arm's prediction by 9% and
  stopped it (1.0% regret): the errors it averages are not shared.
* The study's own errors: a running trial's interval is at least as wide, in log, as the
  largest error the finished trials' predictions from the same checkpoint had
  (:func:`finished_halfwidth`), so an error the proxies could not show (a width transfer, the
  LR's effect on the shape) widens every later interval once one finished trial shows it.
* Extrapolation: when a trial's ``tau`` (the control an LR or weight-decay sweep moves) lies
  outside the range the reference curve was fitted on, its interval is widened by
  ``extrapolation_inflation`` (default 2) around the prediction.
* Paired rule (``paired_tolerance``, a map checkpoint -> delta >= 0 in log units): trials of
  one sweep share almost everything, so their prediction errors are strongly correlated. Each
  trial's *raw* prediction at a checkpoint (``TrialSnapshot.paired``; for a finished trial its
  prediction from the same checkpoint, so that its exact value enters only through the shared
  error) is compared with the others' from the same checkpoint: a running trial is also stopped
  when ``log(pred) - log(pred_other) > delta`` for some alive competitor. A running competitor
  that has not reached the judged trial's checkpoint does not enter (its earlier prediction
  is not what delta was calibrated for, and in a Ray run a best trial that ran ahead
  was stopped at t^ 0.25 by a lagging arm's t^ 0.1 prediction); re-judging brings it in once it
  has. delta is calibrated on the errors of the *log-ratio* of two runs'
  held-out predictions, not on absolute errors: from the reference curve's leave-one-out
  errors on its proxies (:func:`predictors.paired_tolerance`, what the adapters' default
  ``paired_tolerance="auto"`` uses), or by predicting proxy sweeps
  (:func:`paired_tolerance_from_groups`). Per pair of settings (``paired_pairs``): when the
  two trials' counterparts (``Estimate.counterparts``: proxies that ran the same setting at
  another size) form at least two proxy pairs, delta is the largest of those pairs' held-out
  errors if that is smaller (``DecisionConfig.pair_tolerance``). When the pairs carry their
  proxies' size, the pairs of the largest size count, and the next sizes down are added only
  until ``paired_min_pairs`` (4) pairs count: the proxies nearest the target in size transfer
  to it best, and the smallest ones, which collapse worst with it, would otherwise set every
  pair's delta; but the largest of two or three errors is too small a sample (on the CPU
  sweeps the three LRs at one TPP and tau give three pairs per size, and the width-64 arms'
  errors exceeded the width-48 pairs' largest).
  Self-check on the finished trials (``paired_finished_inflation``, k): each pair of finished
  trials was predicted at the judged checkpoint with the delta the rule gives that pair; when
  k times the error of a pair's predicted log-ratio (against their finals) exceeds its delta,
  every delta is scaled up by the largest such ratio (:func:`finished_check`). A calibration
  that held on the study's own trials is kept, pair by pair; one that failed there widens all.
  Predictions that carry the reference curve to a schedule none of its proxies ran
  (``Estimate.extrapolated`` holds ``"schedule"``) take no part in the paired rule: its
  tolerance says nothing about them (on the shared lr_scheduling data they are off by 20-35%
  at t^ = 0.1 where the proxies' pairs are within 13%); the interval rule, whose intervals are
  calibrated for that path, still judges them.
* The judged trial's own latest value (``TrialSnapshot.latest``) can keep it: a trial whose
  latest report is already at least as good as the best expected end of its competitors (a
  finished trial's final value, a running one's prediction) is not stopped, since a metric
  that keeps improving ends there or better. Early in a run the latest value is far from the
  end, so this acts late, where a stored estimate is stale. A trial at its last report
  (``step >= total_steps - 1``) is never stopped: stopping it saves nothing and would lose its
  result. Both matter when re-judging a stored estimate late in a run: an estimate from t^ 0.5
  knows nothing of how the run went since.
* Nothing is stopped while fewer than ``n_startup_trials`` trials (the judged one included) have
  an estimate, and at least ``n_min_trials`` trials stay alive (the least dominated are kept).

Fail open (documented NaN rule):

* Non-finite points are dropped before predicting. A trial whose *latest* reported value is NaN
  or infinite has diverged: it is stopped at the next checkpoint (``stop_diverged=True``, as
  optuna's own pruners prune NaN), regardless of the other trials.
* Missing controls, fewer than ``min_points`` finite points, a predictor that raises or returns a
  non-finite interval: no estimate, the trial is never stopped on that checkpoint and does not
  count as a competitor; the adapters warn once per cause.
* A finished trial with a non-finite final value does not count as a competitor.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = [
    "DIRECTIONS",
    "DEFAULT_CHECKPOINTS",
    "DecisionConfig",
    "Estimate",
    "TrialSnapshot",
    "TrialCurve",
    "Verdict",
    "PredictorLike",
    "at_last_report",
    "latest_checkpoint",
    "estimate_at_checkpoint",
    "debias_factor",
    "finished_halfwidth",
    "explain",
    "extrapolated_controls",
    "dominated",
    "judge_estimate",
    "decide",
    "paired_gap",
    "pair_delta",
    "pair_errors",
    "paired_tolerance_from_groups",
    "new_schedule",
    "NEW_SCHEDULE",
    "finished_check",
]

DIRECTIONS = ("minimize", "maximize")
# where trials are judged by default: from 10% of training, while a stop still saves half
DEFAULT_CHECKPOINTS = (0.1, 0.2, 0.3, 0.4, 0.5)

# status strings of an estimate attempt (also the causes the adapters warn about once)
OK = "ok"
MISSING_CONTROLS = "missing_controls"
TOO_FEW_POINTS = "too_few_points"
FIT_FAILED = "fit_failed"
NON_FINITE = "non_finite_prediction"
DIVERGED = "diverged"
# in Estimate.extrapolated: the prediction carried the curve to a schedule no proxy ran
NEW_SCHEDULE = "schedule"


class PredictorLike(Protocol):
    """What the decision needs from a final-loss predictor (``predictors.FinalLossPredictor``).

    ``predict(steps, losses, controls)`` returns an object with ``final``, ``lower`` and
    ``upper`` (a ``predictors.Prediction``) or raises ``ValueError`` when it cannot predict.
    """

    def predict(self, steps: np.ndarray, losses: np.ndarray, controls: Any) -> Any: ...


@dataclass(frozen=True)
class DecisionConfig:
    """Parameters of the rule (see the module docstring)."""

    # fractions of training t^ at which trials are judged, strictly increasing in (0, 1)
    checkpoints: tuple[float, ...] = DEFAULT_CHECKPOINTS
    # a trial is stopped only if it is worse than the best pessimistic end by more than this
    # (objective units, >= 0)
    margin: float = 0.0
    # no stopping before this many trials (the judged one included) have an estimate
    n_startup_trials: int = 2
    # never leave fewer than this many trials alive (running or completed)
    n_min_trials: int = 1
    # "minimize" or "maximize"
    direction: str = "minimize"
    # fewest finite points a prediction needs
    min_points: int = 3
    # stop a trial whose latest reported value is NaN or infinite
    stop_diverged: bool = True
    # rescale predictions by the median ratio final / prediction of the finished trials at the
    # same checkpoint (cancels a predictor bias shared by the sweep)
    debias: bool = False
    # widen the interval of a trial whose sweep control lies outside the reference curve's
    # fitted range (``extrapolation_controls``) by this factor; 1 turns it off
    extrapolation_inflation: float = 2.0
    extrapolation_controls: tuple[str, ...] = ("tau",)
    # paired rule: checkpoint -> tolerance delta on log(pred / pred_other) (empty: off)
    paired_tolerance: tuple[tuple[float, float], ...] = ()
    # paired rule, per pair of settings: (checkpoint, proxy a, proxy b, |e_a - e_b|[, size])
    # for proxies of one size (``predictors.paired_errors``; size: their n_params, optional);
    # two trials whose counterpart proxies (``Estimate.counterparts``) form at least two such
    # pairs get the largest of those errors as their delta, if it is below
    # ``paired_tolerance`` (empty: the pooled delta for all); with sizes, the pairs of the
    # largest sizes, at least ``paired_min_pairs`` of them (see :meth:`pair_tolerance`)
    paired_pairs: tuple[tuple[Any, ...], ...] = ()
    # paired rule, per pair of settings: the pairs of the largest sizes, taken from the
    # largest down until at least this many count (see :meth:`pair_tolerance`)
    paired_min_pairs: int = 4
    # paired rule, self-check: when this times the paired error of two finished trials (their
    # predictions at the checkpoint against their finals) exceeds the delta of that pair, every
    # delta is scaled up by the largest such ratio (0: off; :func:`finished_check`)
    paired_finished_inflation: float = 1.0
    # judge a running trial again (latest estimate, current competitors) each time its progress
    # advances by this fraction of training after its first checkpoint; 0: only at checkpoints
    rejudge_every: float = 0.02

    def __post_init__(self) -> None:
        tol = self.paired_tolerance
        items = sorted(tol.items()) if isinstance(tol, Mapping) else sorted(tuple(x) for x in tol)
        for c, d in items:
            if not (0.0 < float(c) < 1.0 and math.isfinite(float(d)) and float(d) >= 0):
                raise ValueError(
                    "paired_tolerance must map checkpoints in (0, 1) to finite deltas >= 0, "
                    f"but got {self.paired_tolerance=}"
                )
        object.__setattr__(
            self, "paired_tolerance", tuple((float(c), float(d)) for c, d in items)
        )
        pairs: dict[float, dict[tuple[str, str], tuple[float, float | None]]] = {}
        for entry in self.paired_pairs:
            bad = ValueError(
                "paired_pairs must hold (checkpoint in (0, 1), run a, run b, error >= 0"
                f"[, size > 0]), but got {entry!r}"
            )
            if len(entry) not in (4, 5):
                raise bad
            c, a, b, d = entry[:4]
            size = float(entry[4]) if len(entry) == 5 and entry[4] is not None else None
            if not (0.0 < float(c) < 1.0 and math.isfinite(float(d)) and float(d) >= 0) or (
                size is not None and not (math.isfinite(size) and size > 0)
            ):
                raise bad
            pairs.setdefault(float(c), {})[_pair_key(str(a), str(b))] = (float(d), size)
        object.__setattr__(self, "paired_pairs", tuple(
            (c, a, b, d) if size is None else (c, a, b, d, size)
            for c in sorted(pairs) for (a, b), (d, size) in sorted(pairs[c].items())))
        object.__setattr__(self, "_pairs", pairs)
        # lookups (judging compares every pair of finished trials): sorted keys, once
        object.__setattr__(self, "_pair_cps", sorted(pairs))
        object.__setattr__(self, "_tolerance", dict(self.paired_tolerance))
        object.__setattr__(self, "_tolerance_cps", [c for c, _ in self.paired_tolerance])
        m = self.paired_min_pairs
        if int(m) != m or m < 2:
            raise ValueError(f"paired_min_pairs must be an int >= 2, but got {m=}")
        k = self.paired_finished_inflation
        if not (math.isfinite(k) and k >= 0):
            raise ValueError(f"paired_finished_inflation must be finite and >= 0, but got {k=}")
        r = self.rejudge_every
        if not (math.isfinite(r) and 0.0 <= r < 1.0):
            raise ValueError(f"rejudge_every must be in [0, 1), but got {self.rejudge_every=}")
        cps = tuple(float(c) for c in self.checkpoints)
        if not cps:
            raise ValueError(f"checkpoints must not be empty, but got {self.checkpoints=}")
        increasing = all(b > a for a, b in zip(cps[:-1], cps[1:], strict=True))
        if any(not (0.0 < c < 1.0) for c in cps) or not increasing:
            raise ValueError(
                "checkpoints must be strictly increasing fractions in (0, 1), "
                f"but got {self.checkpoints=}"
            )
        object.__setattr__(self, "checkpoints", cps)
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"margin must be finite and >= 0, but got {self.margin=}")
        if int(self.n_startup_trials) != self.n_startup_trials or self.n_startup_trials < 1:
            raise ValueError(
                f"n_startup_trials must be an int >= 1, but got {self.n_startup_trials=}"
            )
        if int(self.n_min_trials) != self.n_min_trials or self.n_min_trials < 1:
            raise ValueError(f"n_min_trials must be an int >= 1, but got {self.n_min_trials=}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, but got {self.direction=}")
        if not (math.isfinite(self.extrapolation_inflation) and self.extrapolation_inflation >= 1):
            raise ValueError(
                "extrapolation_inflation must be finite and >= 1, "
                f"but got {self.extrapolation_inflation=}"
            )
        object.__setattr__(self, "extrapolation_controls", tuple(self.extrapolation_controls))
        if int(self.min_points) != self.min_points or self.min_points < 2:
            raise ValueError(f"min_points must be an int >= 2, but got {self.min_points=}")

    def rejudge_slot(self, t_hat: float) -> int:
        """Which re-judging interval progress ``t_hat`` lies in (``floor(t_hat /
        rejudge_every)``); a trial is judged again when this grows. -1 when re-judging is off
        or ``t_hat`` is not finite."""
        if self.rejudge_every <= 0 or not math.isfinite(t_hat):
            return -1
        return int(math.floor(t_hat / self.rejudge_every + 1e-9))

    @property
    def sign(self) -> float:
        """+1 for minimize, -1 for maximize: ``sign * value`` is smaller-is-better."""
        return 1.0 if self.direction == "minimize" else -1.0

    def tolerance(self, checkpoint: float) -> float | None:
        """The paired rule's delta at ``checkpoint`` (that of the largest calibrated checkpoint
        not after it, else the first one); ``None`` when the paired rule is off."""
        if not self.paired_tolerance:
            return None
        table: dict[float, float] = self._tolerance  # type: ignore[attr-defined]
        return table[_calibrated_at(self._tolerance_cps, checkpoint)]  # type: ignore[attr-defined]

    def pair_tolerance(
        self, checkpoint: float, mine: Sequence[str], theirs: Sequence[str]
    ) -> float | None:
        """The delta for one pair of settings at ``checkpoint``: the largest paired error
        among the proxy pairs (one counterpart of each trial, ``paired_pairs``, at the largest
        calibrated checkpoint not after it, else the first), when there are at least two such
        pairs; ``None`` otherwise (the pooled ``tolerance`` applies). When every such pair
        has a size, the pairs of the largest size count, and those of the next sizes down
        are added until at least ``paired_min_pairs`` count (all of them when the sizes hold
        fewer). The largest of k errors covers a new one with probability k / (k + 1); the
        default 4 makes that 0.8, the intervals' level."""
        pairs: dict[float, dict[tuple[str, str], tuple[float, float | None]]]
        pairs = self._pairs  # type: ignore[attr-defined]
        if not pairs or not mine or not theirs:
            return None
        table = pairs[_calibrated_at(self._pair_cps, checkpoint)]  # type: ignore[attr-defined]
        keys = {_pair_key(p, q) for p in mine for q in theirs if p != q}
        found = [table[k] for k in keys if k in table]
        if len(found) < 2:
            return None
        if any(size is None for _, size in found):
            return max(d for d, _ in found)
        by_size: dict[float, list[float]] = {}
        for d, size in found:
            by_size.setdefault(size, []).append(d)
        tier: list[float] = []
        for s in sorted(by_size, reverse=True):
            tier += by_size[s]
            if len(tier) >= self.paired_min_pairs:
                break
        return max(tier)


def _calibrated_at(checkpoints: Sequence[float], checkpoint: float) -> float:
    """The largest of the (sorted) calibrated ``checkpoints`` not after ``checkpoint``, else the
    first one."""
    out = checkpoints[0]
    for c in checkpoints:
        if c <= checkpoint + 1e-12:
            out = c
    return out


def _pair_key(a: str, b: str) -> tuple[str, str]:
    """A pair of proxy run ids in a fixed order."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class Estimate:
    """A trial's final value as known at one moment, in objective units.

    ``lower <= value <= upper``; ``exact`` for a finished trial (all three equal); ``t_hat`` the
    progress at which it was made (1.0 when exact); ``status`` is ``"ok"`` or the reason there is
    no usable interval (then the numbers are NaN).
    """

    value: float
    lower: float
    upper: float
    t_hat: float
    exact: bool = False
    status: str = OK
    method: str = ""
    detail: str = ""
    factor: float = 1.0
    extrapolated: tuple[str, ...] = ()
    # the calibrated proxies that ran this setting at another size (``predictors.counterparts``)
    counterparts: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether the estimate can take part in the decision."""
        return self.status == OK and all(
            math.isfinite(x) for x in (self.value, self.lower, self.upper)
        )

    @property
    def pairable(self) -> bool:
        """Whether the prediction can enter the paired rule: usable and not carried to a
        schedule no proxy ran (the paired tolerance is calibrated on predictions of schedules
        the proxies ran; the interval rule, calibrated for both, still applies)."""
        return self.usable and NEW_SCHEDULE not in self.extrapolated

    @property
    def out_of_range(self) -> tuple[str, ...]:
        """The controls outside the reference curve's fitted ranges (``extrapolated`` less
        the schedule)."""
        return tuple(n for n in self.extrapolated if n != NEW_SCHEDULE)

    @classmethod
    def exact_value(cls, value: float) -> Estimate:
        """A finished trial's final value (non-finite -> status ``non_finite_prediction``)."""
        v = float(value)
        status = OK if math.isfinite(v) else NON_FINITE
        return cls(value=v, lower=v, upper=v, t_hat=1.0, exact=True, status=status)

    @classmethod
    def failed(cls, status: str, t_hat: float, detail: str = "") -> Estimate:
        """No usable estimate for the given reason (``detail``: e.g. the predictor's error)."""
        nan = float("nan")
        return cls(
            value=nan, lower=nan, upper=nan, t_hat=float(t_hat), status=status, detail=detail
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as ``None``), the inverse of :meth:`from_dict`."""

        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "value": num(self.value),
            "lower": num(self.lower),
            "upper": num(self.upper),
            "t_hat": float(self.t_hat),
            "exact": bool(self.exact),
            "status": self.status,
            "method": self.method,
            "detail": self.detail,
            "factor": float(self.factor),
            "extrapolated": list(self.extrapolated),
            "counterparts": list(self.counterparts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        """Inverse of :meth:`to_dict`."""

        def num(x: Any) -> float:
            return float("nan") if x is None else float(x)

        return cls(
            value=num(data.get("value")),
            lower=num(data.get("lower")),
            upper=num(data.get("upper")),
            t_hat=float(data.get("t_hat", float("nan"))),
            exact=bool(data.get("exact", False)),
            status=str(data.get("status", OK)),
            method=str(data.get("method", "")),
            detail=str(data.get("detail", "")),
            factor=float(data.get("factor", 1.0)),
            extrapolated=tuple(data.get("extrapolated", ())),
            counterparts=tuple(str(x) for x in data.get("counterparts", ())),
        )

    def widened(self, half: float) -> Estimate:
        """The estimate with its interval at least ``half`` wide on each side, in log units of
        the loss (:func:`finished_halfwidth`); unchanged when it is already as wide."""
        if not self.usable or half <= 0 or self.exact:
            return self
        near, far = math.exp(-half), math.exp(half)
        lo, hi = (self.value * near, self.value * far) if self.value > 0 else \
            (self.value * far, self.value * near)
        return dataclasses.replace(self, lower=min(self.lower, lo), upper=max(self.upper, hi))

    def scaled(self, factor: float) -> Estimate:
        """The estimate times ``factor`` > 0 (the debiasing of :func:`debias_factor`)."""
        if not self.usable or factor == 1.0:
            return self
        return dataclasses.replace(
            self,
            value=self.value * factor,
            lower=self.lower * factor,
            upper=self.upper * factor,
            factor=self.factor * factor,
        )


@dataclass(frozen=True)
class TrialSnapshot:
    """One trial as the decision sees it.

    ``running`` trials may be stopped; ``alive`` is False for trials already stopped/pruned or
    failed (they neither compete nor count toward ``n_min_trials``); ``estimate`` is the latest
    one (``None`` when the trial has none yet); ``diverged`` when its latest value is non-finite.
    ``latest`` is a running trial's latest reported value (``None`` when not known) and
    ``last_report`` whether that report is at its last step (``step >= total_steps - 1``, so
    that steps counted from 0 or from 1 both end there); they guard the stop of that trial (see
    the module docstring).
    """

    key: Hashable
    running: bool
    estimate: Estimate | None = None
    alive: bool = True
    diverged: bool = False
    # paired rule: the raw (uncorrected) prediction and the checkpoint it was made at; for a
    # finished trial, its prediction from the checkpoint being judged
    paired: float | None = None
    paired_cp: float | None = None
    # whether that prediction extrapolated a control (its pairs get the wider tolerance)
    paired_extrapolated: bool = False
    # that prediction's counterpart proxies (``Estimate.counterparts``)
    paired_counterparts: tuple[str, ...] = ()
    # the trial's latest reported value, and whether that report is at its last step
    latest: float | None = None
    last_report: bool = False


@dataclass(frozen=True)
class Verdict:
    """Outcome for one judged trial: ``stop`` and why (``reason``), the threshold it was compared
    with (``threshold``: best pessimistic end plus or minus the margin) and the key of the trial
    that set it (``best``)."""

    stop: bool
    reason: str
    threshold: float | None = None
    best: Hashable | None = None


def at_last_report(step: float, total_steps: float | None) -> bool:
    """Whether a report at ``step`` is a trial's last (``step >= total_steps - 1``, so that
    steps counted from 0 or from 1 both end there); False when ``total_steps`` is unknown."""
    if not total_steps:
        return False
    return step >= float(total_steps) - 1


def latest_checkpoint(t_hat: float, checkpoints: Sequence[float]) -> float | None:
    """The largest checkpoint ``<= t_hat`` (``None`` before the first one or for NaN)."""
    crossed = [c for c in checkpoints if c <= t_hat + 1e-12]
    return crossed[-1] if crossed else None


def estimate_at_checkpoint(
    steps: np.ndarray,
    values: np.ndarray,
    controls: Any,
    predictor: PredictorLike | None,
    config: DecisionConfig,
    t_hat: float,
) -> Estimate:
    """The trial's predicted final value from its reported ``(steps, values)``.

    ``controls`` is a ``predictors.Controls`` (``None`` when missing); for ``maximize`` the
    predictor sees ``-values`` (the reported values are taken to be negated losses) and its
    interval is mirrored back. Never raises for bad data: returns an estimate with ``status``
    naming the cause (see the module docstring).
    """
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    if values.size and not math.isfinite(values[-1]):
        return Estimate.failed(DIVERGED, t_hat)
    if controls is None:
        return Estimate.failed(MISSING_CONTROLS, t_hat)
    if predictor is None:
        return Estimate.failed(FIT_FAILED, t_hat)
    ok = np.isfinite(steps) & np.isfinite(values)
    steps, values = steps[ok], values[ok]
    if steps.size < config.min_points:
        return Estimate.failed(TOO_FEW_POINTS, t_hat)
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    sign = config.sign
    try:
        pred = predictor.predict(steps, sign * values, controls)
        final, lower, upper = float(pred.final), float(pred.lower), float(pred.upper)
    except Exception as exc:  # fail open: a predictor that cannot predict never stops the study
        return Estimate.failed(FIT_FAILED, t_hat, f"{type(exc).__name__}: {exc}")
    if not all(math.isfinite(x) for x in (final, lower, upper)):
        return Estimate.failed(NON_FINITE, t_hat)
    lower, upper = min(lower, final), max(upper, final)
    outside = extrapolated_controls(predictor, controls, config.extrapolation_controls)
    if outside:
        k = config.extrapolation_inflation
        lower, upper = final - k * (final - lower), final + k * (upper - final)
    if new_schedule(predictor, controls):
        outside.append(NEW_SCHEDULE)
    if sign < 0:
        final, lower, upper = -final, -upper, -lower
    return Estimate(
        value=final,
        lower=lower,
        upper=upper,
        t_hat=float(t_hat),
        status=OK,
        method=str(getattr(pred, "method", "")),
        extrapolated=tuple(outside),
        counterparts=_counterparts(predictor, controls) if config.paired_pairs else (),
    )


def _counterparts(predictor: Any, controls: Any) -> tuple[str, ...]:
    """The predictor's reference-curve proxies that ran ``controls``' setting (empty when
    that cannot be told)."""
    curve = getattr(predictor, "curve", None)
    if curve is None:
        return ()
    from predictors import counterparts

    try:
        return counterparts(curve, controls)
    except (ValueError, TypeError, AttributeError, KeyError):
        return ()


def new_schedule(predictor: Any, controls: Any) -> bool:
    """Whether the predictor's reference curve predicts ``controls`` by carrying it to a
    schedule none of its proxies ran (a ``predictors.HybridCurve`` off its empirical part).
    False when that cannot be told."""
    curve = getattr(predictor, "curve", None)
    component = getattr(curve, "component", None)
    empirical = getattr(curve, "empirical", None)
    if not callable(component) or empirical is None:
        return False
    try:
        return component(controls) is not empirical
    except (ValueError, TypeError, AttributeError):
        return False


def extrapolated_controls(
    predictor: Any, controls: Any, names: Sequence[str], rel_tol: float = 0.05
) -> list[str]:
    """Which of ``names`` lie outside the fitted ranges of the predictor's reference curve
    (``predictor.curve.ranges``: name -> [lo, hi]; beyond ``rel_tol``). Empty when the
    predictor has no such ranges or the control is unknown."""
    from predictors.curves import outside_ranges

    ranges = getattr(getattr(predictor, "curve", None), "ranges", None)
    if not isinstance(ranges, Mapping):
        return []
    return outside_ranges(ranges, controls, names, rel_tol)


def _log_ratios(pairs: Sequence[tuple[float, float]]) -> list[float]:
    """log(final / predicted) of each pair whose ratio is finite and positive."""
    logs = []
    for predicted, final in pairs:
        with np.errstate(all="ignore"):
            ratio = float(final) / float(predicted) if predicted else float("nan")
        if math.isfinite(ratio) and ratio > 0:
            logs.append(math.log(ratio))
    return logs


def finished_halfwidth(pairs: Sequence[tuple[float, float]]) -> float:
    """The largest |log(final / predicted)| over the finished trials' predictions from the
    checkpoint being judged (``pairs`` as for :func:`debias_factor`); 0 when there is none.

    A running trial's interval is at least this wide (:func:`judge_estimate`): the study's own
    trials measure how far the predictor is off on this sweep, which the proxies cannot (on
    the quickstart the width-48 trials are predicted 4-19% high, a width transfer the width-32
    proxies do not show)."""
    return max((abs(x) for x in _log_ratios(pairs)), default=0.0)


def debias_factor(pairs: Sequence[tuple[float, float]]) -> float:
    """The median ratio ``final / predicted`` over finished trials, 1.0 when there is none.

    ``pairs`` holds, for each finished trial, the value it was predicted at the checkpoint being
    judged (uncorrected) and its exact final value, in objective units. Pairs whose ratio is not
    finite and positive (sign change, zero) are skipped. Multiplying a running trial's estimate
    by the factor removes a bias the predictor has on the whole sweep (e.g. a schedule the
    proxies did not cover), which would otherwise make a prediction lose against exact values.
    """
    logs = _log_ratios(pairs)
    return float(math.exp(np.median(logs))) if logs else 1.0


def dominated(
    trials: Sequence[TrialSnapshot],
    judged: Sequence[Hashable],
    config: DecisionConfig,
    tolerance_floor: float = 0.0,
) -> dict[Hashable, Verdict]:
    """Which of the ``judged`` trials (keys of running trials in ``trials``) to stop now.

    Implements the rule of the module docstring over the snapshots; keys must be unique.
    The finished snapshots (exact estimates with a paired prediction) check the paired rule's
    deltas (:func:`finished_check`). ``tolerance_floor``: the paired rule's delta is at least
    this. Returns a verdict for every judged key (unknown keys raise ``KeyError``).
    """
    by_key = {t.key: t for t in trials}
    if len(by_key) != len(trials):
        raise ValueError("trial keys must be unique")
    sign = config.sign
    usable = [t for t in trials if t.alive and t.estimate is not None and t.estimate.usable]
    n_with_estimate = len(usable)
    out: dict[Hashable, Verdict] = {}
    flagged: list[tuple[float, Hashable, Verdict]] = []
    checks: dict[float | None, tuple[float, float]] = {}
    for key in judged:
        t = by_key[key]
        if not t.running:
            out[key] = Verdict(False, "not running")
            continue
        if t.diverged and config.stop_diverged:
            out[key] = Verdict(True, DIVERGED)
            continue
        if t.estimate is None or not t.estimate.usable:
            status = t.estimate.status if t.estimate is not None else "no estimate"
            out[key] = Verdict(False, f"no usable estimate ({status})")
            continue
        if n_with_estimate < config.n_startup_trials:
            out[key] = Verdict(
                False, f"startup ({n_with_estimate} < n_startup_trials={config.n_startup_trials})"
            )
            continue
        if t.last_report:
            out[key] = Verdict(False, "at its last report")
            continue
        kept = _kept_by_latest(t, usable, config)
        if kept is not None:
            out[key] = kept
            continue
        # competitors: finished trials, and running ones judged at this trial's checkpoint or
        # a later one (an estimate from an earlier checkpoint, less informed, never stops it)
        mine = latest_checkpoint(t.estimate.t_hat, config.checkpoints)
        others = [o for o in usable if o.key != key and _informed(o, mine, config)]
        if t.paired_cp not in checks:
            checks[t.paired_cp] = finished_check(trials, t.paired_cp, config)
        scale, floor = checks[t.paired_cp]
        pgap, pbest = paired_gap(
            t, [o for o in trials if o.alive and o.key != key], config,
            max(tolerance_floor, floor), scale,
        )
        if not others:
            if pgap is not None and pgap > 0:
                flagged.append((pgap, key, Verdict(True, "dominated (paired)", None, pbest)))
            else:
                out[key] = Verdict(False, "no competitor")
            continue
        # pessimistic end of each competitor in smaller-is-better units
        pess = [sign * (o.estimate.upper if sign > 0 else o.estimate.lower) for o in others]
        i_best = int(np.argmin(pess))
        best_pess = pess[i_best]
        optimistic = sign * (t.estimate.lower if sign > 0 else t.estimate.upper)
        threshold = sign * (best_pess + config.margin)
        gap = optimistic - (best_pess + config.margin)
        if gap > 0:
            verdict = Verdict(True, "dominated", threshold, others[i_best].key)
            flagged.append((gap, key, verdict))
        elif pgap is not None and pgap > 0:
            verdict = Verdict(True, "dominated (paired)", None, pbest)
            flagged.append((pgap, key, verdict))
        else:
            out[key] = Verdict(False, "not dominated", threshold, others[i_best].key)
    # keep at least n_min_trials alive: stop the most dominated first
    n_alive = sum(1 for t in trials if t.alive)
    n_diverged = sum(1 for v in out.values() if v.stop)
    budget = max(0, n_alive - n_diverged - config.n_min_trials)
    flagged.sort(key=lambda x: -x[0])
    for i, (_, key, verdict) in enumerate(flagged):
        if i < budget:
            out[key] = verdict
        else:
            out[key] = Verdict(
                False,
                f"kept (n_min_trials={config.n_min_trials})",
                verdict.threshold,
                verdict.best,
            )
    return out


def _kept_by_latest(
    t: TrialSnapshot, usable: Sequence[TrialSnapshot], config: DecisionConfig
) -> Verdict | None:
    """The keep verdict when ``t``'s latest value is at least as good as the best expected end
    (plus the margin) of the other alive trials with an estimate (a finished trial's final
    value, a running one's prediction); else ``None``."""
    if t.latest is None or not math.isfinite(t.latest):
        return None
    sign = config.sign
    ends = [(sign * o.estimate.value, o.key) for o in usable if o.key != t.key]
    if not ends:
        return None
    best_end, best_key = min(ends, key=lambda e: e[0])
    if sign * t.latest <= best_end + config.margin:
        return Verdict(False, "latest value not dominated", sign * (best_end + config.margin),
                       best_key)
    return None


def judge_estimate(
    raw: Estimate,
    key: Hashable,
    checkpoint: float,
    competitors: Sequence[TrialSnapshot],
    finished_pairs: Sequence[tuple[float, float]],
    config: DecisionConfig,
    diverged: bool = False,
    latest: float | None = None,
    last_report: bool = False,
) -> tuple[Verdict, Estimate]:
    """The verdict on one running trial from its raw (uncorrected) estimate at ``checkpoint``,
    and the estimate as judged (debiased).

    What the adapters do at a checkpoint (after predicting) and when re-judging (with the
    stored raw estimate): ``competitors`` are the other trials' snapshots; ``finished_pairs``
    (raw prediction at ``checkpoint``, final value) of the finished trials give the debiasing
    factor; ``diverged`` when the trial's latest value is not finite; ``latest`` and
    ``last_report``: its latest reported value and whether that is its last step
    (:class:`TrialSnapshot`). The finished trials among the competitors check the paired rule
    (:func:`finished_check`).
    """
    est = raw
    if config.debias and raw.usable:
        est = raw.scaled(debias_factor(finished_pairs))
    # never narrower than the errors the finished trials of this study had at this checkpoint
    est = est.widened(finished_halfwidth(finished_pairs))
    me = TrialSnapshot(
        key, running=True, estimate=est, diverged=diverged or raw.status == DIVERGED,
        paired=raw.value if raw.pairable else None, paired_cp=checkpoint,
        paired_extrapolated=bool(raw.out_of_range), paired_counterparts=raw.counterparts,
        latest=latest, last_report=last_report,
    )
    verdict = dominated([*competitors, me], [key], config)[key]
    return verdict, est


def _informed(other: TrialSnapshot, mine: float | None, config: DecisionConfig) -> bool:
    """Whether ``other`` may set the threshold for a trial judged at checkpoint ``mine``: it
    is finished (exact), or its estimate was made at ``mine`` or a later checkpoint."""
    est = other.estimate
    if est is None or est.exact or mine is None:
        return True
    theirs = latest_checkpoint(est.t_hat, config.checkpoints)
    return theirs is not None and theirs >= mine - 1e-12


def _log_ratio(a: float, b: float, sign: float) -> float:
    """How much worse ``a`` is than ``b``: log(a / b) of the losses (``sign * value``), or
    the relative difference where a loss is not positive."""
    la, lb = sign * a, sign * b
    if la > 0 and lb > 0:
        return math.log(la / lb)
    return (la - lb) / max(abs(lb), 1e-12)


def pair_delta(a: TrialSnapshot, b: TrialSnapshot, config: DecisionConfig) -> float:
    """The paired rule's delta for trials ``a`` and ``b`` as calibrated: the pooled tolerance
    at the earlier of their checkpoints, or their pair's own (``pair_tolerance``) when that is
    smaller, times ``extrapolation_inflation`` when either prediction extrapolated.
    ``ValueError`` unless both have a paired prediction's checkpoint (``paired_cp``)."""
    if a.paired_cp is None or b.paired_cp is None:
        raise ValueError(f"pair_delta needs paired_cp on both trials, got {a.key!r}: "
                         f"{a.paired_cp}, {b.key!r}: {b.paired_cp}")
    return _delta(config, min(a.paired_cp, b.paired_cp), a.paired_counterparts,
                  b.paired_counterparts, a.paired_extrapolated or b.paired_extrapolated)


def _delta(config: DecisionConfig, cp: float, mine: Sequence[str], theirs: Sequence[str],
           extrapolated: bool) -> float:
    """:func:`pair_delta` from the pair's checkpoint, counterparts and extrapolation flag."""
    delta = float(config.tolerance(cp) or 0.0)
    own = config.pair_tolerance(cp, mine, theirs)
    if own is not None:
        delta = min(delta, own)
    return delta * config.extrapolation_inflation if extrapolated else delta


def finished_check(
    trials: Sequence[TrialSnapshot], checkpoint: float | None, config: DecisionConfig
) -> tuple[float, float]:
    """The paired rule checked on the finished trials predicted at ``checkpoint``: ``(scale,
    floor)`` for the deltas of trials judged there.

    For each pair of finished trials (alive, exact estimate, paired prediction from
    ``checkpoint``) the error ``e`` of their predicted log-ratio against their finals' is
    multiplied by ``paired_finished_inflation`` (k) and compared with the pair's delta
    (:func:`pair_delta`): ``scale`` is the largest ``k e / delta``, at least 1; a pair with a
    zero delta (uncalibrated) raises ``floor`` to its ``k e`` instead. ``(1.0, 0.0)`` when the
    rule is off, k is 0 or fewer than two finished trials qualify. The pairs are compared once
    per set of finished trials (cached), not at every judgment.
    """
    k = config.paired_finished_inflation
    if not config.paired_tolerance or k <= 0 or checkpoint is None:
        return 1.0, 0.0
    done = tuple(
        (t.paired, t.estimate.value, tuple(t.paired_counterparts), bool(t.paired_extrapolated))
        for t in trials
        if t.alive and t.estimate is not None and t.estimate.exact and t.paired is not None
        and t.paired_cp is not None and abs(t.paired_cp - checkpoint) < 1e-9
        and math.isfinite(t.paired) and math.isfinite(t.estimate.value)
    )
    return _check_pairs(config, float(checkpoint), done) if len(done) >= 2 else (1.0, 0.0)


@functools.lru_cache(maxsize=64)
def _check_pairs(
    config: DecisionConfig, checkpoint: float,
    done: tuple[tuple[float, float, tuple[str, ...], bool], ...],
) -> tuple[float, float]:
    """:func:`finished_check` over (prediction, final, counterparts, extrapolated) tuples."""
    k = config.paired_finished_inflation
    scale, floor = 1.0, 0.0
    for i, (pred_a, final_a, parts_a, x_a) in enumerate(done):
        for pred_b, final_b, parts_b, x_b in done[i + 1:]:
            err = k * _pair_error(pred_a, pred_b, final_a, final_b, config.sign)
            delta = _delta(config, checkpoint, parts_a, parts_b, x_a or x_b)
            if delta > 0:
                scale = max(scale, err / delta)
            else:
                floor = max(floor, err)
    return scale, floor


def paired_gap(
    me: TrialSnapshot,
    others: Sequence[TrialSnapshot],
    config: DecisionConfig,
    tolerance_floor: float = 0.0,
    scale: float = 1.0,
) -> tuple[float | None, Hashable | None]:
    """The paired rule for one trial: the largest ``log(pred_me / pred_other) - delta`` over
    the ``others`` that have a paired prediction from the same checkpoint as ``me``'s
    (positive: dominated), and that competitor; delta is :func:`pair_delta` times ``scale``,
    and at least ``tolerance_floor``. The tolerances are calibrated on two predictions made at
    one checkpoint; a competitor whose paired prediction comes from another checkpoint (a
    running trial that has not reached ``me``'s yet) does not enter: a lagging trial never
    stops one that is ahead.

    ``(None, None)`` when the rule is off or no pair can be formed.
    """
    if not config.paired_tolerance or me.paired is None or me.paired_cp is None:
        return None, None
    if not math.isfinite(me.paired):
        return None, None
    best: tuple[float | None, Hashable | None] = (None, None)
    for o in others:
        if o.paired is None or o.paired_cp is None or not math.isfinite(o.paired):
            continue
        if abs(o.paired_cp - me.paired_cp) > 1e-9:
            continue
        delta = max(pair_delta(me, o, config) * scale, tolerance_floor)
        gap = _log_ratio(me.paired, o.paired, config.sign) - delta
        if best[0] is None or gap > best[0]:
            best = (gap, o.key)
    return best


def pair_errors(predicted: Sequence[float], finals: Sequence[float], sign: float = 1.0) -> list[
    float
]:
    """Errors of the paired comparison within one sweep: for every pair (i, j) of runs,
    ``|log(pred_i / pred_j) - log(final_i / final_j)|`` (non-finite pairs skipped)."""
    out = []
    n = len(predicted)
    for i in range(n):
        for j in range(i + 1, n):
            try:
                e = _pair_error(predicted[i], predicted[j], finals[i], finals[j], sign)
            except (ValueError, ZeroDivisionError):
                continue
            if math.isfinite(e):
                out.append(e)
    return out


def _pair_error(pred_a: float, pred_b: float, final_a: float, final_b: float,
                sign: float) -> float:
    """The error of one pair's predicted ratio: ``|log(pred_a / pred_b) - log(final_a /
    final_b)|`` (in :func:`_log_ratio`'s units)."""
    return abs(_log_ratio(pred_a, pred_b, sign) - _log_ratio(final_a, final_b, sign))


def paired_tolerance_from_groups(
    groups: Sequence[Sequence[tuple[np.ndarray, np.ndarray, Any, float]]],
    predictor: PredictorLike,
    checkpoints: Sequence[float],
    quantile: float = 1.0,
    inflation: float = 1.0,
    config: DecisionConfig | None = None,
) -> dict[float, float]:
    """Calibrate the paired rule's delta per checkpoint on sweeps with known outcomes.

    ``groups``: sweeps (e.g. the proxies, grouped like the targets), each a list of runs
    ``(steps, values, controls, final)``. At each checkpoint every run is predicted from its
    prefix; delta is ``inflation`` times the ``quantile`` of :func:`pair_errors` over all pairs
    of all groups (give ``predictor`` a curve that never saw those runs, or the errors are
    in-sample and too small). Only pairable predictions count (:attr:`Estimate.pairable`).
    Checkpoints without any pair get the largest delta found (or none at all when no
    checkpoint has pairs).
    """
    if not (0.0 < quantile <= 1.0) or not (inflation > 0):
        raise ValueError(f"need 0 < quantile <= 1 and inflation > 0, but got {quantile=}, "
                         f"{inflation=}")
    cfg = config or DecisionConfig(checkpoints=tuple(checkpoints), extrapolation_inflation=1.0)
    out: dict[float, float] = {}
    for cp in checkpoints:
        errs: list[float] = []
        for runs in groups:
            preds, finals = [], []
            for steps, values, controls, final in runs:
                s = np.asarray(steps, dtype=float)
                total = getattr(controls, "total_steps", None)
                if not total:
                    continue
                keep = s / total <= cp + 1e-12
                est = estimate_at_checkpoint(
                    s[keep], np.asarray(values, dtype=float)[keep], controls, predictor, cfg, cp
                )
                if est.pairable:
                    preds.append(est.value)
                    finals.append(float(final))
            errs.extend(pair_errors(preds, finals, cfg.sign))
        if errs:
            out[float(cp)] = float(inflation * np.quantile(errs, quantile))
    if out and len(out) < len(checkpoints):
        worst = max(out.values())
        out = {float(c): out.get(float(c), worst) for c in checkpoints}
    return out


@dataclass(frozen=True)
class TrialCurve:
    """Raw input of :func:`decide`: a trial's reported curve, its controls and its state.

    ``final_value`` is set for a finished (completed) trial; ``stopped`` for one stopped earlier
    (not alive).
    """

    key: Hashable
    steps: np.ndarray
    values: np.ndarray
    controls: Any
    final_value: float | None = None
    stopped: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


def decide(
    curves: Sequence[TrialCurve],
    predictor: PredictorLike | None,
    config: DecisionConfig,
) -> dict[Hashable, Verdict]:
    """The whole decision from raw curves: which running trials are dominated now.

    Each running, not stopped trial is estimated at the latest checkpoint its curve has crossed
    (``steps[-1] / controls.total_steps``) and judged if it crossed one; finished trials count
    with their exact final value (and, with ``config.debias``, their prediction from the same
    checkpoint and their final value give the debiasing factor; with ``paired_tolerance``, that
    prediction is their paired one). Returns verdicts for the judged trials only. The adapters
    do the same incrementally, caching each estimate once per trial and checkpoint.
    """
    finished = [c for c in curves if c.final_value is not None]
    raw_cache: dict[tuple[Hashable, float], Estimate] = {}

    def finished_raw(f: TrialCurve, cp: float) -> Estimate | None:
        if (f.key, cp) not in raw_cache:
            f_steps = np.asarray(f.steps, dtype=float)
            f_total = getattr(f.controls, "total_steps", None)
            if not f_total:
                return None
            keep = f_steps / f_total <= cp + 1e-12
            raw_cache[(f.key, cp)] = estimate_at_checkpoint(
                f_steps[keep], np.asarray(f.values, dtype=float)[keep], f.controls, predictor,
                config, cp,
            )
        return raw_cache[(f.key, cp)]

    running: list[TrialSnapshot] = []
    others: list[TrialSnapshot] = []
    judged: list[tuple[Hashable, float]] = []
    for c in curves:
        steps = np.asarray(c.steps, dtype=float)
        values = np.asarray(c.values, dtype=float)
        if c.final_value is not None:
            continue
        if c.stopped:
            others.append(TrialSnapshot(c.key, running=False, alive=False))
            continue
        total = getattr(c.controls, "total_steps", None)
        t_hat = float(steps[-1]) / total if total and steps.size else float("nan")
        cp = latest_checkpoint(t_hat, config.checkpoints)
        if cp is None:
            running.append(TrialSnapshot(c.key, running=True))
            continue
        est = estimate_at_checkpoint(steps, values, c.controls, predictor, config, t_hat)
        raw = est
        if config.debias and est.usable:
            pairs = []
            for f in finished:
                fr = finished_raw(f, cp)
                if fr is not None and fr.usable and not fr.out_of_range:
                    pairs.append((fr.value, float(f.final_value)))
            est = est.scaled(debias_factor(pairs))
        running.append(
            TrialSnapshot(c.key, running=True, estimate=est, diverged=est.status == DIVERGED,
                          paired=raw.value if raw.pairable else None, paired_cp=cp,
                          paired_extrapolated=bool(raw.out_of_range),
                          paired_counterparts=raw.counterparts if raw.pairable else (),
                          latest=float(values[-1]) if values.size else None,
                          last_report=bool(steps.size) and at_last_report(steps[-1], total))
        )
        judged.append((c.key, cp))
    out: dict[Hashable, Verdict] = {}
    for cp in sorted({cp for _, cp in judged}):
        done = []
        for f in finished:
            fr = finished_raw(f, cp) if config.paired_tolerance else None
            usable = fr is not None and fr.pairable
            done.append(TrialSnapshot(
                f.key, running=False, estimate=Estimate.exact_value(float(f.final_value)),
                paired=fr.value if usable else None, paired_cp=cp if usable else None,
                paired_extrapolated=bool(usable and fr.out_of_range),
                paired_counterparts=fr.counterparts if usable else (),
            ))
        keys = [k for k, c in judged if c == cp]
        out.update(dominated([*done, *others, *running], keys, config))
    return out


def explain(record: Mapping[str, Any]) -> str:
    """One sentence, with its numbers, on a judged trial's verdict: ``record`` as the adapters
    store it (``estimate``, ``stop``, ``reason``, ``threshold``, and ``best_trial``, the number
    or id of the trial that set the bar)."""
    est = record.get("estimate") or {}
    t_hat, value = est.get("t_hat"), est.get("value")
    at = f"at t^ {t_hat:.2f}" if isinstance(t_hat, (int, float)) and math.isfinite(t_hat) else ""
    pred = ""
    if all(isinstance(est.get(k), (int, float)) and math.isfinite(est[k])
           for k in ("value", "lower", "upper")):
        pred = f"predicted {value:.4g} [{est['lower']:.4g}, {est['upper']:.4g}]"
    best = record.get("best_trial")
    who = f"trial {best}" if best is not None else "the best other trial"
    reason = str(record.get("reason", ""))
    thr = record.get("threshold")
    bar = f"{who}'s pessimistic end {thr:.4g}" if isinstance(thr, (int, float)) else who
    stop = bool(record.get("stop"))
    if stop and reason.startswith("dominated (paired)"):
        text = (f"{pred}, worse than {who}'s prediction from the same checkpoint by more than "
                "two proxies' predictions were ever off relative to each other")
    elif stop and reason.startswith("dominated"):
        text = f"{pred}; even its optimistic end is worse than {bar}"
    elif reason.startswith("not dominated"):
        text = f"{pred}; its optimistic end can still beat {bar}"
    else:
        text = "; ".join(x for x in (pred, reason) if x)
    verb = "stopped" if stop else "kept"
    return f"{verb} {at}: {text}" if at else f"{verb}: {text}"
