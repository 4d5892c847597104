"""The CPU sweeps of the benchmarks: a list of runs trained with ``hpo train``, several
processes at once, each run once (a curve file already there is kept, so a rerun only reads).

    from benchmarks._cpu_sweep import train_runs

    paths = train_runs([(Path("w32.csv.gz"), {"width": 32, "tpp": 80, "threads": 1})], jobs=2)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["train_argv", "train_runs"]

#: one run: its curve file (.csv or .csv.gz) and its ``hpo train`` flags, ``{"base_width": 32}``
#: for ``--base-width 32`` (a ``None`` value leaves the flag out)
RunSpec = tuple[Path, Mapping[str, object]]


def _flag_args(out: Path, flags: Mapping[str, object]) -> list[str]:
    """``hpo train``'s arguments: ``flags`` in their order, then ``--out``."""
    args = []
    for key, value in flags.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return args + ["--out", str(out)]


def train_argv(out: Path, flags: Mapping[str, object], nice: int = 0) -> list[str]:
    """The command line that trains one run into ``out``: ``python -m hpo train`` with
    ``flags`` in their order, then ``--out``; under ``nice -n NICE`` when ``nice`` > 0."""
    prefix = ["nice", "-n", str(nice)] if nice > 0 else []
    return [*prefix, sys.executable, "-m", "hpo", "train", *_flag_args(out, flags)]


def train_runs(runs: Sequence[RunSpec], jobs: int = 2, *, nice: int = 0, echo: bool = False,
               on_done: Callable[[Path], None] | None = None) -> list[Path]:
    """Train every run whose curve file does not exist yet, at most ``jobs`` at once, in the
    order given; the curve files, in that order.

    ``hpo train`` writes a curve file only when its run ends (atomically), so an interrupted
    sweep leaves no partial file and a rerun trains only what is missing. A run's stdout is
    dropped and its stderr passed through; with ``echo`` each command is printed to stderr
    (``+ hpo train FLAGS``) as it starts. ``on_done(path)`` is called for each run in order once
    it and those before it are done. ``ValueError`` for ``jobs`` < 1;
    ``subprocess.CalledProcessError`` for a run that fails (the runs already started finish)."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, but got {jobs=}")

    def train(out: Path, flags: Mapping[str, object]) -> Path:
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        if echo:
            print("+ hpo train", *_flag_args(out, flags), file=sys.stderr, flush=True)
        subprocess.run(train_argv(out, flags, nice), check=True, stdout=subprocess.DEVNULL)
        return out

    paths = []
    pool = ThreadPoolExecutor(jobs)
    try:
        for future in [pool.submit(train, out, flags) for out, flags in runs]:
            paths.append(future.result())
            if on_done is not None:
                on_done(paths[-1])
    finally:
        pool.shutdown(cancel_futures=True)  # after a failure: the runs not started never start
    return paths
