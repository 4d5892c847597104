"""The optional parts of the install and the one-line error when one is missing.

The core (``pip install -e .`` in a checkout of collapse-hpo, which no package index holds) is
the pruner, the predictors, the curve tools and the study schema: optuna, numpy, scipy, pandas.
Training, Ray, plots and parquet files are extras (``[train]``, ``[ray]``, ``[plots]``,
``[parquet]``, or ``[all]``); code that needs one calls :func:`require` before importing it, so
a missing extra names the command that installs it. :func:`missing` asks without importing.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["MissingExtra", "require", "missing", "install_hint", "pyplot"]


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def install_hint(module: str, extra: str) -> str:
    """The one line that says ``module`` is missing and how its ``extra`` installs."""
    return (f"{module.split('.')[0]} is not installed; it comes with the {extra!r} extra: "
            f'pip install -e ".[{extra}]" in the collapse-hpo checkout')


def missing(module: str) -> bool:
    """Whether the top-level package of ``module`` is not installed (nothing is imported)."""
    return importlib.util.find_spec(module.split(".")[0]) is None


def require(module: str, extra: str) -> ModuleType:
    """Import and return ``module``; raise :class:`MissingExtra` (one line naming
    ``pip install -e ".[<extra>]"``, :func:`install_hint`) when it is not installed. An import
    error from inside an installed ``module`` propagates unchanged."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtra(install_hint(module, extra), name=exc.name) from None


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (the ``[plots]`` extra)."""
    matplotlib = require("matplotlib", "plots")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")
