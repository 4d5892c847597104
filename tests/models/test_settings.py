"""The run settings are declared once (hpo.models.settings.RunSettings): TrainConfig, GPTConfig,
``hpo train``'s flags and the study file's sections all follow the declarations."""

from __future__ import annotations

import dataclasses

import pytest

from hpo.cli import main
from hpo.models.config import GPTConfig
from hpo.models.settings import RUN_DEFAULTS, SECTIONS, RunSettings
from hpo.study.schema import SCHEMA, parse_study


def test_every_setting_is_declared_once_and_followed_everywhere() -> None:
    pytest.importorskip("torch")
    from hpo.models.training import TrainConfig

    train = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    gpt = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
    keys = {section: RunSettings.in_section(section) for section in SECTIONS}
    for name, default in RUN_DEFAULTS.items():
        # TrainConfig is a RunSettings: the same field, the same default
        assert train[name] == default, name
        # the model's own config takes the shape's defaults from it
        if RunSettings.declared(name)["section"] == "model":
            assert gpt[name] == default, name
        # the study file: one key per setting in its section, with its default
        decl = RunSettings.declared(name)
        if decl["key"]:
            assert keys[decl["section"]][decl["key"]] == name
            assert SCHEMA[decl["section"]][decl["key"]][1] == default, name
    # and nothing else in those sections
    for section in SECTIONS:
        assert set(SCHEMA[section]) == set(keys[section])


def test_hpo_train_has_one_flag_per_setting_with_its_default(
        capsys: pytest.CaptureFixture[str]) -> None:
    from hpo.cli.train import flag_of

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for name in RunSettings.names():
        assert flag_of(name) in out, name


@pytest.mark.parametrize(("name", "bad", "rule"), [
    ("tpp", -1.0, "must be a finite number > 0"),
    ("activation", "tanh", "must be one of gelu, relu2, swiglu"),
    ("warmup", 2.5, "must be a fraction in [0, 1) or a whole number of steps >= 1"),
    ("base_width", 0, "must be a positive integer"),
])
def test_a_bad_value_reads_the_same_rule_everywhere(
        name: str, bad: object, rule: str, capsys: pytest.CaptureFixture[str]) -> None:
    # the constructor
    with pytest.raises(ValueError, match=rf"^{name} {rule.replace('[', '.').replace(')', '.')}"):
        RunSettings(**{name: bad})
    # the study file
    decl = RunSettings.declared(name)
    tiny = {decl["section"]: {decl["key"]: bad}}
    with pytest.raises(Exception) as info:
        parse_study(tiny, source="tiny.yaml")
    assert (f"{decl['section']}.{decl['key']}", f"{rule}, got {bad!r}") in info.value.errors
    # hpo train: one line naming the flag, the rule and the value
    from hpo.cli.train import flag_of

    code = main(["train", flag_of(name), str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and f"{flag_of(name)}: {rule}, got" in err, err


def test_settings_that_must_fit_together_are_checked_together() -> None:
    problems = RunSettings.problems({"width": 66, "heads": 4, "batch_tokens": 100,
                                     "context": 64, "tau": 0.2, "weight_decay": 0.1})
    assert [name for name, _ in problems] == ["width", "batch_tokens", "tau"]
    with pytest.raises(ValueError, match="width must be divisible by heads"):
        RunSettings(width=66, heads=4)
    # a study's numbers take their declared types
    assert RunSettings.from_sections({"recipe": {"tpp": 80}, "model": {"width": 48}}) == {
        "tpp": 80.0, "width": 48}
    assert isinstance(RunSettings.from_sections({"recipe": {"tpp": 80}})["tpp"], float)
