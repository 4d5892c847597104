"""Tiny study files for the runner tests: seconds per trial on one CPU thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TINY: dict[str, Any] = {
    "name": "tiny",
    "device": "cpu",
    "threads": 1,
    "model": {"width": 16, "depth": 1, "heads": 2, "context": 16, "base_width": 8,
              "base_depth": 1},
    "data": {"max_bytes": 200_000, "eval_batches": 1},
    "recipe": {"tpp": 3, "lr": 0.01, "tau": 0.2, "batch_tokens": 256},
    "proxies": {"widths": [8]},
    "search": {
        "lr": {"type": "float", "low": 0.005, "high": 0.02, "log": True,
               "values": [0.005, 0.02]},
        "tau": {"type": "float", "low": 0.1, "high": 0.4, "log": True, "values": [0.1, 0.4]},
    },
    "sampler": {"type": "grid", "seed": 0},
    "pruner": {"checkpoints": [0.2, 0.3], "report_points": 40},
    "budget": {"trials": 4},
}


def write_study(folder: Path, name: str = "tiny", **changes: Any) -> Path:
    """Write TINY (with top-level ``changes``; a None value drops the key) to folder/name.yaml,
    output in folder/out."""
    data = {**TINY, "name": name, "output": str(folder / "out")}
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
