"""What the sweep hands Optuna besides the sampler: the study's ``pruner`` section as the
settings and arguments of the collapse pruner, and the collapse residual monitor of a run
(``hpo.diagnose``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpo.diagnose import ResidualCallback
from hpo.predictors import Controls, reference_band
from hpo.pruning import PrunerSettings
from hpo.study.plan import controls_of
from hpo.study.schema import Study

if TYPE_CHECKING:
    from hpo.models.recipe import Recipe
    from hpo.models.training import TrainPoint
    from hpo.predictors import UniversalCurve


def pruner_settings(study: Study) -> PrunerSettings:
    """The study's ``pruner`` section as :class:`hpo.pruning.PrunerSettings` (its settings;
    ``enabled`` and ``report_points`` are the study's own). ``ValueError`` only for a section
    that did not come through :func:`hpo.study.schema.parse_study`, which checks it alike."""
    p = study.pruner
    return PrunerSettings(**{name: p[name] for name in PrunerSettings.names() if name in p})


def pruner_kwargs(study: Study) -> dict[str, Any]:
    """The study's ``pruner`` section as keyword arguments of ``hpo.CollapsePruner`` and
    ``hpo.CollapseScheduler`` (the one mapping both backends use:
    :meth:`hpo.pruning.PrunerSettings.kwargs` of :func:`pruner_settings`)."""
    return pruner_settings(study).kwargs()


def residual_callback(curve: UniversalCurve | None, rec: Recipe, name: str, stop_on_alert: bool,
                      on_alert: Callable[[dict[str, Any]], None] | None = None,
                      then: Callable[[TrainPoint], bool] | None = None
                      ) -> ResidualCallback | None:
    """The collapse residual monitor of one run of the study (``hpo.diagnose``), or ``None``
    without a reference curve or when the reference has no residual band."""
    if curve is None:
        return None

    if reference_band(curve) is None:
        return None
    return ResidualCallback(curve, Controls(**controls_of(rec)), name=name,
                            stop_on_alert=stop_on_alert, on_alert=on_alert, then=then)
