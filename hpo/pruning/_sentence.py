"""The one sentence a verdict is stored with (``collapse_reason``), from the judge's record."""

from __future__ import annotations

import math

from hpo.pruning._evidence import SAME_STEP, SameStep
from hpo.pruning._record import Record
from hpo.pruning._rule import (
    DIVERGED,
    KEEP,
    LAST_REPORT,
    NO_COMPETITOR,
    NO_ESTIMATE,
    STARTUP,
    STOP,
    Estimate,
)

__all__ = ["explain"]


def explain(record: Record) -> str:
    """One sentence, with its numbers, on a verdict as the judge records it; a prediction the
    study's finished trials moved says so at its end."""
    est = record.estimate
    return _verdict(record, est) + (_shift(est) if est.usable else "")


def _verdict(record: Record, est: Estimate) -> str:
    """The sentence of :func:`explain` without the shift."""
    verb = "stopped" if record.stop else "kept"
    at = f" at t^ {est.t_hat:.2f}" if math.isfinite(est.t_hat) else ""
    now = record.t_hat
    if math.isfinite(now) and math.isfinite(est.t_hat) and now > est.t_hat + 1e-3:
        at = f" at t^ {now:.2f} (predicted at t^ {est.t_hat:.2f})"
    pred = (f"predicted {est.value:.4g} [{est.lower:.4g}, {est.upper:.4g}]" if est.usable
            else "")
    reason = record.reason
    against = record.against
    who = f"trial {against.label if against is not None else None}"
    p = record.probability
    if reason in (STOP, KEEP) and p is not None and against is not None:
        if against.final is not None:
            theirs = f"its final {against.final:.4g}"
        else:
            o = against.estimate or Estimate.failed("", math.nan)
            theirs = f"{o.value:.4g} [{o.lower:.4g}, {o.upper:.4g}]"
        chance = f"{p:.1%}" if p >= 0.001 else "less than 0.1%"
        bar = record.threshold
        rule = ((f", below the threshold {bar:g}" if record.stop else f", not below {bar:g}")
                if math.isfinite(bar) else "")
        tol = record.tolerance
        below = f"more than {100 * tol:.3g}% below" if tol is not None and tol > 0 else "below"
        if record.decided_by == SAME_STEP:
            return (f"{verb}{at}: {chance} chance to end {below} {who} ({theirs}){rule}, from "
                    "the same step alone (no controls: no curve prediction)"
                    f"{_same_step(record.same_step, who, chance=False)}")
        return (f"{verb}{at}: {chance} chance to end {below} {who}{rule} ({pred} against "
                f"{theirs}){_same_step(record.same_step, who)}")
    if reason == DIVERGED:
        return f"{verb}{at}: its latest value is not finite (diverged)"
    if reason == NO_ESTIMATE:
        detail = est.detail or est.status
        return f"{verb}{at}: no prediction ({detail}); a trial is never stopped without one"
    lead = f"{pred}; " if pred else ""
    if reason == STARTUP:
        return (f"{verb}{at}: {lead}no stop until {record.needed} trials have a "
                f"prediction or a final value ({record.have} so far)")
    if reason == NO_COMPETITOR:
        return f"{verb}{at}: {lead}no other trial to compare with yet"
    if reason == LAST_REPORT:
        return f"{verb}{at}: {lead}at its last report, stopping saves nothing"
    return f"{verb}{at}: {pred or reason}"


def _same_step(step: SameStep | None, who: str, chance: bool = True) -> str:
    """The same-step evidence beside the verdict, as a clause (empty without it): the gap at
    the same step, how often the study's finished pairs with a gap as large closed and
    (``chance``) the crossing law's chance."""
    if step is None or not math.isfinite(step.gap):
        return ""
    gap = math.expm1(abs(step.gap))
    where = "behind" if step.gap > 0 else "ahead of"
    p = step.probability
    said = f"{p:.1%}" if p >= 0.001 else "less than 0.1%"
    seen = (f"in this study {step.closed} of {step.such} such gaps closed by the end"
            if step.such else "no finished pair in this study had a gap as large")
    return (f"; at the same step it is {gap:.1%} {where} {who}: {seen}"
            + (f", same-step chance {said}" if chance else ""))


def _shift(est: Estimate) -> str:
    """The study's shift of the prediction, as a clause (empty without one)."""
    move = -math.expm1(-est.shift)
    if not est.shift_trials or abs(move) < 5e-4:
        return ""
    n = est.shift_trials
    return (f"; the prediction is the curve's {est.predicted:.4g} moved {abs(move):.1%} "
            f"{'down' if move > 0 else 'up'}, as the study's {n} finished "
            f"trial{'s' if n > 1 else ''} ended {'below' if move > 0 else 'above'} their "
            "predictions")
