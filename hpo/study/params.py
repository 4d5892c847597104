"""A trial's params: the Optuna distribution of each searched name and the equality of two
param dicts."""

from __future__ import annotations

import math
from typing import Any


def distribution(d: dict[str, Any]) -> Any:
    """The Optuna distribution of one ``search`` entry of the study."""
    import optuna.distributions as od

    if d["type"] == "categorical":
        return od.CategoricalDistribution(d["choices"])
    if d["type"] == "int":
        return od.IntDistribution(d["low"], d["high"], log=d.get("log", False),
                                  step=d.get("step") or 1)
    return od.FloatDistribution(float(d["low"]), float(d["high"]), log=d.get("log", False),
                                step=d.get("step"))


def same_params(a: dict[str, Any], b: dict[str, Any], rel: float = 1e-6) -> bool:
    """Whether two parameter dicts are equal (floats to ``rel``)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if not math.isclose(float(x), float(y), rel_tol=rel):
                return False
        elif x != y:
            return False
    return True
