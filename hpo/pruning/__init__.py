"""Early stopping by collapse prediction: one rule, one judge, two adapters.

* :mod:`hpo.pruning._rule`: the rule in numbers (a trial stops when its chance to end better
  than its strongest competitor is below ``threshold``); :mod:`hpo.pruning._sentence` its
  one-sentence explanation;
* :mod:`hpo.pruning._settings`: ``PrunerSettings``, the pruner's settings, each declared once
  with its default, rule and doc; the adapters' keyword arguments and the study YAML's
  ``pruner`` section follow it;
* :mod:`hpo.pruning._judge`: when trials are judged (``Judge.maybe_judge``, the one entry point
  of both adapters, and its ``Judgment``), against whom, self-calibration, a trial's state
  (``TrialState``, one vocabulary for the judge and both adapters) and the warnings;
* :mod:`hpo.pruning._record`: a judgment as a frozen ``Record``, converted to a dict only
  where an adapter stores it (``latest_record``: a trial's latest one);
* :mod:`hpo.pruning._optuna` (``CollapsePruner``, ``describe_trial``) and
  :mod:`hpo.pruning._ray` (``CollapseScheduler``) translate their framework's trials for the
  judge; :mod:`hpo.pruning._storage` is the Optuna storage access that Optuna's public API
  lacks (trial system attrs, trial states, study system attrs).

Importing this package imports neither optuna nor ray: the names of the adapters and of the
storage access load their module on first access. Users reach the adapters as
``hpo.CollapsePruner``, ``hpo.describe_trial`` and ``hpo.CollapseScheduler``.
"""

from __future__ import annotations

import importlib
from typing import Any

from hpo.pruning._judge import (
    LEVEL,
    Judge,
    Judgment,
    TrialState,
    TrialView,
    latest_record,
)
from hpo.pruning._record import Record
from hpo.pruning._rule import (
    KEEP,
    NO_RESCALE,
    STOP,
    Competitor,
    Estimate,
    StudyRescale,
    Verdict,
    beat_probability,
    judge,
    study_rescale,
)
from hpo.pruning._sentence import explain
from hpo.pruning._settings import (
    DEFAULT_CHECKPOINTS,
    DEFAULT_MARGIN,
    DEFAULT_N_CALIBRATION_TRIALS,
    DEFAULT_N_STARTUP_TRIALS,
    DEFAULT_THRESHOLD,
    DEFAULT_TOLERANCE,
    REJUDGE_EVERY,
    STALE_AFTER,
    PrunerSettings,
)

# public name -> private module defining it, loaded on first access (module __getattr__)
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("CollapsePruner", "describe_trial", "stop_with_prediction", "value_is_predicted",
         "measured_trials", "trial_state",
         "PREDICTED_VALUE_ATTR", "record_attrs", "trial_records", "CONTROLS_ATTR",
         "PREDICTION_ATTR", "INTERVAL_ATTR", "T_HAT_ATTR", "REASON_ATTR", "RECORD_PREFIX"),
        "hpo.pruning._optuna"),
    **dict.fromkeys(("CollapseScheduler", "STATE_FILE", "REASON_KEY"), "hpo.pruning._ray"),
    **dict.fromkeys(
        ("study_key", "read_trial", "set_trial_system_attr", "set_trial_user_attr",
         "set_trial_attrs", "set_trial_state", "live_trial", "study_system_attrs",
         "set_study_system_attr"),
        "hpo.pruning._storage"),
}

__all__ = [
    *_LAZY,
    "Judge",
    "Judgment",
    "TrialView",
    "TrialState",
    "latest_record",
    "Record",
    "Estimate",
    "Competitor",
    "Verdict",
    "beat_probability",
    "StudyRescale",
    "study_rescale",
    "NO_RESCALE",
    "judge",
    "STOP",
    "KEEP",
    "explain",
    "PrunerSettings",
    "DEFAULT_CHECKPOINTS",
    "DEFAULT_THRESHOLD",
    "DEFAULT_MARGIN",
    "DEFAULT_TOLERANCE",
    "DEFAULT_N_STARTUP_TRIALS",
    "DEFAULT_N_CALIBRATION_TRIALS",
    "LEVEL",
    "REJUDGE_EVERY",
    "STALE_AFTER",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hpo.pruning' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
