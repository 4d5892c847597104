"""Collapse of the quickstart's family on this machine: normalized curves of CompleteP widths
trained with ``hpo train`` at one TPP and tau, against the seed-to-seed spread, per width pair;
how far the base LR moves the normalized curve at a fixed tau; and the same widths with the
weight decay fixed instead of tau (a Llama-2-style recipe, where tau drifts with size).

Trains (two runs at a time, one thread each; a run whose curve exists is kept, so a rerun only
analyses) into ``--out-dir``:

- ``tau/w{W}_s0``: every width at TPP, tau and the base LR;
- ``tau/w{W}_s{S}``: seeds 1..S-1 of the two smallest widths (the seed spread);
- ``lr/w{W}_lr{LR}``: the two smallest widths at the other base LRs of ``--lrs``, same tau;
- ``wd/w{W}_s0``: every width with the base weight decay that gives the middle width tau.

Prints, for the train loss smoothed with a moving average and divided by its final value
(:func:`hpo.predictors.collapse_report`), the maximum spread over t^ in [0.2, 1] and the spread
at the judging checkpoints, beside the seed spread of the same widths:

    python benchmarks/collapse_family.py --out-dir benchmarks/results/collapse \\
        > benchmarks/results/collapse/collapse.txt
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._cpu_sweep import train_runs  # noqa: E402
from hpo.models import GPTConfig  # noqa: E402
from hpo.models.recipe import make_recipe  # noqa: E402

if TYPE_CHECKING:
    from hpo.predictors import RunCurve

#: the fractions of training a study judges at (the quickstart's checkpoints)
CHECKPOINTS = (0.2, 0.3, 0.5)


def _run(out: Path, width: int, seed: int, lr: float, recipe: dict[str, float],
         args: argparse.Namespace) -> tuple[Path, dict[str, object]]:
    """One run of the family: its curve file and ``hpo train``'s flags (``recipe``: tau or the
    weight decay)."""
    return out, {"width": width, "depth": 2, "heads": 4, "context": args.context,
                 "activation": "relu2", "base_width": args.base_width, "tpp": args.tpp,
                 "lr": lr, "batch_tokens": args.batch_tokens, "schedule": "linear",
                 "warmup": 0.05, "seed": seed, "threads": 1, "eval_every": 1000000,
                 "run_id": f"{out.parent.name}-{out.name.removesuffix('.csv.gz')}",
                 "group": out.parent.name, **recipe}


def _middle_weight_decay(args: argparse.Namespace) -> float:
    width = args.widths[len(args.widths) // 2]
    cfg = GPTConfig(width=width, depth=2, heads=4, context=args.context, activation="relu2",
                    base_width=args.base_width)
    return make_recipe(cfg=cfg, tpp=args.tpp, batch_tokens=args.batch_tokens, lr=args.lr,
                       tau=args.tau).weight_decay


def _parse_args() -> argparse.Namespace:
    """The command line's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/collapse"))
    parser.add_argument("--widths", type=lambda s: [int(w) for w in s.split(",")],
                        default=[32, 48, 64])
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the two smallest widths")
    parser.add_argument("--tpp", type=float, default=80.0)
    parser.add_argument("--tau", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=0.01, help="base LR at --base-width")
    parser.add_argument("--lrs", type=lambda s: [float(v) for v in s.split(",")],
                        default=[0.005, 0.01, 0.02], help="base LRs of the LR table")
    parser.add_argument("--base-width", type=int, default=32)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once")
    return parser.parse_args()


def _family_runs(args: argparse.Namespace, wd: float) -> list[tuple[Path, dict[str, object]]]:
    """Every run of the family under ``--out-dir`` (``tau/``, ``lr/``, ``wd/``; ``wd``: the base
    weight decay of ``wd/``), in training order."""
    d, small = args.out_dir, args.widths[:2]
    tau = {"tau": args.tau}
    runs = [_run(d / "tau" / f"w{w}_s0.csv.gz", w, 0, args.lr, tau, args) for w in args.widths]
    runs += [_run(d / "tau" / f"w{w}_s{s}.csv.gz", w, s, args.lr, tau, args)
             for w in small for s in range(1, args.seeds)]
    runs += [_run(d / "lr" / f"w{w}_lr{lr:g}.csv.gz", w, 0, lr, tau, args)
             for w in small for lr in args.lrs if lr != args.lr]
    runs += [_run(d / "wd" / f"w{w}_s0.csv.gz", w, 0, args.lr, {"weight_decay": wd}, args)
             for w in args.widths]
    return runs


def _curve(path: Path) -> RunCurve:
    """The train curve of one run's curve file."""
    from hpo.predictors import read_curves, runs_from_frame

    return runs_from_frame(read_curves([str(path)]), split="train")[0]


def _at(rows: np.ndarray, t: float) -> np.ndarray:
    """The column of normalized curves ``rows`` at the grid point nearest t^ ``t``."""
    from hpo.predictors.metrics import SPREAD_GRID

    return rows[:, int(np.argmin(np.abs(SPREAD_GRID - t)))]


def _tau_run(d: Path, w: int, s: int = 0) -> RunCurve:
    """The curve of width ``w`` at seed ``s`` with tau fixed."""
    return _curve(d / "tau" / f"w{w}_s{s}.csv.gz")


def _width_pairs(args: argparse.Namespace, seeds: dict[int, list[RunCurve]]) -> pd.DataFrame:
    """Per width pair at tau fixed: the maximum spread over t^ in [0.2, 1] and the gap at each
    checkpoint, beside the seed spread of ``seeds`` (curves per width)."""
    from hpo.predictors import collapse_report
    from hpo.predictors.metrics import normalized_matrix

    d, small = args.out_dir, args.widths[:2]
    seed_rows = {w: normalized_matrix(rs) for w, rs in seeds.items()}
    seed_all = collapse_report(seeds[small[0]], seed_groups=list(seeds.values()))["seed_spread"]
    seed_cp = {t: max(float(np.ptp(_at(r, t))) for r in seed_rows.values())
               for t in CHECKPOINTS}
    rows = []
    for a, b in itertools.combinations(args.widths, 2):
        pair = [_tau_run(d, a), _tau_run(d, b)]
        m = normalized_matrix(pair)
        rep = collapse_report(pair, seed_groups=list(seeds.values()))
        row = {"widths": f"{a} / {b}", "max spread [0.2, 1]": rep["spread"],
               "seed spread": seed_all, "ratio": rep["ratio"]}
        for t in CHECKPOINTS:
            row[f"gap at {t:g} (seeds)"] = (f"{_at(m, t)[1] - _at(m, t)[0]:+.4f} "
                                            f"({seed_cp[t]:.4f})")
        rows.append(row)
    return pd.DataFrame(rows)


def _lr_table(args: argparse.Namespace) -> pd.DataFrame:
    """Per small width and checkpoint at tau fixed: l(t^) at each base LR of ``--lrs`` and its
    change per doubling of the LR."""
    from hpo.predictors.metrics import normalized_matrix

    d, small = args.out_dir, args.widths[:2]
    lr_rows = []
    for w in small:
        curves = {lr: (_tau_run(d, w) if lr == args.lr
                       else _curve(d / "lr" / f"w{w}_lr{lr:g}.csv.gz"))
                  for lr in args.lrs}
        m = normalized_matrix(list(curves.values()))
        doublings = np.log2(max(args.lrs) / min(args.lrs))
        for t in CHECKPOINTS:
            vals = _at(m, t)
            lr_rows.append({"width": w, "t^": t, **{f"LR {lr:g}": v for lr, v in
                                                      zip(curves, vals, strict=True)},
                            "per doubling": (vals[-1] - vals[0]) / doublings})
    return pd.DataFrame(lr_rows)


def _tau_against_weight_decay(args: argparse.Namespace,
                              seeds: dict[int, list[RunCurve]]) -> pd.DataFrame:
    """The family with tau fixed and with the weight decay fixed: spread against the seed
    spread of ``seeds``, final losses and taus."""
    from hpo.predictors import collapse_report

    fam_rows = []
    for name in ("tau", "wd"):
        family = [_curve(args.out_dir / name / f"w{w}_s0.csv.gz") for w in args.widths]
        rep = collapse_report(family, seed_groups=list(seeds.values()))
        fam_rows.append({
            "family": "tau fixed" if name == "tau" else "weight decay fixed",
            "max spread": rep["spread"], "seed spread": rep["seed_spread"],
            "ratio": rep["ratio"],
            "final losses": " ".join(f"{r.losses[-50:].mean():.3f}" for r in family),
            "taus": " ".join(f"{r.controls.tau:.3f}" for r in family)})
    return pd.DataFrame(fam_rows)


def main() -> None:
    args = _parse_args()
    d, small = args.out_dir, args.widths[:2]
    wd = _middle_weight_decay(args)
    train_runs(_family_runs(args, wd), args.jobs)

    seeds = {w: [_tau_run(d, w, s) for s in range(args.seeds)] for w in small}
    print(f"# family: CompleteP depth 2, context 64, squared ReLU, byte-level stdlib, TPP "
          f"{args.tpp:g}, B {args.batch_tokens} tokens, linear decay to zero after 5% warmup, "
          f"base LR {args.lr:g} at width {args.base_width}; train loss smoothed over 2% of the "
          "run and divided by its final value")
    print(f"# seed spread: the largest spread among {args.seeds} seeds of widths "
          f"{', '.join(map(str, small))}")
    pairs = _width_pairs(args, seeds)
    print("\n## tau fixed: per width pair (gap = l_wide - l_narrow)")
    print(pairs.round(4).to_string(index=False))

    print(f"\n## the base LR at tau {args.tau:g}: l(t^) per LR (change per doubling of the LR)")
    print(_lr_table(args).round(4).to_string(index=False))

    print(f"\n## tau fixed against weight decay fixed ({wd:.4g}, tau of the middle width)")
    print(_tau_against_weight_decay(args, seeds).round(4).to_string(index=False))

if __name__ == "__main__":
    main()
