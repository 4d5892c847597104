"""Record an LR x tau sweep of CompleteP models on one GPU, in the curve format.

The GPU counterpart of ``record_cpu_sweep.py``, at sizes where the collapse recipe has room to
work: depth 4, context 256, squared ReLU, base width 64, batch 16384 tokens, TPP 20, linear decay
to zero, every run with the same seed (so the same batch order). Target: width 256 (3.3M
parameters, ~4100 steps), one sweep group of LR {0.003, 0.01, 0.03} x tau {0.1, 0.2, 0.4}.
Proxies: the same nine settings at widths 64 and 128 (0.25M and 0.9M parameters), so
``hpo bench --proxy-max-params 1e6`` separates them. Train rows every 4 steps for the target
(every step for the proxies) and the val loss on fixed held-out batches about every 1% of the
run, so the val curves are smooth.

Each run is one ``hpo train`` process; ``--jobs`` of them share the GPU (small models leave it
mostly idle, so they overlap well). Runs still going at ``--deadline`` seconds are killed and
left out; the finished ones are written to ``--out`` (gzipped CSV).

    python benchmarks/record_gpu_sweep.py --jobs 9 --out gpu_sweep.csv.gz [--deadline 420]

Status: run end to end on the CPU only (``--device cpu --tpp 0.1``, a few steps per run); no
GPU sweep has been recorded with it yet.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

LRS = (0.003, 0.01, 0.03)
TAUS = (0.1, 0.2, 0.4)
TARGET_WIDTH = 256
PROXY_WIDTHS = (64, 128)
REPO = Path(__file__).resolve().parents[1]


def _command(width: int, lr: float, tau: float, out: Path, device: str, tpp: float) -> list[str]:
    target = width == TARGET_WIDTH
    return [
        sys.executable, "-m", "hpo", "train",
        "--width", str(width), "--depth", "4", "--heads", "4", "--context", "256",
        "--activation", "relu2", "--base-width", "64", "--base-depth", "4",
        "--tpp", str(tpp), "--lr", str(lr), "--tau", str(tau), "--batch-tokens", "16384",
        "--log-every", "4" if target else "1", "--eval-every", "40" if target else "10",
        "--eval-batches", "8", "--threads", "1", "--device", device, "--out", str(out),
    ]


def main() -> int:
    """Train every run (targets first, at most ``--jobs`` at once), then write one file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=9, help="runs at once (default: 9)")
    parser.add_argument("--device", default="cuda", help="torch device (default: cuda)")
    parser.add_argument("--tpp", type=float, default=20.0, help="tokens per parameter (20)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds after which unfinished runs are killed and left out")
    parser.add_argument("--work", default=None, help="folder for the per-run files")
    parser.add_argument("--out", default="benchmarks/data/gpu_sweep.csv.gz",
                        help="output curve file (default: benchmarks/data/gpu_sweep.csv.gz)")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu_sweep_"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    pending = [
        (width, lr, tau, work / f"w{width}-lr{lr}-tau{tau}.csv")
        for width in (TARGET_WIDTH, *PROXY_WIDTHS)
        for lr, tau in itertools.product(LRS, TAUS)
    ]
    running: list[tuple[subprocess.Popen, Path, float]] = []
    done: list[Path] = []
    t0 = time.time()
    while pending or running:
        while pending and len(running) < args.jobs:
            width, lr, tau, out = pending.pop(0)
            log = open(str(out) + ".log", "w")  # noqa: SIM115 (closed with the process)
            proc = subprocess.Popen(_command(width, lr, tau, out, args.device, args.tpp),
                                    stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
            running.append((proc, out, time.time()))
        time.sleep(0.5)
        for item in list(running):
            proc, out, started = item
            if proc.poll() is None:
                continue
            running.remove(item)
            tail = Path(str(out) + ".log").read_text().strip().splitlines()[-1:]
            print(f"[{time.time() - t0:6.1f}s] {out.name}: rc={proc.returncode} "
                  f"({time.time() - started:.1f}s) {' '.join(tail)}", flush=True)
            if proc.returncode == 0 and out.exists():
                done.append(out)
        if args.deadline is not None and time.time() - t0 > args.deadline:
            for proc, out, _ in running:
                proc.kill()
                print(f"killed at the deadline: {out.name}", flush=True)
            break
    if not done:
        print("no run finished", flush=True)
        return 1
    frame = pd.concat([pd.read_csv(f) for f in done], ignore_index=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False, compression="gzip")
    print(f"{frame['run_id'].nunique()} runs, {len(frame)} rows -> {out} "
          f"({time.time() - t0:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
