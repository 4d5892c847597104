"""Reading and validating curves in the curve format (shared/data/curves/README.md).

Behaviour on malformed input (tested in tests/predictors/test_io.py):

* a missing required column (``run_id``, ``step``, ``loss``, ``total_steps``): ``ValueError``
  naming the column and the file;
* non-finite losses (NaN, inf): the rows are dropped with a ``UserWarning`` naming the runs
  (a diverged tail is data, but cannot be normalized);
* steps out of order: sorted per run (stable); duplicate steps of one run and split are averaged
  by :func:`run_arrays`;
* a step beyond the run's ``total_steps``, a negative step, or ``total_steps`` that is not one
  positive integer per run: ``ValueError`` naming the run;
* a run with a single point is kept by :func:`read_curves`; fitting and prediction reject it;
* no row of the split a command or fit uses (e.g. a file with only ``val`` rows, read for
  ``train``): ``ValueError`` naming the split and the splits the file has
  (:func:`require_split`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hpo.predictors.schedules import Controls, lr_schedule_from_points, schedule_from_name

__all__ = [
    "REQUIRED_COLUMNS",
    "RunCurve",
    "reaches_end",
    "read_curves",
    "validate_curves",
    "require_split",
    "run_arrays",
    "controls_from_run",
    "runs_from_frame",
]

REQUIRED_COLUMNS = ("run_id", "step", "loss", "total_steps")
_NUMERIC = ("n_params", "tokens", "batch_tokens", "peak_lr", "weight_decay", "warmup_steps", "lr")


@dataclass(frozen=True)
class RunCurve:
    """One run's loss curve: sorted unique ``steps``, their ``losses`` and the run's controls."""

    run_id: str
    steps: np.ndarray
    losses: np.ndarray
    controls: Controls
    group: str | None = None

    @property
    def t_hat(self) -> np.ndarray:
        """Fractions of training of the logged points."""
        return self.steps / self.controls.total_steps

    @property
    def complete(self) -> bool:
        """Whether the curve reaches the end of training (:func:`reaches_end`)."""
        return reaches_end(self.steps, self.controls.total_steps)


def reaches_end(steps: Sequence[float] | np.ndarray, total_steps: float) -> bool:
    """Whether a run logged at sorted ``steps`` reached the end of its ``total_steps``: its
    last step within 1% of ``total_steps`` or 1.5 median log intervals of it. A run with fewer
    than two points never does."""
    s = np.asarray(steps, dtype=float)
    if s.size < 2:
        return False
    gap = float(np.median(np.diff(s)))
    total = float(total_steps)
    return bool(s[-1] >= total - max(0.01 * total, 1.5 * gap))


def _read_one(path: Path) -> pd.DataFrame:
    name = path.name.lower()
    if not path.exists():
        raise FileNotFoundError(f"curve file not found: {path}")
    if name.endswith(".parquet") or name.endswith(".pq"):
        from hpo._extras import require

        require("pyarrow", "parquet")
        return pd.read_parquet(path)
    if name.endswith(".csv") or name.endswith(".csv.gz") or name.endswith(".gz"):
        return pd.read_csv(path)
    raise ValueError(f"{path}: unknown curve file type (expected .csv, .csv.gz or .parquet)")


def validate_curves(df: pd.DataFrame, source: str = "curves") -> pd.DataFrame:
    """Check and normalize a curve-format frame; returns a new frame sorted by run and step.

    See the module docstring for what is an error and what is repaired. ``source`` names the
    input in messages.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"{source}: missing required column(s) {', '.join(missing)} "
            f"(required: {', '.join(REQUIRED_COLUMNS)}; found: {', '.join(map(str, df.columns))})"
        )
    out = df.copy()
    out["run_id"] = out["run_id"].astype(str)
    if "split" not in out.columns:
        out["split"] = "train"
    out["split"] = out["split"].fillna("train").astype(str)
    for col in ("step", "loss", "total_steps", *[c for c in _NUMERIC if c in out.columns]):
        try:
            out[col] = pd.to_numeric(out[col], errors="raise").astype(float)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{source}: column {col!r} is not numeric ({exc})") from None
    if out.empty:
        raise ValueError(f"{source}: no rows")
    if out["step"].isna().any():
        bad = sorted(out.loc[out["step"].isna(), "run_id"].unique())[:3]
        raise ValueError(f"{source}: empty step in run(s) {', '.join(bad)}")
    bad_loss = ~np.isfinite(out["loss"].to_numpy())
    if bad_loss.any():
        runs = sorted(out.loc[bad_loss, "run_id"].unique())
        warnings.warn(
            f"{source}: dropped {int(bad_loss.sum())} row(s) with a non-finite loss in run(s) "
            f"{', '.join(runs[:5])}{' ...' if len(runs) > 5 else ''}",
            UserWarning,
            stacklevel=2,
        )
        out = out.loc[~bad_loss]
        if out.empty:
            raise ValueError(f"{source}: no row with a finite loss")
    per_run = out.groupby("run_id", sort=False)["total_steps"].agg(["min", "max"])
    for run_id, row in per_run.iterrows():
        lo, hi = row["min"], row["max"]
        if not np.isfinite(lo) or lo != hi or lo <= 0 or lo != round(lo):
            raise ValueError(
                f"{source}: run {run_id!r}: total_steps must be one positive integer per run, "
                f"but got values from {lo} to {hi}"
            )
    if (out["step"] < 0).any():
        run_id = out.loc[out["step"] < 0, "run_id"].iloc[0]
        raise ValueError(f"{source}: run {run_id!r} has a negative step")
    over = out["step"] > out["total_steps"]
    if over.any():
        row = out.loc[over].iloc[0]
        raise ValueError(
            f"{source}: run {row['run_id']!r} is longer than its total_steps: step "
            f"{int(row['step'])} > total_steps {int(row['total_steps'])}"
        )
    out["total_steps"] = out["total_steps"].astype(int)
    out = out.sort_values(["run_id", "split", "step"], kind="stable").reset_index(drop=True)
    return out


def require_split(
    df: pd.DataFrame, split: str | None, source: str = "curves", hint: str = "split={split!r}"
) -> None:
    """Raise ``ValueError`` when a curve-format frame has no row of ``split``.

    Rows without a ``split`` (no column, or empty) are ``train``, as in :func:`validate_curves`;
    ``split=None`` (every row) always passes. The message names ``source``, the split asked for
    and the splits the frame has, and ends with ``use <hint>`` for one of those (``hint`` is
    formatted with ``split``: the CLI passes ``"--split {split}"``).
    """
    if split is None:
        return
    if "split" in df.columns:
        present = sorted(set(df["split"].fillna("train").astype(str)))
    else:
        present = ["train"] if len(df) else []
    if split in present:
        return
    if not present:
        raise ValueError(f"{source}: no rows of split {split!r} (no rows at all)")
    other = "val" if "val" in present else present[0]
    raise ValueError(
        f"{source}: no rows of split {split!r} (the curves have: {', '.join(present)}); "
        f"use {hint.format(split=other)}"
    )


def read_curves(path_or_paths: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """Read one or more curve files (CSV, .csv.gz, Parquet) into one validated frame.

    The same ``run_id`` in two files is an error. Extra columns are kept and ignored.
    """
    paths = [path_or_paths] if isinstance(path_or_paths, (str, Path)) else list(path_or_paths)
    if not paths:
        raise ValueError("no curve file given")
    frames = []
    seen: dict[str, Path] = {}
    for p in map(Path, paths):
        df = validate_curves(_read_one(p), source=str(p))
        for run_id in df["run_id"].unique():
            if run_id in seen:
                raise ValueError(f"run {run_id!r} appears in both {seen[run_id]} and {p}")
            seen[run_id] = p
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def run_arrays(run_df: pd.DataFrame, split: str | None = "train") -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique steps and their losses for one run (duplicate steps averaged).

    ``split=None`` uses every row; otherwise only rows of that split (empty arrays when none).
    """
    df = run_df if split is None or "split" not in run_df.columns else run_df[
        run_df["split"] == split
    ]
    steps = df["step"].to_numpy(dtype=float)
    losses = df["loss"].to_numpy(dtype=float)
    ok = np.isfinite(steps) & np.isfinite(losses)
    steps, losses = steps[ok], losses[ok]
    if steps.size == 0:
        return steps, losses
    uniq, inv = np.unique(steps, return_inverse=True)
    mean = np.bincount(inv, weights=losses) / np.bincount(inv)
    return uniq, mean


def _first(run_df: pd.DataFrame, col: str) -> float | str | None:
    if col not in run_df.columns:
        return None
    values = run_df[col].dropna()
    if values.empty:
        return None
    value = values.iloc[0]
    if isinstance(value, str):
        return value if value.strip() else None
    return float(value)


def _known_schedule(name: object, total_steps: int, warmup: float | None) -> bool:
    """Whether ``name`` is a schedule name :func:`schedule_from_name` can evaluate."""
    if not isinstance(name, str):
        return False
    try:
        schedule_from_name(name, total_steps, warmup, np.array([0.5]))
    except ValueError:
        return False
    return True


def controls_from_run(run_df: pd.DataFrame) -> Controls:
    """The controls of one run (all rows of one ``run_id``) in the curve format.

    TPP = tokens / n_params and tau = 1 / (peak_lr * weight_decay * total_steps) where the inputs
    are known (tau unknown for weight_decay 0). The exact schedule comes from the ``lr`` column
    of every split where present (see :func:`lr_schedule_from_points`), else from the name. A
    run stopped early logs its LR only up to the stop: then a schedule name this module knows
    describes the whole run and is used instead; an unknown name keeps the logged LR, held
    after the last point.
    """
    ids = run_df["run_id"].unique()
    if len(ids) != 1:
        raise ValueError(f"controls_from_run needs the rows of one run, got {len(ids)} run ids")
    total = int(run_df["total_steps"].iloc[0])
    n_params = _first(run_df, "n_params")
    tokens = _first(run_df, "tokens")
    peak_lr = _first(run_df, "peak_lr")
    wd = _first(run_df, "weight_decay")
    warmup = _first(run_df, "warmup_steps")
    schedule = _first(run_df, "schedule")
    tpp = tokens / n_params if tokens and n_params else None
    tau = 1.0 / (peak_lr * wd * total) if peak_lr and wd else None
    lr_schedule = None
    if "lr" in run_df.columns and run_df["lr"].notna().any():
        rows = run_df[run_df["lr"].notna()]
        lr_vals = rows["lr"].to_numpy(float)
        logged_to = float(np.nanmax(rows["step"].to_numpy(float)))
        if np.nanmax(lr_vals) > 0 and not (
            logged_to < 0.99 * total and _known_schedule(schedule, total, warmup)
        ):
            lr_schedule = lr_schedule_from_points(
                rows["step"].to_numpy(float), lr_vals, total, warmup
            )
    return Controls(
        total_steps=total,
        tpp=tpp,
        tau=tau,
        schedule=str(schedule) if schedule is not None else None,
        warmup_steps=warmup,
        lr_schedule=lr_schedule,
        n_params=n_params,
        batch_tokens=_first(run_df, "batch_tokens"),
        peak_lr=peak_lr,
        weight_decay=wd,
        base_lr=_first(run_df, "base_lr"),
    )


def runs_from_frame(
    df: pd.DataFrame | Iterable[pd.DataFrame], split: str | None = "train", min_points: int = 1
) -> list[RunCurve]:
    """Per-run curves of a curve-format frame (or of a list of per-run frames), in file order.

    Every frame is validated (:func:`validate_curves`). Runs with fewer than ``min_points``
    points of ``split`` are left out.
    """
    frames = [df] if isinstance(df, pd.DataFrame) else list(df)
    out: list[RunCurve] = []
    for frame in frames:
        frame = validate_curves(frame)
        for run_id, run_df in frame.groupby("run_id", sort=False):
            steps, losses = run_arrays(run_df, split)
            if steps.size < min_points:
                continue
            group = _first(run_df, "group")
            out.append(
                RunCurve(
                    run_id=str(run_id),
                    steps=steps,
                    losses=losses,
                    controls=controls_from_run(run_df),
                    group=str(group) if group is not None else None,
                )
            )
    return out
