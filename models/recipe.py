"""The collapse recipe: from a model size, TPP, batch, peak LR and tau to steps, warmup and lambda.

No torch: ``hpo recipe`` and the study schema plan runs without loading a backend.

Definitions ("Scaling with Collapse", Bergsma et al. 2025, arXiv 2509.25087):

- ``N`` counts **all** trainable parameters, embeddings and the (untied) output head included,
  exactly what ``GPT.num_params()`` returns. TPP = D / N.
- ``D = TPP * N`` planned tokens; ``T = ceil(D / B)`` optimizer steps of ``B`` tokens each. The run
  trains ``T * B >= D`` tokens; :attr:`Recipe.tokens` is that number.
- ``tau = 1 / (eta_h * lambda_h * T)``: the normalized AdamW timescale, with ``eta_h`` the *peak*
  LR and ``lambda_h`` the decoupled weight decay (``torch.optim.AdamW`` semantics) **as applied to
  the hidden weights**. Under CompleteP (width multiplier ``m_N``, depth multiplier ``m_L``, depth
  exponent ``alpha``) the hidden weights get ``eta_h = eta * m_N^-1 * m_L^(alpha-1)`` and
  ``lambda_h = lambda * m_N``, so ``eta_h * lambda_h = eta * lambda * m_L^(alpha-1)``: tau does not
  depend on width, and for ``alpha = 1`` not on depth either. ``eta`` and ``lambda`` are the *base*
  values (at base width and depth) that the user sets. Under standard parametrization all
  multipliers are 1.

Schedules: the curve format's names (``linear``, the default, ``cosine``, ``cosine:F``,
``wsd:linear:F``, ``wsd:sqrt:F``, ``constant``) after a linear warmup, read and evaluated by
:mod:`hpo.predictors.schedules` (one grammar for the recipe, the study schema and the predictors).

``step`` is the optimizer step as the curve format counts it: the update with number ``step``
(1-based) is taken with ``peak * lr_multiplier(step, ...)``; warmup gives ``step / W`` (so step 1
gets ``1 / W`` and step ``W`` the peak) and ``linear`` reaches exactly 0 at ``step = T``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpo.predictors.schedules import parse_schedule, schedule_from_name

__all__ = [
    "Recipe",
    "make_recipe",
    "count_params",
    "hidden_lr_wd",
    "weight_decay_for_tau",
    "tau_for_weight_decay",
    "lr_multiplier",
]

def _bad(name: str, value: object, why: str) -> ValueError:
    return ValueError(f"{name} must be {why}, but got {name}={value!r}.")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise _bad(name, value, "a finite number > 0")


# ---- schedules ----------------------------------------------------------------------------------


def lr_multiplier(step: float, total_steps: int, warmup_steps: int = 0,
                  schedule: str = "linear") -> float:
    """LR multiplier in [0, 1] (1 = peak) of the update numbered ``step`` (1-based, as in curves):
    :func:`hpo.predictors.schedules.schedule_from_name` at ``t^ = step / total_steps``, with
    linear warmup ``step / warmup_steps``. Requires ``0 <= warmup_steps < total_steps``.
    """
    if not isinstance(total_steps, int) or total_steps < 1:
        raise _bad("total_steps", total_steps, "an integer >= 1")
    if not 0 <= warmup_steps < total_steps:
        raise _bad("warmup_steps", warmup_steps, f"in [0, total_steps={total_steps})")
    parse_schedule(schedule)
    t_hat = np.array([min(max(step, 0.0), float(total_steps)) / total_steps])
    return float(schedule_from_name(schedule, total_steps, warmup_steps, t_hat)[0])


# ---- tau <-> lambda -----------------------------------------------------------------------------


def hidden_lr_wd(lr: float, weight_decay: float, width_mult: float = 1.0,
                 depth_mult: float = 1.0, alpha: float = 1.0) -> tuple[float, float]:
    """``(eta_h, lambda_h)``: base LR and weight decay as CompleteP applies them to hidden weights.

    ``eta_h = lr / m_N * m_L^(alpha - 1)``, ``lambda_h = weight_decay * m_N`` (CompleteP, "Don't
    be lazy", Dey et al. 2025). With all multipliers 1 (standard parametrization) they are
    ``(lr, weight_decay)``.
    """
    return lr / width_mult * depth_mult ** (alpha - 1.0), weight_decay * width_mult


def weight_decay_for_tau(tau: float, lr: float, total_steps: int, width_mult: float = 1.0,
                         depth_mult: float = 1.0, alpha: float = 1.0) -> float:
    """Base weight decay ``lambda`` that gives timescale ``tau`` over ``total_steps`` at base LR
    ``lr``: solves ``tau = 1 / (eta_h * lambda_h * T)``. ``tau = inf`` gives 0."""
    if tau == math.inf:
        return 0.0
    eta_h, unit = hidden_lr_wd(lr, 1.0, width_mult, depth_mult, alpha)
    return 1.0 / (tau * eta_h * unit * total_steps)


def tau_for_weight_decay(weight_decay: float, lr: float, total_steps: int,
                         width_mult: float = 1.0, depth_mult: float = 1.0,
                         alpha: float = 1.0) -> float:
    """The inverse of :func:`weight_decay_for_tau`: ``tau = 1 / (eta_h * lambda_h * T)``
    (``inf`` for no weight decay)."""
    eta_h, lam_h = hidden_lr_wd(lr, weight_decay, width_mult, depth_mult, alpha)
    if eta_h * lam_h == 0.0:
        return math.inf
    return 1.0 / (eta_h * lam_h * total_steps)


def count_params(cfg: Any) -> int:
    """N of a ``GPTConfig`` without building the model: all parameters (token and learned position
    embeddings, blocks, final norm, untied output head), as ``GPT(cfg).num_params()`` counts them.
    """
    d, v, hd = cfg.width, cfg.vocab_size, cfg.head_dim or cfg.width // cfg.heads
    inner, hidden = cfg.heads * hd, cfg.ffn_hidden
    norm = d * (2 if cfg.ln_bias else 1)
    ffn = d * hidden * (3 if cfg.activation == "swiglu" else 2)
    block = 2 * norm + 4 * d * inner + ffn  # ln1, ln2, qkv + proj, FFN
    pos = cfg.context * d if cfg.position == "learned" else 0
    return 2 * v * d + pos + cfg.depth * block + norm


# ---- the recipe ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """One run's controls, derived and consistent. Build it with :func:`make_recipe`.

    Every field is validated on construction (``ValueError`` naming the field and the value).
    """

    n_params: int  # N: all parameters, embeddings and output head included
    tpp: float  # requested tokens per parameter (D = tpp * N)
    batch_tokens: int  # B: tokens per optimizer step
    total_steps: int  # T = ceil(tpp * N / B)
    warmup_steps: int  # W, 0 <= W < T
    schedule: str  # schedule name (see module docstring)
    lr: float  # eta: base peak LR (at base width and depth)
    weight_decay: float  # lambda: base decoupled weight decay
    tau: float  # 1 / (eta_h * lambda_h * T); inf without weight decay
    width_mult: float = 1.0  # m_N (1 under standard parametrization)
    depth_mult: float = 1.0  # m_L
    alpha: float = 1.0  # CompleteP depth exponent

    def __post_init__(self) -> None:
        for name in ("n_params", "batch_tokens", "total_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _bad(name, value, "an integer >= 1")
        for name in ("tpp", "lr", "width_mult", "depth_mult", "alpha"):
            _positive(name, getattr(self, name))
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) \
                or not 0 <= self.warmup_steps < self.total_steps:
            raise _bad("warmup_steps", self.warmup_steps,
                       f"an integer in [0, total_steps={self.total_steps})")
        parse_schedule(self.schedule)
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise _bad("weight_decay", self.weight_decay, "a finite number >= 0")
        if not self.tau > 0:
            raise _bad("tau", self.tau, "> 0")
        expected = tau_for_weight_decay(self.weight_decay, self.lr, self.total_steps,
                                        self.width_mult, self.depth_mult, self.alpha)
        if not math.isclose(self.tau, expected, rel_tol=1e-9):
            raise _bad("tau", self.tau, f"1 / (eta_h * lambda_h * T) = {expected!r}")

    @property
    def tokens(self) -> int:
        """Tokens actually trained, ``T * B`` (>= tpp * N by less than one batch)."""
        return self.total_steps * self.batch_tokens

    @property
    def hidden_lr(self) -> float:
        """eta_h: peak LR applied to hidden weights."""
        return hidden_lr_wd(self.lr, self.weight_decay, self.width_mult, self.depth_mult,
                            self.alpha)[0]

    @property
    def hidden_weight_decay(self) -> float:
        """lambda_h: weight decay applied to hidden weights."""
        return hidden_lr_wd(self.lr, self.weight_decay, self.width_mult, self.depth_mult,
                            self.alpha)[1]

    def lr_multiplier(self, step: float) -> float:
        """Schedule multiplier of update ``step`` (1-based); see :func:`lr_multiplier`."""
        return lr_multiplier(step, self.total_steps, self.warmup_steps, self.schedule)


def make_recipe(
    *,
    n_params: int | None = None,
    cfg: Any = None,
    tpp: float,
    batch_tokens: int,
    lr: float,
    tau: float | None = None,
    weight_decay: float | None = None,
    warmup: float = 0.05,
    schedule: str = "linear",
    width_mult: float = 1.0,
    depth_mult: float = 1.0,
    alpha: float = 1.0,
) -> Recipe:
    """Derive a :class:`Recipe` from N (all parameters), TPP, B, base peak LR and tau or lambda.

    Give ``n_params`` (N) or a ``GPTConfig`` as ``cfg``: then N is :func:`count_params` of it and
    the multipliers ``width_mult``, ``depth_mult``, ``alpha`` are taken from it.

    Give exactly one of ``tau`` (then lambda is solved for) or ``weight_decay`` (base lambda; then
    tau follows). ``warmup`` below 1 is a fraction of T (rounded), 1 or more a number of steps; it
    is capped at ``T - 1``. ``width_mult``, ``depth_mult``, ``alpha`` come from the model config
    (``GPTConfig.width_mult`` ...); all 1 under standard parametrization.
    """
    if cfg is not None:
        if n_params is not None:
            raise ValueError(f"give n_params or cfg, not both, but got n_params={n_params!r}.")
        n_params = count_params(cfg)
        width_mult, depth_mult, alpha = cfg.width_mult, cfg.depth_mult, cfg.alpha
    if (tau is None) == (weight_decay is None):
        raise ValueError(
            f"give exactly one of tau and weight_decay, but got tau={tau!r} and "
            f"weight_decay={weight_decay!r}."
        )
    if isinstance(n_params, bool) or not isinstance(n_params, int) or n_params < 1:
        raise _bad("n_params", n_params, "an integer >= 1")
    _positive("tpp", tpp)
    if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int) or batch_tokens < 1:
        raise _bad("batch_tokens", batch_tokens, "an integer >= 1")
    _positive("lr", lr)
    if not (isinstance(warmup, (int, float)) and warmup >= 0 and math.isfinite(warmup)):
        raise _bad("warmup", warmup, "a fraction in [0, 1) or a number of steps >= 1")
    parse_schedule(schedule)
    schedule = schedule.strip().lower()
    total_steps = max(1, math.ceil(tpp * n_params / batch_tokens))
    warmup_steps = round(warmup * total_steps) if warmup < 1 else int(round(warmup))
    warmup_steps = min(warmup_steps, total_steps - 1)
    mults = (width_mult, depth_mult, alpha)
    if tau is not None:
        if not (isinstance(tau, (int, float)) and tau > 0):
            raise _bad("tau", tau, "a number > 0")
        weight_decay = weight_decay_for_tau(tau, lr, total_steps, *mults)
    else:
        assert weight_decay is not None
        if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0
                and math.isfinite(weight_decay)):
            raise _bad("weight_decay", weight_decay, "a finite number >= 0")
        tau = tau_for_weight_decay(weight_decay, lr, total_steps, *mults)
    return Recipe(
        n_params=n_params, tpp=float(tpp), batch_tokens=batch_tokens, total_steps=total_steps,
        warmup_steps=warmup_steps, schedule=schedule, lr=float(lr),
        weight_decay=float(weight_decay), tau=float(tau), width_mult=float(width_mult),
        depth_mult=float(depth_mult), alpha=float(alpha),
    )
