"""The pruner's settings and their one validator, :class:`PrunerSettings`.

Each setting is one field here: its default, its rule, its check and its doc. Every entry point
follows the declarations: :class:`hpo.pruning.Judge` takes a ``PrunerSettings``,
``hpo.CollapsePruner`` and ``hpo.CollapseScheduler`` build it from their keyword arguments
(:meth:`PrunerSettings.of`), and the study YAML's ``pruner`` section has one key per field,
checked with :meth:`PrunerSettings.check_field`. Adding a setting is one field and its test.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from hpo.predictors.crossings import CrossingPrior, load_crossing_prior
from hpo.predictors.prior import PairPrior, load_pair_prior

__all__ = [
    "PrunerSettings",
    "DEFAULT_CHECKPOINTS",
    "DEFAULT_THRESHOLD",
    "DEFAULT_MARGIN",
    "DEFAULT_TOLERANCE",
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
#: relative: ending less than this fraction below a competitor does not count as beating it.
#: Chosen leave one source out: the largest tolerance that adds at most 0.2% to the max regret
#: of tolerance 0 in every launch order on every other source (0.002 for each of the five
#: sources held out; benchmarks/results/study_calibration/)
DEFAULT_TOLERANCE = 0.002
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


def _crossing_prior(x: Any) -> CrossingPrior | None:
    if x is None or isinstance(x, CrossingPrior):
        return x
    if not isinstance(x, (str, Path, Mapping)):
        raise _Invalid
    try:
        return load_crossing_prior(x)
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise _Invalid(str(exc)) from None


def _checked(name: str, value: Any) -> tuple[Any, str | None]:
    """``(normalised value, None)`` when ``value`` is a valid ``name``, else ``(None, why)``
    with ``why`` the rule and any detail, to be followed by the value. ``KeyError`` for an
    unknown ``name``."""
    meta = _declared()[name].metadata
    try:
        return meta["check"](value), None
    except _Invalid as exc:
        return None, meta["rule"] + (f" ({exc})" if str(exc) else "")


def _setting(default: Any, rule: str, check: Callable[[Any], Any], doc: str) -> Any:
    """A field of :class:`PrunerSettings`: its default, its rule (worded to follow its name),
    the check that returns the normalised value or raises ``_Invalid``, and what it does. The
    constructors, the study schema and the docs read all four from here."""
    return field(default=default, metadata={"rule": rule, "check": check, "doc": doc})


@dataclass(frozen=True)
class PrunerSettings:
    """The settings of the collapse pruner, each declared and validated once, here.

    ``hpo.CollapsePruner`` and ``hpo.CollapseScheduler`` take them as keyword arguments, and a
    study file's ``pruner:`` section as keys: each accepts exactly the values this class does.
    Booleans are not numbers here. ``prior`` keeps the value given; ``pair_prior`` is the
    loaded prior (``None``: the shipped one). Raises ``ValueError`` naming the first bad
    setting and its value (``threshold must be a number in [0, 1), but got threshold=1.5``).

    The settings (:meth:`table` writes this table from the declarations):

    """

    checkpoints: Sequence[float] = _setting(
        DEFAULT_CHECKPOINTS,
        "must be a non-empty sequence of strictly increasing fractions in (0, 1)", _checkpoints,
        "fractions of training t^ where a trial is predicted and judged")
    threshold: float = _setting(
        DEFAULT_THRESHOLD, "must be a number in [0, 1)", _threshold,
        "stop when the chance to end more than `tolerance` below the strongest competitor is "
        "below this; 0 stops nothing and records every verdict (a shadow run)")
    tolerance: float = _setting(
        DEFAULT_TOLERANCE, "must be a number in [0, 1)", _threshold,
        "relative: ending less than this fraction below a competitor does not count as "
        "beating it (near-ties do not keep a trial alive)")
    margin: float = _setting(
        DEFAULT_MARGIN, "must be a finite number >= 0", _margin,
        "objective units added to the competitor's final before comparing")
    n_startup_trials: int = _setting(
        DEFAULT_N_STARTUP_TRIALS, "must be an int >= 1", _count,
        "no stop until this many trials (the judged one included) have a prediction or a "
        "final value")
    n_calibration_trials: int = _setting(
        DEFAULT_N_CALIBRATION_TRIALS, "must be an int >= 1", _count,
        "without a reference curve: finished trials the pruner fits its own curve on (it "
        "stops nothing before)")
    prior: PairPrior | str | Path | Mapping[str, Any] | None = _setting(
        None, "must be a pair prior: a hpo.predictors.PairPrior, a path to its JSON file or "
        "its dict", _prior,
        "the pair prior (a hpo.predictors.PairPrior, its JSON path or dict); None: the one "
        "shipped with the package")
    crossing_prior: CrossingPrior | str | Path | Mapping[str, Any] | None = _setting(
        None, "must be a crossing prior: a hpo.predictors.crossings.CrossingPrior, a path to "
        "its JSON file or its dict", _crossing_prior,
        "the prior of the same-step evidence's crossing law (a "
        "hpo.predictors.crossings.CrossingPrior, its JSON path or dict); None: the one shipped "
        "with the package")
    rejudge_every: float = _setting(
        REJUDGE_EVERY, "must be a finite number > 0", _positive,
        "after a checkpoint, a trial is judged again from its prediction each time its "
        "progress t^ advances by this ...")
    stale_after: float = _setting(
        STALE_AFTER, "must be a finite number >= 0", _margin,
        "... until its progress is this much past the prediction's (0: once per checkpoint)")
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
        return tuple(_declared())

    @staticmethod
    def check_field(name: str, value: Any) -> str | None:
        """``None`` when ``value`` is valid for the setting ``name``; else why not, worded for a
        schema line: ``"must be a number in [0, 1), got 1.5"``. ``KeyError`` for an unknown
        ``name``."""
        _, why = _checked(name, value)
        return None if why is None else f"{why}, got {value!r}"

    @staticmethod
    def defaults() -> dict[str, Any]:
        """Each setting's default, by name."""
        return {name: f.default for name, f in _declared().items()}

    @staticmethod
    def table() -> str:
        """The settings as a text table: name, default, rule and what each does."""
        rows = []
        for name, f in _declared().items():
            default = list(f.default) if isinstance(f.default, tuple) else f.default
            rows.append(f"``{name}`` (default ``{default!r}``): {f.metadata['doc']}; "
                        f"{f.metadata['rule']}.")
        return "\n".join(f"    * {r}" for r in rows)

    @classmethod
    def of(cls, owner: str, settings: Mapping[str, Any]) -> PrunerSettings:
        """The settings given to ``owner`` as keyword arguments: ``TypeError`` naming an unknown
        one and the known ones, ``ValueError`` naming a bad value."""
        unknown = sorted(set(settings) - set(cls.names()))
        if unknown:
            raise TypeError(f"{owner} got an unexpected keyword argument {unknown[0]!r}; its "
                            f"settings are {', '.join(cls.names())}")
        return cls(**settings)

    def kwargs(self) -> dict[str, Any]:
        """The settings as keyword arguments of ``hpo.CollapsePruner`` and
        ``hpo.CollapseScheduler``; ``prior`` as given and ``crossing_prior`` as loaded, each
        only when given (``None`` is their default, the shipped one)."""
        out = {name: getattr(self, name) for name in self.names()}
        for name in ("prior", "crossing_prior"):
            if out[name] is None:
                del out[name]
        return out


@functools.cache
def _declared() -> dict[str, Field]:
    """The declared settings, by name in declaration order (``pair_prior``, derived, is not
    one): read once from the dataclass's fields."""
    return {f.name: f for f in fields(PrunerSettings) if f.init}


def with_settings_table(doc: str | None) -> str:
    """``doc`` followed by :meth:`PrunerSettings.table` (the docstrings of the settings' class
    and of the constructors that take them)."""
    return (doc or "").rstrip() + "\n\n" + PrunerSettings.table() + "\n"


PrunerSettings.__doc__ = with_settings_table(PrunerSettings.__doc__)
