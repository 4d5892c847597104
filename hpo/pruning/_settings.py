"""The pruner's settings and their one validator, :class:`PrunerSettings`.

Every entry point checks the settings here and nowhere else: :class:`hpo.pruning.Judge` builds a
``PrunerSettings`` from its keyword arguments (so ``hpo.CollapsePruner`` and
``hpo.CollapseScheduler`` do), and the study YAML's ``pruner`` section checks each key with
:meth:`PrunerSettings.check_field`. A value is accepted by the YAML exactly when the
constructors accept it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from hpo.predictors.prior import PairPrior, load_pair_prior

__all__ = [
    "PrunerSettings",
    "DEFAULT_CHECKPOINTS",
    "DEFAULT_THRESHOLD",
    "DEFAULT_MARGIN",
    "DEFAULT_N_STARTUP_TRIALS",
    "DEFAULT_N_CALIBRATION_TRIALS",
    "REJUDGE_EVERY",
    "STALE_AFTER",
]

#: where trials are judged by default: from 10% of training, while a stop still saves half
DEFAULT_CHECKPOINTS = (0.1, 0.2, 0.3, 0.4, 0.5)
#: stop when the chance to beat the strongest competitor is below this: chosen with the pair
#: prior, the largest threshold whose lockstep replay of every sweep group has a mean regret of
#: at most 0.05% on each source (the shipped prior's ``meta["threshold"]``; with each source
#: held out, 0.02 on four of five: benchmarks/pair_prior.py, benchmarks/results/prior/fit.md)
DEFAULT_THRESHOLD = 0.02
#: a trial stops only when unlikely to end better than a competitor plus this (objective units)
DEFAULT_MARGIN = 0.0
#: no stopping until this many trials (the judged one included) have a prediction
DEFAULT_N_STARTUP_TRIALS = 2
#: completed trials a self-calibrating judge (no reference curve) fits its curve on
DEFAULT_N_CALIBRATION_TRIALS = 3
#: default ``rejudge_every``: a trial is judged again from its latest prediction each time its
#: progress advances by this
REJUDGE_EVERY = 0.02
#: default ``stale_after``: ... for this much progress after the prediction was made (then it
#: waits for the next checkpoint)
STALE_AFTER = 0.1


class _Invalid(Exception):
    """A value breaks its setting's rule; a message, when there is one, says more."""


def _number(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def _checkpoints(x: Any) -> tuple[float, ...]:
    if isinstance(x, (str, bytes, Mapping)) or not isinstance(x, Iterable):
        raise _Invalid
    cps = tuple(x)
    if not cps or not all(_number(c) and 0.0 < c < 1.0 for c in cps):
        raise _Invalid
    if any(b <= a for a, b in zip(cps[:-1], cps[1:], strict=True)):
        raise _Invalid
    return tuple(float(c) for c in cps)


def _threshold(x: Any) -> float:
    if not (_number(x) and 0.0 <= x < 1.0):
        raise _Invalid
    return float(x)


def _margin(x: Any) -> float:
    if not (_number(x) and math.isfinite(x) and x >= 0.0):
        raise _Invalid
    return float(x)


def _count(x: Any) -> int:
    if not (isinstance(x, Integral) and not isinstance(x, bool) and x >= 1):
        raise _Invalid
    return int(x)


def _positive(x: Any) -> float:
    if not (_number(x) and math.isfinite(x) and x > 0.0):
        raise _Invalid
    return float(x)


def _prior(x: Any) -> PairPrior | None:
    if x is None or isinstance(x, PairPrior):
        return x
    if not isinstance(x, (str, Path, Mapping)):
        raise _Invalid
    try:
        return load_pair_prior(x)
    except (OSError, TypeError, ValueError) as exc:
        raise _Invalid(str(exc)) from None


#: setting -> (its rule, worded to follow its name; the check that returns the normalised value
#: or raises ``_Invalid``)
_RULES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "checkpoints": ("must be a non-empty sequence of strictly increasing fractions in (0, 1)",
                    _checkpoints),
    "threshold": ("must be in [0, 1)", _threshold),
    "margin": ("must be finite and >= 0", _margin),
    "n_startup_trials": ("must be an int >= 1", _count),
    "n_calibration_trials": ("must be an int >= 1", _count),
    "prior": ("must be a pair prior: a hpo.predictors.PairPrior, a path to its JSON file or "
              "its dict", _prior),
    "rejudge_every": ("must be finite and > 0", _positive),
    "stale_after": ("must be finite and >= 0", _margin),
}


def _checked(name: str, value: Any) -> tuple[Any, str | None]:
    """``(normalised value, None)`` when ``value`` is a valid ``name``, else ``(None, why)``
    with ``why`` the rule and any detail, to be followed by the value."""
    rule, check = _RULES[name]
    try:
        return check(value), None
    except _Invalid as exc:
        return None, rule + (f" ({exc})" if str(exc) else "")


@dataclass(frozen=True)
class PrunerSettings:
    """The settings of the collapse pruner, each validated once, here.

    =========================  ==============================================  ===============
    setting                    range                                           default
    =========================  ==============================================  ===============
    ``checkpoints``            strictly increasing fractions t^ in (0, 1),     ``(0.1, 0.2,
                               at least one; stored as a tuple of floats       0.3, 0.4, 0.5)``
    ``threshold``              a number in [0, 1); 0 stops nothing and         ``0.02``
                               records every verdict (a shadow run)
    ``margin``                 a finite number >= 0 (objective units)          ``0.0``
    ``n_startup_trials``       an int >= 1                                     ``2``
    ``n_calibration_trials``   an int >= 1                                     ``3``
    ``prior``                  a ``hpo.predictors.PairPrior``, a path to its   ``None`` (the
                               JSON file or its dict; loaded to check it       shipped prior)
    ``rejudge_every``          a finite number > 0 (of t^): after a            ``0.02``
                               checkpoint, judged again at each such step
    ``stale_after``            a finite number >= 0 (of t^): ... for this      ``0.1``
                               long after the prediction
    =========================  ==============================================  ===============

    Booleans are not numbers here. What each setting does: :class:`hpo.CollapsePruner`.
    ``prior`` keeps the value given; ``pair_prior`` is the loaded prior (``None``: the shipped
    one). Raises ``ValueError`` naming the first bad setting and its value
    (``threshold must be in [0, 1), but got threshold=1.5``).
    """

    checkpoints: Sequence[float] = DEFAULT_CHECKPOINTS  # fractions of training t^ to judge at
    threshold: float = DEFAULT_THRESHOLD  # stop below this chance to beat the strongest
    margin: float = DEFAULT_MARGIN  # objective units added to the competitor's final
    n_startup_trials: int = DEFAULT_N_STARTUP_TRIALS  # trials with a prediction before a stop
    n_calibration_trials: int = DEFAULT_N_CALIBRATION_TRIALS  # finished trials to self-calibrate
    prior: PairPrior | str | Path | Mapping[str, Any] | None = None  # as given
    rejudge_every: float = REJUDGE_EVERY  # t^ between two judgments from one prediction
    stale_after: float = STALE_AFTER  # t^ a prediction is judged from after it was made
    pair_prior: PairPrior | None = field(init=False, repr=False, compare=False)  # as loaded

    def __post_init__(self) -> None:
        for name in self.names():
            value = getattr(self, name)
            normalised, why = _checked(name, value)
            if why is not None:
                raise ValueError(f"{name} {why}, but got {name}={value!r}")
            object.__setattr__(self, "pair_prior" if name == "prior" else name, normalised)

    @staticmethod
    def names() -> tuple[str, ...]:
        """The settings' names, in the order they are checked (``pair_prior`` is derived)."""
        return tuple(f.name for f in fields(PrunerSettings) if f.init)

    @staticmethod
    def check_field(name: str, value: Any) -> str | None:
        """``None`` when ``value`` is valid for the setting ``name``; else why not, worded for a
        schema line: ``"must be in [0, 1), got 1.5"``. ``KeyError`` for an unknown ``name``."""
        _, why = _checked(name, value)
        return None if why is None else f"{why}, got {value!r}"

    def kwargs(self) -> dict[str, Any]:
        """The settings as keyword arguments of ``hpo.CollapsePruner`` and
        ``hpo.CollapseScheduler``; ``prior`` as given, and only when given (``None`` is their
        default, the shipped prior)."""
        out = {name: getattr(self, name) for name in self.names()}
        if out["prior"] is None:
            del out["prior"]
        return out
