"""Mutated study files never end in a traceback: each is a valid study, or every error is one
line with its YAML path (``StudyError``; exit code 2 from ``hpo validate``)."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpo.cli import main
from hpo.study.schema import StudyError, load_study, parse_study

ROOT = Path(__file__).resolve().parents[3]
STUDIES = ("quickstart.yaml", "celerity_family.yaml", "ray_cluster.yaml")
#: what a value may be swapped for: wrong types, odd numbers, nesting where a scalar goes
REPLACEMENTS: tuple[Any, ...] = (
    None, True, 0, -1, 1e308, float("nan"), "", "x", "0.02", [], [1, 2], ["a"], {}, {"a": 1},
    [[1]], [{"a": 1}], {"a": [1]}, 10**30, -1e-9, "auto",
)


def _paths(data: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every key path of a nested mapping / list."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def _parent(data: Any, path: tuple) -> Any:
    for k in path[:-1]:
        data = data[k]
    return data


def mutate(data: dict, rng: random.Random) -> dict:
    """One to three mutations: a value swapped, a key deleted or misspelled."""
    out = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(out))
        if not paths:
            break
        path = rng.choice(paths)
        parent = _parent(out, path)
        key = path[-1]
        kind = rng.random()
        if kind < 0.6:
            parent[key] = copy.deepcopy(rng.choice(REPLACEMENTS))
        elif kind < 0.8 and isinstance(parent, dict):
            del parent[key]
        elif isinstance(parent, dict) and isinstance(key, str):
            parent[key[:-1] + "z" if key else "z"] = parent.pop(key)
    return out


def _check_parse(data: Any) -> None:
    try:
        parse_study(data, source="fuzz.yaml", base_dir=ROOT / "studies")
    except StudyError as exc:
        # every error has a path (or none, for the whole file) and one line
        assert exc.errors and all("\n" not in msg for _, msg in exc.errors), exc.errors


@pytest.mark.parametrize("name", STUDIES)
def test_mutated_studies_are_valid_or_named_errors(name: str) -> None:
    rng = random.Random(name)
    base = yaml.safe_load((ROOT / "studies" / name).read_text())
    for _ in range(1500):
        _check_parse(mutate(base, rng))


@pytest.mark.parametrize("name", STUDIES)
def test_truncated_study_files_are_valid_or_named_errors(name: str, tmp_path: Path) -> None:
    text = (ROOT / "studies" / name).read_text()
    rng = random.Random(name)
    path = tmp_path / name
    for cut in sorted(rng.sample(range(len(text)), min(200, len(text)))):
        path.write_text(text[:cut])
        try:
            load_study(path)
        except StudyError as exc:
            assert exc.errors and all("\n" not in msg for _, msg in exc.errors)


def test_hpo_validate_on_mutated_files_exits_0_or_2(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(0)
    base = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    path = tmp_path / "s.yaml"
    for _ in range(150):
        path.write_text(yaml.safe_dump(mutate(base, rng)))
        code = main(["validate", str(path)])
        err = capsys.readouterr().err
        # a traceback would escape main; a refusal is a header line and one line per error
        assert code in (0, 2)
        assert "Traceback" not in err
