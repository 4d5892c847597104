"""The collapse residual monitor of a study's runs (``hpo.diagnose``)."""

from __future__ import annotations

from typing import Any

from hpo.study.run_config import controls_of


def residual_callback(curve: Any, rec: Any, name: str, stop_on_alert: bool,
                      on_alert: Any = None, then: Any = None) -> Any:
    """The collapse residual monitor of one run of the study (``hpo.diagnose``), or ``None``
    without a reference curve or when the reference has no residual band."""
    if curve is None:
        return None
    from hpo.diagnose import ResidualCallback
    from hpo.predictors import Controls, reference_band

    if reference_band(curve) is None:
        return None
    return ResidualCallback(curve, Controls(**controls_of(rec)), name=name,
                            stop_on_alert=stop_on_alert, on_alert=on_alert, then=then)
