"""What each run of a study trains: the proxy plan (the proxy runs its universal curve is fitted
on, one per width, seed and combination of the ``proxies.vary`` values), a trial's recipe and
setup, the ``TrainConfig`` of a run, the ``Recipe`` that ``train`` derives from it, that
recipe's curve controls and the run's compute."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.models.settings import DEFAULT_TAU
from hpo.study.schema import Study
from hpo.study.stage import RunContext

if TYPE_CHECKING:
    from hpo.models.recipe import Recipe
    from hpo.models.training import TrainConfig


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


def with_params(settings: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (a recipe, or a ``TrainConfig``'s fields) with a trial's ``params``: a
    sampled ``tau`` frees ``weight_decay`` and the other way round (one sets the other)."""
    out = {**settings, **params}
    if "weight_decay" in params:
        out["tau"] = None
    if "tau" in params:
        out["weight_decay"] = None
    return out


def trial_overrides(study: Study, params: dict[str, Any]) -> dict[str, Any]:
    """Recipe (and seed) settings of a trial: the study's recipe with the trial's params."""
    recipe = with_params({**study.recipe, "seed": study.seed}, params)
    recipe["seed"] = int(recipe["seed"])
    return recipe


def train_config(study: Study, *, width: int, depth: int, recipe: dict[str, Any], run_id: str,
                 group: str, checkpoint: Path | None = None, inject: str | None = None) -> Any:
    """The ``hpo.models.training.TrainConfig`` of one run of the study's family (``inject``: a
    fault ``KIND@T`` to break it with)."""
    from hpo.models.settings import RunSettings
    from hpo.models.training import TrainConfig

    settings = RunSettings.from_sections({
        "model": {**study.model, "width": width, "depth": depth}, "recipe": recipe,
        "data": study.data})
    return TrainConfig(
        **settings, seed=int(recipe.get("seed", study.seed)), device=study.device,
        checkpoint=None if checkpoint is None else str(checkpoint),
        resume=checkpoint is not None, run_id=run_id, group=group, inject=inject,
    )


def trial_setup(ctx: RunContext, params: dict[str, Any], number: int,
                run_id: str | None = None) -> tuple[TrainConfig, Recipe]:
    """``(TrainConfig, Recipe)`` of trial ``number`` of the study of ``ctx`` with ``params``;
    ``run_id`` (default ``trial-<number>``) is the identity its checkpoint
    (``trials/<number>.ckpt``) is written and resumed under. Trial ``diagnose.inject_trial``
    gets the study's ``diagnose.inject`` fault. Raises ``ValueError`` for invalid settings."""
    study = ctx.study
    diagnose = study.diagnose
    inject = diagnose.get("inject") if number == diagnose.get("inject_trial", 0) else None
    cfg = train_config(study, width=study.model["width"], depth=study.model["depth"],
                       recipe=trial_overrides(study, params), run_id=run_id or f"trial-{number}",
                       group=f"sweep-{study.name}",
                       checkpoint=ctx.out / "trials" / f"{number}.ckpt", inject=inject)
    return cfg, recipe_of(cfg, ctx.vocab_size())


def recipe_of(cfg: TrainConfig, vocab_size: int) -> Recipe:
    """The ``hpo.models.recipe.Recipe`` that ``train(cfg)`` trains with (without building the
    model): steps, tau, weight decay and LRs of the run."""
    from hpo.models.recipe import make_recipe

    tau = cfg.tau if cfg.tau is not None or cfg.weight_decay is not None else DEFAULT_TAU
    return make_recipe(cfg=cfg.model_config(vocab_size=vocab_size), tpp=cfg.tpp,
                       batch_tokens=cfg.batch_tokens, lr=cfg.lr, tau=tau,
                       weight_decay=cfg.weight_decay, warmup=cfg.warmup, schedule=cfg.schedule)


def controls_of(rec: Recipe) -> dict[str, Any]:
    """The curve controls of a run with recipe ``rec``, as keyword arguments of
    ``hpo.predictors.Controls`` (the hidden-weight LR and weight decay, as in its curve)."""
    return dict(total_steps=rec.total_steps, tau=rec.tau, tpp=rec.tpp, schedule=rec.schedule,
                warmup_steps=rec.warmup_steps, n_params=rec.n_params,
                batch_tokens=rec.batch_tokens, peak_lr=rec.hidden_lr,
                weight_decay=rec.hidden_weight_decay, base_lr=rec.lr)


def cost_attrs(rec: Recipe, steps_done: int, status: str,
               final_val_loss: float | None) -> dict[str, Any]:
    """What a study records on a trial of recipe ``rec`` that trained ``steps_done`` steps and
    ended with ``status`` (a :class:`hpo.models.status.RunStatus` value): its size, steps,
    tokens and FLOPs done and planned, tau and weight decay, final val loss. The summary's
    compute accounting reads them, whichever backend ran the trial."""
    tokens = steps_done * rec.batch_tokens
    return {"n_params": rec.n_params, "total_steps": rec.total_steps,
            "steps_done": steps_done, "tokens": tokens, "full_tokens": rec.tokens,
            "flops": flops(rec.n_params, tokens), "full_flops": flops(rec.n_params, rec.tokens),
            "tau": rec.tau, "weight_decay": rec.weight_decay, "status": status,
            "final_val_loss": final_val_loss}


def flops(n_params: float, tokens: float) -> float:
    """Training compute in FLOPs, 6 N D (N all parameters, D tokens trained)."""
    return 6.0 * float(n_params) * float(tokens)
