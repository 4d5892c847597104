"""Run controls and learning-rate schedules normalized to peak 1 over the fraction of training.

A schedule is known either exactly (an LR value at every step, e.g. from the curve format's ``lr``
column) or by name (``linear``, ``cosine``, ``cosine:F``, ``wsd:linear:F``, ``wsd:sqrt:F``,
``constant``) plus ``warmup_steps``. The exact values take precedence over the name.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Controls",
    "schedule_from_name",
    "lr_schedule_from_points",
    "SCHEDULES",
    "parse_schedule",
    "SCHEDULE_RULE",
]

#: the schedule names every part of the product understands (the curve format's names)
SCHEDULES = ("linear", "cosine", "cosine:F", "wsd:linear:F", "wsd:sqrt:F", "constant")
#: what a schedule name must be, in words (the error messages)
SCHEDULE_RULE = (f"one of {', '.join(SCHEDULES)} (cosine:F with 0 <= F <= 1, wsd:linear:F and "
                 "wsd:sqrt:F with 0 < F <= 1)")


def parse_schedule(name: str) -> tuple[str, float]:
    """Split a schedule name into ``(kind, F)``, kind one of ``linear``, ``cosine``,
    ``wsd:linear``, ``wsd:sqrt``, ``constant``; ``F`` is the final fraction of ``cosine:F`` (0
    for plain ``cosine``), the cooldown fraction of WSD, and 0 otherwise. The one reading of the
    names: the recipe, the study schema and the predictors all call it. Raises ``ValueError``
    naming the schedule for anything else."""
    if isinstance(name, str):
        parts = name.strip().lower().split(":")
        kind = parts[0]
        try:
            if parts in (["linear"], ["constant"], ["cosine"]):
                return kind, 0.0
            if kind == "cosine" and len(parts) == 2 and 0.0 <= float(parts[1]) <= 1.0:
                return "cosine", float(parts[1])
            if (kind == "wsd" and len(parts) == 3 and parts[1] in ("linear", "sqrt")
                    and 0.0 < float(parts[2]) <= 1.0):
                return f"wsd:{parts[1]}", float(parts[2])
        except ValueError:
            pass
    raise ValueError(f"schedule must be {SCHEDULE_RULE}, but got schedule={name!r}")


def schedule_from_name(
    name: str, total_steps: int, warmup_steps: float | None, t_hat: np.ndarray
) -> np.ndarray:
    """The named schedule at fractions ``t_hat`` of training, normalized to peak 1.

    After ``warmup_steps`` of linear warmup from 0 (none when ``None``; the LR at step ``s`` of
    the warmup is ``s / warmup_steps``), as a function of the progress
    ``p = (step - warmup_steps) / (total_steps - warmup_steps)`` in [0, 1]:

    ================ ==============================================================
    ``linear``       1 - p (decay to zero)
    ``cosine``       (1 + cos(pi p)) / 2
    ``cosine:F``     F + (1 - F) (1 + cos(pi p)) / 2
    ``constant``     1
    ``wsd:linear:F`` 1 until the last fraction F of training (t^ < 1 - F), then 1 - q
    ``wsd:sqrt:F``   1 until the last fraction F of training, then 1 - sqrt(q)
    ================ ==============================================================

    with ``q = (t^ - (1 - F)) / F`` the progress of the WSD cooldown. Raises ``ValueError`` for
    any other name (:func:`parse_schedule`).
    """
    try:
        kind, frac = parse_schedule(name)
    except ValueError as exc:
        raise ValueError(f"{exc} (other schedules need the exact LR values, e.g. the curve "
                         "format's lr column)") from None
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, but got {total_steps=}")
    t = np.clip(np.asarray(t_hat, dtype=float), 0.0, 1.0)
    steps = t * total_steps
    warm = float(warmup_steps) if warmup_steps is not None and np.isfinite(warmup_steps) else 0.0
    warm = min(max(warm, 0.0), float(total_steps))
    span = max(total_steps - warm, 1e-12)
    p = np.clip((steps - warm) / span, 0.0, 1.0)
    if kind == "linear":
        decay = 1.0 - p
    elif kind == "cosine":
        decay = frac + (1.0 - frac) * 0.5 * (1.0 + np.cos(np.pi * p))
    elif kind == "constant":
        decay = np.ones_like(p)
    else:
        q = np.clip((t - (1.0 - frac)) / frac, 0.0, 1.0)
        decay = 1.0 - q if kind == "wsd:linear" else 1.0 - np.sqrt(q)
    if warm <= 0:
        return decay
    return np.where(steps < warm, np.clip(steps / warm, 0.0, 1.0), decay)


def lr_schedule_from_points(
    steps: np.ndarray, lrs: np.ndarray, total_steps: int, warmup_steps: float | None = None
) -> np.ndarray:
    """The LR at every step 0..total_steps from logged (step, lr) points.

    Points are sorted and duplicates averaged; between points the LR is interpolated linearly;
    after the last point it is held. Before the first logged step the schedule ramps linearly
    from 0 at step 0 (a warmup), unless ``warmup_steps`` is known and ends before that step,
    in which case it ramps over ``warmup_steps`` and then holds the first logged value.
    Raises ``ValueError`` when no finite point is given.
    """
    s = np.asarray(steps, dtype=float)
    v = np.asarray(lrs, dtype=float)
    ok = np.isfinite(s) & np.isfinite(v)
    s, v = s[ok], v[ok]
    if s.size == 0:
        raise ValueError("no finite (step, lr) point to build the schedule from")
    uniq, inv = np.unique(s, return_inverse=True)
    vals = np.bincount(inv, weights=v) / np.bincount(inv)
    if uniq[0] > 0:
        first = vals[0]
        warm = uniq[0]
        if warmup_steps is not None and np.isfinite(warmup_steps) and 0 < warmup_steps < uniq[0]:
            warm = float(warmup_steps)
            uniq = np.concatenate([[0.0, warm], uniq])
            vals = np.concatenate([[0.0, first], vals])
        else:
            uniq = np.concatenate([[0.0], uniq])
            vals = np.concatenate([[0.0 if warm > 0 else first], vals])
    grid = np.arange(int(total_steps) + 1, dtype=float)
    return np.interp(grid, uniq, vals)


@dataclass(frozen=True)
class Controls:
    """The controls of one run's loss-curve shape: TPP, tau and the LR schedule ("Scaling with
    Collapse", Bergsma et al. 2025, arXiv 2509.25087), with the run's other settings.

    Fields: ``total_steps`` planned optimizer steps T; ``tpp`` tokens per parameter; ``tau`` the
    normalized AdamW timescale 1 / (peak_lr * weight_decay * T); ``schedule`` a curve-format name
    (``linear``, ``cosine:0.1``, ``wsd:linear:0.2``, ``constant``); ``warmup_steps``;
    ``lr_schedule`` the LR at every step 0..T in any units (normalized to peak internally; takes
    precedence over the name; excluded from ``==``); optional ``n_params``, ``batch_tokens``,
    ``peak_lr``, ``weight_decay`` and ``base_lr`` (the LR the sweep sets, where a
    parametrization such as CompleteP scales it per layer and width into ``peak_lr``: the same
    setting at two widths shares ``base_lr``, not ``peak_lr``). Unknown values are ``None``.
    """

    total_steps: int
    tpp: float | None = None
    tau: float | None = None
    schedule: str | None = None
    warmup_steps: float | None = None
    lr_schedule: np.ndarray | None = field(default=None, compare=False, repr=False)
    n_params: float | None = None
    batch_tokens: float | None = None
    peak_lr: float | None = None
    weight_decay: float | None = None
    base_lr: float | None = None

    def __post_init__(self) -> None:
        total = self.total_steps
        integral = isinstance(total, (int, np.integer)) or (
            isinstance(total, (float, np.floating)) and math.isfinite(total)
            and float(total).is_integer()
        )
        if isinstance(total, bool) or not integral or total <= 0:
            raise ValueError(f"total_steps must be a positive integer, but got {total=}")
        object.__setattr__(self, "total_steps", int(self.total_steps))
        for name in ("tpp", "tau", "warmup_steps", "n_params", "batch_tokens", "peak_lr",
                     "weight_decay", "base_lr"):
            value = getattr(self, name)
            if value is None:
                continue
            value = float(value)
            if not math.isfinite(value):
                value = None  # NaN / inf from a table means "unknown"
            elif name in ("tpp", "tau") and value <= 0:
                raise ValueError(f"{name} must be > 0, but got {name}={value}")
            object.__setattr__(self, name, value)
        if self.lr_schedule is not None:
            arr = np.asarray(self.lr_schedule, dtype=float)
            if arr.ndim != 1 or arr.size != self.total_steps + 1:
                raise ValueError(
                    "lr_schedule must hold the LR at every step 0..total_steps "
                    f"({self.total_steps + 1} values), but got shape {arr.shape}"
                )
            if not np.all(np.isfinite(arr)) or arr.max() <= 0:
                raise ValueError("lr_schedule must be finite with a positive peak")
            arr = arr.copy()
            arr.setflags(write=False)
            object.__setattr__(self, "lr_schedule", arr)

    @property
    def has_schedule(self) -> bool:
        """Whether ``eta`` can be evaluated (exact LR values or a known schedule name)."""
        if self.lr_schedule is not None:
            return True
        if self.schedule is None:
            return False
        try:
            schedule_from_name(self.schedule, self.total_steps, self.warmup_steps, np.zeros(1))
        except ValueError:
            return False
        return True

    def eta(self, t_hat: np.ndarray) -> np.ndarray:
        """The LR schedule normalized to peak 1 at fractions ``t_hat`` of training.

        Uses ``lr_schedule`` when given (linear interpolation between steps), else the schedule
        name with ``warmup_steps``. Raises ``ValueError`` when neither is known or the name is
        not one the format defines.
        """
        t = np.clip(np.asarray(t_hat, dtype=float), 0.0, 1.0)
        if self.lr_schedule is not None:
            lr = self.lr_schedule
            return np.interp(t * self.total_steps, np.arange(lr.size, dtype=float), lr / lr.max())
        if self.schedule is None:
            raise ValueError(
                "the LR schedule is unknown: give Controls.schedule (a curve-format name) "
                "or Controls.lr_schedule (the LR at every step)"
            )
        return schedule_from_name(self.schedule, self.total_steps, self.warmup_steps, t)

    def schedule_key(self) -> str:
        """A short label of the schedule shape, for grouping runs (name or 'lr-values')."""
        return self.schedule if self.schedule is not None else "lr-values"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (``lr_schedule`` as a list of floats, or ``None``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "lr_schedule" and value is not None:
                value = [float(x) for x in value]
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Controls:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown Controls field(s): {', '.join(unknown)}")
        kwargs = dict(data)
        if kwargs.get("lr_schedule") is not None:
            kwargs["lr_schedule"] = np.asarray(kwargs["lr_schedule"], dtype=float)
        if "total_steps" not in kwargs:
            raise ValueError("Controls needs total_steps")
        return cls(**kwargs)

    def with_(self, **changes: Any) -> Controls:
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **changes)
