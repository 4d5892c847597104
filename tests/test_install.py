"""The project installed into throwaway virtualenvs, as a user installs it.

* A user's project with its own ``models/`` and ``predictors/`` packages, run from inside it (its
  folder first on ``sys.path``, as ``python -m``, notebooks and ``PYTHONPATH=.`` put it): ours,
  installed editable and regular, still trains, runs a study and gives ``CollapsePruner``.
  These venvs reuse this environment's packages (torch, optuna, ...) through a ``.pth`` file, so
  nothing is downloaded; only the project itself is installed.
* The core alone (``pip install .`` from the checkout) into a fresh venv: the pruner works in an
  Optuna study without torch, Ray or matplotlib, and a command that needs an extra (``hpo
  train``, ``hpo run``) says which in one line, before it writes anything.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.hpo._studies import TINY

REPO = Path(__file__).resolve().parents[1]
# what the project's wheel is built from (copied, so that builds leave nothing in the checkout)
SOURCES = ("hpo", "models", "predictors", "pyproject.toml", "README.md")
# the CLI's entry point, the same in every layout the project has had
HPO = "import sys; from hpo.cli import main; sys.exit(main(sys.argv[1:]))"

pytestmark = pytest.mark.slow


def _copy_project(dest: Path) -> Path:
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def _venv(path: Path) -> Path:
    """A fresh virtualenv without pip of its own (:func:`_pip` installs into it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   capture_output=True)
    return path / "bin" / "python"


def _pip(python: Path, *args: str, cwd: Path, timeout: float = 600) -> None:
    """``pip install ARGS`` into the venv of ``python``, by this environment's pip."""
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args], cwd,
         timeout=timeout)


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd[-3:]}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _user_project(root: Path) -> Path:
    """A typical ML repository: its own models/ and predictors/ packages, and a study file."""
    for pkg, text in {
        "models": "raise ImportError('the user project models package was imported')\n",
        "predictors": "raise ImportError('the user project predictors package was imported')\n",
    }.items():
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text(text)
        (root / pkg / "train.py").write_text("class TrainConfig:  # the user's own\n    pass\n")
    study = {**TINY, "name": "user", "output": str(root / "out"),
             "budget": {"trials": 2}, "proxies": {"widths": [8], "seeds": [0, 1, 2]}}
    (root / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    return root


@pytest.mark.parametrize("editable", [True, False], ids=["editable", "regular"])
def test_a_user_project_with_its_own_models_and_predictors(tmp_path: Path,
                                                          editable: bool) -> None:
    project = _copy_project(tmp_path / "collapse-hpo")
    python = _venv(tmp_path / "venv")
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # this environment's packages (torch, optuna, ray, ...), but not its collapse-hpo: a path
    # listed in a .pth file is added as is, its own .pth files (our editable hook) are not read
    (site / "parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _pip(python, "--no-deps", *(["-e"] if editable else []), str(project), cwd=tmp_path)
    user = _user_project(tmp_path / "user")

    probe = _run([str(python), "-c", textwrap.dedent("""
        import json, optuna, hpo, hpo.models, hpo.predictors
        from hpo import CollapsePruner
        study = optuna.create_study(pruner=CollapsePruner())
        print(json.dumps({"hpo": hpo.__file__, "models": hpo.models.__file__,
                          "predictors": hpo.predictors.__file__}))
    """)], user)
    where = json.loads(probe.stdout.strip().splitlines()[-1])
    # ours, from where it was installed, never the user's folders
    installed = (project if editable else site).resolve()
    assert all(Path(p).resolve().is_relative_to(installed) for p in where.values()), where

    if editable:  # hpo train imports what hpo run does; one layout runs it
        _run([str(python), "-c", HPO, "train", "--width", "8", "--depth", "1", "--heads", "2",
              "--context", "16", "--tpp", "2", "--batch-tokens", "256", "--device", "cpu",
              "--max-data-bytes", "200000", "--out", str(user / "train.csv.gz")], user)
        assert (user / "train.csv.gz").stat().st_size > 0
    _run([str(python), "-c", HPO, "run", "study.yaml", "--quiet"], user)
    summary = json.loads((user / "out" / "summary.json").read_text())
    assert summary["trials"]["complete"] + summary["trials"]["stopped"] == 2
    assert summary["trials"]["failed_or_interrupted"] == 0 and summary["best"]


def test_core_install_runs_the_pruner_without_torch_or_ray(tmp_path: Path) -> None:
    project = _copy_project(tmp_path / "collapse-hpo")
    python = _venv(tmp_path / "venv")
    _pip(python, str(project), cwd=tmp_path, timeout=900)
    script = textwrap.dedent("""
        import importlib.util, json, math
        import optuna
        from hpo import CollapsePruner, describe_trial
        from hpo.predictors import Controls, fit_universal_curve, RunCurve
        import numpy as np

        T = 200
        steps = np.arange(1, T + 1, dtype=float)
        def curve(scale):  # one shape for every run: the curves collapse exactly
            return scale * (1.0 + 0.8 * (1.0 - steps / T) ** 1.2)

        controls = Controls(total_steps=T, tpp=20, tau=0.2, schedule="linear")
        proxies = [RunCurve(f"p{i}", steps, curve(2.5 + 0.2 * i), controls, group="proxies")
                   for i in range(4)]
        reference = fit_universal_curve(proxies)
        study = optuna.create_study(pruner=CollapsePruner(reference, n_startup_trials=1))

        def objective(trial):
            scale = trial.suggest_float("scale", 2.0, 4.0)
            describe_trial(trial, total_steps=T, tpp=20, tau=0.2, schedule="linear")
            loss = curve(scale)
            for step, value in zip(steps.astype(int), loss):
                trial.report(float(value), int(step))
                if trial.should_prune():
                    raise optuna.TrialPruned()
            return float(loss[-1])

        study.enqueue_trial({"scale": 2.0})
        for s in (3.5, 3.8, 3.9):
            study.enqueue_trial({"scale": s})
        study.optimize(objective, n_trials=4)
        states = [t.state.name for t in study.trials]
        print(json.dumps({"states": states,
                          "missing": [m for m in ("torch", "ray", "matplotlib", "pyarrow")
                                      if importlib.util.find_spec(m) is None]}))
    """)
    out = json.loads(_run([str(python), "-c", script], tmp_path).stdout.strip().splitlines()[-1])
    # the best trial finishes; the clearly worse ones stop early; none of the extras is installed
    assert out["states"][0] == "COMPLETE" and "PRUNED" in out["states"][1:], out
    assert out["missing"] == ["torch", "ray", "matplotlib", "pyarrow"]
    # a command that needs an extra names the one to install, in one line, exit code 1
    proc = subprocess.run([str(tmp_path / "venv" / "bin" / "hpo"), "train", "--tpp", "2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "hpo train: error: torch is not installed; it comes with the 'train' extra: "
        'pip install -e ".[train]" in the collapse-hpo checkout']
    # hpo run says the same before it writes anything
    study = REPO / "studies" / "quickstart.yaml"
    proc = subprocess.run([str(tmp_path / "venv" / "bin" / "hpo"), "run", str(study),
                           "--output", str(tmp_path / "out")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "hpo run: error: torch is not installed; it comes with the 'train' extra: "
        'pip install -e ".[train]" in the collapse-hpo checkout']
    assert not (tmp_path / "out").exists()
    # the light commands work on the core
    _run([str(tmp_path / "venv" / "bin" / "hpo"), "recipe", "--params", "50M", "--tpp", "20"],
         tmp_path)
