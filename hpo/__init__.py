"""collapse-hpo: early-stopping hyperparameter optimization from universal loss curves.

``import hpo`` is cheap: it imports neither torch nor ray. Heavy backends load lazily inside the
functions that need them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> private module defining it; loaded on first access (module __getattr__), so
# ``import hpo`` stays light and ``hpo.CollapseScheduler`` alone imports ray
_LAZY: dict[str, str] = {
    "CollapsePruner": "hpo.pruning._optuna",
    "describe_trial": "hpo.pruning._optuna",
    # a stopped trial ends with its predicted final, for the sampler (marked as predicted)
    "stop_with_prediction": "hpo.pruning._optuna",
    "value_is_predicted": "hpo.pruning._optuna",
    "measured_trials": "hpo.pruning._optuna",
    "CollapseScheduler": "hpo.pruning._ray",
    # where the pruner and the scheduler judge trials by default (fractions of total_steps)
    "DEFAULT_CHECKPOINTS": "hpo.pruning",
    # the pruner's settings, their ranges and defaults, validated in one place
    "PrunerSettings": "hpo.pruning",
    # the trial attrs the pruner stores (user attrs; the records are system attrs)
    "CONTROLS_ATTR": "hpo.pruning._optuna",
    "PREDICTION_ATTR": "hpo.pruning._optuna",
    "INTERVAL_ATTR": "hpo.pruning._optuna",
    "T_HAT_ATTR": "hpo.pruning._optuna",
    "REASON_ATTR": "hpo.pruning._optuna",
    "PREDICTED_VALUE_ATTR": "hpo.pruning._optuna",
    "RECORD_PREFIX": "hpo.pruning._optuna",
}

__all__ = [
    "__version__", "CollapsePruner", "describe_trial", "stop_with_prediction",
    "value_is_predicted", "measured_trials",
    "CollapseScheduler", "DEFAULT_CHECKPOINTS", "PrunerSettings", "CONTROLS_ATTR",
    "PREDICTION_ATTR", "INTERVAL_ATTR", "T_HAT_ATTR", "REASON_ATTR", "PREDICTED_VALUE_ATTR",
    "RECORD_PREFIX",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
