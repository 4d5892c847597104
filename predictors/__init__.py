"""Pure numerics of collapse-hpo: curve IO, schedules, normalization, universal curves,
final-loss prediction with calibrated intervals, peers, collapse metrics and the residual
monitor (collapse diagnostics).

Imports numpy, scipy and pandas only. The science: "Scaling with Collapse: Efficient and
Predictable Training of LLM Families" (Bergsma et al. 2025, arXiv 2509.25087): with AdamW,
muP-style transfer and a fixed LR-schedule shape, the normalized loss curve L(t^ T) / L(T)
depends only on TPP, tau = 1 / (eta lambda T) and the schedule.
"""

from __future__ import annotations

from hpo.predictors.calibrate import calibrate_predictor, fit_universal_curve
from hpo.predictors.chosen import ChosenPredictor
from hpo.predictors.curves import (
    DEFAULT_FORM,
    EmpiricalCurve,
    HybridCurve,
    PaperCurve,
    UniversalCurve,
    load_universal_curve,
    normalized_run,
)
from hpo.predictors.evaluate import evaluate_predictors
from hpo.predictors.io import (
    RunCurve,
    controls_from_run,
    read_curves,
    require_split,
    run_arrays,
    runs_from_frame,
)
from hpo.predictors.metrics import collapse_report, collapse_spread, curve_mae, seed_spread
from hpo.predictors.monitor import (
    MonitorState,
    ResidualBand,
    ResidualMonitor,
    raw_loss_alert,
    raw_loss_rise,
    reference_band,
)
from hpo.predictors.normalize import (
    ema,
    final_loss_estimate,
    interpolate_on_grid,
    moving_average,
    normalize_curve,
    smooth_curve,
)
from hpo.predictors.pairs import ProxyPairScale, fit_proxy_pair_scale
from hpo.predictors.peers import (
    AnnealingLawPredictor,
    LastValuePredictor,
    PowerLawEnsemblePredictor,
    TwinPredictor,
)
from hpo.predictors.predict import (
    CollapsePredictor,
    FinalLossPredictor,
    Prediction,
    align_final_loss,
)
from hpo.predictors.prior import PairPrior, default_prior, fit_pair_prior, load_pair_prior
from hpo.predictors.schedules import Controls, parse_schedule, schedule_from_name

__all__ = [
    "Controls",
    "schedule_from_name",
    "parse_schedule",
    "RunCurve",
    "read_curves",
    "require_split",
    "runs_from_frame",
    "run_arrays",
    "controls_from_run",
    "moving_average",
    "ema",
    "smooth_curve",
    "final_loss_estimate",
    "normalize_curve",
    "interpolate_on_grid",
    "UniversalCurve",
    "PaperCurve",
    "EmpiricalCurve",
    "HybridCurve",
    "DEFAULT_FORM",
    "fit_universal_curve",
    "load_universal_curve",
    "normalized_run",
    "Prediction",
    "FinalLossPredictor",
    "CollapsePredictor",
    "LastValuePredictor",
    "PowerLawEnsemblePredictor",
    "AnnealingLawPredictor",
    "TwinPredictor",
    "ChosenPredictor",
    "align_final_loss",
    "calibrate_predictor",
    "ProxyPairScale",
    "PairPrior",
    "default_prior",
    "fit_pair_prior",
    "load_pair_prior",
    "fit_proxy_pair_scale",
    "collapse_spread",
    "seed_spread",
    "collapse_report",
    "curve_mae",
    "ResidualMonitor",
    "MonitorState",
    "ResidualBand",
    "reference_band",
    "raw_loss_rise",
    "raw_loss_alert",
    "evaluate_predictors",
]
