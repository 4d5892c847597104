"""A run's twin: the proxy run at its own settings.

The collapse premise says that runs with the same schedule, tau and TPP share one normalized
curve across sizes. The plainest use of it is to read a proxy that ran the target's own
settings as the target's curve. :func:`find_twin` picks that proxy: the same schedule shape
(matched by the caller), then the nearest settings (:func:`settings_distance`: LR, batch, tau
and TPP), then the nearest size. :class:`~hpo.predictors.peers.TwinPredictor` is it alone, as
a peer, among the proxies of the target's own LR and batch (:func:`same_settings`); the
universal curve can carry its residual, weighted by how near it is
(:class:`~hpo.predictors.curves.EmpiricalCurve`'s ``twin_width``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from hpo.predictors.schedules import Controls

__all__ = ["SAME_SETTING", "same_settings", "settings_distance", "find_twin"]

#: two runs share a setting (LR, batch) where the two values differ by at most this much,
#: relative: a sweep's grid points lie far further apart
SAME_SETTING = 0.01


def same_settings(a: Controls, b: Controls) -> bool:
    """Whether two runs share their LR (the base LR where both know it, else the peak LR) and
    their batch tokens where both know it (each within ``SAME_SETTING``). A run that knows no
    LR shares no setting."""
    x, y = _lrs(a, b)
    if x is None or y is None:
        return False
    for u, v in ((x, y), (a.batch_tokens, b.batch_tokens)):
        if u is not None and v is not None and abs(u - v) > SAME_SETTING * max(abs(u), abs(v)):
            return False
    return True


def settings_distance(a: Controls, b: Controls) -> float:
    """How far apart two runs' settings are: the root of the summed squared log ratios of their
    LRs (base where both know it, else peak), batch tokens, taus and TPPs, each where both runs
    know it. Where either TPP is unknown, the numbers of steps and the sizes stand in for it
    (TPP is steps x batch / size), each a term of its own."""
    horizon = ([(a.tpp, b.tpp)] if a.tpp and b.tpp
               else [(a.total_steps, b.total_steps), (a.n_params, b.n_params)])
    gaps = [_lrs(a, b), (a.batch_tokens, b.batch_tokens), (a.tau, b.tau), *horizon]
    return math.sqrt(sum(_log_gap(x, y) ** 2 for x, y in gaps))


def _lrs(a: Controls, b: Controls) -> tuple[float | None, float | None]:
    if a.base_lr is not None and b.base_lr is not None:
        return a.base_lr, b.base_lr
    return a.peak_lr, b.peak_lr


def _log_gap(x: float | None, y: float | None) -> float:
    return abs(math.log(x / y)) if x and y and x > 0 and y > 0 else 0.0


def find_twin(
    controls: Controls, proxies: Sequence[Controls], candidates: Iterable[int],
    other_size_than: float | None = None, same: bool = True,
) -> tuple[int, float] | None:
    """``(index, distance)`` of ``controls``' twin among ``candidates`` (indices into
    ``proxies``: those whose schedule matches), or ``None``: the proxy nearest in
    :func:`settings_distance`, then in size. With ``same`` only proxies of the same LR and
    batch count (:func:`same_settings`); with ``other_size_than`` only proxies of another
    ``n_params``."""
    best, key = None, None
    for i in candidates:
        c = proxies[i]
        if other_size_than is not None and c.n_params == other_size_than:
            continue
        if same and not same_settings(c, controls):
            continue
        k = (settings_distance(c, controls), _log_gap(c.n_params, controls.n_params))
        if key is None or k < key:
            best, key = int(i), k
    return None if best is None else (best, key[0])
