"""``hpo recipe``: the collapse-consistent plan for a target size."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from hpo.cli import main
from hpo.cli.recipe import plan


def test_recipe_300m_tpp20_is_consistent() -> None:
    p = plan(300e6, 20.0)
    # a shape near the requested size with the Celerity aspect, D = TPP x N, T = ceil(D / B)
    assert abs(p["n_params"] / 300e6 - 1) < 0.1
    assert 40 <= p["shape"]["d_model"] / p["shape"]["depth"] <= 60
    assert p["tokens"] >= 20 * p["n_params"] > p["tokens"] - p["batch_tokens"]
    assert p["total_steps"] == math.ceil(20 * p["n_params"] / p["batch_tokens"])
    assert p["batch_tokens"] % p["shape"]["context"] == 0
    # tau of the TPP-20 band, and it round-trips through eta_h, lambda_h, T
    assert p["tau"] == pytest.approx(0.175)
    assert 1 / (p["hidden_lr"] * p["hidden_weight_decay"] * p["total_steps"]) == \
        pytest.approx(p["tau"])
    # CompleteP: hidden LR eta * 256 / d, hidden weight decay lambda * d / 256
    m = p["shape"]["d_model"] / 256
    assert p["groups"]["hidden weights"]["lr"] == pytest.approx(0.15 / m)
    assert p["groups"]["hidden weights"]["weight_decay"] == pytest.approx(p["weight_decay"] * m)
    assert p["groups"]["embedding"]["lr"] == pytest.approx(0.15)
    # warmup min(10% of the tokens, 375M tokens)
    assert p["warmup_tokens"] <= min(0.1 * p["tokens"], 375e6) + p["batch_tokens"]


def test_recipe_tau_bands_follow_tpp_power_law() -> None:
    # 20 -> 0.175, 80 -> 0.087, 234 -> ~0.05 (tau_opt ~ TPP^-0.5, "Power Lines", Bergsma et al.
    # 2025)
    assert plan(300e6, 80.0)["tau"] == pytest.approx(0.0875, rel=0.01)
    assert plan(300e6, 234.0)["tau"] == pytest.approx(0.05, rel=0.05)


def test_recipe_cli_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipe", "--params", "300M", "--tpp", "20", "--batch-tokens", "524288"]) == 0
    out = capsys.readouterr().out
    for word in ("shape", "D ", "B ", "T ", "warmup", "tau", "hidden weights", "embedding"):
        assert word in out, word
    assert main(["recipe", "--params", "1.8B", "--tpp", "80", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch_tokens"] > 0 and data["tau"] == pytest.approx(0.0875, rel=0.01)


@pytest.mark.parametrize("argv", [
    ["--params", "-3", "--tpp", "20"],
    ["--params", "300M", "--tpp", "0"],
    ["--params", "300M", "--tpp", "20", "--batch-tokens", "1000"],
    ["--params", "abc", "--tpp", "20"],
    # no shape at the default vocabulary comes near 50k parameters: said, not planned
    ["--params", "50k", "--tpp", "20"],
])
def test_recipe_bad_input_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(["recipe", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpo recipe: error: ") and err.count("\n") == 1


def test_recipe_matches_what_the_celerity_study_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[3] / "studies" / "celerity_family.yaml"
    text = path.read_text()
    study = yaml.safe_load(text)
    argv = re.search(r"^#\s+hpo recipe (.+)$", text, re.M).group(1).split()
    flags = dict(zip(argv[::2], argv[1::2], strict=True))
    # the quoted command plans the study's own target: its shape, TPP, context and batch
    assert (int(flags["--width"]), int(flags["--depth"])) == (study["model"]["width"],
                                                              study["model"]["depth"])
    assert float(flags["--tpp"]) == study["recipe"]["tpp"]
    assert int(flags["--context"]) == study["model"]["context"]
    assert int(flags["--batch-tokens"]) == study["recipe"]["batch_tokens"]
    assert main(["recipe", *argv]) == 0
    out = capsys.readouterr().out
    comment = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    # the numbers the study quotes are the ones `hpo recipe` prints
    for pattern in (r"d_model \d+, depth \d+", r"T\s+[\d,]+ steps", r"warmup\s+[\d,]+ steps"):
        printed = " ".join(re.search(pattern, out).group(0).split())
        assert printed in comment, printed
    n_printed = re.search(r"N\s+([\d,]+) parameters", out).group(1)
    assert f"N = {n_printed} parameters" in comment
    # and what --params 300M alone picks, which the study names too
    p = plan(300e6, 20.0)
    assert (f"d_model {p['shape']['d_model']}, depth {p['shape']['depth']} "
            f"(N = {p['n_params']:,})") in comment
