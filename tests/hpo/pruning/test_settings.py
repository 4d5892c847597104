"""``PrunerSettings``: the one validator of the pruner's settings, and the two entry points
that use it (the study YAML's ``pruner`` section and the pruner's constructor) accepting and
rejecting the same values."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

import hpo
from hpo import CollapsePruner
from hpo.pruning import (
    DEFAULT_CHECKPOINTS,
    DEFAULT_MARGIN,
    DEFAULT_N_CALIBRATION_TRIALS,
    DEFAULT_N_STARTUP_TRIALS,
    DEFAULT_THRESHOLD,
    DEFAULT_TOLERANCE,
    REJUDGE_EVERY,
    STALE_AFTER,
    PrunerSettings,
)
from hpo.study.pruner import pruner_kwargs, pruner_settings
from hpo.study.schema import StudyError, parse_study
from tests.hpo._studies import TINY

REPO = Path(__file__).resolve().parents[3]

# (setting, value, valid): the values both entry points are asked about
CASES: list[tuple[str, Any, bool]] = [
    ("threshold", 0, True),
    ("threshold", 0.5, True),
    ("threshold", 1, False),
    ("threshold", -0.1, False),
    ("threshold", True, False),
    ("threshold", "x", False),
    ("threshold", math.nan, False),
    ("checkpoints", [], False),
    ("checkpoints", [0.3, 0.2], False),
    ("checkpoints", [0, 0.5], False),
    ("checkpoints", [0.2, 0.3], True),
    ("checkpoints", [1.0], False),
    ("checkpoints", [0.2, 0.2], False),
    ("checkpoints", [0.5], True),
    ("checkpoints", 0.5, False),
    ("checkpoints", ["0.5"], False),
    ("checkpoints", [True], False),
    ("margin", -1, False),
    ("margin", math.inf, False),
    ("margin", math.nan, False),
    ("margin", 0, True),
    ("margin", 0.1, True),
    ("margin", True, False),
    ("n_startup_trials", 0, False),
    ("n_startup_trials", 1, True),
    ("n_startup_trials", 2.5, False),
    ("n_startup_trials", True, False),
    ("n_startup_trials", "2", False),
    ("rejudge_every", 0.05, True),
    ("rejudge_every", 0, False),
    ("rejudge_every", math.inf, False),
    ("rejudge_every", True, False),
    ("stale_after", 0, True),
    ("stale_after", 0.2, True),
    ("stale_after", -0.1, False),
    ("stale_after", math.nan, False),
    ("prior", None, True),
    ("prior", {"intercept": -3.0}, True),
    ("prior", {"coef": {}}, False),
    ("prior", {"intercept": -3.0, "coef": {"colour": 1.0}}, False),
    ("prior", 5, False),
    ("crossing_prior", None, True),
    ("crossing_prior", str(REPO / "predictors" / "crossing_prior.json"), True),
    ("crossing_prior", {"fractions": [0.1]}, False),
    ("crossing_prior", 5, False),
]


def _yaml_accepts(name: str, value: Any) -> bool:
    """Whether a study whose ``pruner`` section sets ``name: value`` validates; a rejection
    must name ``pruner.<name>`` and show the value."""
    data = {**TINY, "pruner": {**TINY["pruner"], name: value}}
    try:
        study = parse_study(data, source="s.yaml")
    except StudyError as exc:
        # the only error is the setting's, with its path and the value given
        assert [path for path, _ in exc.errors] == [f"pruner.{name}"], exc.errors
        assert repr(value) in exc.errors[0][1], exc.errors
        return False
    assert study.pruner[name] == value or (value is None and study.pruner[name] is None)
    return True


def _constructor_accepts(name: str, value: Any) -> bool:
    """Whether ``hpo.CollapsePruner(name=value)`` constructs; a rejection is a ``ValueError``
    naming the setting and the value."""
    try:
        CollapsePruner(**{name: value})
    except ValueError as exc:
        assert f"{name}={value!r}" in str(exc), exc
        return False
    return True


@pytest.mark.parametrize(("name", "value", "valid"), CASES,
                         ids=[f"{name}={value!r}" for name, value, _ in CASES])
def test_yaml_and_constructor_accept_the_same_values(name: str, value: Any, valid: bool) -> None:
    # the study file and the pruner agree, and both say what the table says
    assert _yaml_accepts(name, value) is valid
    assert _constructor_accepts(name, value) is valid


def test_yaml_and_constructor_read_a_prior_file_alike(tmp_path: Path) -> None:
    from hpo.predictors import default_prior

    good, bad, broken = tmp_path / "prior.json", tmp_path / "bad.json", tmp_path / "broken.json"
    good.write_text(json.dumps(default_prior().to_dict()))
    bad.write_text("{}")
    broken.write_text("{not json")
    for path, valid in ((good, True), (bad, False), (broken, False),
                        (tmp_path / "missing.json", False)):
        assert _yaml_accepts("prior", str(path)) is valid
        assert _constructor_accepts("prior", str(path)) is valid


def test_settings_defaults_are_the_constants() -> None:
    settings = PrunerSettings()
    assert settings.checkpoints == DEFAULT_CHECKPOINTS
    assert (settings.threshold, settings.margin) == (DEFAULT_THRESHOLD, DEFAULT_MARGIN)
    assert settings.n_startup_trials == DEFAULT_N_STARTUP_TRIALS
    assert settings.n_calibration_trials == DEFAULT_N_CALIBRATION_TRIALS
    assert settings.prior is None and settings.pair_prior is None
    # the YAML's defaults are the same settings
    assert pruner_settings(parse_study({**TINY, "pruner": None}, source="s.yaml")) == settings
    assert hpo.PrunerSettings is PrunerSettings


def test_settings_normalise_and_are_frozen() -> None:
    settings = PrunerSettings(checkpoints=[0.5, 0.75], threshold=0, margin=1)
    # any sequence becomes a tuple of floats; numbers become floats
    assert settings.checkpoints == (0.5, 0.75) and isinstance(settings.checkpoints, tuple)
    assert type(settings.threshold) is float and type(settings.margin) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.threshold = 0.5  # type: ignore[misc]


def test_settings_name_the_setting_and_the_value() -> None:
    with pytest.raises(ValueError) as info:
        PrunerSettings(threshold=1.5)
    assert str(info.value) == "threshold must be a number in [0, 1), but got threshold=1.5"
    with pytest.raises(ValueError, match=r"n_calibration_trials must be an int >= 1, but got "
                                         r"n_calibration_trials=0"):
        PrunerSettings(n_calibration_trials=0)
    # the schema's wording of the same rule: what it must be, then what it got
    assert PrunerSettings.check_field("threshold", 1.5) == "must be a number in [0, 1), got 1.5"
    assert PrunerSettings.check_field("threshold", 0.5) is None
    with pytest.raises(KeyError):
        PrunerSettings.check_field("enabled", True)


def test_the_judge_keeps_the_settings_and_the_loaded_prior() -> None:
    from hpo.predictors import PairPrior

    prior = {"intercept": -3.0}
    judge = CollapsePruner(checkpoints=[0.2, 0.4], prior=prior).judge
    assert judge.settings == PrunerSettings(checkpoints=(0.2, 0.4), prior=prior)
    assert judge.checkpoints == (0.2, 0.4)
    assert judge.prior == PairPrior(-3.0)


def test_pruner_kwargs_are_the_settings_kwargs() -> None:
    study = parse_study({**TINY, "pruner": {"threshold": 0.1, "checkpoints": [0.2]}},
                        source="s.yaml")
    kwargs = pruner_kwargs(study)
    # the YAML-only keys stay in the study; every setting reaches the constructor
    assert "enabled" not in kwargs and "report_points" not in kwargs
    assert kwargs == {"checkpoints": (0.2,), "threshold": 0.1, "tolerance": DEFAULT_TOLERANCE,
                      "margin": DEFAULT_MARGIN,
                      "n_startup_trials": DEFAULT_N_STARTUP_TRIALS,
                      "n_calibration_trials": DEFAULT_N_CALIBRATION_TRIALS,
                      "rejudge_every": REJUDGE_EVERY, "stale_after": STALE_AFTER}
    assert CollapsePruner(**kwargs).judge.settings == pruner_settings(study)
