"""Record a small LR x tau sweep of CompleteP models on the CPU, in the curve format.

Targets: width 32, depth 2, context 64, squared ReLU, base width 32, linear decay to zero, at
TPP 20 and 40 (two sweep groups of nine), LR in {0.003, 0.01, 0.03} x tau in {0.1, 0.2, 0.4}.
Proxies: the same settings at widths 16 and 24 (smaller n_params, so
``hpo bench --proxy-max-params`` separates them from the targets). Each run is one ``hpo train``
process under ``nice`` (``benchmarks/_cpu_sweep.py``); at most two run at once. Train rows (the
loss of that step's batch) and val rows (the mean loss over the same 8 held-out batches each
time) every 10 steps; the val curves are ~14x less noisy per point.
Output: ``benchmarks/data/cpu_sweep.csv.gz``.

    nice python benchmarks/record_cpu_sweep.py [--jobs 2] [--out benchmarks/data/cpu_sweep.csv.gz]

The same sweep one size up (targets width 64, proxies widths 32 and 48; 49 min on 2 cores
shared with other jobs), where the family is closer to collapsing:

    nice python benchmarks/record_cpu_sweep.py --target-width 64 --proxy-widths 32,48 \
        --out benchmarks/data/cpu_sweep_w64.csv.gz
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._cpu_sweep import train_runs  # noqa: E402

LRS = (0.003, 0.01, 0.03)
TAUS = (0.1, 0.2, 0.4)
TPPS = (20, 40)
TARGET_WIDTH = 32
PROXY_WIDTHS = (16, 24)


def _flags(width: int, tpp: int, lr: float, tau: float) -> dict[str, object]:
    """``hpo train``'s flags for one run of the sweep."""
    return {"width": width, "depth": 2, "heads": 4, "context": 64, "activation": "relu2",
            "base_width": 32, "tpp": tpp, "lr": lr, "tau": tau, "log_every": 10,
            "eval_every": 10, "eval_batches": 8, "threads": 1, "device": "cpu"}


def main() -> int:
    """Train every run (targets first), then write one gzipped curve file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="parallel trainings (default: 2)")
    parser.add_argument("--target-width", type=int, default=TARGET_WIDTH,
                        help=f"width of the target runs (default: {TARGET_WIDTH})")
    parser.add_argument("--proxy-widths", default=",".join(map(str, PROXY_WIDTHS)),
                        help="widths of the proxy runs, comma-separated (default: "
                             f"{','.join(map(str, PROXY_WIDTHS))})")
    parser.add_argument("--work", default=None,
                        help="folder for the per-run files; runs already there are kept")
    parser.add_argument("--out", default="benchmarks/data/cpu_sweep.csv.gz",
                        help="output curve file (default: benchmarks/data/cpu_sweep.csv.gz)")
    args = parser.parse_args()
    try:
        proxies = [int(w) for w in args.proxy_widths.split(",")]
    except ValueError:
        parser.error(f"--proxy-widths: expected comma-separated integers, "
                     f"got {args.proxy_widths!r}")
    tmp = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="cpu_sweep_"))
    runs = [(tmp / f"w{width}-tpp{tpp}-lr{lr}-tau{tau}.csv", _flags(width, tpp, lr, tau))
            for width in (args.target_width, *proxies)
            for tpp, lr, tau in itertools.product(TPPS, LRS, TAUS)]
    files = train_runs(runs, args.jobs, nice=10,
                       on_done=lambda path: print(f"done {path.name}", flush=True))
    frame = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False, compression="gzip")
    print(f"{frame['run_id'].nunique()} runs, {len(frame)} rows -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
