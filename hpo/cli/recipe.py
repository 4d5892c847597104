"""``hpo recipe``: the collapse-consistent training plan for one target size of a family.

Celerity-style family (the recipes of "Scaling with Collapse", Bergsma et al. 2025, arXiv
2509.25087): CompleteP ("Don't be lazy", Dey et al. 2025), pre-LN, untied embeddings,
squared-ReLU FFN 8x, ALiBi, linear decay to zero; warmup min(10% of tokens, 375M tokens); base LR
0.15 at proxy width 256 (hidden weights get eta * 256 / d); tau per TPP band,
tau = 0.175 (TPP / 20)^-0.5 (20 -> 0.175, 80 -> 0.087, 234 -> 0.051, "Power Lines", Bergsma et
al. 2025); batch B ~ D^0.4.

The shape: d_model a multiple of 64 with d / depth ~ 51 whose N (every parameter, embeddings
included, as counted here) is closest to --params; --width and --depth force one. The paper's
shape names count differently: its "300M" (d_model 640, depth 13) has N = 170,859,520 here
(vocab 50257), so --params 300M picks d_model 832, depth 16.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from hpo._errors import UsageError
from hpo.cli._flags import STDOUT, add_json, json_path, write_json
from hpo.cli.curves import parse_count

__all__ = ["add_parser", "run", "plan"]

# Celerity shapes: name -> (d_model, depth)
CELERITY = {"300M": (640, 13), "500M": (896, 17), "900M": (1152, 23), "1.8B": (1536, 30),
            "3.9B": (2048, 40)}
ASPECT = 51.0  # d_model / depth of the Celerity shapes
HEAD_DIM = 64
TAU_20 = 0.175  # tau at TPP 20; tau ~ TPP^-0.5
BATCH_EXPONENT = 0.4
# batch anchor: 2^20 tokens at D = 1e10 tokens (an assumption of this tool, not a published fit;
# override with --batch-tokens or --batch-anchor)
BATCH_ANCHOR = (2.0**20, 1e10)


def _count(width: int, depth: int, context: int, vocab: int, base_width: int) -> int:
    from hpo.models.config import GPTConfig  # torch-free module
    from hpo.models.recipe import count_params

    cfg = GPTConfig(vocab_size=vocab, context=context, width=width, depth=depth,
                    heads=max(1, width // HEAD_DIM), ffn_ratio=8.0, activation="relu2",
                    position="alibi", base_width=base_width)
    return count_params(cfg)


def shape_for(params: float, context: int, vocab: int, base_width: int) -> tuple[int, int, str]:
    """(d_model, depth, how): the shape with d / depth ~ 51 (the Celerity aspect) and d a
    multiple of 64 whose N (all parameters, as counted here) is closest to ``params``; ``how``
    names the nearest Celerity shape for reference."""
    best = None
    for d in range(HEAD_DIM, 16385, HEAD_DIM):
        depth = max(1, round(d / ASPECT))
        n = _count(d, depth, context, vocab, base_width)
        err = abs(math.log(n / params))
        if best is None or err < best[0]:
            best = (err, d, depth)
        if n > 4 * params:
            break
    assert best is not None
    name, (cd, cl) = min(CELERITY.items(), key=lambda kv: abs(kv[1][0] - best[1]))
    return best[1], best[2], (f"d / depth ~ 51, d a multiple of 64, N closest to the target; "
                              f"nearest Celerity shape: {name} d={cd} L={cl}")


def plan(params: float, tpp: float, *, batch_tokens: int | None = None, tau: float | None = None,
         context: int = 8192, vocab: int = 50257, base_width: int = 256, base_lr: float = 0.15,
         width: int | None = None, depth: int | None = None,
         batch_anchor: tuple[float, float] = BATCH_ANCHOR) -> dict[str, Any]:
    """The plan as a dict (see the module docstring for the rules)."""
    from hpo.models.recipe import make_recipe

    if width is not None or depth is not None:
        if width is None or depth is None:
            raise UsageError("--width and --depth go together")
        d, L, how = width, depth, "given"
    else:
        d, L, how = shape_for(params, context, vocab, base_width)
    n = _count(d, L, context, vocab, base_width)
    tokens = tpp * n
    if batch_tokens is None:
        b_ref, d_ref = batch_anchor
        raw = b_ref * (tokens / d_ref) ** BATCH_EXPONENT
        batch_tokens = max(context, int(round(raw / context)) * context)
        batch_how = (f"B ~ D^{BATCH_EXPONENT} anchored at {b_ref:.3g} tokens for D = "
                     f"{d_ref:.3g}, rounded to whole sequences")
    else:
        if batch_tokens % context:
            raise UsageError(f"--batch-tokens: must be a multiple of --context={context}, "
                             f"got {batch_tokens!r}")
        batch_how = "given"
    tau_how = "given"
    if tau is None:
        tau = TAU_20 * (tpp / 20.0) ** -0.5
        tau_how = "0.175 (TPP / 20)^-0.5"
    total = math.ceil(tokens / batch_tokens)
    warm_tokens = min(0.1 * total * batch_tokens, 375e6)
    warmup_steps = max(1, int(round(warm_tokens / batch_tokens)))
    m_n = d / base_width
    rec = make_recipe(n_params=n, tpp=tpp, batch_tokens=batch_tokens, lr=base_lr, tau=tau,
                      warmup=warmup_steps, schedule="linear", width_mult=m_n)
    lam = rec.weight_decay
    groups = {
        "embedding": {"lr": base_lr, "weight_decay": lam, "eps_mult": 1 / m_n},
        "unembedding": {"lr": base_lr, "weight_decay": lam, "eps_mult": 1 / m_n},
        "hidden weights": {"lr": base_lr / m_n, "weight_decay": lam * m_n,
                           "eps_mult": 1 / m_n},  # m_L^(alpha - 1) = 1 and m_L^-alpha below
        "hidden norms": {"lr": base_lr, "weight_decay": 0.0, "eps_mult": 1.0},
        "final norm": {"lr": base_lr, "weight_decay": 0.0, "eps_mult": 1.0},
    }
    return {
        "target_params": params, "shape": {"d_model": d, "depth": L, "heads": d // HEAD_DIM,
                                            "head_dim": HEAD_DIM, "ffn": "squared ReLU, 8x",
                                            "context": context, "vocab": vocab,
                                            "position": "alibi", "embeddings": "untied",
                                            "how": how},
        "n_params": n, "tpp": tpp, "tokens": rec.tokens, "batch_tokens": batch_tokens,
        "batch_how": batch_how, "total_steps": rec.total_steps,
        "warmup_steps": rec.warmup_steps, "warmup_tokens": rec.warmup_steps * batch_tokens,
        "schedule": "linear decay to zero after warmup",
        "tau": rec.tau, "tau_how": tau_how, "base_lr": base_lr, "base_width": base_width,
        "width_mult": m_n, "weight_decay": lam, "hidden_lr": rec.hidden_lr,
        "hidden_weight_decay": rec.hidden_weight_decay, "groups": groups,
        "compute_flops": 6.0 * n * rec.tokens,
    }


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "recipe", help="the collapse-consistent plan (shape, D, T, B, LR per group, weight "
                       "decay, tau, warmup) for a target size",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", required=True,
                   help="target size N (all parameters), e.g. 300M or 1.8B: picks the d / depth "
                        "~ 51 shape with N closest (--width and --depth force one)")
    p.add_argument("--tpp", type=float, required=True, help="tokens per parameter D / N")
    p.add_argument("--batch-tokens", type=int, default=None,
                   help="tokens per step B (default: B ~ D^0.4 from the anchor)")
    p.add_argument("--batch-anchor", default=None,
                   help="B_REF@D_REF anchoring B ~ D^0.4, e.g. 1M@10B (default: 1048576@1e10)")
    p.add_argument("--tau", type=float, default=None,
                   help="AdamW timescale (default: 0.175 (TPP / 20)^-0.5)")
    p.add_argument("--base-lr", type=float, default=0.15,
                   help="base LR eta at --base-width (default: 0.15)")
    p.add_argument("--base-width", type=int, default=256,
                   help="proxy width the base LR was tuned at (default: 256)")
    p.add_argument("--context", type=int, default=8192, help="sequence length (default: 8192)")
    p.add_argument("--vocab", type=int, default=50257, help="vocabulary size (default: 50257)")
    p.add_argument("--width", type=int, default=None, help="force d_model (with --depth)")
    p.add_argument("--depth", type=int, default=None, help="force the depth (with --width)")
    add_json(p, "the plan", bare=True, note=" instead of the text")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    params = parse_count("--params", args.params)
    target = json_path(args.json)
    for flag, value in (("--tpp", args.tpp), ("--base-lr", args.base_lr), ("--tau", args.tau)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag}: must be > 0, got {value!r}")
    for flag, value in (("--batch-tokens", args.batch_tokens), ("--context", args.context),
                        ("--vocab", args.vocab), ("--base-width", args.base_width),
                        ("--width", args.width), ("--depth", args.depth)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be >= 1, got {value!r}")
    if args.width is not None and args.width % HEAD_DIM:
        raise UsageError(f"--width: must be a multiple of {HEAD_DIM} (the head size), "
                         f"got {args.width!r}")
    anchor = BATCH_ANCHOR
    if args.batch_anchor:
        try:
            b, d = args.batch_anchor.split("@")
            anchor = (parse_count("--batch-anchor", b), parse_count("--batch-anchor", d))
        except ValueError:
            raise UsageError(f"--batch-anchor: must look like 1M@10B, "
                             f"got {args.batch_anchor!r}") from None
    try:
        result = plan(params, args.tpp, batch_tokens=args.batch_tokens, tau=args.tau,
                      context=args.context, vocab=args.vocab, base_width=args.base_width,
                      base_lr=args.base_lr, width=args.width, depth=args.depth,
                      batch_anchor=anchor)
    except UsageError:
        raise
    except (ArithmeticError, ValueError) as exc:  # a value far outside any real run's
        given = ", ".join(f"{flag}={value!r}" for flag, value in (
            ("--params", args.params), ("--tpp", args.tpp), ("--tau", args.tau),
            ("--base-lr", args.base_lr), ("--batch-anchor", args.batch_anchor),
            ("--batch-tokens", args.batch_tokens)) if value is not None)
        raise UsageError(f"no plan for {given}: {str(exc).rstrip('.')}; give values in the "
                         "range of real runs") from None
    n = result["n_params"]
    if args.width is None and not 0.5 <= n / params <= 2.0:
        raise UsageError(f"--params {args.params}: the nearest shape at --vocab {args.vocab} and "
                         f"--context {args.context} has {n:,} parameters (embeddings included); "
                         "give --params near that, a smaller --vocab, or --width and --depth.")
    if target == STDOUT:
        write_json(target, result, indent=1)
        return 0
    s = result["shape"]
    lines = [
        f"plan for {args.params} at TPP {args.tpp:g} (CompleteP, Celerity-style family)",
        f"  shape      d_model {s['d_model']}, depth {s['depth']}, {s['heads']} heads of "
        f"{s['head_dim']}, FFN {s['ffn']}, context {s['context']}, vocab {s['vocab']}, "
        f"{s['position']}, {s['embeddings']} embeddings ({s['how']})",
        f"  N          {result['n_params']:,} parameters (embeddings included)",
        f"  D          {result['tokens']:,} tokens (TPP x N, whole steps)",
        f"  B          {result['batch_tokens']:,} tokens per step "
        f"({result['batch_tokens'] // s['context']} sequences; {result['batch_how']})",
        f"  T          {result['total_steps']:,} steps",
        f"  warmup     {result['warmup_steps']:,} steps ({result['warmup_tokens']:,} tokens; "
        "min(10% of tokens, 375M)), then linear decay to zero",
        f"  tau        {result['tau']:.4g} ({result['tau_how']})",
        f"  base LR    {result['base_lr']:g} at width {result['base_width']} "
        f"(m_N = {result['width_mult']:.4g})",
        f"  weight decay (base lambda) {result['weight_decay']:.4g}",
        "  per group  lr          weight_decay  eps multiplier",
    ]
    for name, g in result["groups"].items():
        lines.append(f"    {name:<15}{g['lr']:<12.4g}{g['weight_decay']:<14.4g}"
                     f"{g['eps_mult']:.4g}")
    lines.append(f"  check      tau = 1 / (eta_h lambda_h T) = 1 / ({result['hidden_lr']:.4g} x "
                 f"{result['hidden_weight_decay']:.4g} x {result['total_steps']}) = "
                 f"{1 / (result['hidden_lr'] * result['hidden_weight_decay'] * result['total_steps']):.4g}")  # noqa: E501
    lines.append(f"  compute    {result['compute_flops']:.3g} FLOPs (6 N D)")
    print("\n".join(lines))
    if target is not None:
        write_json(target, result, indent=1)
    return 0
