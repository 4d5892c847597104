"""The names of the attributes a study stores on its Optuna trials."""

from __future__ import annotations

INTERRUPTED_ATTR = "hpo:interrupted"
RESUME_RUN_ID_ATTR = "resume_run_id"  # a re-run trial trains under its original's identity
HEARTBEAT_ATTR = "hpo:heartbeat"  # system attr: when the trial's worker last marked it alive
FAIL_REASON_ATTR = "fail_reason"  # user attr: why a trial failed, in one line
RESIDUAL_ALERT_ATTR = "residual_alert"  # user attr: {t_hat, residual, threshold} of the alert
RESIDUAL_MAX_ATTR = "residual_max"  # user attr: the largest absolute collapse residual
