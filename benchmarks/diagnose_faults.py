"""Collapse diagnostics on a CPU family: how early the residual alert and the raw-loss rule
catch each injected fault, and whether either alerts on clean seeds.

The family is the one of ``benchmarks/collapse_family.py`` (CompleteP, depth 2, context 64,
squared ReLU, base width 32, TPP 80, tau 0.2, linear decay, batch 2048 tokens). The reference
is the universal curve fitted on the proxies (width 32, seeds 0-2, calibrated as ``hpo run``
does: its residual threshold comes from them). Targets are width 48: clean seeds 0-4, and seed 0
with each fault of ``hpo train --inject`` at t^ = 0.5 (data-repeat at 0.4). Curves already
present are reused, so a rerun only analyses.

The raw-loss rule stops when the smoothed loss rises x above its running minimum; it gets the
smallest x without a false alert on every clean run (proxies and clean targets), the most
favourable x it could have. "Remaining" is 1 - t^ at the alert (0 where nothing fired); the
goal is a residual alert with at least twice the raw rule's remaining training.

    python benchmarks/diagnose_faults.py --out-dir benchmarks/results/diagnose/cpu \
        > benchmarks/results/diagnose/faults.txt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

FAULTS = ("lr-spike@0.5", "data-repeat@0.4", "grad-noise@0.5", "precision@0.5", "restart@0.5")


def train(out: Path, width: int, seed: int, args: argparse.Namespace,
          inject: str | None = None) -> Path:
    """Train one run with ``hpo train`` unless its curve exists; its path."""
    if out.exists():
        return out
    cmd = [sys.executable, "-m", "hpo", "train", "--width", str(width), "--depth", "2",
           "--heads", "4", "--context", "64", "--activation", "relu2", "--base-width", "32",
           "--tpp", str(args.tpp), "--tau", "0.2", "--lr", "0.01", "--batch-tokens", "2048",
           "--schedule", "linear", "--warmup", "0.05", "--seed", str(seed),
           "--eval-every", "1000000", "--out", str(out),
           "--run-id", out.name.removesuffix(".csv.gz"), "--group", f"w{width}"]
    if inject:
        cmd += ["--inject", inject]
    print("+ hpo train", " ".join(cmd[4:]), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def _t(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/diagnose/cpu"))
    parser.add_argument("--tpp", type=float, default=80.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    proxies = [train(args.out_dir / f"w32_s{s}.csv.gz", 32, s, args) for s in range(3)]
    clean = [train(args.out_dir / f"w48_s{s}.csv.gz", 48, s, args) for s in range(5)]
    faulty = {f: train(args.out_dir / f"w48_s0_{f.replace('@', '_')}.csv.gz", 48, 0, args, f)
              for f in FAULTS}

    import warnings

    from hpo.diagnose import diagnose_runs
    from hpo.predictors import (
        fit_universal_curve,
        raw_loss_alert,
        raw_loss_rise,
        read_curves,
        reference_threshold,
        runs_from_frame,
    )

    def runs_of(paths: list[Path]) -> list:
        return runs_from_frame(read_curves(paths), split="train")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curve = fit_universal_curve(runs_of(proxies))
    proxy_runs, clean_runs = runs_of(proxies), runs_of(clean)
    fault_runs = runs_of(list(faulty.values()))
    x = max(raw_loss_rise(r.t_hat, r.losses) for r in proxy_runs + clean_runs)
    base = reference_threshold(curve)
    assert base is not None
    rows, out = [], {"threshold": base, "raw_rule_x": x, "runs": {}}
    for kind, group in (("proxy", proxy_runs), ("clean", clean_runs), ("fault", fault_runs)):
        plain = diagnose_runs(group, curve, threshold=base)  # the threshold without widening
        for run, d, p in zip(group, diagnose_runs(group, curve), plain, strict=True):
            raw = raw_loss_alert(run.t_hat, run.losses, x)
            rows.append((kind, run.run_id, d.threshold, d.max_abs_residual, d.alert_t,
                         p.alert_t, raw))
            out["runs"][run.run_id] = {"role": kind, **d.to_dict(trace=False),
                                       "alert_t_unwidened": p.alert_t, "raw_alert_t": raw}
    print(f"Reference: the universal curve of {len(proxy_runs)} proxies (width 32, TPP "
          f"{args.tpp:g}); residual threshold {100 * base:.2f}% (widened for width 48); raw "
          f"rule x = {100 * x:.2f}% (the smallest without a false alert on the clean runs).\n")
    print("| run | role | threshold | max abs residual | residual alert t^ | without widening "
          "| raw-rule alert t^ | remaining at residual / raw alert | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, rid, th, mx, a, plain_a, raw in rows:
        rem_a = 0.0 if a is None else 1 - a
        rem_r = 0.0 if raw is None else 1 - raw
        ratio = "" if kind != "fault" else (
            "-" if rem_a == 0 else ("inf" if rem_r == 0 else f"{rem_a / rem_r:.1f}"))
        print(f"| {rid} | {kind} | {100 * th:.2f}% | {100 * mx:.2f}% | {_t(a)} | {_t(plain_a)} "
              f"| {_t(raw)} | "
              f"{rem_a:.2f} / {rem_r:.2f} | {ratio} |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
