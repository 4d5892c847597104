"""Collapse on this machine: a CompleteP family trained with ``hpo train`` at fixed TPP and tau,
against the seed-to-seed spread of one size, and the same family with weight decay fixed instead.

Trains (skipping runs whose curve already exists, so a rerun only analyses):

- ``tau``: widths W at TPP, tau (weight decay solved per run so every run has the same tau);
- ``seeds``: the smallest width at seeds 1..S-1 (seed 0 is in ``tau``);
- ``wd``: widths W with the base weight decay fixed at the value that gives the middle width the
  same tau (so tau drifts with size, as in a Llama-2-style recipe).

Then prints, for train loss smoothed with a moving average and normalized by its final value,
the maximum spread of L / L_final over t^ in [0.2, 1] of each family, and the seed spread.

    python benchmarks/collapse_family.py --out-dir benchmarks/results/collapse
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from hpo.models import GPTConfig
from hpo.models.recipe import make_recipe


def _train(out: Path, width: int, seed: int, args: argparse.Namespace, **recipe: float) -> None:
    if out.exists():
        return
    cmd = [sys.executable, "-m", "hpo", "train", "--width", str(width), "--depth", "2",
           "--heads", "4", "--context", str(args.context), "--activation", "relu2",
           "--base-width", str(args.base_width), "--tpp", str(args.tpp), "--lr", str(args.lr),
           "--batch-tokens", str(args.batch_tokens), "--schedule", "linear", "--warmup", "0.05",
           "--seed", str(seed), "--eval-every", "1000000", "--out", str(out),
           "--run-id", out.stem.removesuffix(".csv"), "--group", out.parent.name]
    for key, value in recipe.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    print("+", " ".join(cmd[3:]), flush=True)
    subprocess.run(cmd, check=True)


def _middle_weight_decay(args: argparse.Namespace) -> float:
    width = args.widths[len(args.widths) // 2]
    cfg = GPTConfig(width=width, depth=2, heads=4, context=args.context, activation="relu2",
                    base_width=args.base_width)
    recipe = make_recipe(cfg=cfg, tpp=args.tpp, batch_tokens=args.batch_tokens, lr=args.lr,
                         tau=args.tau)
    return recipe.weight_decay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/collapse"))
    parser.add_argument("--widths", type=lambda s: [int(w) for w in s.split(",")],
                        default=[32, 48, 64])
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the smallest width")
    parser.add_argument("--tpp", type=float, default=80.0)
    parser.add_argument("--tau", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=0.01, help="base LR at --base-width")
    parser.add_argument("--base-width", type=int, default=32)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--context", type=int, default=64)
    args = parser.parse_args()

    wd = _middle_weight_decay(args)
    families: dict[str, list[Path]] = {"tau": [], "seeds": [], "wd": []}
    for width in args.widths:
        path = args.out_dir / "tau" / f"w{width}_s0.csv.gz"
        _train(path, width, 0, args, tau=args.tau)
        families["tau"].append(path)
    families["seeds"].append(families["tau"][0])
    for seed in range(1, args.seeds):
        path = args.out_dir / "tau" / f"w{args.widths[0]}_s{seed}.csv.gz"
        _train(path, args.widths[0], seed, args, tau=args.tau)
        families["seeds"].append(path)
    for width in args.widths:
        path = args.out_dir / "wd" / f"w{width}_s0.csv.gz"
        _train(path, width, 0, args, weight_decay=wd)
        families["wd"].append(path)

    from hpo.predictors import collapse_report, read_curves, runs_from_frame  # numpy-only side

    def runs(paths: list[Path]) -> list:
        return runs_from_frame(read_curves([str(p) for p in paths]), split="train")

    seed_runs = runs(families["seeds"])
    rows = []
    for name in ("tau", "wd"):
        family = runs(families[name])
        report = collapse_report(family, seed_groups=[seed_runs])
        rows.append({
            "family": f"{name} fixed" if name == "tau" else "weight decay fixed",
            "max spread": round(report["spread"], 4),
            "seed spread": round(report["seed_spread"], 4),
            "ratio": round(report["ratio"], 2),
            "final losses": " ".join(f"{r.losses[-50:].mean():.3f}" for r in family),
            "taus": " ".join(f"{r.controls.tau:.3f}" for r in family),
        })
    print(f"\nTPP {args.tpp}, tau {args.tau}, widths {args.widths}, base LR {args.lr} at width "
          f"{args.base_width}, B {args.batch_tokens}, context {args.context}, weight decay of "
          f"the wd family {wd:.4g}")
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
