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

# CLI flag for each TrainConfig field named in error messages
_FLAGS = {
    "width": "--width", "depth": "--depth", "heads": "--heads", "context": "--context",
    "ffn_ratio": "--ffn-ratio", "activation": "--activation", "position": "--position",
    "parametrization": "--parametrization", "base_width": "--base-width",
    "base_depth": "--base-depth", "alpha": "--alpha", "tpp": "--tpp", "tau": "--tau",
    "weight_decay": "--weight-decay", "lr": "--lr", "batch_tokens": "--batch-tokens",
    "schedule": "--schedule", "warmup": "--warmup", "grad_clip": "--grad-clip",
    "seed": "--seed", "data": "--data", "val_fraction": "--val-fraction",
    "max_data_bytes": "--max-data-bytes", "device": "--device", "dtype": "--dtype",
    "log_every": "--log-every", "eval_every": "--eval-every", "eval_batches": "--eval-batches",
    "checkpoint": "--checkpoint", "checkpoint_every": "--checkpoint-every", "out": "--output",
    "run_id": "--run-id", "group": "--group", "inject": "--inject",
}
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
    _add_model_args(p)
    _add_recipe_args(p)
    _add_data_args(p)
    _add_hardware_args(p)
    _add_output_args(p)
    _add_checkpoint_args(p)
    _add_fault_args(p)
    p.set_defaults(func=run)
    return p


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """Add the model's shape and parametrization: the ``model shape`` group."""
    m = p.add_argument_group("model shape")
    m.add_argument("--width", type=int, default=64, help="model width d_model (default: 64)")
    m.add_argument("--depth", type=int, default=2, help="transformer blocks L (default: 2)")
    m.add_argument("--heads", type=int, default=4,
                   help="attention heads; must divide --width (default: 4)")
    m.add_argument("--context", type=int, default=64,
                   help="sequence length in tokens (default: 64)")
    m.add_argument("--ffn-ratio", type=float, default=4.0,
                   help="FFN hidden size / width (default: 4)")
    m.add_argument("--activation", default="gelu",
                   help="FFN activation: gelu, relu2 (squared ReLU) or swiglu (default: gelu)")
    m.add_argument("--position", default="learned",
                   help="position encoding: learned, rope or alibi (default: learned)")
    m.add_argument("--parametrization", default="completep",
                   help="completep (width/depth transfer) or sp (standard; --lr and "
                        "--weight-decay applied as given) (default: completep)")
    m.add_argument("--base-width", type=int, default=64,
                   help="width at which --lr and --weight-decay are given (default: 64)")
    m.add_argument("--base-depth", type=int, default=2,
                   help="depth at which --lr and --weight-decay are given (default: 2)")
    m.add_argument("--alpha", type=float, default=1.0,
                   help="CompleteP depth exponent: 1 (CompleteP) or 0.5 (depth-muP) (default: 1)")


def _add_recipe_args(p: argparse.ArgumentParser) -> None:
    """Add the training recipe (budget, LR, weight decay, schedule, seed): the ``recipe``
    group."""
    r = p.add_argument_group("recipe")
    r.add_argument("--tpp", type=float, default=10.0,
                   help="tokens per parameter D / N, N = all parameters (default: 10)")
    r.add_argument("--tau", type=float, default=None,
                   help="AdamW timescale 1 / (eta_h * lambda_h * T); sets the weight decay "
                        "(default: 0.2 unless --weight-decay is given)")
    r.add_argument("--weight-decay", type=float, default=None,
                   help="base decoupled weight decay lambda (torch AdamW), instead of --tau")
    r.add_argument("--lr", type=float, default=0.01,
                   help="BASE peak LR eta at --base-width/--base-depth; the LR applied to hidden "
                        "weights is lr * base_width / width under CompleteP (default: 0.01)")
    r.add_argument("--batch-tokens", type=int, default=2048,
                   help="tokens per optimizer step B, a multiple of --context (default: 2048)")
    r.add_argument("--schedule", default="linear",
                   help="LR schedule: linear (decay to zero), cosine, cosine:F (to F x peak), "
                        "wsd:linear:F or wsd:sqrt:F (cooldown over the last fraction F), "
                        "constant (default: linear)")
    r.add_argument("--warmup", type=float, default=0.05,
                   help="linear warmup: < 1 a fraction of the steps, >= 1 a number of steps "
                        "(default: 0.05)")
    r.add_argument("--grad-clip", type=float, default=None,
                   help="clip the global gradient norm to this value (default: no clipping)")
    r.add_argument("--seed", type=int, default=0,
                   help="seed of model init and batch order (default: 0)")


def _add_data_args(p: argparse.ArgumentParser) -> None:
    """Add the training and validation data: the ``data`` group."""
    d = p.add_argument_group("data")
    d.add_argument("--data", default="stdlib",
                   help="'stdlib' (bytes of this Python's standard library), a text file or "
                        "folder (bytes), a uint16 .bin token file or a folder with train.bin "
                        "[val.bin] (default: stdlib)")
    d.add_argument("--val-fraction", type=float, default=0.1,
                   help="share of the data held out for validation (default: 0.1)")
    d.add_argument("--max-data-bytes", type=int, default=16 * 2**20,
                   help="read at most this many bytes of text; 0 for all (default: 16 MiB)")


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
    o.add_argument("--eval-batches", type=int, default=4,
                   help="val batches of --batch-tokens per evaluation (default: 4)")


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
    if args.max_data_bytes < 0:
        raise UsageError(f"--max-data-bytes: must be >= 0, "
                         f"got {args.max_data_bytes!r}")
    if args.data != "stdlib" and not Path(args.data).exists():
        raise UsageError(f"--data: path does not exist: {args.data!r}")

    from hpo.models.training import TrainConfig, train  # torch loads here

    try:
        cfg = TrainConfig(
            width=args.width, depth=args.depth, heads=args.heads, context=args.context,
            ffn_ratio=args.ffn_ratio, activation=args.activation, position=args.position,
            parametrization=args.parametrization, base_width=args.base_width,
            base_depth=args.base_depth, alpha=args.alpha, tpp=args.tpp, tau=args.tau,
            weight_decay=args.weight_decay, lr=args.lr, batch_tokens=args.batch_tokens,
            schedule=args.schedule, warmup=args.warmup, grad_clip=args.grad_clip,
            seed=args.seed, data=args.data, val_fraction=args.val_fraction,
            max_data_bytes=args.max_data_bytes or None, device=args.device, dtype=args.dtype,
            compile=args.compile, peak_flops=args.peak_tflops * 1e12,
            log_every=args.log_every, eval_every=args.eval_every,
            eval_batches=args.eval_batches, checkpoint=args.checkpoint,
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
