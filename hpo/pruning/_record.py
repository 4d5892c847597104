"""A judgment as the judge makes it and a trial keeps it: one frozen :class:`Record`.

The judge returns a :class:`Record` for every judgment; both adapters keep them by checkpoint
(:func:`checkpoint_key`) and convert them to JSON-ready dicts (:meth:`Record.to_dict`) only
where they store them (Optuna's trial system attrs ``collapse:cp:<t>``, the Ray scheduler's
state file), and back (:meth:`Record.from_dict`) where they read them. Every reader past that
edge (the sentence, the study's summary, the bench) reads fields, not string keys.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpo.pruning._evidence import SameStep
from hpo.pruning._rule import Competitor, Estimate, Verdict

__all__ = ["Record", "checkpoint_key", "latest_record"]


def checkpoint_key(cp: float) -> str:
    """How a checkpoint names its record (``"0.2"``)."""
    return f"{cp:g}"


@dataclass(frozen=True)
class Record:
    """One judgment of one trial.

    ``estimate`` is the trial's prediction at ``checkpoint`` (made there once, re-used by the
    re-judgments until it is stale); ``stop`` and ``reason`` the verdict (a code of
    :mod:`hpo.pruning._rule`); ``threshold`` and ``tolerance`` the rule's settings it was
    reached under. Where the rule compared: ``probability`` that the trial ends more than
    ``tolerance`` better than ``against``, its strongest competitor (a
    :class:`~hpo.pruning.Competitor`: its final where it finished, else its estimate);
    ``decided_by`` which evidence decided (``"curve"`` or ``"same_step"``); ``same_step`` the
    same-step evidence against the competitor; ``study_scale``, ``study_distance_slope`` and
    ``study_trials`` the study's rescale of the pair law. Before ``n_startup_trials``: ``have``
    of ``needed``. ``slot`` is the re-judging slot reached, ``step`` and ``t_hat`` the report
    judged, ``explanation`` the verdict's sentence.
    """

    estimate: Estimate
    stop: bool
    reason: str
    threshold: float
    checkpoint: float = math.nan
    slot: int = 0
    step: float = math.nan
    t_hat: float = math.nan
    probability: float | None = None
    against: Competitor | None = None
    tolerance: float | None = None
    decided_by: str | None = None
    same_step: SameStep | None = None
    study_scale: float | None = None
    study_distance_slope: float | None = None
    study_trials: int | None = None
    have: int | None = None
    needed: int | None = None
    explanation: str = ""

    @classmethod
    def of(cls, estimate: Estimate, verdict: Verdict, threshold: float,
           **fields: Any) -> Record:
        """The record of ``verdict`` on a trial with ``estimate`` (``fields``: the others)."""
        return cls(estimate, bool(verdict.stop), verdict.reason, float(threshold),
                   probability=verdict.probability, against=verdict.against, **fields)

    def repeats(self, other: Record | None) -> bool:
        """Whether ``other`` (a record at the same checkpoint, or ``None``) has this verdict:
        the same decision for the same reason."""
        return other is not None and (other.stop, other.reason) == (self.stop, self.reason)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict a trial's storage keeps (fields without a value left out), the
        inverse of :meth:`from_dict`."""
        out: dict[str, Any] = {"estimate": self.estimate.to_dict(), "stop": bool(self.stop),
                               "reason": self.reason, "threshold": float(self.threshold),
                               "checkpoint": float(self.checkpoint), "slot": int(self.slot),
                               "step": float(self.step), "t_hat": float(self.t_hat)}
        if self.probability is not None:
            out["probability"] = float(self.probability)
        c = self.against
        if c is not None:
            out["against"] = {"label": c.label, "final": c.final,
                              "estimate": c.estimate.to_dict() if c.estimate else None}
        for name in ("tolerance", "decided_by", "study_scale", "study_distance_slope",
                     "study_trials", "have", "needed"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.same_step is not None:
            out["same_step"] = self.same_step.to_dict()
        if self.explanation:
            out["explanation"] = self.explanation
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        """Inverse of :meth:`to_dict`; a field the dict lacks takes its default."""

        def opt(name: str, kind: type) -> Any:
            value = data.get(name)
            return None if value is None else kind(value)

        against = data.get("against")
        if isinstance(against, Mapping):
            est = against.get("estimate")
            against = Competitor(against.get("label"), against.get("label"),
                                 Estimate.from_dict(est) if isinstance(est, Mapping) else None,
                                 opt_float(against.get("final")))
        step = data.get("same_step")
        return cls(
            Estimate.from_dict(data.get("estimate") or {}), bool(data.get("stop")),
            str(data.get("reason", "")), float(data.get("threshold", math.nan)),
            float(data.get("checkpoint", math.nan)), int(data.get("slot", 0)),
            float(data.get("step", math.nan)), float(data.get("t_hat", math.nan)),
            opt("probability", float), against if isinstance(against, Competitor) else None,
            opt("tolerance", float), opt("decided_by", str),
            SameStep.from_dict(step) if isinstance(step, Mapping) else None,
            opt("study_scale", float), opt("study_distance_slope", float),
            opt("study_trials", int), opt("have", int), opt("needed", int),
            str(data.get("explanation") or ""))

    def replace(self, **changes: Any) -> Record:
        """A copy with ``changes`` (:func:`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)


def opt_float(x: Any) -> float | None:
    """``x`` as a float, ``None`` for ``None``."""
    return None if x is None else float(x)


def latest_record(records: Mapping[str, Record]) -> Record | None:
    """The record at the latest checkpoint among a trial's ``records`` (by
    :func:`checkpoint_key`), ``None`` when there is none: the one place "a trial's latest
    verdict" is computed; every reader of a trial's latest record (the judge's views, the
    adapters, the study's summary and backends) goes through it."""
    return max(records.values(), key=lambda r: r.checkpoint if math.isfinite(r.checkpoint)
               else 0.0, default=None)
