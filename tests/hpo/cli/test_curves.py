from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hpo.cli import main
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


@pytest.fixture(scope="module")
def curves_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("curves") / "curves.csv"
    big = make_run("big", 8e7, 2000, 1e-3, 20.0, TRUE, final=2.5, noise=0.001, every=40)
    pd.concat([paper_family(TRUE, noise=0.001, every=40), big]).to_csv(path, index=False)
    return path


def test_fit_curve_writes_json(curves_file, tmp_path, capsys):
    out = tmp_path / "curve.json"
    assert main(["fit-curve", str(curves_file), "--output", str(out),
                 "--proxy-max-params", "50M"]) == 0
    data = json.loads(out.read_text())
    assert data["form"] == "hybrid" and data["n_proxies"] == 9
    assert "fitted a hybrid universal curve on 9 run(s)" in capsys.readouterr().out


def test_eval_predictor_json_shape(curves_file, tmp_path, capsys):
    out = tmp_path / "eval.json"
    rc = main(["eval-predictor", str(curves_file), "--proxy-max-params", "5e7",
               "--at", "0.2,0.30", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    # one source, named after its file, and the median over sources
    (name,) = data["sources"]
    source = data["sources"][name]
    assert set(source["methods"]) >= {"collapse", "last_value", "power_law_ensemble",
                                      "annealing_law"}
    # fractions are keys in the form given to --at
    assert set(source["methods"]["collapse"]) == {"0.2", "0.30"}
    cell = source["methods"]["collapse"]["0.2"]
    assert set(cell) >= {"median_abs_rel_err", "mean_abs_rel_err", "max_abs_rel_err",
                         "coverage", "curve_mae", "n", "declined"}
    assert cell["n"] == 1 and cell["median_abs_rel_err"] < 0.01
    assert data["median_over_sources"]["collapse"]["0.2"]["n_sources"] == 1
    assert f"== {name}:" in capsys.readouterr().out


def test_eval_predictor_one_threshold_per_file(curves_file, tmp_path, capsys):
    other = tmp_path / "other.csv"
    other.write_text(curves_file.read_text())
    out = tmp_path / "eval.json"
    rc = main(["eval-predictor", str(curves_file), str(other),
               "--proxy-max-params", "5e7", "5e7", "--split", "train", "--at", "0.3",
               "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    # two sources, each evaluated apart with its own proxies
    assert set(data["sources"]) == {curves_file.name.split(".")[0], "other"}
    assert main(["eval-predictor", str(curves_file), str(other),
                 "--proxy-max-params", "5e7", "5e7", "5e7"]) == 2
    err = capsys.readouterr().err
    assert "--proxy-max-params: give one value or one per file (2), got 3" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--at", "0.1,abc"], "--at: 'abc' is not a number"),
        (["--at", "1.5"], "--at: fractions must be in (0, 1), got '1.5'"),
        (["--proxy-max-params", "lots"], "--proxy-max-params: expected a positive number"),
        (["--split", "test"], "--split: expected train or val, got 'test'"),
        (["--proxy-max-params", "1"], "no complete proxy run"),
    ],
)
def test_eval_predictor_bad_input_exits_2(curves_file, capsys, argv, message):
    base = {"--proxy-max-params": "5e7"}
    args = ["eval-predictor", str(curves_file)]
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    for flag, value in base.items():
        args += [flag, value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # one line naming the flag and the value
    assert len(err) == 1 and err[0].startswith("hpo eval-predictor: error:") and message in err[0]


def test_cli_missing_file_and_missing_column(tmp_path, capsys):
    assert main(["eval-predictor", str(tmp_path / "nope.csv"),
                 "--proxy-max-params", "1e6"]) == 2
    assert "file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"run_id": ["a"], "step": [1], "loss": [1.0]}).to_csv(bad, index=False)
    assert main(["fit-curve", str(bad), "--output", str(tmp_path / "c.json")]) == 2
    assert "missing required column(s) total_steps" in capsys.readouterr().err



def test_fit_curve_names_the_split_a_file_lacks(curves_file, tmp_path, capsys):
    val_only = tmp_path / "val_only.csv"
    pd.read_csv(curves_file).assign(split="val").to_csv(val_only, index=False)
    argv = ["fit-curve", str(val_only), "--output", str(tmp_path / "c.json"),
            "--proxy-max-params", "1.2e8"]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    # one line naming the split asked for (the default train), the file's splits and the fix,
    # not "no run with n_params <= '1.2e8'"
    assert len(err) == 1 and err[0].startswith("hpo fit-curve: error: --split: ")
    assert "no rows of split 'train' (the curves have: val); use --split val" in err[0]
    # the split it has works
    assert main([*argv, "--split", "val"]) == 0
    # eval-predictor reads curves through the same check
    argv = ["eval-predictor", str(val_only), "--proxy-max-params", "1.2e8"]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("hpo eval-predictor: error: --split: ")
    assert "no rows of split 'train' (the curves have: val); use --split val" in err[0]


def test_import_predictors_and_cmd_curves_stay_light():
    # a fresh interpreter: importing predictors and this CLI module loads no torch/optuna/ray
    code = (
        "import sys, hpo, predictors, hpo.cli.curves\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'optuna', 'ray'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"
