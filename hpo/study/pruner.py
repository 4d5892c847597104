"""The study's ``pruner`` section as the settings and arguments of the collapse pruner."""

from __future__ import annotations

from typing import Any

from hpo.pruning import PrunerSettings


def pruner_settings(study: Any) -> PrunerSettings:
    """The study's ``pruner`` section as :class:`hpo.pruning.PrunerSettings` (its settings;
    ``enabled`` and ``report_points`` are the study's own). ``ValueError`` only for a section
    that did not come through :func:`hpo.study.schema.parse_study`, which checks it alike."""
    p = study.pruner
    return PrunerSettings(**{name: p[name] for name in PrunerSettings.names() if name in p})


def pruner_kwargs(study: Any) -> dict[str, Any]:
    """The study's ``pruner`` section as keyword arguments of ``hpo.CollapsePruner`` and
    ``hpo.CollapseScheduler`` (the one mapping both backends use:
    :meth:`hpo.pruning.PrunerSettings.kwargs` of :func:`pruner_settings`)."""
    return pruner_settings(study).kwargs()
