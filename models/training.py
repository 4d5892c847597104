"""The training loop: one CompleteP GPT trained for exactly T steps, emitting its loss curve.

:func:`train` builds the model, derives the run's :class:`~models.recipe.Recipe` (steps, warmup,
weight decay for the requested tau), trains with ``torch.optim.AdamW`` (betas 0.9, 0.95) on the
model's CompleteP parameter groups with the per-step LR ``group peak LR * lr_multiplier(step)``,
hands every logged :class:`TrainPoint` to a callback that may stop the run (the pruners' hook), and
returns a :class:`TrainResult` whose ``rows`` are the run's curve in the curve format
(``shared/data/curves/README.md``), written with :func:`write_curve`.

Curve conventions:

- ``step`` k (1..T) counts optimizer updates. The ``train`` row at step k holds the loss of the
  batch of update k (computed before that update) and ``lr`` the LR of update k; the ``val`` row
  at step k the mean loss over a fixed set of val batches after update k (the same batches at
  every evaluation and for every run with the same data, context and batch size).
- ``peak_lr`` and ``weight_decay`` are as applied to the **hidden** weights (``eta_h``,
  ``lambda_h``), so ``1 / (peak_lr * weight_decay * total_steps)`` is the run's tau, and ``lr`` is
  the hidden-weight LR at that step. ``base_lr`` (an extra column) is the recipe's base LR eta,
  the same for one setting at every width. ``tokens`` is ``T * B``; ``n_params`` counts all
  parameters.

Fault injection (``TrainConfig.inject = "KIND@T"``, ``hpo train --inject``) breaks a run on
purpose, so that a monitor of the collapse residual can be shown to catch it. ``T`` in (0, 1) is
the fraction of training at which the fault starts: start step ``s = max(1, ceil(T * total))``.
Steps before ``s`` are bitwise those of the clean run (on CPU).

- ``lr-spike``: every group's LR times :data:`LR_SPIKE_FACTOR` (10) for
  ``max(1, round(LR_SPIKE_FRACTION * total))`` steps (2% of T) from ``s``, then back to normal;
  the ``lr`` column shows the spiked LR.
- ``data-repeat``: at ``s`` the train sampler draws :data:`DATA_REPEAT_BATCHES` (4) batches once;
  for ``max(1, round(DATA_REPEAT_FRACTION * total))`` steps (10% of T) from ``s`` training cycles
  over them (so the window's first four steps see the batches the clean run saw there); afterwards
  the sampler continues from where those draws left it, as if nothing had happened.
- ``grad-noise``: from ``s`` to the end, after backward and before clipping and the step, every
  gradient tensor gets Gaussian noise of std :data:`GRAD_NOISE_SCALE` (1) times that tensor's own
  RMS, from a ``torch.Generator`` on the training device seeded from ``seed`` (reruns identical).
- ``precision``: from ``s`` to the end, the training loss is computed on logits rounded to
  multiples of :data:`PRECISION_STEP` (1.5) with a straight-through estimator, so the logged train
  loss and the gradients are both lossy; val losses stay exact. On the default tiny model (width
  64, depth 2, 664 steps, from T = 0.5) a step of 0.5 raised the late train loss by 0.4% only,
  1.5 by ~4% with the loss still falling, 3 by 15%.
- ``restart``: at ``s`` the run behaves as if resumed from a checkpoint with another data order:
  the train sampler is re-created and torch's global RNG reseeded with
  ``seed + RESTART_SEED_OFFSET``; model and optimizer state carry over.

A faulty run's rows carry an extra ``inject`` column (the spec), its default run id ends in
``-inject-KIND@T``, and checkpoint/resume stays exact (the fault's state is in the checkpoint).

Library code logs through :mod:`logging`; it prints nothing.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hpo._extras import require

require("torch", "train")
import torch
import torch.nn.functional as F

from hpo.models.config import GPTConfig
from hpo.models.data import BatchSampler, load_tokens
from hpo.models.faults import (
    DATA_REPEAT_BATCHES,
    FAULTS,
    GRAD_NOISE_SCALE,
    GRAD_NOISE_SEED_OFFSET,
    LR_SPIKE_FACTOR,
    PRECISION_STEP,
    RESTART_SEED_OFFSET,
    Fault,
    parse_fault,
)
from hpo.models.gpt import GPT
from hpo.models.recipe import Recipe, make_recipe
from hpo.models.settings import DEFAULT_TAU, RunSettings
from hpo.models.status import RunStatus

__all__ = [
    "FAULTS",
    "Fault",
    "parse_fault",
    "TrainConfig",
    "TrainPoint",
    "TrainResult",
    "train",
    "write_curve",
    "CURVE_COLUMNS",
    "DEFAULT_TAU",
]

log = logging.getLogger(__name__)

CURVE_COLUMNS = (
    "run_id", "group", "n_params", "tokens", "total_steps", "batch_tokens", "peak_lr",
    "weight_decay", "schedule", "warmup_steps", "step", "lr", "loss", "split",
)
_VAL_SEED = 1234  # val batches are the same for every run (comparable val curves)
_CKPT_VERSION = 1
#: below this many parameters a CPU run uses one thread by default: small matmuls gain little from
#: more, and on a loaded machine OpenMP threads that spin-wait on each other are many times slower
SMALL_MODEL_PARAMS = 10_000_000

@dataclass
class TrainConfig(RunSettings):
    """Everything one training run needs: its :class:`~hpo.models.settings.RunSettings` (model
    shape, recipe, data; declared there) and where and how it trains, logs and checkpoints.
    Validated on construction: ``ValueError`` naming the field and the value
    (``"tpp must be a finite number > 0, but got tpp=-1.0."``)."""

    # hardware
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 autocast on CUDA, fp32 on CPU) | float32 | bfloat16
    compile: bool = False  # torch.compile the model
    peak_flops: float = 989e12  # accelerator peak (H100/H200 dense bf16) for MFU
    threads: int | None = None  # CPU threads; None: 1 below SMALL_MODEL_PARAMS, else torch's own
    # logging and checkpoints
    log_every: int | None = None  # None: every step up to 2000 steps, else ~2000 points
    eval_every: int | None = None  # None: ~20 evaluations per run (and always at T)
    eval_batches: int = 4  # val batches (of batch_tokens each) per evaluation
    checkpoint: str | None = None  # checkpoint file; None: no checkpoints
    checkpoint_every: int | None = None  # None: ~10 per run (and at the end or a stop)
    resume: bool = False  # continue from `checkpoint` when it exists
    out: str | None = None  # curve file (.csv or .csv.gz) written at the end; None: not written
    run_id: str | None = None  # None: derived from the settings
    group: str | None = None  # None: derived from shape, TPP and schedule
    # fault injection
    inject: str | None = None  # KIND@T (see the module docstring); None: a clean run

    def __post_init__(self) -> None:
        super().__post_init__()

        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"{name} must be {why}, but got {name}={getattr(self, name)!r}.")

        for name in ("log_every", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise bad(name, "a positive integer or None")
        if self.data != "stdlib" and not Path(self.data).exists():
            raise bad("data", "'stdlib' or an existing file or folder")  # the run reads it
        if not _finite_positive(self.peak_flops):
            raise bad("peak_flops", "a finite number > 0")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise bad("dtype", "one of auto, float32, bfloat16")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise bad("device", "auto, cpu, cuda or cuda:N")
        if self.out is not None and not str(self.out).endswith((".csv", ".csv.gz")):
            raise bad("out", "a path ending in .csv or .csv.gz")
        threads = self.threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise bad("threads", "a positive integer or None")
        if self.resume and self.checkpoint is None:
            raise bad("checkpoint", "a path when resume is set")
        if self.inject is not None:
            parse_fault(self.inject)

    @property
    def fault(self) -> Fault | None:
        """The parsed :attr:`inject`, or ``None`` for a clean run."""
        return None if self.inject is None else parse_fault(self.inject)

    @property
    def batch_size(self) -> int:
        """Sequences per step, ``batch_tokens // context``."""
        return self.batch_tokens // self.context

    def model_config(self, vocab_size: int = 256) -> GPTConfig:
        """The :class:`GPTConfig` of this run's model."""
        return GPTConfig(
            vocab_size=vocab_size, context=self.context, width=self.width, depth=self.depth,
            heads=self.heads, ffn_ratio=self.ffn_ratio, activation=self.activation,
            position=self.position, parametrization=self.parametrization, alpha=self.alpha,
            base_width=self.base_width, base_depth=self.base_depth,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _finite_positive(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


@dataclass(frozen=True)
class TrainPoint:
    """One logged point, as handed to the callback."""

    step: int  # optimizer updates done (1..T)
    tokens: int  # tokens seen so far, step * B
    t_hat: float  # step / T
    lr: float  # hidden-weight LR of this step's update
    train_loss: float  # loss of this step's batch
    val_loss: float | None = None  # mean val loss after this update, on evaluation steps


@dataclass
class TrainResult:
    """What a run produced. ``rows`` is the curve (curve-format dicts, train and val rows)."""

    run_id: str
    group: str
    recipe: Recipe
    n_params: int
    steps: int  # updates completed (== recipe.total_steps unless stopped)
    status: RunStatus  # COMPLETED, STOPPED (the callback asked) or DIVERGED (non-finite loss)
    final_train_loss: float
    final_val_loss: float | None
    tokens_per_s: float  # training throughput of this process (evaluation time excluded)
    mfu: float | None  # model FLOPs utilization (CUDA only)
    train_seconds: float
    device: str
    rows: list[dict] = field(default_factory=list, repr=False)

    @property
    def tau(self) -> float:
        return self.recipe.tau

    def summary(self) -> str:
        """One line: size, steps, losses, throughput."""
        val = "n/a" if self.final_val_loss is None else f"{self.final_val_loss:.4f}"
        mfu = "" if self.mfu is None else f" MFU {100 * self.mfu:.1f}%"
        return (f"{self.run_id}: {self.status} {self.steps}/{self.recipe.total_steps} steps, "
                f"N={self.n_params:,}, tau={self.recipe.tau:.4g}, "
                f"final train loss {self.final_train_loss:.4f}, val loss {val}, "
                f"{self.tokens_per_s:,.0f} tokens/s{mfu} ({self.device})")


def write_curve(rows: list[dict], path: str | os.PathLike) -> Path:
    """Write curve rows as CSV (gzipped when ``path`` ends in ``.gz``) with :data:`CURVE_COLUMNS`
    first; floats are written with ``repr`` precision so they read back exactly."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = sorted({k for r in rows for k in r} - set(CURVE_COLUMNS))
    opener = gzip.open if path.suffix == ".gz" else open
    tmp = path.with_name(path.name + ".tmp")
    with opener(tmp, "wt", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*CURVE_COLUMNS, *extra], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device must be available, but got device={name!r} (no CUDA device).")
    return device


def _default_ids(cfg: TrainConfig, recipe: Recipe) -> tuple[str, str]:
    group = cfg.group or (f"w{cfg.width}d{cfg.depth}-tpp{cfg.tpp:g}-b{cfg.batch_tokens}-"
                          f"{recipe.schedule}")
    fault = cfg.fault
    run_id = cfg.run_id or (f"w{cfg.width}d{cfg.depth}-tpp{cfg.tpp:g}-tau{recipe.tau:.4g}-"
                            f"lr{cfg.lr:g}-{recipe.schedule}-s{cfg.seed}"
                            + ("" if fault is None else f"-inject-{fault}"))
    return run_id, group


def _lossy_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, step_size: float
                         ) -> torch.Tensor:
    """The model's cross entropy (``GPT.forward``) on logits rounded to multiples of
    ``step_size``, with a straight-through estimator: the value is that of the rounded logits,
    and the gradient (the one at the rounded logits) passes to the logits unchanged."""
    z = logits.float()  # (B, T, V)
    z = z + (torch.round(z / step_size) * step_size - z).detach()
    return F.cross_entropy(z.flatten(0, 1), targets.reshape(-1))


def _add_grad_noise(parameters: Iterable[torch.nn.Parameter], generator: torch.Generator,
                    scale: float) -> None:
    """Add N(0, (scale * RMS(g))^2) noise to every gradient g, drawn from ``generator``."""
    with torch.no_grad():
        for p in parameters:
            if p.grad is None:
                continue
            g = p.grad
            rms = g.float().pow(2).mean().sqrt()
            noise = torch.randn(g.shape, generator=generator, device=g.device, dtype=g.dtype)
            g.add_(noise * (scale * rms).to(g.dtype))


def _auto_every(total: int, points: int) -> int:
    return max(1, math.ceil(total / points))


def train(cfg: TrainConfig, callback: Callable[[TrainPoint], bool | None] | None = None
          ) -> TrainResult:
    """Train one model for exactly ``recipe.total_steps`` updates (fewer if stopped).

    ``callback(point)`` receives every logged :class:`TrainPoint` in order (train loss every
    ``log_every`` steps, with ``val_loss`` set on evaluation steps; steps already done before a
    resume are not replayed); returning ``True`` stops the run after that step (status
    ``RunStatus.STOPPED``). A non-finite train loss stops it too (``RunStatus.DIVERGED``).

    With ``cfg.checkpoint`` set, model, optimizer, step, data-sampler state and the curve so far
    are saved every ``checkpoint_every`` steps and when the run ends; with ``cfg.resume`` a run
    continues from that file and ends bitwise equal (on CPU) to an uninterrupted one. With
    ``cfg.out`` set the curve is written there at the end. ``cfg.inject`` breaks the run on purpose
    (see the module docstring); a faulty run resumes exactly too.

    Raises ``ValueError`` for unusable data (missing path, too short for the context) or a
    checkpoint written by a different configuration.
    """
    run = _Run(cfg)
    if cfg.resume and run.ckpt is not None and run.ckpt.exists():
        run.resume()
    run.loop(callback)
    result = run.result()
    if cfg.out is not None:
        write_curve(result.rows, cfg.out)
    log.info("%s", result.summary())
    return result


class _Run:
    """One run of :func:`train` between its steps: model, optimizer, samplers, the fault's
    state and the curve so far. Built from a :class:`TrainConfig` in the order that makes a run
    reproducible (seed, model, optimizer, samplers); :meth:`resume` and :meth:`save_checkpoint`
    carry all of it through the checkpoint file; :meth:`loop` trains."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.device = _resolve_device(cfg.device)
        self.cuda = self.device.type == "cuda"
        self.dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if self.cuda else "float32")
        if self.cuda:
            torch.set_float32_matmul_precision("high")
        self.data = load_tokens(cfg.data, val_fraction=cfg.val_fraction,
                                max_bytes=cfg.max_data_bytes)
        self._build_model()
        self._build_recipe()
        total = self.recipe.total_steps
        self.run_id, self.group = _default_ids(cfg, self.recipe)
        self.log_every = cfg.log_every or (1 if total <= 2000 else _auto_every(total, 2000))
        self.eval_every = cfg.eval_every or _auto_every(total, 20)
        self.ckpt_every = cfg.checkpoint_every or _auto_every(total, 10)
        self._build_optimizer()
        self._describe()
        self._set_up_fault()
        self.rows: list[dict] = []
        self.start = 0  # updates done before this process (a resume)
        self.status = RunStatus.RUNNING
        self.ckpt = Path(cfg.checkpoint) if cfg.checkpoint else None
        self.train_seconds, self.timed_steps = 0.0, 0

    def _build_model(self) -> None:
        """The model, seeded with ``cfg.seed``; one CPU thread for a small model unless told."""
        cfg = self.cfg
        self.gcfg = cfg.model_config(vocab_size=self.data.vocab_size)
        torch.manual_seed(cfg.seed)
        self.model = GPT(self.gcfg).to(self.device)
        self.n_params = self.model.num_params()
        threads = cfg.threads
        if threads is None and self.device.type == "cpu" and self.n_params < SMALL_MODEL_PARAMS:
            threads = 1
        if threads is not None:
            torch.set_num_threads(threads)  # process-wide, as torch has it

    def _build_recipe(self) -> None:
        """The run's recipe, and the hidden-weight LR and weight decay the model applies."""
        cfg, gcfg = self.cfg, self.gcfg
        recipe = make_recipe(
            n_params=self.n_params, tpp=cfg.tpp, batch_tokens=cfg.batch_tokens, lr=cfg.lr,
            tau=DEFAULT_TAU if cfg.tau is None and cfg.weight_decay is None else cfg.tau,
            weight_decay=cfg.weight_decay, warmup=cfg.warmup, schedule=cfg.schedule,
            width_mult=gcfg.width_mult, depth_mult=gcfg.depth_mult, alpha=gcfg.alpha,
        )
        eta_h, lam_h = self.model.hidden_lr_wd(recipe.lr, recipe.weight_decay)
        if not (math.isclose(eta_h, recipe.hidden_lr)
                and math.isclose(lam_h, recipe.hidden_weight_decay)):
            raise RuntimeError("recipe and model disagree on the hidden-weight LR / weight decay")
        self.recipe = recipe
        # the exact pair: tau round-trips
        self.eta_h, self.lam_h = recipe.hidden_lr, recipe.hidden_weight_decay

    def _build_optimizer(self) -> None:
        """AdamW on the model's parameter groups, the train sampler and the fixed val batches."""
        cfg, data, device = self.cfg, self.data, self.device
        groups = self.model.param_groups(self.recipe.lr, self.recipe.weight_decay)
        self.peaks = [g["lr"] for g in groups]
        self.optimizer = torch.optim.AdamW(groups, betas=(0.9, 0.95),
                                           fused=True if self.cuda else None)
        self.sampler = BatchSampler(data.train, cfg.batch_size, cfg.context, seed=cfg.seed,
                                    device=device)
        val_sampler = BatchSampler(data.val, cfg.batch_size, cfg.context, seed=_VAL_SEED,
                                   device=device)
        self.val_batches = [val_sampler.sample() for _ in range(cfg.eval_batches)]

    def _describe(self) -> None:
        """``const``, the columns of every row, and ``identity``, what a checkpoint must match."""
        cfg, recipe = self.cfg, self.recipe
        self.const = {
            "run_id": self.run_id, "group": self.group, "n_params": self.n_params,
            "tokens": recipe.tokens, "total_steps": recipe.total_steps,
            "batch_tokens": recipe.batch_tokens, "peak_lr": self.eta_h,
            "weight_decay": self.lam_h, "schedule": recipe.schedule,
            "warmup_steps": recipe.warmup_steps, "base_lr": recipe.lr}
        self.identity = {
            "recipe": asdict(recipe), "model": self.gcfg.to_dict(),
            "batch_tokens": cfg.batch_tokens, "seed": cfg.seed, "data": self.data.source,
            "grad_clip": cfg.grad_clip, "run_id": self.run_id}

    def _set_up_fault(self) -> None:
        """The injected fault's state; a clean run's rows, identity and checkpoint are as
        without it."""
        cfg = self.cfg
        self.fault = fault = cfg.fault
        self.fault_kind = fault.kind if fault is not None else None
        self.fault_steps = fault.steps(self.recipe.total_steps) if fault is not None else range(0)
        self.noise_gen: torch.Generator | None = None
        if self.fault_kind == "grad-noise":
            self.noise_gen = torch.Generator(device=self.device).manual_seed(
                cfg.seed + GRAD_NOISE_SEED_OFFSET)
        self.repeat_state: dict | None = None  # data-repeat: the sampler's state before its draws
        self.repeat: list[tuple[torch.Tensor, torch.Tensor]] = []  # data-repeat: the batches
        if fault is not None:
            self.const["inject"] = cfg.inject
            self.identity["inject"] = cfg.inject

    def _draw_repeat(self, state: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The data-repeat batches: the train sampler's next draws from ``state``."""
        draws = BatchSampler(self.data.train, self.cfg.batch_size, self.cfg.context,
                             device=self.device)
        draws.load_state_dict(state)
        return [draws.sample() for _ in range(DATA_REPEAT_BATCHES)]

    def resume(self) -> None:
        """Continue from the checkpoint: model, optimizer, sampler, RNG, the fault's state and
        the curve so far. ``ValueError`` when another configuration wrote it."""
        assert self.ckpt is not None
        state = torch.load(self.ckpt, map_location="cpu", weights_only=True)  # RNG states: CPU
        if state.get("version") != _CKPT_VERSION or state["identity"] != self.identity:
            raise ValueError(f"checkpoint was written by a different run configuration: "
                             f"checkpoint={str(self.ckpt)!r}.")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.sampler.load_state_dict(state["sampler"])
        torch.set_rng_state(state["rng"])
        fault_state = state.get("fault", {})
        if self.noise_gen is not None:
            self.noise_gen.set_state(fault_state["noise"])
        if fault_state.get("repeat") is not None:
            self.repeat_state = fault_state["repeat"]
            self.repeat = self._draw_repeat(self.repeat_state)
        self.rows, self.start = list(state["rows"]), int(state["step"])
        self.status = RunStatus(str(state["status"]))
        if self.status == RunStatus.STOPPED:  # stopped by a callback: resuming continues it
            self.status = RunStatus.RUNNING
        log.info("resumed %s from %s at step %d", self.run_id, self.ckpt, self.start)

    def save_checkpoint(self, step: int) -> None:
        """Write everything :meth:`resume` reads, atomically (a temporary file replaced)."""
        assert self.ckpt is not None
        self.ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.ckpt.with_name(self.ckpt.name + ".tmp")
        extra = {}
        if self.fault is not None:  # only a faulty run's checkpoint has (and needs) this entry
            extra["fault"] = {
                "noise": None if self.noise_gen is None else self.noise_gen.get_state(),
                "repeat": self.repeat_state}
        torch.save({"version": _CKPT_VERSION, "identity": self.identity, "step": step,
                    "status": self.status.value, "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "sampler": self.sampler.state_dict(), "rng": torch.get_rng_state(),
                    "rows": self.rows, **extra}, tmp)
        os.replace(tmp, self.ckpt)

    def evaluate(self) -> float:
        """The mean loss over the fixed val batches."""
        self.model.eval()
        with torch.no_grad():
            losses = []
            for x, y in self.val_batches:
                with self.autocast:
                    losses.append(self.forward(x, y).float())
            value = torch.stack(losses).mean().item()
        self.model.train()
        return value

    def _batch(self, step: int, faulty: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of update ``step``: the train sampler's next, unless the fault says
        otherwise (a restart re-creates the sampler; data-repeat cycles over its batches)."""
        cfg = self.cfg
        if faulty and self.fault_kind == "restart":  # as if resumed with another data order
            self.sampler = BatchSampler(self.data.train, cfg.batch_size, cfg.context,
                                        seed=cfg.seed + RESTART_SEED_OFFSET, device=self.device)
            torch.manual_seed(cfg.seed + RESTART_SEED_OFFSET)
        if faulty and self.fault_kind == "data-repeat":
            first = self.fault_steps[0]
            if step == first:
                self.repeat_state = self.sampler.state_dict()  # _draw_repeat(it) redraws them
                self.repeat = [self.sampler.sample() for _ in range(DATA_REPEAT_BATCHES)]
            return self.repeat[(step - first) % DATA_REPEAT_BATCHES]
        return self.sampler.sample()

    def _update(self, step: int) -> tuple[torch.Tensor, float]:
        """One optimizer update, the fault's part in it included: its batch's loss and the
        LR multiplier it applied."""
        faulty = step in self.fault_steps
        mult = self.recipe.lr_multiplier(step)
        if faulty and self.fault_kind == "lr-spike":
            mult *= LR_SPIKE_FACTOR
        for group, peak in zip(self.optimizer.param_groups, self.peaks, strict=True):
            group["lr"] = peak * mult
        x, y = self._batch(step, faulty)
        with self.autocast:
            if faulty and self.fault_kind == "precision":
                loss = _lossy_cross_entropy(self.forward(x), y, PRECISION_STEP)
            else:
                loss = self.forward(x, y)
        loss.backward()
        if self.noise_gen is not None and faulty:
            _add_grad_noise(self.model.parameters(), self.noise_gen, GRAD_NOISE_SCALE)
        if self.cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss, mult

    def _log(self, step: int, train_loss: float, mult: float, is_eval: bool,
             callback: Callable[[TrainPoint], bool | None] | None) -> bool:
        """A logged step: its rows (val on evaluation steps), divergence, the callback, the
        run's status and the checkpoint. ``True``: the run stops after it."""
        total = self.recipe.total_steps
        lr_h = self.eta_h * mult
        self.rows.append({**self.const, "step": step, "lr": lr_h, "loss": train_loss,
                          "split": "train"})
        val_loss = None
        if is_eval:
            val_loss = self.evaluate()
            self.rows.append({**self.const, "step": step, "lr": lr_h, "loss": val_loss,
                              "split": "val"})
        stop = False
        if not math.isfinite(train_loss):
            self.status, stop = RunStatus.DIVERGED, True
            log.warning("%s: non-finite train loss %r at step %d; stopping", self.run_id,
                        train_loss, step)
        if callback is not None and callback(TrainPoint(
                step=step, tokens=step * self.recipe.batch_tokens, t_hat=step / total,
                lr=lr_h, train_loss=train_loss, val_loss=val_loss)):
            self.status, stop = (RunStatus.STOPPED if self.status == RunStatus.RUNNING
                                 else self.status), True
        if step == total and self.status == RunStatus.RUNNING:
            self.status = RunStatus.COMPLETED
        if self.ckpt is not None and (step % self.ckpt_every == 0 or stop or step == total):
            self.save_checkpoint(step)
        return stop

    def loop(self, callback: Callable[[TrainPoint], bool | None] | None) -> None:
        """Train from the step after :attr:`start` to the end or a stop, timing the updates
        (evaluation, callback and checkpoint time excluded)."""
        self.forward = torch.compile(self.model) if self.cfg.compile else self.model
        self.autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16)
                         if self.dtype == "bfloat16" else contextlib.nullcontext())
        self.model.train()
        total = self.recipe.total_steps
        t_mark: float | None = None  # timer starts after this process's first step (compile)
        if self.status == RunStatus.RUNNING:
            for step in range(self.start + 1, total + 1):
                loss, mult = self._update(step)
                is_eval = step % self.eval_every == 0 or step == total
                is_log = is_eval or step % self.log_every == 0
                if is_log or t_mark is None:
                    train_loss = loss.item()  # syncs
                    if t_mark is None:
                        t_mark = time.perf_counter()
                    else:
                        self.train_seconds += time.perf_counter() - t_mark
                        self.timed_steps = step - self.start - 1
                if not is_log:
                    continue
                if self._log(step, train_loss, mult, is_eval, callback):
                    break
                t_mark = time.perf_counter()
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def result(self) -> TrainResult:
        """The run's :class:`TrainResult` (throughput from :meth:`loop`'s timing)."""
        rows, recipe = self.rows, self.recipe
        train_rows = [r for r in rows if r["split"] == "train"]
        val_rows = [r for r in rows if r["split"] == "val"]
        tokens_per_s = (self.timed_steps * recipe.batch_tokens / self.train_seconds
                        if self.train_seconds else 0.0)
        mfu = (tokens_per_s * self.model.flops_per_token() / self.cfg.peak_flops
               if self.cuda else None)
        return TrainResult(
            run_id=self.run_id, group=self.group, recipe=recipe, n_params=self.n_params,
            steps=int(rows[-1]["step"]) if rows else self.start, status=self.status,
            final_train_loss=train_rows[-1]["loss"] if train_rows else math.nan,
            final_val_loss=val_rows[-1]["loss"] if val_rows else None,
            tokens_per_s=tokens_per_s, mfu=mfu, train_seconds=self.train_seconds,
            device=str(self.device), rows=rows,
        )
