"""PyTorch side of collapse-hpo: the CompleteP GPT, its optimizer groups, recipes, data, training.

Imports torch (and nothing from ``hpo``); ``import hpo`` never imports this package eagerly.
"""

from __future__ import annotations

from models.config import GPTConfig
from models.gpt import GPT

__all__ = ["GPT", "GPTConfig"]
