"""PyTorch side of collapse-hpo: the CompleteP GPT, its optimizer groups, recipes, data, training.

Imports torch (and nothing from ``hpo``); ``import hpo`` never imports this package eagerly.
"""

from __future__ import annotations

from models.config import GPTConfig
from models.data import BatchSampler, TokenData, load_tokens
from models.gpt import GPT
from models.recipe import (
    Recipe,
    count_params,
    hidden_lr_wd,
    lr_multiplier,
    make_recipe,
    parse_schedule,
    tau_for_weight_decay,
    weight_decay_for_tau,
)
from models.train import CURVE_COLUMNS, TrainConfig, TrainPoint, TrainResult, train, write_curve

__all__ = [
    "GPT",
    "GPTConfig",
    "Recipe",
    "make_recipe",
    "count_params",
    "hidden_lr_wd",
    "lr_multiplier",
    "parse_schedule",
    "tau_for_weight_decay",
    "weight_decay_for_tau",
    "load_tokens",
    "TokenData",
    "BatchSampler",
    "TrainConfig",
    "TrainPoint",
    "TrainResult",
    "train",
    "write_curve",
    "CURVE_COLUMNS",
]
