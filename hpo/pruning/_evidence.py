"""Same-step evidence beside the curve's: pure numbers.

The curve's evidence is :func:`hpo.pruning._rule.judge`: the probability, from two
predictions and the pair law, that the judged trial ends more than ``tolerance`` below a
competitor; it decides. The same-step evidence needs no curve: the judged trial trails (or
leads) a competitor at the same progress t^ by a gap ``g`` (their levels there,
:func:`hpo.predictors.crossings.level_at`), and the study's crossing law
(:func:`hpo.predictors.crossings.fit_crossing_law`: the shipped prior, updated by the study's
finished pairs) says how often such a gap closed by the end. The judge records it beside every
verdict against the strongest competitor (record field ``same_step``), and the verdict's
sentence says it.

Which evidence decided a verdict is its record's ``decided_by``: :data:`CURVE` wherever the
trial has a curve prediction, :data:`SAME_STEP` where it has none for want of controls (no
``describe_trial``, no tau or schedule): then the same-step chance against the strongest
finished trial is the verdict's probability.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpo.predictors.crossings import CrossingLaw

__all__ = ["SameStep", "same_step", "CURVE", "SAME_STEP"]

#: ``decided_by`` of a verdict that the curve's probability decided
CURVE = "curve"
#: ``decided_by`` of a verdict that the same-step evidence decided (no curve prediction)
SAME_STEP = "same_step"


@dataclass(frozen=True)
class SameStep:
    """The same-step evidence against one competitor: ``gap``, the log ratio of the judged
    trial's level to the competitor's at t^ (> 0: behind); ``probability`` that the judged
    trial ends more than the tolerance below it; the study's finished pairs (``pairs``), how
    many had a gap at least as large (``such``) and how many of those closed (``closed``)."""

    gap: float
    probability: float
    pairs: int = 0
    such: int = 0
    closed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Record fields (JSON-ready)."""
        return {"gap": float(self.gap), "probability": float(self.probability),
                "pairs": self.pairs, "such": self.such, "closed": self.closed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SameStep:
        """Inverse of :meth:`to_dict`."""
        return cls(float(data["gap"]), float(data["probability"]), int(data.get("pairs", 0)),
                   int(data.get("such", 0)), int(data.get("closed", 0)))


def same_step(law: CrossingLaw, gap: float, finished_gaps: np.ndarray,
              finished_closed: np.ndarray) -> SameStep:
    """The same-step evidence against a competitor the judged trial trails by ``gap`` (log
    ratio of the two levels; < 0: it leads): behind, the chance that the gap closes
    (:meth:`CrossingLaw.probability`); ahead, one minus the chance that the competitor's gap
    closes. ``finished_gaps`` and ``finished_closed``: the study's finished pairs, counted for
    the sentence."""
    g_all = np.asarray(finished_gaps, dtype=float)
    c_all = np.asarray(finished_closed, dtype=bool)
    if gap > 0:
        p = law.probability(gap)
    elif gap < 0:
        p = 1.0 - law.probability(-gap)
    else:
        p = 0.5
    such = g_all >= abs(gap)
    return SameStep(gap, p, int(g_all.size), int(such.sum()), int(c_all[such].sum()))
