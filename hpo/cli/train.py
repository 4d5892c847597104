"""``hpo train``: train one CompleteP GPT with the collapse recipe and write its loss curve.

torch loads only when the command runs, so building the ``hpo`` parser stays cheap.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from hpo._errors import UsageError
from hpo.cli._flags import hidden_alias

__all__ = ["add_parser", "run"]

_DESCRIPTION = """\
Train one decoder-only GPT (CompleteP by default) for exactly T = ceil(TPP * N / B) steps with the
collapse recipe, and write its loss curve (train rows every --log-every steps, val rows every
--eval-every steps) in the curve format to --output. N counts all parameters, embeddings included.

--lr is the BASE peak LR eta, as tuned at --base-width / --base-depth. Under CompleteP the LR
applied to hidden weights is lr * base_width / width (times (depth / base_depth)^(alpha - 1), i.e.
1 for alpha = 1); embeddings, output head and final norm get lr itself. Give --tau (the AdamW
timescale, tau = 1 / (eta_h * lambda_h * T) with eta_h, lambda_h the peak LR and weight decay
applied to hidden weights; default 0.2) or --weight-decay (base lambda; hidden weights get
lambda * width / base_width). The curve's peak_lr, weight_decay and lr columns are the
hidden-weight values, so 1 / (peak_lr * weight_decay * total_steps) is the run's tau.

--inject KIND@T breaks the run on purpose from the fraction T of training on (a demonstration
that the collapse-residual monitor catches broken runs); see the flag's help for the kinds.

Prints one summary line: final train and val loss, tokens/s (and MFU on CUDA).
"""

# CLI flag of each TrainConfig field that is not a run setting, named in error messages (the
# run settings' flags are their names, flag_of)
_OTHER_FLAGS = {
    "device": "--device", "dtype": "--dtype", "log_every": "--log-every",
    "eval_every": "--eval-every", "checkpoint": "--checkpoint",
    "checkpoint_every": "--checkpoint-every", "out": "--output", "run_id": "--run-id",
    "group": "--group", "inject": "--inject",
}


def flag_of(name: str) -> str:
    """The ``hpo train`` flag of the run setting ``name`` (``--base-width`` for ``base_width``)."""
    return "--" + name.replace("_", "-")


def _flags() -> dict[str, str]:
    """Each TrainConfig field's flag, by field name."""
    from hpo.models.settings import RunSettings

    return {**{name: flag_of(name) for name in RunSettings.names()}, **_OTHER_FLAGS}


_FLAGS = _flags()
_FIELD_RE = re.compile(r"\b(" + "|".join(sorted(_FLAGS, key=len, reverse=True))
                       + r")(?=( must\b|=))")
#: "FLAG must RULE, but got FLAG=VALUE." (the models' style) -> "FLAG: must RULE, got VALUE"
_RULE_RE = re.compile(r"^(--[\w-]+) must (.*), but got \1=(.*?)\.?$", re.S)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand; its ``func`` is :func:`run`."""
    p = subparsers.add_parser(
        "train", help="train one model with the collapse recipe and write its loss curve",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_settings_args(p)
    _add_hardware_args(p)
    _add_output_args(p)
    _add_checkpoint_args(p)
    _add_fault_args(p)
    p.set_defaults(func=run)
    return p


#: the ``hpo train`` group of each study-file section of the run settings
_GROUPS = {"model": "model shape", "recipe": "recipe", "data": "data"}
#: the type of a flag by its setting's annotation
_TYPES = {"int": int, "int | None": int, "float": float, "float | None": float}


def _add_settings_args(p: argparse.ArgumentParser) -> None:
    """Add one flag per run setting (:class:`hpo.models.settings.RunSettings`), its default and
    help from its declaration, in a group per study-file section (``model shape``, ``recipe``,
    ``data``)."""
    import dataclasses

    from hpo.models.settings import RunSettings

    groups = {section: p.add_argument_group(title) for section, title in _GROUPS.items()}
    types = {f.name: f.type for f in dataclasses.fields(RunSettings)}
    for name in RunSettings.names():
        decl = RunSettings.declared(name)
        default = decl["default"]
        shown = "none" if default is None else default
        if name == "max_data_bytes":
            shown = f"{default // 2**20} MiB; 0 for all"
        groups[decl["section"]].add_argument(
            flag_of(name), type=_TYPES.get(str(types[name]), str), default=default,
            help=f"{decl['doc']} (default: {shown})".replace("%", "%%"))


def _add_hardware_args(p: argparse.ArgumentParser) -> None:
    """Add where and how fast it trains (device, dtype, compile, MFU, threads): the
    ``hardware`` group."""
    h = p.add_argument_group("hardware")
    h.add_argument("--device", default="auto",
                   help="auto (CUDA when present), cpu, cuda or cuda:N (default: auto)")
    h.add_argument("--dtype", default="auto",
                   help="auto (bf16 autocast on CUDA, fp32 on CPU), float32 or bfloat16 "
                        "(default: auto)")
    h.add_argument("--compile", action="store_true", help="torch.compile the model")
    h.add_argument("--peak-tflops", type=float, default=989.0,
                   help="accelerator peak TFLOP/s for MFU (default: 989, H100/H200 dense bf16)")
    h.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: 1 on CPU for models under 10M "
                        "parameters, whose small matmuls gain little from more threads and lose "
                        "much on a busy machine; torch's own choice otherwise)")


def _add_output_args(p: argparse.ArgumentParser) -> None:
    """Add the curve file, its names and its logging cadence: the ``logging and output``
    group."""
    o = p.add_argument_group("logging and output")
    output = o.add_argument("--output", dest="out", default=None,
                            help="curve file, .csv or .csv.gz (default: runs/<run-id>.csv)")
    hidden_alias(p, "--out", output)  # its old spelling
    o.add_argument("--run-id", default=None,
                   help="run id in the curve (default: derived from shape and settings)")
    o.add_argument("--group", default=None,
                   help="sweep group in the curve (default: derived from shape, TPP, batch, "
                        "schedule)")
    o.add_argument("--log-every", type=int, default=None,
                   help="log the train loss every k steps (default: every step up to 2000 "
                        "steps, else ~2000 points)")
    o.add_argument("--eval-every", type=int, default=None,
                   help="val loss every k steps and at the end (default: ~20 per run)")


def _add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """Add saving and resuming from a checkpoint: the ``checkpoint and resume`` group."""
    c = p.add_argument_group("checkpoint and resume")
    c.add_argument("--checkpoint", default=None,
                   help="checkpoint file (model, optimizer, step, data state, curve so far)")
    c.add_argument("--checkpoint-every", type=int, default=None,
                   help="save the checkpoint every k steps (default: ~10 per run, and at the end)")
    c.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint when it exists (exactly as if uninterrupted)")


def _add_fault_args(p: argparse.ArgumentParser) -> None:
    """Add the deliberate fault of ``--inject``: the ``fault injection`` group."""
    f = p.add_argument_group("fault injection")
    f.add_argument("--inject", default=None, metavar="KIND@T",
                   help="break the run from step max(1, ceil(T * total)) on, T in (0, 1): "
                        "lr-spike (LR x 10 for 2%% of the steps), data-repeat (cycle over 4 "
                        "batches for 10%% of the steps, then continue the data as before), "
                        "grad-noise (Gaussian noise of 1 x each gradient tensor's RMS, seeded), "
                        "precision (train loss on logits rounded to multiples of 1.5, "
                        "straight-through; val exact), restart (new data order and RNG seed, "
                        "model and optimizer kept). Rows get an inject column and the default "
                        "run id an -inject-KIND@T suffix (default: none, a clean run)")


def _flagged(message: str) -> str:
    """Rewrite a config error in the CLI's one style: its field names as the flags that set
    them, and "--tpp must be > 0, but got --tpp=-5." as "--tpp: must be > 0, got -5"."""
    flagged = _FIELD_RE.sub(lambda mt: _FLAGS[mt.group(1)], message)
    return _RULE_RE.sub(r"\1: must \2, got \3", flagged)


def run(args: argparse.Namespace) -> int:
    """Validate the flags, train, write the curve, print one summary line; returns 0."""
    if args.peak_tflops is None or not args.peak_tflops > 0:
        raise UsageError(f"--peak-tflops: must be > 0, got {args.peak_tflops!r}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads: must be >= 1, got {args.threads!r}")
    if args.max_data_bytes is not None and args.max_data_bytes < 0:
        raise UsageError(f"--max-data-bytes: must be >= 0, "
                         f"got {args.max_data_bytes!r}")

    from hpo.models.settings import RunSettings

    settings = {name: getattr(args, name) for name in RunSettings.names()}
    settings["max_data_bytes"] = args.max_data_bytes or None  # 0: all
    try:
        RunSettings(**settings)  # checked before torch loads
    except ValueError as exc:
        raise UsageError(_flagged(str(exc))) from None

    from hpo.models.training import TrainConfig, train  # torch loads here

    try:
        cfg = TrainConfig(
            **settings, device=args.device, dtype=args.dtype, compile=args.compile,
            peak_flops=args.peak_tflops * 1e12, log_every=args.log_every,
            eval_every=args.eval_every, checkpoint=args.checkpoint,
            checkpoint_every=args.checkpoint_every, resume=args.resume, out=args.out,
            run_id=args.run_id, group=args.group, threads=args.threads, inject=args.inject,
        )
    except ValueError as exc:
        raise UsageError(_flagged(str(exc))) from None
    try:
        result = train(cfg)
    except ValueError as exc:
        raise UsageError(_flagged(str(exc))) from None
    if cfg.out is None:
        from hpo.models.training import write_curve

        out = write_curve(result.rows, Path("runs") / f"{result.run_id}.csv")
    else:
        out = Path(cfg.out)
    print(f"{result.summary()} -> {out}", file=sys.stdout)
    return 0
