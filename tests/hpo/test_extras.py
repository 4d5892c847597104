"""The one-line error of a missing extra (the full core-only install is tests/test_install.py)."""

from __future__ import annotations

import sys
import types

import pytest

from hpo._extras import MissingExtra, require


def test_require_names_the_extra_that_brings_a_missing_module() -> None:
    with pytest.raises(MissingExtra) as info:
        require("no_such_module_xyz.sub", "train")
    assert str(info.value) == ("no_such_module_xyz is not installed; it comes with the 'train' "
                               'extra: pip install -e ".[train]" in the collapse-hpo checkout')
    assert isinstance(info.value, ImportError)
    assert require("json", "train") is sys.modules["json"]


def test_require_passes_on_an_error_from_inside_an_installed_module(monkeypatch) -> None:
    broken = types.ModuleType("broken_pkg_xyz")
    broken.__path__ = []  # a package whose submodule imports something missing
    monkeypatch.setitem(sys.modules, "broken_pkg_xyz", broken)

    def fail(name, *args, **kwargs):
        raise ModuleNotFoundError("No module named 'libfoo'", name="libfoo")

    monkeypatch.setattr("importlib.import_module", fail)
    with pytest.raises(ModuleNotFoundError, match="libfoo"):
        require("broken_pkg_xyz", "ray")


def test_cli_prints_the_missing_extra_in_one_line(monkeypatch, capsys) -> None:
    from hpo.cli import main
    from hpo.cli import train as cmd

    def run(args):
        raise MissingExtra('torch is not installed; it comes with the \'train\' extra: '
                           'pip install -e ".[train]" in the collapse-hpo checkout')

    monkeypatch.setattr(cmd, "run", run)
    assert main(["train", "--tpp", "2"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "hpo train: error: torch is not installed; it comes with the 'train' extra: "
        'pip install -e ".[train]" in the collapse-hpo checkout']
