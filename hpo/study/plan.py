"""The plan of a study and the pieces its stages share: the proxy plan, a trial's recipe and
training config, the objective, compute in FLOPs, the output folder's lock and the checks run
before a study starts.

Compute is counted as 6 N D FLOPs (N all parameters, D tokens trained).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo.pruning import PrunerSettings
from hpo.study.schema import Study, StudyError, check_files, check_storage

log = logging.getLogger(__name__)

IDENTITY_FILE = "study.json"
LOCK_FILE = ".hpo.lock"
INTERRUPTED_ATTR = "hpo:interrupted"
RESUME_RUN_ID_ATTR = "resume_run_id"  # a re-run trial trains under its original's identity
HEARTBEAT_ATTR = "hpo:heartbeat"  # system attr: when the trial's worker last marked it alive
FAIL_REASON_ATTR = "fail_reason"  # user attr: why a trial failed, in one line
RESIDUAL_ALERT_ATTR = "residual_alert"  # user attr: {t_hat, residual, threshold} of the alert
RESIDUAL_MAX_ATTR = "residual_max"  # user attr: the largest absolute collapse residual
READY_FILE = "sweep.ready"  # written when the proxies and the curve are ready for workers


@dataclass(frozen=True)
class ProxySpec:
    """One planned proxy run."""

    run_id: str
    width: int
    depth: int
    seed: int
    overrides: tuple[tuple[str, Any], ...]  # recipe settings varied for this proxy


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def plan_proxies(study: Study) -> list[ProxySpec]:
    """The proxy runs: widths x seeds x every combination of the ``vary`` values."""
    depth = study.proxies["depth"] or study.model["depth"]
    vary = study.proxies["vary"]
    names = sorted(vary)
    out = []
    for width, seed in itertools.product(study.proxies["widths"], study.proxies["seeds"]):
        for combo in itertools.product(*(vary[n] for n in names)):
            overrides = tuple(zip(names, combo, strict=True))
            tag = "".join(f"-{n}{_fmt(v)}" for n, v in overrides)
            out.append(ProxySpec(f"proxy-w{width}d{depth}{tag}-s{seed}", width, depth, seed,
                                 overrides))
    return out


def trial_overrides(study: Study, params: dict[str, Any]) -> dict[str, Any]:
    """Recipe (and seed) settings of a trial: the study's recipe with the trial's params."""
    recipe = dict(study.recipe)
    seed = study.seed
    for name, value in params.items():
        if name == "seed":
            seed = int(value)
        else:
            recipe[name] = value
    if "weight_decay" in params:
        recipe["tau"] = None
    if "tau" in params:
        recipe["weight_decay"] = None
    recipe["seed"] = seed
    return recipe


def same_params(a: dict[str, Any], b: dict[str, Any], rel: float = 1e-6) -> bool:
    """Whether two parameter dicts are equal (floats to ``rel``)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if not math.isclose(float(x), float(y), rel_tol=rel):
                return False
        elif x != y:
            return False
    return True


def train_config(study: Study, *, width: int, depth: int, recipe: dict[str, Any], run_id: str,
                 group: str, checkpoint: Path | None = None, inject: str | None = None) -> Any:
    """The ``hpo.models.training.TrainConfig`` of one run of the study's family (``inject``: a
    fault ``KIND@T`` to break it with)."""
    from hpo.models.training import TrainConfig

    m, d = study.model, study.data
    return TrainConfig(
        width=width, depth=depth, heads=m["heads"], context=m["context"],
        ffn_ratio=float(m["ffn_ratio"]), activation=m["activation"], position=m["position"],
        parametrization=m["parametrization"], base_width=m["base_width"],
        base_depth=m["base_depth"], alpha=float(m["alpha"]), tpp=float(recipe["tpp"]),
        tau=None if recipe.get("tau") is None else float(recipe["tau"]),
        weight_decay=None if recipe.get("weight_decay") is None else float(
            recipe["weight_decay"]),
        lr=float(recipe["lr"]), batch_tokens=int(recipe["batch_tokens"]),
        schedule=str(recipe["schedule"]), warmup=float(recipe["warmup"]),
        grad_clip=None if recipe.get("grad_clip") is None else float(recipe["grad_clip"]),
        seed=int(recipe.get("seed", study.seed)), data=d["source"],
        val_fraction=float(d["val_fraction"]), max_data_bytes=d["max_bytes"],
        device=study.device, eval_batches=int(d["eval_batches"]),
        checkpoint=None if checkpoint is None else str(checkpoint),
        resume=checkpoint is not None, run_id=run_id, group=group, inject=inject,
    )


def recipe_of(cfg: Any, vocab_size: int) -> Any:
    """The ``hpo.models.recipe.Recipe`` that ``train(cfg)`` trains with (without building the
    model): steps, tau, weight decay and LRs of the run."""
    from hpo.models.recipe import make_recipe

    tau = cfg.tau if cfg.tau is not None or cfg.weight_decay is not None else 0.2
    return make_recipe(cfg=cfg.model_config(vocab_size=vocab_size), tpp=cfg.tpp,
                       batch_tokens=cfg.batch_tokens, lr=cfg.lr, tau=tau,
                       weight_decay=cfg.weight_decay, warmup=cfg.warmup, schedule=cfg.schedule)


def controls_of(rec: Any) -> dict[str, Any]:
    """The curve controls of a run with recipe ``rec``, as keyword arguments of
    ``hpo.predictors.Controls`` (the hidden-weight LR and weight decay, as in its curve)."""
    return dict(total_steps=rec.total_steps, tau=rec.tau, tpp=rec.tpp, schedule=rec.schedule,
                warmup_steps=rec.warmup_steps, n_params=rec.n_params,
                batch_tokens=rec.batch_tokens, peak_lr=rec.hidden_lr,
                weight_decay=rec.hidden_weight_decay, base_lr=rec.lr)


def pruner_settings(study: Any) -> PrunerSettings:
    """The study's ``pruner`` section as :class:`hpo.pruning.PrunerSettings` (its settings;
    ``enabled`` and ``report_points`` are the study's own). ``ValueError`` only for a section
    that did not come through :func:`hpo.study.schema.parse_study`, which checks it alike."""
    p = study.pruner
    return PrunerSettings(**{name: p[name] for name in PrunerSettings.names() if name in p})


def pruner_kwargs(study: Any) -> dict[str, Any]:
    """The study's ``pruner`` section as keyword arguments of ``hpo.CollapsePruner`` and
    ``hpo.CollapseScheduler`` (the one mapping both backends use:
    :meth:`hpo.pruning.PrunerSettings.kwargs` of :func:`pruner_settings`)."""
    return pruner_settings(study).kwargs()


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


def curve_runs(folder: Path, pattern: str = "*.csv.gz") -> list[Any]:
    """The train curves (``hpo.predictors.RunCurve``) of the curve files in ``folder``."""
    from hpo.predictors import read_curves, runs_from_frame

    paths = sorted(folder.glob(pattern))
    return runs_from_frame(read_curves(paths), split="train") if paths else []


def run_id_of(frozen: Any) -> str:
    """The identity a trial's training runs under: that of the trial it continues, if any."""
    return str(frozen.user_attrs.get(RESUME_RUN_ID_ATTR) or f"trial-{frozen.number}")


def objective_value(rows: list[dict], objective: str) -> float:
    """The trial's value from its curve rows: the smoothed final train loss (what the predictor
    predicts, :func:`hpo.predictors.final_loss_estimate` at t^ = 1) or the last val loss."""
    import numpy as np

    from hpo.predictors.normalize import final_loss_estimate

    if objective == "val":
        val = [r["loss"] for r in rows if r["split"] == "val"]
        return float(val[-1]) if val else math.nan
    train = [r for r in rows if r["split"] == "train"]
    if not train:
        return math.nan
    total = float(train[0]["total_steps"])
    t = np.array([r["step"] for r in train], dtype=float) / total
    y = np.array([r["loss"] for r in train], dtype=float)
    ok = np.isfinite(y)
    if not ok.any():
        return math.nan
    return final_loss_estimate(t[ok], y[ok], at=1.0)


def flops(n_params: float, tokens: float) -> float:
    """Training compute, 6 N D."""
    return 6.0 * float(n_params) * float(tokens)


class FolderLock:
    """One coordinating ``hpo run`` per output folder: an exclusive ``fcntl.flock`` on
    ``.hpo.lock``, which the kernel releases when the process dies (a killed, even unreaped,
    process never blocks a rerun). The file holds the holder's pid, for the message only.
    ``hpo run --worker`` processes do not take it: they join the running study."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> FolderLock:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(f"output folder {str(self.path.parent)!r} is in use by another "
                             f"hpo run (pid {holder}); wait for it, stop it, or add workers "
                             "to it with hpo run STUDY --worker") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock; the file stays (removing it would race)
            self._fd = None


def check_resumable(study: Study) -> None:
    """``StudyError`` when the output folder holds a different study (nothing is touched)."""
    path = study.output / IDENTITY_FILE
    if not path.exists():
        return
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    mine = json.loads(json.dumps(study.identity()))
    diff = [k for k in mine if stored.get(k) != mine[k]]
    if diff:
        raise StudyError(study.source, [(
            ", ".join(diff),
            f"differs from the study already in {str(study.output)!r}; resuming needs the same "
            "settings (only budget, pruner, backend, device and ray may change): give a new "
            "output folder (--output) or restore the file")])


def check_before_run(study: Study, address: str | None = None,
                     where: str = "--address") -> None:
    """What ``hpo run`` needs that is cheap to check, before anything is trained or written
    (``hpo validate`` runs the same): the input files and the storage (every problem in one
    :class:`StudyError`), an output folder that holds this study or none, and with
    ``backend: ray`` the cluster at ``address`` (one TCP connection; a
    :class:`~hpo._errors.UsageError` naming ``where``, the flag or field that gave it)."""
    errors: list[tuple[str, str]] = []
    for check in (check_files, check_storage):
        try:
            check(study)
        except StudyError as exc:
            errors += exc.errors
    if errors:
        raise StudyError(study.source, errors)
    check_resumable(study)
    if study.backend == "ray":
        from hpo._net import check_address

        check_address(address, where)


def prediction_accuracy(rows: list[dict[str, Any]],
                        verification: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """How well the trials' final losses were predicted (at each trial's latest checkpoint):
    against the final value of completed trials, the ``--verify`` value of stopped ones, or the
    full sweep's value of the same params. ``{"n", "inside", "median_abs_err",
    "max_abs_err"}`` (relative errors) and a ``per_trial`` list; n 0 when nothing is known."""
    verified = {v["trial"]: v["actual"] for v in verification or []}
    per = []
    for r in rows:
        truth = r["value"] if r["state"] == "complete" else verified.get(
            r["trial"], r.get("full_sweep_value"))
        if truth is None or r.get("predicted") is None:
            continue
        itv = r.get("interval")
        per.append({"trial": r["trial"], "predicted": r["predicted"], "actual": truth,
                    "rel_err": r["predicted"] / truth - 1,
                    "inside": None if not itv else bool(itv[0] <= truth <= itv[1])})
    errs = sorted(abs(p["rel_err"]) for p in per)
    return {
        "n": len(per),
        "inside": sum(1 for p in per if p["inside"]),
        "median_abs_err": (errs[len(errs) // 2] if len(errs) % 2 else
                           0.5 * (errs[len(errs) // 2 - 1] + errs[len(errs) // 2])) if errs
        else None,
        "max_abs_err": errs[-1] if errs else None,
        "per_trial": per,
    }



def distribution(d: dict[str, Any]) -> Any:
    import optuna.distributions as od

    if d["type"] == "categorical":
        return od.CategoricalDistribution(d["choices"])
    if d["type"] == "int":
        return od.IntDistribution(d["low"], d["high"], log=d.get("log", False),
                                  step=d.get("step") or 1)
    return od.FloatDistribution(float(d["low"]), float(d["high"]), log=d.get("log", False),
                                step=d.get("step"))


def params_text(params: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={fmt_param(v)}" for k, v in sorted(params.items())) + "}"


def fmt_param(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def fmt_number(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.4f}"


@contextlib.contextmanager
def quiet_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
