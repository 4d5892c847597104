"""``import hpo`` and the Optuna pruner import neither torch nor ray (checked in a fresh
interpreter, since the test process may have imported them already)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def _heavy(mods: set[str]) -> set[str]:
    return {m for m in mods if m.split(".")[0] in ("torch", "ray")}


def test_import_hpo_is_light() -> None:
    # no torch, no ray after `import hpo`
    assert _heavy(_modules_after("import hpo")) == set()


def test_import_pruner_is_light() -> None:
    mods = _modules_after(
        "import hpo\nfrom hpo import CollapsePruner, describe_trial\n"
        "import optuna\n"
        "CollapsePruner(predictor=type('P', (), {'predict': lambda *a: None})())\n"
        "describe_trial(optuna.trial.FixedTrial({}), total_steps=10, schedule='linear')"
    )
    # the pruner (and the predictors it uses) import optuna but neither torch nor ray
    assert "optuna" in mods and "hpo.pruning._optuna" in mods and "hpo.predictors" in mods
    assert _heavy(mods) == set()
    # the product's packages load under hpo only, never as top-level models or predictors
    assert not {m for m in mods if m.split(".")[0] in ("models", "predictors")}


def test_lazy_names_are_listed() -> None:
    import hpo

    assert {"CollapsePruner", "describe_trial", "CollapseScheduler"} <= set(hpo.__all__)
    assert "CollapsePruner" in dir(hpo)
    # the default checkpoints, what CollapsePruner judges at unless told otherwise
    assert "DEFAULT_CHECKPOINTS" in hpo.__all__
    assert hpo.CollapsePruner().judge.checkpoints == hpo.DEFAULT_CHECKPOINTS
    assert hpo.DEFAULT_CHECKPOINTS == (0.1, 0.2, 0.3, 0.4, 0.5)


def test_every_public_model_name_is_the_object_not_a_submodule() -> None:
    # `from hpo.models import TrainConfig, train` must give the function `train` though
    # TrainConfig loads the module that defines both first (checked in a fresh interpreter)
    code = ("import types\nfrom hpo.models import TrainConfig, train\n"
            "assert not isinstance(train, types.ModuleType), train\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
