"""PyTorch side of collapse-hpo: the CompleteP GPT, its optimizer groups, recipes, data, training.

The names load lazily: ``hpo.models.recipe`` (pure Python) works without torch, everything
else needs the ``[train]`` extra.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module defining it, imported on first access
_LAZY: dict[str, str] = {
    "GPTConfig": "hpo.models.config",
    "BatchSampler": "hpo.models.data",
    "TokenData": "hpo.models.data",
    "load_tokens": "hpo.models.data",
    "GPT": "hpo.models.gpt",
    "Recipe": "hpo.models.recipe",
    "count_params": "hpo.models.recipe",
    "hidden_lr_wd": "hpo.models.recipe",
    "lr_multiplier": "hpo.models.recipe",
    "make_recipe": "hpo.models.recipe",
    "tau_for_weight_decay": "hpo.models.recipe",
    "weight_decay_for_tau": "hpo.models.recipe",
    "CURVE_COLUMNS": "hpo.models.training",
    "TrainConfig": "hpo.models.training",
    "TrainPoint": "hpo.models.training",
    "TrainResult": "hpo.models.training",
    "train": "hpo.models.training",
    "write_curve": "hpo.models.training",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hpo.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
