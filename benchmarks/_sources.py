"""The four shared sources of the corpus, each with its proxy threshold and split.

Proxies are each source's runs of at most about 100M parameters (Marin's smallest runs are
130M, nominal, so its proxies are those). ``CURVES_DIR`` overrides ``../shared/data/curves``.
"""

from __future__ import annotations

import os
from pathlib import Path

from hpo.predictors import read_curves
from hpo.predictors.evaluate import Source

__all__ = ["SOURCES", "curves_dir", "load_sources"]

#: name -> (file, proxy_max_params, split)
SOURCES: dict[str, tuple[str, float, str]] = {
    "lr_scheduling": ("lr_scheduling.csv.gz", 94e6, "val"),
    "multipowerlaw": ("multipowerlaw.csv.gz", 150e6, "train"),
    "nanochat": ("nanochat.csv.gz", 100e6, "train"),
    "marin": ("marin.csv.gz", 150e6, "val"),
}


def curves_dir() -> Path:
    """Where the shared curve files are."""
    root = Path(__file__).resolve().parents[1]
    return Path(os.environ.get("CURVES_DIR", root.parent / "shared" / "data" / "curves"))


def load_sources(names: list[str] | None = None) -> list[Source]:
    """The sources named (all by default), read from :func:`curves_dir`."""
    out = []
    for name in names or list(SOURCES):
        file, proxy_max, split = SOURCES[name]
        out.append(Source(name, read_curves(curves_dir() / file), proxy_max, split))
    return out
