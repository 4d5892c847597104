"""LR transfer: the same base-LR sweep at two widths picks the same best LR under CompleteP.

Trains every (parametrization, width, LR) of the grid with :func:`hpo.models.training.train` (same
TPP, tau, schedule, data and seed) and prints the final val loss table and each row's best LR.
Under CompleteP the best base LR should not move with width; under standard parametrization (same
grid, LR applied as given) it usually shifts down as the model widens.

    python benchmarks/lr_transfer.py                     # CompleteP and SP, widths 32 and 64
"""

from __future__ import annotations

import argparse
import math

from hpo.models.training import TrainConfig, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="32,64", help="comma-separated widths")
    parser.add_argument("--lrs", default="0.003,0.01,0.03,0.1,0.3", help="base LRs")
    parser.add_argument("--parametrizations", default="completep,sp")
    parser.add_argument("--base-width", type=int, default=32)
    parser.add_argument("--tpp", type=float, default=10.0)
    parser.add_argument("--tau", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    lrs = [float(v) for v in args.lrs.split(",")]

    print(f"final val loss; depth 2, relu2, context 64, B 2048, TPP {args.tpp}, tau {args.tau}, "
          f"linear decay to zero, base width {args.base_width}")
    header = f"{'param.':>9} {'width':>5} " + " ".join(f"{lr:>8g}" for lr in lrs) + "   best LR"
    print(header)
    best: dict[str, list[float]] = {}
    for parametrization in args.parametrizations.split(","):
        for width in widths:
            losses = []
            for lr in lrs:
                cfg = TrainConfig(width=width, depth=2, heads=4, context=64, activation="relu2",
                                  parametrization=parametrization, base_width=args.base_width,
                                  tpp=args.tpp, tau=args.tau, lr=lr, seed=args.seed,
                                  eval_batches=8)
                result = train(cfg)
                loss = result.final_val_loss
                losses.append(loss if loss is not None and math.isfinite(loss) else math.inf)
            best_lr = lrs[min(range(len(lrs)), key=losses.__getitem__)]
            best.setdefault(parametrization, []).append(best_lr)
            print(f"{parametrization:>9} {width:>5} " + " ".join(f"{v:8.4f}" for v in losses)
                  + f"   {best_lr:g}", flush=True)
    for parametrization, picks in best.items():
        same = "same" if len(set(picks)) == 1 else "DIFFERENT"
        print(f"{parametrization}: best LR per width {picks} -> {same}")


if __name__ == "__main__":
    main()
