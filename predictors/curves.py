"""Universal normalized loss curves lhat(t^; controls), fitted on proxy runs.

Forms (``fit_universal_curve(runs, form=...)``):

``paper``
    Eq. 4 of "Scaling with Collapse" (Bergsma et al. 2025, arXiv 2509.25087): lhat = g(t^) / g(1),
    g = ((1 + e1) / (t^ + e1))^m + b (eta(t^) + e2)^q, b = b_c tau^b_e, q = q_c TPP^q_e.
    An unknown control drops its power law (b or q becomes a constant).
``empirical``
    The mean normalized curve of the proxies whose schedule shape matches (RMS distance of
    eta over t^ in [0.1, 1] at most ``match_tol``), on a t^ grid, with a per-grid-point linear
    trend in the shape controls (log TPP and log tau where known; log total_steps and log n_params
    where they are not) when the matching proxies spread in them. For sweeps where every trial
    shares its schedule; a target without a matching proxy raises ``ValueError``.
``hybrid`` (the default, see ``DEFAULT_FORM``)
    ``empirical`` where a proxy's schedule matches; elsewhere the empirical curve of the nearest
    proxy schedule times the ``paper`` form's ratio between the run's schedule and that one.

A fitted curve serializes to JSON (``to_dict`` / ``to_json``; ``load_universal_curve``) with the
format version, the form, its parameters, the control ranges it was fitted on and the leave-one-out
calibration of the final-loss predictor (see :mod:`hpo.predictors.predict`). Predicting outside the
fitted range of a shape control warns once per control (:meth:`UniversalCurve.check_range`):
TPP and tau, and total_steps and n_params only where they stand in for an unknown TPP. A larger
or longer target than its proxies at their TPP and tau is no extrapolation: the curve is over
t^ = step / total_steps.
"""

from __future__ import annotations

import json
import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from hpo.predictors.io import RunCurve, require_split, runs_from_frame
from hpo.predictors.normalize import final_loss_estimate, interpolate_on_grid, smooth_curve
from hpo.predictors.schedules import Controls
from hpo.predictors.twins import find_twin

__all__ = [
    "FORMAT_VERSION",
    "DEFAULT_FORM",
    "FIT_GRID",
    "UniversalCurve",
    "PaperCurve",
    "EmpiricalCurve",
    "HybridCurve",
    "load_universal_curve",
    "paper_g",
    "normalized_run",
    "shape_covariates",
    "outside_ranges",
    "schedule_shape",
    "schedule_distance",
]

FORMAT_VERSION = 1
DEFAULT_FORM = "hybrid"
#: grid on which proxies' normalized curves are compared and fitted
FIT_GRID = np.round(np.linspace(0.04, 1.0, 97), 6)
#: grid on which schedules are stored; matching compares them over t^ >= _MATCH_FROM
_ETA_GRID = np.linspace(0.0, 1.0, 201)
_MATCH_FROM = 0.1
_MATCH = _ETA_GRID >= _MATCH_FROM - 1e-9

# paper Eq. 4 constants
E1, E2, M_EXP = 0.001, 0.1, 0.05


def schedule_distance(etas: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """RMS distance over t^ in [0.1, 1] between each row of ``etas`` and ``eta`` (schedules
    normalized to peak 1, on the grid of :func:`schedule_shape`): how schedules are matched."""
    return np.sqrt(np.mean((np.atleast_2d(etas)[:, _MATCH] - eta[_MATCH]) ** 2, axis=1))


def schedule_shape(controls: Controls) -> np.ndarray:
    """A run's LR schedule normalized to peak 1, on the grid :func:`schedule_distance` reads."""
    return controls.eta(_ETA_GRID)


def paper_g(t_hat: np.ndarray, eta: np.ndarray, b: float, q: float) -> np.ndarray:
    """Paper Eq. 4 numerator: g = ((1 + e1) / (t^ + e1))^m + b (eta + e2)^q."""
    t = np.asarray(t_hat, dtype=float)
    return ((1 + E1) / (t + E1)) ** M_EXP + b * (np.asarray(eta, dtype=float) + E2) ** q


def normalized_run(
    run: RunCurve, grid: np.ndarray = FIT_GRID, window: float = 0.02
) -> np.ndarray:
    """A complete run's smoothed normalized curve L / L_final on ``grid`` (NaN off its range)."""
    t = run.t_hat
    final = final_loss_estimate(t, run.losses, at=1.0)
    return interpolate_on_grid(t, smooth_curve(t, run.losses, window) / final, grid)


def shape_covariates(
    controls: Sequence[Controls], split_tpp: bool = True, lr: bool = False, size: bool = False
) -> tuple[list[str], np.ndarray, list[str]]:
    """The shape controls usable across ``controls``: names, a (runs, k) matrix, notes.

    log TPP where every run knows it; otherwise, where every run knows n_params, log total_steps
    and log n_params as separate columns (``split_tpp``) or their difference
    log(total_steps / n_params) (TPP up to the batch size, assuming one batch size). log tau
    where every run knows it, else nothing. With ``lr``, log base LR where every run knows it
    and the runs do not all share one: at a fixed tau a higher LR is worse early and better
    after the decay, which moves the normalized curve (``base_lr``, the LR the sweep sets, is
    the same setting at every width under CompleteP). With ``size``, log n_params beside a
    known TPP where every run knows it and the runs span several sizes: how the normalized
    curve moves with size at a fixed TPP. Notes say which substitutes were used.
    """
    notes: list[str] = []
    names: list[str] = []
    if all(c.tpp is not None for c in controls):
        names.append("log_tpp")
        sizes = {c.n_params for c in controls}
        if size and None not in sizes and len(sizes) > 1:
            names.append("log_n_params")
    elif all(c.n_params is not None for c in controls):
        if split_tpp:
            names += ["log_total_steps", "log_n_params"]
            notes.append("TPP unknown: using log total_steps and log n_params in its place")
        else:
            names.append("log_steps_per_param")
            notes.append("TPP unknown: using log(total_steps / n_params) in its place")
    else:
        notes.append("TPP unknown and n_params unknown: no TPP term")
    if all(c.tau is not None for c in controls):
        names.append("log_tau")
    else:
        notes.append("tau unknown: no tau term")
    lrs = [c.base_lr for c in controls]
    if lr and all(v is not None and v > 0 for v in lrs) and max(lrs) > min(lrs) * (1 + 1e-9):
        names.append("log_lr")
    rows = [_covariate_row(names, c) for c in controls]
    mat = np.array(rows, dtype=float).reshape(len(controls), len(names))
    return names, mat, notes


def _covariate_row(names: Sequence[str], c: Controls) -> np.ndarray | None:
    out = []
    for name in names:
        if name == "log_tpp":
            value = c.tpp
        elif name == "log_tau":
            value = c.tau
        elif name == "log_lr":
            value = c.base_lr
        elif name == "log_total_steps":
            value = float(c.total_steps)
        elif name == "log_n_params":
            value = c.n_params
        elif name == "log_steps_per_param":
            value = c.total_steps / c.n_params if c.n_params else None
        else:
            raise ValueError(f"unknown covariate {name!r}")
        if value is None:
            return None
        out.append(math.log(value))
    return np.asarray(out, dtype=float)


def outside_ranges(
    ranges: Mapping[str, Sequence[float]],
    controls: Any,
    names: Sequence[str] | None = None,
    rel_tol: float = 0.05,
) -> list[str]:
    """Which controls (``names``, default every one in ``ranges``) lie outside ``ranges``
    (name -> [lo, hi], as a fitted curve records them) by more than ``rel_tol``. A control
    the run lacks, or without a two-number range, counts as inside."""
    out = []
    for name in ranges if names is None else names:
        value = getattr(controls, name, None)
        bounds = ranges.get(name)
        if value is None or bounds is None or len(bounds) != 2:
            continue
        lo, hi = float(bounds[0]), float(bounds[1])
        if value < lo * (1 - rel_tol) or value > hi * (1 + rel_tol):
            out.append(name)
    return out


#: the controls behind each shape covariate of :func:`shape_covariates`
_COVARIATE_CONTROLS: dict[str, tuple[str, ...]] = {
    "log_tpp": ("tpp",),
    "log_tau": ("tau",),
    "log_lr": ("base_lr",),
    "log_total_steps": ("total_steps",),
    "log_n_params": ("n_params",),
    "log_steps_per_param": ("total_steps", "n_params"),
}


# what to do instead when a frame has no train rows (fitting on frames uses the train split)
_SPLIT_HINT = "runs_from_frame(frame, split={split!r}) and fit on those runs"


def _as_runs(runs: pd.DataFrame | Sequence[RunCurve] | Sequence[pd.DataFrame]) -> list[RunCurve]:
    if isinstance(runs, pd.DataFrame):
        require_split(runs, "train", hint=_SPLIT_HINT)
        return runs_from_frame(runs)
    runs = list(runs)
    if runs and isinstance(runs[0], pd.DataFrame):
        splits = [f[["split"]] if "split" in f.columns
                  else pd.DataFrame({"split": ["train"] * len(f)}) for f in runs]
        require_split(pd.concat(splits, ignore_index=True), "train", hint=_SPLIT_HINT)
        return runs_from_frame(runs)
    return runs  # type: ignore[return-value]


def _usable(runs: Sequence[RunCurve]) -> list[RunCurve]:
    out = [r for r in runs if r.complete and r.steps.size >= 5 and r.controls.has_schedule]
    if not out:
        raise ValueError(
            "no usable proxy run: fitting needs complete curves (reaching total_steps) with at "
            "least 5 points and a known schedule"
        )
    return out


def control_ranges(runs: Sequence[RunCurve]) -> dict[str, list[float]]:
    """[min, max] of TPP, tau, n_params, total_steps and base LR over the runs that know each
    (what a fitted curve keeps as its ``ranges``)."""
    ranges = {}
    for name in ("tpp", "tau", "n_params", "total_steps", "base_lr"):
        values = [float(v) for r in runs if (v := getattr(r.controls, name)) is not None]
        if values:
            ranges[name] = [min(values), max(values)]
    return ranges


class UniversalCurve(ABC):
    """A universal normalized loss curve lhat(t^; controls), fitted on proxy runs.

    Contract: ``fit(runs)`` learns from complete proxy curves (a curve-format DataFrame, a list
    of per-run frames, or a list of :class:`~predictors.io.RunCurve`) and returns ``self``;
    ``predict(t_hat, controls)`` returns lhat at ``t_hat`` (normalized so lhat(1) = 1) and raises
    ``ValueError`` when the controls lack what the form needs.
    """

    form: ClassVar[str] = "abstract"

    def __init__(self) -> None:
        self.ranges: dict[str, list[float]] = {}
        self.calibration: dict[str, Any] | None = None
        self.notes: list[str] = []
        self.n_proxies = 0
        self._warned: set[str] = set()

    @abstractmethod
    def fit(self, runs: Any) -> UniversalCurve:
        """Fit on proxy curves; returns ``self``."""

    @abstractmethod
    def predict(self, t_hat: np.ndarray, controls: Controls) -> np.ndarray:
        """lhat(t^) for a run with ``controls``."""

    def of_run(self, controls: Controls) -> Callable[[np.ndarray], np.ndarray]:
        """lhat of one run: ``t_hat -> predict(t_hat, controls)``, with what depends on the
        controls alone worked out once (what a caller asking point after point of one run,
        such as the residual monitor, uses). Raises what :meth:`predict` raises, now."""
        self.predict(np.ones(1), controls)
        return lambda t_hat: self.predict(t_hat, controls)

    # -- shared machinery -------------------------------------------------------------------
    def _params(self) -> dict[str, Any]:
        return {}

    def _set_params(self, params: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        pass

    def _record_ranges(self, runs: Sequence[RunCurve]) -> None:
        self.n_proxies = len(runs)
        self.ranges = control_ranges(runs)

    def _covariates(self) -> list[str]:
        return list(getattr(self, "covariates", []))

    def shape_controls(self) -> list[str]:
        """The controls the fitted shape depends on, which :meth:`check_range` checks: TPP and
        tau, plus total_steps and n_params where the curve uses them in place of an unknown TPP
        (:func:`shape_covariates`). total_steps and n_params alone do not shape the normalized
        curve (t^ = step / total_steps), so a target larger and longer than the proxies is no
        extrapolation."""
        names = ["tpp", "tau"]
        for cov in self._covariates():
            names += [n for n in _COVARIATE_CONTROLS.get(cov, ()) if n not in names]
        return names

    def blank(self) -> UniversalCurve:
        """An unfitted curve of this form with this curve's options (what a held-out refit
        starts from)."""
        return type(self)()

    def twin_weight(self, controls: Controls) -> float:
        """How much of ``controls``' curve comes from its twin proxy (0 to 1; 0 for a form
        without a twin term): the collapse predictor's per-run stretch shrinks by it."""
        return 0.0

    def check_range(self, controls: Controls, rel_tol: float = 0.05) -> list[str]:
        """The shape controls (:meth:`shape_controls`) of ``controls`` outside the fitted
        ranges by more than ``rel_tol`` (relative); warns once per control.

        A control every proxy held at one value (a zero-width range) is inside when the run has
        that value within ``rel_tol``; only a genuine extrapolation warns.
        """
        out = outside_ranges(self.ranges, controls, self.shape_controls(), rel_tol=rel_tol)
        for name in out:
            if name not in self._warned:
                self._warned.add(name)
                lo, hi = self.ranges[name]
                warnings.warn(
                    f"universal curve ({self.form}) used outside its fitted range: "
                    f"{name}={getattr(controls, name):g} not in [{lo:g}, {hi:g}]",
                    UserWarning,
                    stacklevel=3,
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly description: format version, form, parameters, ranges, calibration."""
        return {
            "format_version": FORMAT_VERSION,
            "form": self.form,
            "params": self._params(),
            "ranges": self.ranges,
            "n_proxies": self.n_proxies,
            "notes": list(self.notes),
            "calibration": self.calibration,
        }

    def to_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


class PaperCurve(UniversalCurve):
    """Paper Eq. 4 with b = b_c tau^b_e and q = q_c TPP^q_e (unknown controls: constants).

    Fitted by least squares on the proxies' smoothed normalized curves for t^ >= ``t_min``
    (several starts). When TPP is unknown for a proxy, log(total_steps / n_params) stands in
    (see :func:`shape_covariates`).
    """

    form = "paper"

    def __init__(self, t_min: float = 0.1) -> None:
        super().__init__()
        self.t_min = t_min
        self.log_b_c = 0.0
        self.b_e = 0.0
        self.log_q_c = 0.0
        self.q_e = 0.0
        self.covariates: list[str] = []

    def _bq(self, controls: Controls) -> tuple[float, float]:
        z = _covariate_row(self.covariates, controls)
        if z is None:
            missing = ", ".join(n[4:] for n in self.covariates)
            raise ValueError(f"paper curve needs the controls {missing} of the run")
        zz = dict(zip(self.covariates, z, strict=False))
        ltau = zz.get("log_tau", 0.0)
        ltpp = zz.get("log_tpp", zz.get("log_steps_per_param", 0.0))
        b = math.exp(self.log_b_c + self.b_e * ltau)
        q = math.exp(self.log_q_c + self.q_e * ltpp)
        return b, q

    def fit(self, runs: Any) -> PaperCurve:
        runs = _usable(_as_runs(runs))
        self._record_ranges(runs)
        names, zmat, notes = shape_covariates([r.controls for r in runs], split_tpp=False)
        self.covariates, self.notes = names, notes
        grid = FIT_GRID[FIT_GRID >= self.t_min]
        ts, ys, etas, ids = [], [], [], []
        eta1 = np.empty(len(runs))
        for i, r in enumerate(runs):
            y = normalized_run(r, grid)
            ok = np.isfinite(y)
            ts.append(grid[ok])
            ys.append(np.log(y[ok]))
            etas.append(r.controls.eta(grid[ok]))
            ids.append(np.full(ok.sum(), i))
            eta1[i] = r.controls.eta(np.ones(1))[0]
        t, logy, eta, idx = map(np.concatenate, (ts, ys, etas, ids))
        has_tau = "log_tau" in names
        tpp_name = next((n for n in names if n != "log_tau"), None)
        ztau = zmat[:, names.index("log_tau")] if has_tau else np.zeros(len(runs))
        ztpp = zmat[:, names.index(tpp_name)] if tpp_name else np.zeros(len(runs))
        mtau, mtpp = ztau.mean(), ztpp.mean()
        first = ((1 + E1) / (t + E1)) ** M_EXP
        eta_e2, eta1_e2 = np.log(eta + E2), np.log(eta1 + E2)

        # free parameters: log b_c, [b_e], log q_c, [q_e] (exponents only where known)
        free = np.array([True, has_tau, True, tpp_name is not None])

        def full(p: np.ndarray) -> np.ndarray:
            out = np.zeros(4)
            out[free] = p
            return out

        def resid(p: np.ndarray) -> np.ndarray:
            lb, be, lq, qe = full(p)
            b = np.exp(lb + be * (ztau - mtau))
            q = np.minimum(np.exp(lq + qe * (ztpp - mtpp)), 50.0)
            g = first + b[idx] * np.exp(q[idx] * eta_e2)
            g1 = 1.0 + b * np.exp(q * eta1_e2)
            return np.log(g) - np.log(g1)[idx] - logy

        lower = np.array([-15.0, -3.0, -5.0, -3.0])[free]
        upper = np.array([10.0, 3.0, 4.0, 3.0])[free]
        best = None
        for lb0, lq0 in ((-2.0, 0.0), (0.0, 1.0), (-4.0, -1.0)):
            try:
                with np.errstate(all="ignore"):
                    res = least_squares(resid, np.array([lb0, 0.0, lq0, 0.0])[free],
                                        bounds=(lower, upper), max_nfev=200)
            except (ValueError, FloatingPointError):
                continue
            if np.isfinite(res.cost) and (best is None or res.cost < best.cost):
                best = res
        if best is None:
            raise ValueError("paper curve: the fit failed from every start")
        lb, be, lq, qe = (float(v) for v in full(best.x))
        self.log_b_c, self.b_e = lb - be * mtau, be
        self.log_q_c, self.q_e = lq - qe * mtpp, qe
        return self

    def predict(self, t_hat: np.ndarray, controls: Controls) -> np.ndarray:
        self.check_range(controls)
        b, q = self._bq(controls)
        q = min(q, 50.0)
        t = np.asarray(t_hat, dtype=float)
        g = paper_g(t, controls.eta(t), b, q)
        g1 = paper_g(np.ones(1), controls.eta(np.ones(1)), b, q)[0]
        return g / g1

    def _params(self) -> dict[str, Any]:
        return {
            "b_c": math.exp(self.log_b_c),
            "b_e": self.b_e,
            "q_c": math.exp(self.log_q_c),
            "q_e": self.q_e,
            "e1": E1,
            "e2": E2,
            "m": M_EXP,
            "t_min": self.t_min,
            "covariates": self.covariates,
        }

    def _set_params(self, params: dict[str, Any]) -> None:
        self.log_b_c = math.log(params["b_c"])
        self.b_e = float(params["b_e"])
        self.log_q_c = math.log(params["q_c"])
        self.q_e = float(params["q_e"])
        self.t_min = float(params.get("t_min", 0.1))
        self.covariates = list(params.get("covariates", []))


#: the width (in log units of the settings' distance) of the twin's weight
#: exp(-d^2 / 2 width^2) in :class:`EmpiricalCurve`; chosen leave one source out
#: (benchmarks/twin_term.py)
TWIN_WIDTH = 0.0
#: whether the empirical curve fits a trend in log size beside a known TPP (where its proxies
#: span sizes); chosen leave one source out (benchmarks/twin_term.py)
SIZE_TREND = False
#: the controls a proxy's twin is found by, kept with a fitted curve
_SETTINGS = ("total_steps", "tpp", "n_params", "batch_tokens", "peak_lr", "weight_decay",
             "base_lr")


def _settings_of(c: Controls) -> Controls:
    return Controls(**{k: getattr(c, k) for k in _SETTINGS})


class EmpiricalCurve(UniversalCurve):
    """Mean normalized curve of schedule-matched proxies, with a linear trend in shape controls.

    Proxies are grouped by schedule shape (RMS distance of eta over t^ in [0.1, 1] at most
    ``match_tol``). On each grid point, the slopes of log l in the centred shape covariates are
    fitted across all proxies with one intercept per schedule group (a fixed-effects ridge
    regression, ``ridge``), so a group with a single size still gets the size trend the other
    groups show (the covariates of :func:`shape_covariates`, log base LR among them where the
    proxies vary it). For a run, lhat is the mean over the proxies that match its schedule of
    log l - slopes . z, plus slopes . z_run, plus a group-local slope correction where the
    matching proxies spread in a covariate (ridge ``local_ridge`` toward the pooled slope); the
    mean and the local correction weight each proxy by a Gaussian kernel of width ``bandwidth``
    in the covariates (log units) around the run's, so a run close to some proxies follows
    them (a local linear regression).

    The twin term: the matching proxy nearest the run in LR, batch, tau and TPP (its twin,
    :func:`~hpo.predictors.twins.find_twin`, at a distance d in log units) leaves a residual:
    its own log curve minus the curve the other proxies give at its controls. log lhat gains
    w = exp(-d^2 / 2 ``twin_width``^2) times that residual (held flat where the twin has no
    points; ``twin_width`` 0, the default: no twin term). The smooth curve pools every proxy;
    a near twin carries what the pooled trend misses at the run's own settings. With
    ``size_trend`` (default off) log n_params joins TPP among the covariates where the
    proxies span sizes, so the curve extrapolates how it moves with size.
    A run with no matching proxy raises ``ValueError``.
    """

    form = "empirical"

    def __init__(self, match_tol: float = 0.03, ridge: float = 0.05,
                 local_ridge: float = 0.5, bandwidth: float = 0.1,
                 twin_width: float | None = None, size_trend: bool | None = None) -> None:
        super().__init__()
        self.size_trend = SIZE_TREND if size_trend is None else bool(size_trend)
        self.twin_width = TWIN_WIDTH if twin_width is None else float(twin_width)
        self.settings: list[Controls] = []
        self.bandwidth = bandwidth
        self.match_tol = match_tol
        self.ridge = ridge
        self.local_ridge = local_ridge
        self.grid = FIT_GRID
        self.covariates: list[str] = []
        self.etas: np.ndarray = np.zeros((0, _ETA_GRID.size))
        self.log_curves: np.ndarray = np.zeros((0, FIT_GRID.size))
        self.z: np.ndarray = np.zeros((0, 0))
        self.slopes: np.ndarray = np.zeros((FIT_GRID.size, 0))
        self.run_ids: list[str] = []

    def blank(self) -> EmpiricalCurve:
        return EmpiricalCurve(self.match_tol, self.ridge, self.local_ridge, self.bandwidth,
                              self.twin_width, self.size_trend)

    def _groups(self) -> np.ndarray:
        labels = -np.ones(len(self.etas), dtype=int)
        for i in range(len(self.etas)):
            if labels[i] >= 0:
                continue
            dist = schedule_distance(self.etas, self.etas[i])
            labels[(dist <= self.match_tol) & (labels < 0)] = labels.max() + 1
        return labels

    def _fit_slopes(self) -> np.ndarray:
        k = self.z.shape[1]
        slopes = np.zeros((self.grid.size, k))
        if k == 0:
            return slopes
        groups = self._groups()
        for j in range(self.grid.size):
            ok = np.isfinite(self.log_curves[:, j])
            if ok.sum() < 2:
                continue
            y, z, g = self.log_curves[ok, j], self.z[ok], groups[ok]
            yc, zc = y.copy(), z.copy()
            for lab in np.unique(g):
                m = g == lab
                yc[m] -= y[m].mean()
                zc[m] -= z[m].mean(axis=0)
            slopes[j] = np.linalg.solve(zc.T @ zc + self.ridge * np.eye(k), zc.T @ yc)
        return slopes

    def fit(self, runs: Any) -> EmpiricalCurve:
        runs = _usable(_as_runs(runs))
        self._record_ranges(runs)
        names, z, notes = shape_covariates([r.controls for r in runs], lr=True,
                                           size=self.size_trend)
        self.covariates, self.z, self.notes = names, z, notes
        self.etas = np.array([schedule_shape(r.controls) for r in runs])
        self.log_curves = np.log(np.array([normalized_run(r, self.grid) for r in runs]))
        self.run_ids = [r.run_id for r in runs]
        self.settings = [_settings_of(r.controls) for r in runs]
        self.slopes = self._fit_slopes()
        return self

    def matches(self, controls: Controls) -> np.ndarray:
        """Indices of proxies whose schedule shape matches ``controls``'."""
        dist = schedule_distance(self.etas, schedule_shape(controls))
        return np.flatnonzero(dist <= self.match_tol)

    def grid_curve(self, controls: Controls, twin: bool = True) -> np.ndarray:
        """log lhat on ``self.grid`` (NaN where no matching proxy covers a point); with
        ``twin``, the twin term included."""
        idx = self.matches(controls)
        if idx.size == 0:
            raise ValueError(
                "empirical curve: no proxy run has a schedule matching "
                f"{controls.schedule_key()!r}"
            )
        k = len(self.covariates)
        z_t = _covariate_row(self.covariates, controls) if k else np.zeros(0)
        if z_t is None:
            missing = ", ".join(n[4:] for n in self.covariates)
            raise ValueError(f"empirical curve needs the controls {missing} of the run")
        out = self._local(z_t, idx)
        return self._with_twin(out, controls, idx) if twin else out

    def _local(self, z_t: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """log lhat on the grid at covariates ``z_t`` from the proxies ``idx``: the kernel-
        weighted local linear regression around the pooled slopes."""
        k = len(self.covariates)
        y = self.log_curves[idx]
        z = self.z[idx]
        # kernel weights: proxies close in the shape controls count more (local regression)
        w_all = (
            np.exp(-0.5 * np.sum((z - z_t) ** 2, axis=1) / self.bandwidth**2)
            if k and self.bandwidth > 0 else np.ones(idx.size)
        )
        w_all = np.maximum(w_all, 1e-6)
        out = np.full(self.grid.size, np.nan)
        for j in range(self.grid.size):
            ok = np.isfinite(y[:, j])
            if not ok.any():
                continue
            c = self.slopes[j]
            w = w_all[ok] / w_all[ok].sum()
            resid = y[ok, j] - z[ok] @ c
            z_bar = w @ z[ok]
            r_bar = w @ resid
            d = np.zeros(k)
            if ok.sum() >= 2 and k:
                zz = (z[ok] - z_bar) * np.sqrt(w)[:, None]
                rc = (resid - r_bar) * np.sqrt(w)
                d = np.linalg.solve(zz.T @ zz + self.local_ridge / ok.sum() * np.eye(k),
                                    zz.T @ rc)
            out[j] = r_bar + z_t @ c + (z_t - z_bar) @ d
        return out

    def twin(self, controls: Controls) -> tuple[int, float] | None:
        """``(index, weight)`` of ``controls``' twin among the matching proxies, or ``None``
        (always without a twin term: no proxy is matched then)."""
        if self.twin_width <= 0 or not self.settings:
            return None
        return self._twin(controls, self.matches(controls))

    def twin_weight(self, controls: Controls) -> float:
        twin = self.twin(controls)
        return 0.0 if twin is None else twin[1]

    def _twin(self, controls: Controls, idx: np.ndarray) -> tuple[int, float] | None:
        if self.twin_width <= 0 or not self.settings:
            return None
        found = find_twin(controls, self.settings, idx, same=False)
        if found is None:
            return None
        return found[0], math.exp(-0.5 * (found[1] / self.twin_width) ** 2)

    def _with_twin(self, out: np.ndarray, controls: Controls, idx: np.ndarray) -> np.ndarray:
        """``out`` (log lhat on the grid) plus its twin's weight times the twin's residual."""
        twin = self._twin(controls, idx)
        if twin is None:
            return out
        i, weight = twin
        others = idx[idx != i]
        if others.size == 0:
            return out
        # the twin's residual against the curve of the other proxies at its own controls
        residual = self.log_curves[i] - self._local(self.z[i], others)
        ok = np.isfinite(residual)
        if not ok.any():
            return out
        # the offset where the twin has points, held flat to either side
        return out + weight * np.interp(self.grid, self.grid[ok], residual[ok])

    def predict(self, t_hat: np.ndarray, controls: Controls, twin: bool = True) -> np.ndarray:
        return self.of_run(controls, twin)(t_hat)

    def of_run(self, controls: Controls,
               twin: bool = True) -> Callable[[np.ndarray], np.ndarray]:
        """lhat of one run from its grid curve, worked out once: linear in t^ between grid
        points, the first segment's slope before the first one."""
        self.check_range(controls)
        g = self.grid_curve(controls, twin)
        ok = np.isfinite(g)
        if ok.sum() < 2:
            raise ValueError("empirical curve: matching proxies cover too little of t^")
        gx, gy = self.grid[ok], g[ok]
        slope = (gy[1] - gy[0]) / (gx[1] - gx[0])
        end = np.interp(1.0, gx, gy)

        def lhat(t_hat: np.ndarray) -> np.ndarray:
            t = np.asarray(t_hat, dtype=float)
            out = np.interp(t, gx, gy)
            early = t < gx[0]
            out[early] = gy[0] + slope * (t[early] - gx[0])
            return np.exp(out - end)

        return lhat

    def _params(self) -> dict[str, Any]:
        return {
            "match_tol": self.match_tol,
            "ridge": self.ridge,
            "grid": self.grid.tolist(),
            "eta_grid": _ETA_GRID.tolist(),
            "local_ridge": self.local_ridge,
            "bandwidth": self.bandwidth,
            "twin_width": self.twin_width,
            "size_trend": self.size_trend,
            "settings": [{k: getattr(c, k) for k in _SETTINGS} for c in self.settings],
            "covariates": self.covariates,
            "slopes": np.round(self.slopes, 8).tolist(),
            "run_ids": self.run_ids,
            "z": self.z.tolist(),
            "etas": np.round(self.etas, 6).tolist(),
            "log_curves": [[None if not np.isfinite(v) else round(float(v), 7) for v in row]
                           for row in self.log_curves],
        }

    def _set_params(self, params: dict[str, Any]) -> None:
        self.match_tol = float(params["match_tol"])
        self.ridge = float(params["ridge"])
        self.grid = np.asarray(params["grid"], dtype=float)
        self.local_ridge = float(params["local_ridge"])
        self.bandwidth = float(params["bandwidth"])
        # a curve saved without its proxies' settings has no twin term
        self.twin_width = float(params.get("twin_width", 0.0))
        self.size_trend = bool(params.get("size_trend", False))
        self.settings = [Controls(**row) for row in params.get("settings", [])]
        self.covariates = list(params["covariates"])
        self.slopes = np.asarray(params["slopes"], dtype=float).reshape(self.grid.size, -1)
        self.run_ids = list(params["run_ids"])
        self.z = np.asarray(params["z"], dtype=float).reshape(len(self.run_ids), -1)
        stored = np.asarray(params["eta_grid"], dtype=float)
        self.etas = np.array([np.interp(_ETA_GRID, stored, row) for row in params["etas"]])
        self.log_curves = np.array(
            [[np.nan if v is None else v for v in row] for row in params["log_curves"]],
            dtype=float,
        )


class HybridCurve(UniversalCurve):
    """``empirical`` where a proxy's schedule matches the run's; elsewhere the nearest proxy
    schedule's empirical curve, carried to the run's schedule by the paper form's ratio.

    Why this is the default: on the shared data, when proxies share the target's schedule the
    empirical shape with a trend in the shape controls tracks the target more closely than the
    4-parameter paper form (which cannot express e.g. a TPP-dependent curvature of the early
    curve); the paper form still generalizes to schedules no proxy ran.
    """

    form = "hybrid"

    def __init__(self, match_tol: float = 0.03, twin_width: float | None = None,
                 size_trend: bool | None = None) -> None:
        super().__init__()
        self.empirical = EmpiricalCurve(match_tol=match_tol, twin_width=twin_width,
                                        size_trend=size_trend)
        self.paper = PaperCurve()

    def blank(self) -> HybridCurve:
        emp = self.empirical
        return HybridCurve(emp.match_tol, emp.twin_width, emp.size_trend)

    def fit(self, runs: Any) -> HybridCurve:
        runs = _usable(_as_runs(runs))
        self._record_ranges(runs)
        self.empirical.fit(runs)
        self.paper.fit(runs)
        self.notes = [f"empirical part: {n}" for n in self.empirical.notes] + [
            f"paper part: {n}" for n in self.paper.notes
        ]
        return self

    def _covariates(self) -> list[str]:
        return self.empirical._covariates() + self.paper._covariates()

    def component(self, controls: Controls) -> UniversalCurve:
        """The sub-model used for ``controls``."""
        return self.empirical if self.empirical.matches(controls).size else self.paper

    def surrogate(self, controls: Controls) -> Controls:
        """``controls`` with the schedule of the nearest proxy (in eta over t^ in [0.1, 1]),
        warmup included."""
        emp = self.empirical
        dist = schedule_distance(emp.etas, schedule_shape(controls))
        nearest = emp.etas[int(np.argmin(dist))]
        t = np.arange(controls.total_steps + 1) / controls.total_steps
        eta = np.interp(t, _ETA_GRID, nearest)
        return controls.with_(lr_schedule=eta, schedule=None)

    def predict(self, t_hat: np.ndarray, controls: Controls) -> np.ndarray:
        return self.of_run(controls)(t_hat)

    def of_run(self, controls: Controls) -> Callable[[np.ndarray], np.ndarray]:
        self.check_range(controls)
        for sub in (self.empirical, self.paper):
            sub._warned = self._warned  # warn once across components
        if self.empirical.matches(controls).size:
            return self.empirical.of_run(controls)
        # no proxy ran this schedule: the empirical curve of the nearest proxy schedule, times
        # the paper form's ratio between the run's schedule and that one
        sur = self.surrogate(controls)
        # (a twin counts only where a proxy ran the run's own schedule)
        nearest = self.empirical.of_run(sur, twin=False)

        def lhat(t_hat: np.ndarray) -> np.ndarray:
            t = np.asarray(t_hat, dtype=float)
            return nearest(t) * (self.paper.predict(t, controls) / self.paper.predict(t, sur))

        return lhat

    def twin_weight(self, controls: Controls) -> float:
        # a twin counts only where a proxy ran the run's schedule: the empirical part's
        return self.empirical.twin_weight(controls)

    def _params(self) -> dict[str, Any]:
        return {"empirical": self.empirical._params(), "paper": self.paper._params()}

    def _set_params(self, params: dict[str, Any]) -> None:
        self.empirical._set_params(params["empirical"])
        self.paper._set_params(params["paper"])


_FORMS: dict[str, type[UniversalCurve]] = {
    "paper": PaperCurve,
    "empirical": EmpiricalCurve,
    "hybrid": HybridCurve,
}


def load_universal_curve(path_or_dict: str | Path | Mapping[str, Any]) -> UniversalCurve:
    """Rebuild a curve from :meth:`UniversalCurve.to_dict` output or a JSON file of it.

    Raises ``ValueError`` naming the file (or ``the curve dict``) when it is missing, is not a
    universal-curve JSON (a CSV, another JSON) or has another ``format_version``.
    """
    data: Any = path_or_dict
    where = "the curve dict"
    fix = "fit one with `hpo fit-curve`"
    if not isinstance(data, Mapping):
        path = Path(data)
        where = repr(str(path))
        if not path.is_file():
            raise ValueError(f"universal-curve file not found: {where} ({fix})")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            data = None
    if not isinstance(data, Mapping) or "format_version" not in data:
        raise ValueError(f"{where} is not a universal-curve JSON ({fix})")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{where}: unsupported universal-curve format_version {version!r}, "
                         f"this version reads {FORMAT_VERSION} ({fix})")
    form = data.get("form")
    if form not in _FORMS:
        raise ValueError(f"{where}: unknown curve form {form!r} in the JSON; known: "
                         f"{', '.join(_FORMS)}")
    curve = _FORMS[form]()
    try:
        curve._set_params(data["params"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where} is not a universal-curve JSON: bad params ({exc!r}; "
                         f"{fix})") from None
    curve.ranges = {k: list(v) for k, v in data.get("ranges", {}).items()}
    curve.calibration = data.get("calibration")
    curve.notes = list(data.get("notes", []))
    curve.n_proxies = int(data.get("n_proxies", 0))
    return curve
