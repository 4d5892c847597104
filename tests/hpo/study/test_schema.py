"""Study schema and ``hpo validate`` / ``hpo run`` on bad files: every error with its path,
exit code 2, an existing study untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hpo.cli import main
from hpo.pruning import DEFAULT_THRESHOLD
from hpo.study.schema import StudyError, load_study, parse_study
from tests.hpo._studies import TINY, write_study

ROOT = Path(__file__).resolve().parents[3]
FULL_SWEEP = ROOT / "benchmarks" / "results" / "quickstart" / "full_sweep.json"


def _errors(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(StudyError) as info:
        parse_study(data, source="s.yaml")
    return info.value.errors


def test_schema_accepts_the_example_studies() -> None:
    for name in ("quickstart.yaml", "celerity_family.yaml", "ray_cluster.yaml"):
        study = load_study(ROOT / "studies" / name)
        # defaults filled in, storage next to the output by default
        assert study.search and study.budget["trials"] >= 1
        assert study.storage.startswith(("sqlite:///", "postgresql"))


def test_schema_fills_defaults_and_proxy_plan() -> None:
    study = parse_study(dict(TINY), source="tiny.yaml")
    assert study.name == "tiny" and study.output == Path("runs/tiny")
    assert study.storage == "sqlite:///runs/tiny/study.db"
    # vary defaults to the searched tau: its low, geometric middle and high
    assert study.proxies["vary"] == {"tau": [0.1, 0.2, 0.4]}
    assert study.pruner["checkpoints"] == [0.2, 0.3]
    assert study.pruner["threshold"] == DEFAULT_THRESHOLD


@pytest.mark.parametrize(("change", "path", "needle"), [
    ({"budegt": {"trials": 3}}, "budegt", "did you mean 'budget'"),
    ({"model": {**TINY["model"], "widht": 32}}, "model.widht", "did you mean 'width'"),
    ({"model": {**TINY["model"], "depth": "two"}}, "model.depth", "must be a positive integer"),
    ({"budget": {"trials": -3}}, "budget.trials", "must be >= 1"),
    ({"budget": {"trials": 3, "wall_time": "-5m"}}, "budget.wall_time", "duration"),
    ({"search": {"lr": {"type": "float", "low": 0.1, "high": 0.01}}}, "search.lr",
     "low must be <= high"),
    ({"search": {"learning_rate": {"low": 0.1, "high": 0.2}}}, "search.learning_rate",
     "not a searchable setting"),
    ({"pruner": {"checkpoints": [0.3, 0.2]}}, "pruner.checkpoints", "strictly increasing"),
    ({"pruner": {"threshold": 1.0}}, "pruner.threshold", "must be a number in [0, 1), got 1.0"),
    ({"pruner": {"threshold": -0.1}}, "pruner.threshold", "must be a number in [0, 1), got -0.1"),
    ({"pruner": {"debias": True}}, "pruner.debias", "unknown key"),
    ({"recipe": {**TINY["recipe"], "schedule": "exp"}}, "recipe.schedule", "must be one of"),
    ({"backend": "slurm"}, "backend", "must be one of local, ray"),
    ({"workers": 0}, "workers", "must be >= 1"),
    ({"diagnose": {"stop_on_alert": "yes"}}, "diagnose.stop_on_alert", "true or false"),
    ({"diagnose": {"stop_on_alrt": True}}, "diagnose.stop_on_alrt", "did you mean"),
    ({"diagnose": {"inject": "spike@0.5"}}, "diagnose.inject", "KIND one of lr-spike"),
    ({"diagnose": {"inject": "lr-spike@1.5"}}, "diagnose.inject", "got 'lr-spike@1.5'"),
    ({"diagnose": {"inject": "lr-spike@0.5", "inject_trial": -1}}, "diagnose.inject_trial",
     "must be >= 0"),
    ({"diagnose": {"inject": "lr-spike@0.5"}, "backend": "ray"}, "diagnose.inject",
     "local backend only"),
    ({"proxies": {"widths": [8], "seeds": [0], "vary": {}}}, "proxies", "at least 3"),
    # a value of the wrong type is named, never hashed or compared
    ({"search": {"lr": {"type": ["float"], "low": 0.01, "high": 0.1}}}, "search.lr.type",
     "must be one of float, int, categorical, got ['float']"),
    ({"search": {"lr": {"type": {"a": 1}, "low": 0.01, "high": 0.1}}}, "search.lr.type",
     "got {'a': 1}"),
    ({"proxies": {"vary": [["tau"]]}}, "proxies.vary[0]", "must name a searched setting"),
    ({"proxies": {"vary": [{"tau": 1}]}}, "proxies.vary[0]", "must name a searched setting"),
    ({"pruner": {"threshold": "0.02"}}, "pruner.threshold",
     "must be a number in [0, 1), got '0.02'"),
    ({"pruner": {"tolerance": 1.5}}, "pruner.tolerance", "must be a number in [0, 1)"),
])
def test_schema_reports_path_and_reason(change: dict, path: str, needle: str) -> None:
    errors = _errors({**TINY, **change})
    assert any(p == path and needle in msg for p, msg in errors), errors


def test_a_ray_study_keeps_its_workers_for_the_proxies() -> None:
    # the shipped quickstart says workers: 2; onto a cluster (--address) it stays valid: the
    # proxies train two at a time here, the cluster runs the trials
    study = parse_study({**TINY, "backend": "ray", "workers": 2}, source="tiny.yaml")
    assert study.backend == "ray" and study.workers == 2


@pytest.mark.parametrize("threshold", [0.0, 0.02, 0.5])
def test_schema_accepts_every_threshold_the_pruner_does(threshold: float) -> None:
    from hpo import CollapsePruner
    from hpo.predictors import LastValuePredictor

    # 0 is a shadow run: it stops nothing and records every verdict
    study = parse_study({**TINY, "pruner": {"threshold": threshold}}, source="tiny.yaml")
    assert study.pruner["threshold"] == threshold
    CollapsePruner(predictor=LastValuePredictor(), threshold=threshold)


def test_the_yaml_pruner_maps_onto_the_pruner_with_its_prior(tmp_path) -> None:
    import json

    from hpo import CollapsePruner
    from hpo.predictors import LastValuePredictor, default_prior
    from hpo.study.pruner import pruner_kwargs

    prior = tmp_path / "prior.json"
    prior.write_text(json.dumps(default_prior().to_dict()))
    study = parse_study({**TINY, "pruner": {"threshold": 0.1, "prior": str(prior)}},
                        source="tiny.yaml")
    kwargs = pruner_kwargs(study)
    assert kwargs["threshold"] == 0.1 and kwargs["prior"] == str(prior)
    CollapsePruner(predictor=LastValuePredictor(), **kwargs)
    # without one, the shipped prior (no keyword)
    assert "prior" not in pruner_kwargs(parse_study(dict(TINY), source="tiny.yaml"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    errors = _errors({**TINY, "pruner": {"prior": str(bad)}})
    assert any(p == "pruner.prior" and "missing field 'intercept'" in m for p, m in errors)


def test_schema_reports_every_error_at_once() -> None:
    data = {**TINY, "budegt": 1, "budget": {"trials": 0},
            "search": {"lr": {"type": "float", "low": 1.0, "high": 0.5}},
            "model": {**TINY["model"], "heads": "4"}}
    paths = {p for p, _ in _errors(data)}
    # all four problems in one report
    assert {"budegt", "budget.trials", "search.lr", "model.heads"} <= paths


def test_schema_grid_sampler_needs_points() -> None:
    data = {**TINY, "search": {"lr": {"type": "float", "low": 0.001, "high": 0.01}}}
    assert ("search.lr.values", "is required with sampler.type: grid (the grid points)") in \
        _errors(data)


def test_load_study_bad_yaml_syntax(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: x\nmodel: {width: 3\n")
    with pytest.raises(StudyError, match="not valid YAML at line"):
        load_study(path)


def test_load_study_refuses_a_key_given_twice(tmp_path: Path) -> None:
    # safe_load keeps the last of two equal keys silently: the study would run with a value
    # its author did not mean
    path = tmp_path / "s.yaml"
    path.write_text("name: x\npruner:\n  threshold: 0.02\n  threshold: 0.5\n")
    with pytest.raises(StudyError, match="not valid YAML at line 4, column 3: key 'threshold' "
                                         "given twice"):
        load_study(path)


def test_every_pruner_setting_is_a_study_key() -> None:
    from hpo.pruning import PrunerSettings

    # the pruner section has one key per setting, with its default: a new setting needs no
    # edit here
    study = parse_study({**TINY, "pruner": {"tolerance": 0.005, "n_calibration_trials": 4}},
                        source="s.yaml")
    assert study.pruner["tolerance"] == 0.005 and study.pruner["n_calibration_trials"] == 4
    defaults = parse_study(TINY, source="s.yaml").pruner
    for name, default in PrunerSettings.defaults().items():
        if name in TINY.get("pruner", {}):
            continue
        assert defaults[name] == (list(default) if isinstance(default, tuple) else default)


def test_a_study_setting_is_one_schema_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A study-level setting is declared once: its schema entry (check, default) in a
    section, or at the top level with its typed :class:`Study` field. The study carries it, the
    check refuses a bad value by its path, ``to_dict`` (``config.json``, ``validate --show``)
    writes it, with no other edit."""
    import dataclasses

    from hpo.study import schema

    top = {f.name for f in dataclasses.fields(schema.Study)} - {"search", "source", "raw"}
    assert top == set(schema.TOP) | set(schema.SCHEMA)  # nothing declared twice or left out
    monkeypatch.setitem(schema.SCHEMA, "budget", {**schema.SCHEMA["budget"],
                                                  "patience": (schema._int(0), 3)})
    study = parse_study({**TINY, "budget": {"trials": 2, "patience": 5}}, source="s.yaml")
    assert study.budget["patience"] == 5 and study.to_dict()["budget"]["patience"] == 5
    assert parse_study(TINY, source="s.yaml").budget["patience"] == 3
    with pytest.raises(StudyError, match=r"budget\.patience: must be >= 0, got -1"):
        parse_study({**TINY, "budget": {"patience": -1}}, source="s.yaml")


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _existing_study(folder: Path) -> Path:
    """An output folder holding a real Optuna study with one finished trial."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = folder / "out"
    out.mkdir()
    study = optuna.create_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}")
    study.optimize(lambda t: t.suggest_float("lr", 0.005, 0.02), n_trials=1)
    (out / "summary.json").write_text("{}")
    return out


@pytest.mark.parametrize(("changes", "needles"), [
    ({"extra_key": 1}, ["extra_key", "unknown key"]),
    ({"budget": {"trials": "many"}}, ["budget.trials", "must be an integer"]),
    ({"budget": {"trials": -2}}, ["budget.trials", "must be >= 1"]),
    ({"search": {"lr": {"type": "float", "low": 0.02, "high": 0.005, "values": [0.01]},
                 "tau": TINY["search"]["tau"]}}, ["search.lr", "low must be <= high"]),
    ({"storage": "sqlite:////no/such/folder/study.db"}, ["storage", "cannot reach"]),
    ({"storage": "postgresql://hpo@127.0.0.1:1/hpo"}, ["storage", "cannot reach"]),
    ({"storage": "foo://x"}, ["storage", "unknown storage 'foo://x' (scheme 'foo')"]),
    ({"data": {**TINY["data"], "source": "no/such/data"}},
     ["data.source", "does not exist: 'no/such/data'"]),
    ({"reference": "no_such_sweep.json"}, ["reference", "file not found: 'no_such_sweep.json'"]),
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_bad_study_exit_2_existing_study_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict, needles: list[str],
        command: str) -> None:
    out = _existing_study(tmp_path)
    before = _digest(out)
    path = write_study(tmp_path, **changes)
    code = main([command, str(path)])
    captured = capsys.readouterr()
    err = captured.err
    if command == "validate" and "data" in changes:
        # the data may live only on the machine that runs the study: validate notes it
        assert code == 0 and "note: hpo run reads data.source" in captured.out
        assert all(n in captured.out for n in needles[1:])
        return
    # exit code 2, a clear error naming the path and the reason, no traceback
    assert code == 2
    assert err.startswith(f"hpo {command}: error: ") and "Traceback" not in err
    assert all(n in err for n in needles), err
    # nothing in the existing study changed
    assert _digest(out) == before


def test_cli_run_refuses_a_different_study_in_the_same_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "study.json").write_text('{"name": "tiny", "model": {"width": 999}}')
    before = _digest(out)
    code = main(["run", str(write_study(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2 and "differs from the study already in" in err
    assert _digest(out) == before


def test_cli_validate_ok_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(tmp_path)
    assert main(["validate", str(path)]) == 0
    assert "ok" in capsys.readouterr().out
    assert main(["validate", str(path), "--show"]) == 0
    assert '"checkpoints"' in capsys.readouterr().out


@pytest.mark.parametrize(("changes", "path", "value", "reason"), [
    ({"data": {**TINY["data"], "source": "no/such/data"}}, "data.source", "'no/such/data'",
     "does not exist"),
    ({"data": {**TINY["data"], "source": "/no/such/train.bin"}}, "data.source",
     "'/no/such/train.bin'", "does not exist"),
    ({"reference": "no_such_sweep.json"}, "reference", "'no_such_sweep.json'", "file not found"),
    ({"reference": "proxies.csv"}, "reference", "'proxies.csv'", "not a study summary JSON"),
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_missing_input_file_one_line_exit_2_before_training(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict, path: str,
        value: str, reason: str, command: str) -> None:
    (tmp_path / "proxies.csv").write_text("run_id,step,loss\nr0,0,5.0\n")
    code = main([command, str(write_study(tmp_path, **changes))])
    captured = capsys.readouterr()
    err = captured.err
    if command == "validate" and path == "data.source":
        # validate notes a data path this machine lacks (the runner's machine may have it)
        assert code == 0 and value in captured.out and reason in captured.out
        return
    # exit 2 and one line naming the field, the value and the reason; no traceback
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"hpo {command}: error: ") and f"{path}: " in err
    assert value in err and reason in err
    # hpo run stopped before training or writing anything: no output folder
    assert not (tmp_path / "out").exists()


def test_cli_validate_accepts_an_existing_reference(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text(FULL_SWEEP.read_text())
    # a full sweep's summary beside the study file (the reference is relative to it) is fine
    assert main(["validate", str(write_study(tmp_path, reference="sweep.json"))]) == 0


def test_load_study_reads_relative_paths_from_the_study_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpo.study.schema import check_files

    folder = tmp_path / "studies"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "corpus.txt").write_text("hello world\n" * 100)
    (folder / "sweep.json").write_text(FULL_SWEEP.read_text())
    path = write_study(folder, data={**TINY["data"], "source": "data/corpus.txt"},
                       reference="sweep.json", output="runs/tiny")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for given in (path, Path("../studies/tiny.yaml")):
        study = load_study(given)
        # data.source and reference: relative to the study file's folder, not the working one
        assert Path(study.data["source"]).resolve() == folder / "data" / "corpus.txt"
        assert study.reference is not None and study.reference.resolve() == folder / "sweep.json"
        check_files(study)
        # output (and the default storage inside it): relative to the working directory
        assert study.output == Path("runs/tiny")
        assert study.storage == "sqlite:///runs/tiny/study.db"
        # the identity holds the source as the file gives it: the same from any folder
        assert study.identity()["data"]["source"] == "data/corpus.txt"
    assert main(["validate", "../studies/tiny.yaml"]) == 0
    # absolute paths and the stdlib source stay as given
    absolute = str(folder / "data" / "corpus.txt")
    for source in (absolute, "stdlib"):
        study = load_study(write_study(folder, data={**TINY["data"], "source": source}))
        assert study.data["source"] == source
    # a missing relative source: the error gives it as written and where it was looked for
    study = load_study(write_study(folder, data={**TINY["data"], "source": "no/such.txt"}))
    with pytest.raises(StudyError, match=r"'no/such.txt' \(resolved relative to the study "
                                         r"file: '.*studies/no/such.txt'\)"):
        check_files(study)


SECRET_STORAGE = "postgresql://user:secret@127.0.0.1:1/db"


def test_cli_storage_password_never_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_study(tmp_path, storage=SECRET_STORAGE)
    # an unreachable storage: the error names it without its password
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "secret" not in err and "postgresql://user:***@127.0.0.1:1/db" in err
    # a reachable one (no PostgreSQL server here: the connection check skipped): the ok line
    # and --show (what config.json holds) print the masked URL
    import hpo.study.folder

    monkeypatch.setattr(hpo.study.folder, "check_storage", lambda study: None)
    assert main(["validate", str(path)]) == 0
    assert main(["validate", str(path), "--show"]) == 0
    out = capsys.readouterr().out
    assert "secret" not in out and out.count("postgresql://user:***@127.0.0.1:1/db") == 2


def test_study_to_dict_masks_the_storage_password() -> None:
    study = parse_study({**TINY, "storage": SECRET_STORAGE}, source="s.yaml")
    # the study keeps the URL it connects with; what is written (config.json) does not hold it
    assert study.storage == SECRET_STORAGE
    assert study.to_dict()["storage"] == "postgresql://user:***@127.0.0.1:1/db"


@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_unreachable_ray_address_in_the_study_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    path = write_study(tmp_path, backend="ray", ray={"address": address})
    code = main([command, str(path)])
    err = capsys.readouterr().err
    # one line naming the study's field and its value, before anything is written
    assert code == 2 and err.count("\n") == 1 and f"ray.address={address!r}" in err
    assert not (tmp_path / "out").exists()


def test_diagnose_inject_breaks_the_named_trial_only(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from hpo.study.plan import trial_setup
    from hpo.study.runner import StudyRunner

    study = parse_study({**TINY, "output": str(tmp_path / "out"),
                         "diagnose": {"inject": "lr-spike@0.5", "inject_trial": 1}},
                        source="s.yaml")
    runner = StudyRunner(study)
    cfgs = {n: trial_setup(runner.ctx, {"lr": 0.01, "tau": 0.2}, n)[0] for n in (0, 1, 2)}
    assert [cfgs[n].inject for n in (0, 1, 2)] == [None, "lr-spike@0.5", None]
    assert cfgs[1].run_id == "trial-1"  # the trial keeps its identity; its rows name the fault
    clean = StudyRunner(parse_study(dict(TINY), source="s.yaml"))
    assert clean.study.diagnose["inject"] is None
    assert trial_setup(clean.ctx, {"lr": 0.01, "tau": 0.2}, 0)[0].inject is None


def test_cli_inject_flag_is_the_study_field(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(tmp_path, diagnose={"stop_on_alert": True})
    # a bad fault: one line naming the flag that gave it and the value, exit 2, nothing run
    assert main(["run", str(path), "--inject", "spike@0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert ": --inject: must be KIND@T" in err and "'spike@0.5'" in err
    assert not (tmp_path / "out").exists()
    # so is a storage given by --storage
    assert main(["run", str(path), "--storage", "sqlite:////no/such/dir/s.db"]) == 2
    assert ": --storage: cannot reach" in capsys.readouterr().err
    # a good one joins the file's diagnose section (stop_on_alert kept) and the study's identity
    study = load_study(path, {"diagnose.inject": "lr-spike@0.5", "diagnose.inject_trial": 2})
    assert study.diagnose == {"stop_on_alert": True, "inject": "lr-spike@0.5",
                              "inject_trial": 2}
    assert study.identity()["inject"] == ["lr-spike@0.5", 2]
    assert "inject" not in load_study(path).identity()


@pytest.mark.parametrize("path", sorted((ROOT / "studies").iterdir()), ids=lambda p: p.name)
def test_every_file_in_studies_is_a_study_that_validates_as_shipped(
        path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # studies/ holds study files only (results live in benchmarks/results/), and each one
    # validates on a machine without its data, noting what hpo run will need
    assert path.suffix == ".yaml"
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    assert ": ok. study " in capsys.readouterr().out
