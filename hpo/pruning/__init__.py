"""Early stopping by collapse prediction: one rule, one judge, two adapters.

* :mod:`hpo.pruning._rule`: the rule in numbers (a trial stops when its chance to end better
  than its strongest competitor is below ``threshold``) and the one-sentence explanation;
* :mod:`hpo.pruning._judge`: when trials are judged, against whom, self-calibration, the stored
  records and the warnings;
* :mod:`hpo.pruning._optuna` (``CollapsePruner``, ``describe_trial``) and
  :mod:`hpo.pruning._ray` (``CollapseScheduler``) translate their framework's trials for the
  judge. Importing this package imports neither optuna nor ray; users reach the adapters as
  ``hpo.CollapsePruner``, ``hpo.describe_trial`` and ``hpo.CollapseScheduler``.
"""

from __future__ import annotations

from hpo.pruning._judge import (
    DEFAULT_CHECKPOINTS,
    DEFAULT_MARGIN,
    DEFAULT_N_CALIBRATION_TRIALS,
    DEFAULT_N_STARTUP_TRIALS,
    DEFAULT_THRESHOLD,
    LEVEL,
    REJUDGE_EVERY,
    STALE_AFTER,
    Judge,
    TrialView,
)
from hpo.pruning._rule import (
    KEEP,
    STOP,
    Competitor,
    Estimate,
    Verdict,
    beat_probability,
    explain,
    judge,
    sweep_scale,
)

__all__ = [
    "Judge",
    "TrialView",
    "Estimate",
    "Competitor",
    "Verdict",
    "beat_probability",
    "sweep_scale",
    "judge",
    "STOP",
    "KEEP",
    "explain",
    "DEFAULT_CHECKPOINTS",
    "DEFAULT_THRESHOLD",
    "DEFAULT_MARGIN",
    "DEFAULT_N_STARTUP_TRIALS",
    "DEFAULT_N_CALIBRATION_TRIALS",
    "LEVEL",
    "REJUDGE_EVERY",
    "STALE_AFTER",
]
