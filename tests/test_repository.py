"""Checks over the repository's own files (code, studies, config)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# a design brief that is not part of the repository: code and studies cite the facts or papers
MISSING_DOC = "DESIGN" + ".md"


def _repository_files(suffixes: tuple[str, ...]) -> list[Path]:
    out = []
    for root, dirs, files in os.walk(REPO):
        # not .venv, .git, caches or build metadata
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d == "__pycache__"
                                           or d.endswith(".egg-info"))]
        out += [Path(root) / f for f in files if Path(f).suffix in suffixes]
    return out


def test_repository_cites_no_file_it_lacks() -> None:
    assert not (REPO / MISSING_DOC).exists()
    files = _repository_files((".py", ".yaml", ".yml", ".toml"))
    assert any(p.name == "pyproject.toml" for p in files)
    citing = [f"{p.relative_to(REPO)}:{i}" for p in files
              for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
              if MISSING_DOC in line]
    # no .py, .yaml or .toml file points the reader at a file the repository does not have
    assert citing == []


def test_repository_reads_files_with_safe_loaders_only() -> None:
    import re

    code = [p for p in _repository_files((".py",))
            if p.relative_to(REPO).parts[0] in ("hpo", "predictors", "models", "benchmarks")]
    unsafe = re.compile(r"yaml\.(load|full_load|unsafe_load)\(|pickle\.loads?\(|np\.load\(.*"
                        r"allow_pickle=True|read_pickle\(")
    found = [f"{p.relative_to(REPO)}:{i}" for p in code
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if unsafe.search(line)
             or ("torch.load(" in line and "weights_only=True" not in line)]
    # YAML through yaml.safe_load, checkpoints through torch.load(weights_only=True), no pickle
    assert found == []
