"""collapse-hpo: early-stopping hyperparameter optimization from universal loss curves.

``import hpo`` is cheap: it imports neither torch nor ray. Heavy backends load lazily inside the
functions that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
