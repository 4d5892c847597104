"""The bench: replay recorded sweeps through real pruners and schedulers, side by side.

``hpo bench`` and the scripts in ``benchmarks/`` use these names. :mod:`hpo.bench.data` reads the
recorded sweeps, :mod:`hpo.bench.replay` replays them through Optuna's pruners and Ray Tune's
schedulers, :mod:`hpo.bench.metrics` does the accounting and the goal, :mod:`hpo.bench.knobs`
holds the collapse pruner's variants, and :mod:`hpo.bench.tables` the output.
"""

from __future__ import annotations

from hpo.bench.data import (
    BenchGroup,
    BenchTrial,
    budget,
    curve_for,
    fit_proxy_curves,
    load_groups,
    resample_groups,
)
from hpo.bench.knobs import collapse_knobs, collapse_pruner
from hpo.bench.metrics import (
    GOAL_MAX_REGRET,
    GOAL_ORACLE_FACTOR,
    MODES,
    GroupMetrics,
    TrialOutcome,
    aggregate,
    compare_to_goal,
    group_metrics,
    sequential_floor,
)
from hpo.bench.reliability import calibration_error, format_reliability, reliability
from hpo.bench.replay import (
    BASELINE_FRACTIONS,
    optuna_methods,
    ray_methods,
    replay_current_best,
    replay_optuna,
    replay_oracle,
    replay_predicted_best,
    replay_ray,
    run_bench,
    shadow_verdicts,
)
from hpo.bench.tables import format_explanations, format_table, plot_tradeoff

__all__ = [
    "BASELINE_FRACTIONS",
    "BenchTrial", "BenchGroup", "budget", "load_groups", "resample_groups", "fit_proxy_curves",
    "curve_for", "collapse_knobs", "collapse_pruner", "TrialOutcome", "GroupMetrics",
    "group_metrics", "aggregate", "sequential_floor", "compare_to_goal", "MODES",
    "GOAL_ORACLE_FACTOR", "GOAL_MAX_REGRET", "replay_optuna", "replay_current_best",
    "replay_predicted_best", "replay_oracle", "optuna_methods", "ray_methods", "replay_ray",
    "run_bench", "format_table", "format_explanations", "plot_tradeoff", "shadow_verdicts",
    "reliability", "calibration_error", "format_reliability",
]
