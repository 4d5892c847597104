from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hpo.cli import main
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A reference fitted on nine proxies, and a file with a clean target and a broken one
    (+3% from t^ 0.6 on)."""
    root = tmp_path_factory.mktemp("diagnose")
    proxies = root / "proxies.csv"
    paper_family(TRUE, noise=0.003, every=20).to_csv(proxies, index=False)
    reference = root / "curve.json"
    assert main(["fit-curve", str(proxies), "--output", str(reference)]) == 0
    clean = make_run("clean", 2e7, 2000, 1e-3, 20.0, TRUE, noise=0.003, seed=5, every=20)
    broken = make_run("broken", 2e7, 2000, 1e-3, 20.0, TRUE, noise=0.003, seed=6, every=20)
    broken["loss"] *= np.where(broken["step"] / 2000 >= 0.6, 1.03, 1.0)
    runs = root / "runs.csv"
    pd.concat([clean, broken]).to_csv(runs, index=False)
    return {"reference": reference, "runs": runs, "root": root}


def test_diagnose_writes_alerts_and_plot(files, tmp_path, capsys):
    out, png = tmp_path / "diag.json", tmp_path / "residuals.png"
    rc = main(["diagnose", str(files["runs"]), "--reference", str(files["reference"]),
               "--json", str(out), "--plot", str(png)])
    assert rc == 0
    data = json.loads(out.read_text())
    runs = data["runs"]
    # the clean run never alerts; the broken one soon after its step at t^ 0.6
    assert runs["clean"]["alert_t"] is None
    assert 0.6 < runs["broken"]["alert_t"] < 0.7
    assert runs["broken"]["max_abs_residual"] > runs["broken"]["threshold"] > 0
    assert len(runs["clean"]["t_hat"]) == len(runs["clean"]["residual"]) > 10
    assert png.stat().st_size > 1000
    text = capsys.readouterr().out
    assert "1 of 2 judged run(s) alert: broken at t^ 0.6" in text


def test_diagnose_json_dash_prints_only_the_json(files, capsys):
    assert main(["diagnose", str(files["runs"]), "--reference", str(files["reference"]),
                 "--json", "-"]) == 0
    captured = capsys.readouterr()
    # stdout is the JSON alone (pipe it to jq); the table goes to stderr
    assert set(json.loads(captured.out)["runs"]) == {"clean", "broken"}
    assert "1 of 2 judged run(s) alert: broken at t^ 0.6" in captured.err


def test_diagnose_threshold_flag_overrides(files, tmp_path):
    out = tmp_path / "diag.json"
    assert main(["diagnose", str(files["runs"]), "--reference", str(files["reference"]),
                 "--threshold", "0.5", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["threshold"] == 0.5
    assert all(r["alert_t"] is None for r in data["runs"].values())


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_diagnose_rejects_a_reference_of_another_format_version(files, tmp_path, capsys):
    data = json.loads(files["reference"].read_text())
    data["format_version"] = 99
    bad = tmp_path / "v99.json"
    bad.write_text(json.dumps(data))
    assert main(["diagnose", str(files["runs"]), "--reference", str(bad)]) == 2
    err = _one_line_error(capsys)
    assert "--reference" in err and "format_version 99" in err


def test_diagnose_rejects_a_run_without_a_loss_column(files, tmp_path, capsys):
    frame = pd.read_csv(files["runs"]).drop(columns=["loss"])
    bad = tmp_path / "noloss.csv"
    frame.to_csv(bad, index=False)
    assert main(["diagnose", str(bad), "--reference", str(files["reference"])]) == 2
    err = _one_line_error(capsys)
    assert "CURVES" in err and "loss" in err


def test_diagnose_rejects_an_uncalibrated_reference_and_bad_flags(files, tmp_path, capsys):
    raw = tmp_path / "raw.json"
    assert main(["fit-curve", str(files["root"] / "proxies.csv"), "--output", str(raw),
                 "--no-calibrate"]) == 0
    capsys.readouterr()
    assert main(["diagnose", str(files["runs"]), "--reference", str(raw)]) == 2
    assert "no residual band" in _one_line_error(capsys)
    assert main(["diagnose", str(files["runs"]), "--reference", str(files["reference"]),
                 "--threshold", "-1"]) == 2
    assert "--threshold" in _one_line_error(capsys)
    assert main(["diagnose", str(tmp_path / "missing.csv"), "--reference",
                 str(files["reference"])]) == 2
    assert "file not found" in _one_line_error(capsys)


def test_diagnose_says_which_runs_it_could_not_judge(files, tmp_path, capsys):
    # a run with one point: nothing after the alignment window, so no residual to judge
    one = make_run("short", 2e7, 2000, 1e-3, 20.0, TRUE, noise=0.003, seed=7, every=20)
    runs = tmp_path / "runs.csv"
    pd.concat([pd.read_csv(files["runs"]), one.iloc[:1]]).to_csv(runs, index=False)
    assert main(["diagnose", str(runs), "--reference", str(files["reference"])]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("1 of 2 judged run(s) alert: broken at t^ 0.6")
    assert "; 1 run(s) could not be judged: short (" in last
