"""Optuna samplers the study runner needs beyond Optuna's own (imports optuna)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = ["AskTellGridSampler"]


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler for ask/tell loops and Ray's ``OptunaSearch``: an exhausted grid
    does not call ``study.stop()`` (which raises outside ``Study.optimize``); the caller stops
    after the grid's size. Module level, so it pickles with a Ray experiment."""

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        with contextlib.suppress(RuntimeError):
            super().after_trial(study, trial, state, values)
