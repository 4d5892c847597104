"""The collapse pruner's variants the bench sweeps: its one knob, the threshold (the
compute-regret frontier), and the ablation without re-judging (an attribute of
``hpo.pruning.Judge``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["collapse_knobs", "collapse_pruner", "FRONTIER_THRESHOLDS"]

#: the thresholds of the frontier rows (``collapse@threshold T``)
FRONTIER_THRESHOLDS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.1, 0.2)


def collapse_knobs() -> dict[str, dict[str, Any]]:
    """The aggressiveness sweep and the ablation of ``collapse``: name -> ``CollapsePruner``
    keyword overrides, and under ``"judge"`` attributes of its :class:`hpo.pruning.Judge`.

    ``threshold T``: the one knob; ``no re-judging``: judged only when a checkpoint is
    crossed."""
    variants: dict[str, dict[str, Any]] = {
        f"threshold {t:g}": {"threshold": t} for t in FRONTIER_THRESHOLDS}
    variants["no re-judging"] = {"judge": {"stale_after": 0.0}}
    return variants


def collapse_pruner(curve: Any, **kwargs: Any) -> Any:
    """A ``CollapsePruner`` on ``curve`` with ``kwargs`` (a :func:`collapse_knobs` entry)."""
    from hpo import CollapsePruner

    overrides = dict(kwargs.pop("judge", {}))
    pruner = CollapsePruner(reference=curve, **kwargs)
    for name, value in overrides.items():
        setattr(pruner.judge, name, value)
    return pruner
