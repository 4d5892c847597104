"""The collapse pruner's variants the bench sweeps: its one knob, the threshold (the
compute-regret frontier)."""

from __future__ import annotations

from typing import Any

__all__ = ["collapse_knobs", "collapse_pruner", "FRONTIER_THRESHOLDS"]

#: the thresholds of the frontier rows (``collapse@threshold T``)
FRONTIER_THRESHOLDS = (0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.2)


def collapse_knobs() -> dict[str, dict[str, Any]]:
    """The aggressiveness sweep of ``collapse``: name (``threshold T``) -> ``CollapsePruner``
    keyword overrides."""
    return {f"threshold {t:g}": {"threshold": t} for t in FRONTIER_THRESHOLDS}


def collapse_pruner(curve: Any, **kwargs: Any) -> Any:
    """A ``CollapsePruner`` on ``curve`` with ``kwargs`` (a :func:`collapse_knobs` entry)."""
    from hpo import CollapsePruner

    return CollapsePruner(reference=curve, **kwargs)
