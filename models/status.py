"""How a training run ended, one vocabulary for the training loop and what reads its result
(torch-free: the study's sweep and Ray backend compare with it without loading torch)."""

from __future__ import annotations

import enum

__all__ = ["RunStatus"]


class RunStatus(str, enum.Enum):
    """A training run's status (each member is its string value, so it compares equal to,
    and serializes as, that string)."""

    #: training, or resumable from a checkpoint
    RUNNING = "running"
    #: trained to its last step
    COMPLETED = "completed"
    #: a callback (the pruner) asked it to stop; resuming continues it
    STOPPED = "stopped"
    #: a non-finite train loss stopped it
    DIVERGED = "diverged"

    def __str__(self) -> str:
        return self.value
