"""Early stopping by collapse prediction: one rule, one judge, two adapters.

* :mod:`hpo.pruning._rule`: the rule in numbers (a trial stops when its chance to end better
  than its strongest competitor is below ``threshold``) and the one-sentence explanation;
* :mod:`hpo.pruning._judge`: when trials are judged, against whom, self-calibration, the stored
  records and the warnings;
* :mod:`hpo.pruning._optuna` (``CollapsePruner``, ``describe_trial``) and
  :mod:`hpo.pruning._ray` (``CollapseScheduler``) translate their framework's trials for the
  judge. Importing this package imports neither optuna nor ray; the adapters load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from hpo.pruning._judge import (
    DEFAULT_CHECKPOINTS,
    DEFAULT_THRESHOLD,
    LEVEL,
    REJUDGE_EVERY,
    STALE_AFTER,
    Judge,
    TrialView,
)
from hpo.pruning._rule import Competitor, Estimate, Verdict, beat_probability, explain, judge

__all__ = [
    "CollapsePruner",
    "CollapseScheduler",
    "describe_trial",
    "Judge",
    "TrialView",
    "Estimate",
    "Competitor",
    "Verdict",
    "beat_probability",
    "judge",
    "explain",
    "DEFAULT_CHECKPOINTS",
    "DEFAULT_THRESHOLD",
    "LEVEL",
    "REJUDGE_EVERY",
    "STALE_AFTER",
]

_LAZY = {"CollapsePruner": "hpo.pruning._optuna", "describe_trial": "hpo.pruning._optuna",
         "CollapseScheduler": "hpo.pruning._ray"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hpo.pruning' has no attribute {name!r}")
