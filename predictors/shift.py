"""The error a study's predictions share, learned from its finished trials.

Predictions of one sweep err together: the same data, family and schedule put every target of a
study a little above (or below) where the proxies say, by about the same factor. Across the
corpus this shared part is most of the error where proxies and targets differ (Marin, nanochat,
the CPU sweeps: the targets' mean signed error is 3-50x the spread around it), and almost none
where proxies ran the targets' recipe (`benchmarks/results/shift/`). A study sees it as its
trials finish: each finished trial's prediction at a checkpoint against its final is one
draw of ``e = log(predicted / final) = shift + noise``.

:func:`study_shift` is the normal-normal posterior of the shift from ``m`` such errors: a prior
``N(0, tau^2)`` (how far studies' shared errors range, :data:`SHIFT_TAU`) and noise of sd
``s`` around it, ``s^2`` the errors' own variance pooled with :data:`SHIFT_SD` (worth
:data:`SHIFT_SD_DOF` observations, so that one or two trials do not read as noise-free):

    shift = mean(e) * m tau^2 / (m tau^2 + s^2)

A prediction and its interval divided by ``exp(shift)`` are where the study's own evidence puts
the final (the interval keeps its width: the predictor's intervals, measured on proxies, cover
the shifted finals at least as often as the raw ones on every source). Without finished trials
nothing moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["StudyShift", "study_shift", "NO_SHIFT", "SHIFT_TAU", "SHIFT_SD", "SHIFT_SD_DOF"]

#: prior sd of a study's shared log error (chosen leave one source out,
#: ``benchmarks/study_shift.py``)
SHIFT_TAU = 0.05
#: prior sd of a trial's error around the shared one (same script)
SHIFT_SD = 0.02
#: how many observations :data:`SHIFT_SD` is worth against a study's own spread
SHIFT_SD_DOF = 2.0


@dataclass(frozen=True)
class StudyShift:
    """The shared log error of a study's predictions at one checkpoint: ``shift`` (the
    posterior mean; a prediction is divided by ``exp(shift)``) and the finished ``trials`` it
    was learned from."""

    shift: float = 0.0
    trials: int = 0


#: no finished trial: nothing moves
NO_SHIFT = StudyShift()


def study_shift(errors: Sequence[float] | np.ndarray, tau: float = SHIFT_TAU,
                sd: float = SHIFT_SD, sd_dof: float = SHIFT_SD_DOF) -> StudyShift:
    """The posterior of the shared error from finished trials' signed log errors ``errors``
    (``log(predicted / final)`` at one checkpoint; non-finite ones are left out), under the
    prior ``N(0, tau^2)`` with noise ``sd`` pooled with the errors' own variance (module
    docstring). :data:`NO_SHIFT` without errors or with ``tau <= 0``."""
    e = np.asarray(errors, dtype=float)
    e = e[np.isfinite(e)]
    m = int(e.size)
    if not m or not tau > 0:
        return NO_SHIFT
    own = float(np.var(e, ddof=1)) if m >= 2 else 0.0
    s2 = (sd_dof * sd * sd + (m - 1) * own) / (sd_dof + m - 1)
    t2 = tau * tau
    return StudyShift(float(e.mean()) * m * t2 / (m * t2 + s2), m)
