"""The optional parts of the install and the one-line error when one is missing.

The core (``pip install collapse-hpo``) is the pruner, the predictors, the curve tools and the
study schema: optuna, numpy, scipy, pandas. Training, Ray, plots and parquet files are extras
(``[train]``, ``[ray]``, ``[plots]``, ``[parquet]``, or ``[all]``); code that needs one calls
:func:`require` before importing it, so a missing extra names the command that installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtra", "require", "pyplot"]


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def require(module: str, extra: str) -> ModuleType:
    """Import and return ``module``; raise :class:`MissingExtra` (one line naming
    ``pip install "collapse-hpo[<extra>]"``) when it is not installed. An import error from
    inside an installed ``module`` propagates unchanged."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtra(
            f"{module.split('.')[0]} is not installed; it comes with the {extra!r} extra: "
            f'pip install "collapse-hpo[{extra}]"', name=exc.name) from None


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (the ``[plots]`` extra)."""
    matplotlib = require("matplotlib", "plots")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")
