"""One spelling per flag across the ``hpo`` commands (:mod:`hpo.cli._flags`), the old spellings
still accepted but hidden, and argparse's own errors as one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpo.cli import build_parser, main
from hpo.cli._flags import curve_files


def _subparser(command: str):
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    return sub.choices[command]


def _one_error_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"hpo {command}: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(("command", "shown", "hidden"), [
    ("fit-curve", ["CURVES", "--output", "--proxy-max-params"],
     ["--curves", "--out", "--max-params"]),
    ("diagnose", ["CURVES", "--json"], ["--curves"]),
    ("eval-predictor", ["CURVES", "--proxy-max-params", "--json"], ["--curves"]),
    ("bench", ["CURVES", "--proxy-max-params", "--json"], ["--curves"]),
    ("submit", ["--dashboard", "--output"], ["--address"]),
    ("train", ["--output"], ["--out"]),
    ("recipe", ["--json"], []),
])
def test_help_shows_only_the_one_spelling(command: str, shown: list[str],
                                          hidden: list[str]) -> None:
    parser = _subparser(command)
    usage, text = parser.format_usage(), parser.format_help()
    for flag in shown:
        assert flag in usage, flag
    # an old spelling is neither in the usage line nor a flag of the help
    for flag in hidden:
        pattern = re.compile(rf"(^|[\s\[]){re.escape(flag)}(?![\w-])", re.M)
        assert not pattern.search(usage), flag
        assert not re.search(rf"^\s+{re.escape(flag)}(?![\w-])", text, re.M), flag


@pytest.mark.parametrize(("old", "new"), [
    (["fit-curve", "c.csv", "--out", "o.json", "--max-params", "5e7"],
     ["fit-curve", "c.csv", "--output", "o.json", "--proxy-max-params", "5e7"]),
    (["submit", "s.yaml", "--address", "http://127.0.0.1:8265"],
     ["submit", "s.yaml", "--dashboard", "http://127.0.0.1:8265"]),
    (["train", "--out", "c.csv"], ["train", "--output", "c.csv"]),
    (["recipe", "--params", "300M", "--tpp", "20", "--json"],
     ["recipe", "--params", "300M", "--tpp", "20", "--json", "-"]),
])
def test_old_spelling_parses_as_the_new_one(old: list[str], new: list[str]) -> None:
    parser = build_parser()
    # the same settings, whichever spelling gave them
    assert vars(parser.parse_args(old)) == vars(parser.parse_args(new))


@pytest.mark.parametrize(("command", "required"), [
    ("fit-curve", []), ("diagnose", ["--reference", "c.json"]),
    ("eval-predictor", ["--proxy-max-params", "5e7"]), ("bench", []),
])
def test_curve_files_positional_or_old_flag(command: str, required: list[str]) -> None:
    parser = build_parser()
    positional = parser.parse_args([command, "a.csv", "b.csv", *required])
    old = parser.parse_args([command, "--curves", "a.csv", "b.csv", *required])
    # the same files, whichever form gave them
    assert curve_files(positional) == curve_files(old) == ["a.csv", "b.csv"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["bench", "a.csv", "--curves", "b.csv"], "CURVES: give the curve files once"),
    (["eval-predictor", "--proxy-max-params", "5e7"], "CURVES: no curve file given"),
    # a flag of several values swallows the files after it: said, with the order that works
    (["eval-predictor", "--proxy-max-params", "5e7", "a.csv"],
     "hpo eval-predictor CURVES... --flag value"),
    (["fit-curve", "a.csv"], "--output: required"),
    (["submit", "s.yaml"], "--dashboard: required"),
    (["recipe", "--params", "300M", "--tpp", "20", "--json", "no/such/dir/plan.json"],
     "--json: folder does not exist: 'no/such/dir'"),
    (["recipe", "--params", "300M", "--tpp", "20", "--json", ""], "--json: expected a file"),
    (["recipe", "--params", "300M", "--tpp", "20", "--nope"],
     "unrecognized arguments: --nope"),
    # argparse 3.11 reads --flag=-- as an empty list; refused as a missing value
    (["recipe", "--params=--", "--tpp", "20"], "argument --params: expected one argument"),
    (["fit-curve", "a.csv", "--output=--"], "argument --output: expected one argument"),
])
def test_flag_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                         needle: str) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors exit from the parser
        code = exc.code
    assert code == 2
    assert needle in _one_error_line(capsys, argv[0])


def test_submit_old_address_flag_still_gives_the_dashboard(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # past the --dashboard check, to the study file (which does not exist)
    assert main(["submit", str(tmp_path / "s.yaml"), "--address", "http://127.0.0.1:1"]) == 2
    assert "file not found" in _one_error_line(capsys, "submit")


@pytest.mark.parametrize("flag", ["--dashboard", "--address"])
def test_submit_names_the_dashboard_flag_when_the_server_is_unreachable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    pytest.importorskip("ray.job_submission", reason="hpo submit needs ray")
    from tests.hpo._ray import free_port
    from tests.hpo._studies import write_study

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code = main(["submit", str(write_study(tmp_path)), flag, url, "--working-dir", str(tmp_path)])
    line = _one_error_line(capsys, "submit")
    # exit 2, one line naming the address by the flag hpo submit documents, whichever spelling
    assert code == 2 and f"--dashboard={url!r}" in line and "--address" not in line


def test_recipe_json_to_stdout_or_to_a_file(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    base = ["recipe", "--params", "171M", "--tpp", "20", "--width", "640", "--depth", "13"]
    assert main([*base, "--json"]) == 0
    bare = capsys.readouterr().out
    assert main([*base, "--json", "-"]) == 0
    # a bare --json and --json - print the same plan, and only the plan
    assert capsys.readouterr().out == bare and json.loads(bare)["n_params"] > 0
    out = tmp_path / "plan.json"
    assert main([*base, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    # --json OUT writes the file and prints the text plan, as every other command's --json
    assert json.loads(out.read_text()) == json.loads(bare)
    assert "plan for 171M" in printed and f"wrote {out}" in printed


def test_json_refuses_to_overwrite_a_curve_file(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    curves = tmp_path / "runs.csv"
    curves.write_text("run_id,step,loss,total_steps\n")
    assert main(["bench", str(curves), "--json", str(curves)]) == 2
    assert "is one of the input files" in _one_error_line(capsys, "bench")
    # the curve file is untouched
    assert curves.read_text() == "run_id,step,loss,total_steps\n"
