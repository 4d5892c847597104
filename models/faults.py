"""The faults ``hpo train --inject`` and a study's ``diagnose.inject`` break a run with.

A fault is ``KIND@T``: ``KIND`` one of :data:`FAULTS`, starting at the fraction ``T`` in (0, 1) of
training (what each does: :mod:`hpo.models.training`). Pure Python (no torch), so that a study
file is checked without the training extra.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["FAULTS", "FAULT_FORMAT", "Fault", "parse_fault"]

#: the fault kinds of ``TrainConfig.inject`` (see the module docstring)
FAULTS = ("lr-spike", "data-repeat", "grad-noise", "precision", "restart")
LR_SPIKE_FACTOR = 10.0  # lr-spike: every group's LR is multiplied by this ...
LR_SPIKE_FRACTION = 0.02  # ... for this fraction of the total steps (at least one step)
DATA_REPEAT_BATCHES = 4  # data-repeat: the number of distinct batches cycled over ...
DATA_REPEAT_FRACTION = 0.1  # ... for this fraction of the total steps (at least one step)
GRAD_NOISE_SCALE = 1.0  # grad-noise: noise std as a multiple of each gradient tensor's RMS
GRAD_NOISE_SEED_OFFSET = 2_000_003  # grad-noise: its generator's seed is seed + this
PRECISION_STEP = 1.5  # precision: train logits are rounded to multiples of this
RESTART_SEED_OFFSET = 1_000_003  # restart: the new data order and global RNG seed is seed + this
#: what a fault spec must be, for error messages
FAULT_FORMAT = f"KIND@T with KIND one of {', '.join(FAULTS)} and T in (0, 1)"


@dataclass(frozen=True)
class Fault:
    """A fault to inject: ``kind`` (one of :data:`FAULTS`) starting at fraction ``at`` in (0, 1)
    of the run."""

    kind: str
    at: float

    def start_step(self, total_steps: int) -> int:
        """The first step (1-based optimizer update) the fault acts on:
        ``max(1, ceil(at * total_steps))``."""
        return max(1, math.ceil(self.at * total_steps))

    def steps(self, total_steps: int) -> range:
        """The steps the fault acts on: a window for ``lr-spike`` and ``data-repeat``, the start
        step alone for ``restart`` (whose effect persists), start to end otherwise."""
        first = self.start_step(total_steps)
        if self.kind == "restart":
            return range(first, first + 1)
        fraction = {"lr-spike": LR_SPIKE_FRACTION, "data-repeat": DATA_REPEAT_FRACTION}.get(
            self.kind)
        if fraction is None:
            return range(first, total_steps + 1)
        length = max(1, round(fraction * total_steps))
        return range(first, min(first + length, total_steps + 1))

    def __str__(self) -> str:
        return f"{self.kind}@{self.at:g}"


def parse_fault(spec: str) -> Fault:
    """Parse ``"KIND@T"`` (e.g. ``"lr-spike@0.5"``) into a :class:`Fault`.

    Raises ``ValueError`` naming ``inject`` and the value for anything else: an unknown kind, a
    missing ``@T``, a ``T`` that is not a number in (0, 1).
    """
    error = ValueError(f"inject must be {FAULT_FORMAT}, but got inject={spec!r}.")
    if not isinstance(spec, str) or spec.count("@") != 1:
        raise error
    kind, _, at_text = spec.partition("@")
    try:
        at = float(at_text)
    except ValueError:
        raise error from None
    if kind not in FAULTS or not 0.0 < at < 1.0:  # NaN fails the range check too
        raise error
    return Fault(kind, at)
