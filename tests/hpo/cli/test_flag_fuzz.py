"""Mutated ``hpo`` command lines never end in a traceback: each call succeeds (exit 0) or exits
with code 2 and one ``hpo COMMAND: error: ...`` line.

A seeded RNG builds the argument lists from a valid command line of each cheap subcommand:
flags misspelled, stripped of their dashes, given twice, dropped or borrowed from another
command; values empty, negative, NaN, huge, a list, unicode, a path that does not exist or a
folder. Nothing long runs: the curve files are one run (bench finds no sweep to replay,
eval-predictor no target to predict), ``hpo run`` always ends with ``--trials 0`` (refused
before anything trains), ``hpo submit`` gets a study file that does not exist, ``hpo train`` a
``--data`` that does not exist, and ``--plot`` never a writable path.
"""

from __future__ import annotations

import functools
import random
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import hpo.cli
from hpo._errors import UsageError
from hpo.cli import build_parser, main
from tests.hpo._studies import write_study
from tests.predictors._synth import make_run, paper_family

SEED = 20250611
CASES = 3000

#: (command, share of the cases)
COMMANDS = (("recipe", 0.28), ("fit-curve", 0.1), ("diagnose", 0.12), ("eval-predictor", 0.12),
            ("bench", 0.14), ("run", 0.1), ("validate", 0.04), ("submit", 0.05),
            ("train", 0.05))

#: how often each mutation of :func:`_argv` is drawn: mostly a value swapped, so that most
#: calls get past argparse to the commands' own checks
MUTATION_WEIGHTS = (8, 1, 1, 1, 1, 1, 0.5, 1, 0.5)

#: flags given less often: the old spelling beside the new one, and flags that always fail
RARE = frozenset({"--curves", "--out", "--max-params", "--address", "--plot", "--prior"})

#: values any flag may get instead of its own
ODD_VALUES = (
    "", " ", "-", "--", "-1", "0", "-0", "1", "nan", "NaN", "inf", "-inf", "1e309", "-1e-9",
    "9" * 40, "1e300", "4e-324", "1e-400", "0x10", "1_000", "1,2,3", "[1, 2]", "{}", "0.1,abc",
    "0.2,0.2", "ünïcødé", "日本語", "\udcff", "a b", "1M@10B", "@", "93M", "1.5B", " 5e7 ", "5e7",
    "train", "val", "lockstep", "auto", "http://127.0.0.1:1", "ray://:x", "lr-spike@0.5",
    "foo@2", "no/such/dir/out.json", "/nonexistent/file.csv", ".", "/", "out.json",
    "sub/dir/o.json",
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Small inputs: one curve run, a reference curve with a residual band, a study, and files
    of the wrong kind."""
    root = tmp_path_factory.mktemp("fuzz")
    one = root / "one.csv"
    make_run("big", 8e7, 2000, 1e-3, 20.0, every=200).to_csv(one, index=False)
    family = root / "family.csv"
    paper_family(noise=0.003, every=200).to_csv(family, index=False)
    reference = root / "curve.json"
    assert main(["fit-curve", str(family), "--output", str(reference)]) == 0
    bad = root / "bad.csv"
    pd.DataFrame({"run_id": ["a"], "step": [1], "loss": [1.0]}).to_csv(bad, index=False)
    empty = root / "empty.csv"
    empty.write_text("")
    text = root / "notes.txt"
    text.write_text("not a curve\n")
    study = write_study(root)
    return {"one": str(one), "reference": str(reference), "bad": str(bad),
            "empty": str(empty), "text": str(text), "study": str(study), "root": str(root),
            "missing": str(root / "missing.csv"), "missing_study": str(root / "none.yaml")}


def _templates(f: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per command: the positionals, the flags with plausible values (None: a switch),
    those always given, and the pins appended last that keep the call from running long. A
    value with spaces is several arguments."""
    curve_files = [f["one"], f["missing"], f["bad"], f["empty"], f["text"], f["reference"]]
    return {
        "recipe": {
            "positional": [], "required": ["--params", "--tpp"], "pins": [],
            "flags": {"--params": ["300M", "1.8B", "171M", "50k", "1e15"],
                      "--tpp": ["20", "80", "0.5", "1e6"],
                      "--batch-tokens": ["524288", "8192", "1000"],
                      "--batch-anchor": ["1M@10B", "2M@1e11", "1M"],
                      "--tau": ["0.2", "0.05"], "--base-lr": ["0.15", "0.01"],
                      "--base-width": ["256", "64"], "--context": ["8192", "2048", "1"],
                      "--vocab": ["50257", "1000"],
                      "--width": ["640 --depth 13", "64 --depth 2", "1 --depth 1", "640"],
                      "--depth": ["13", "2"], "--json": [None, "-", "plan.json"]},
        },
        "fit-curve": {
            "positional": [f["one"]], "required": ["--output"], "pins": [],
            "flags": {"--output": ["curve.json", "sub/c.json"], "--out": ["curve.json"],
                      "--proxy-max-params": ["1e8", "50M", "1"], "--max-params": ["1e8"],
                      "--split": ["train", "val"], "--no-calibrate": [None],
                      "--curves": [f["one"]]},
            "files": curve_files,
        },
        "diagnose": {
            "positional": [f["one"]], "required": ["--reference"], "pins": [],
            "flags": {"--reference": [f["reference"]] * 3 + [f["text"], f["missing"], f["one"]],
                      "--split": ["train", "val"], "--threshold": ["0.01", "0.5"],
                      "--plot": [f["root"], "/nonexistent/p.png", ""],
                      "--json": ["-", "diag.json"], "--curves": [f["one"]]},
            "files": curve_files,
        },
        "eval-predictor": {
            "positional": [f["one"]], "required": ["--proxy-max-params"], "pins": [],
            "flags": {"--proxy-max-params": ["5e7", "1e9", "1e8 1e8"],
                      "--at": ["0.1,0.2,0.3", "0.5"], "--split": ["train", "val"],
                      "--max-targets": ["3", "1"], "--seed": ["0", "7"],
                      "--json": ["-", "eval.json"], "--level": ["0.8", "0.5"],
                      "--curves": [f["one"]]},
            "files": curve_files,
        },
        "bench": {
            "positional": [f["one"]], "required": [], "pins": [],
            "flags": {"--group-col": ["group", "n_params,total_steps", "schedule"],
                      "--proxy-max-params": ["1e7", "1e9"], "--min-trials": ["2", "3"],
                      "--order": ["file", "lr", "reverse"], "--resample": ["0", "2"],
                      "--seed": ["0", "3"], "--split": ["train", "val"],
                      "--modes": ["lockstep", "lockstep,sequential"],
                      "--max-points": ["200", "10"], "--checkpoints": ["0.2,0.3", "0.3"],
                      "--prior": [f["text"], f["missing"]], "--max-groups": ["1", "4"],
                      "--no-ray": [None], "--no-knobs": [None], "--all-rows": [None],
                      "--json": ["-", "bench.json"], "--plot": [f["root"]],
                      "--explain": [None], "--quiet": [None], "--curves": [f["one"]]},
            "files": curve_files,
        },
        "run": {
            "positional": [f["study"]], "required": [], "pins": ["--trials", "0"],
            "flags": {"--output": ["out", "runs/x"], "--storage": ["sqlite:///s.db", "x://"],
                      "--address": ["ray://127.0.0.1:1", "auto"], "--no-prune": [None],
                      "--verify": [None], "--no-report": [None], "--quiet": [None],
                      "--workers": ["1", "2"], "--inject": ["lr-spike@0.5", "x@y"],
                      "--inject-trial": ["0", "3"], "--worker": [None]},
            "files": [f["study"], f["missing_study"], f["text"], f["one"]],
        },
        "validate": {
            "positional": [f["study"]], "required": [], "pins": [],
            "flags": {"--show": [None]},
            "files": [f["study"], f["missing_study"], f["text"], f["one"]],
        },
        "submit": {
            "positional": [f["missing_study"]], "required": ["--dashboard"], "pins": [],
            "flags": {"--dashboard": ["http://127.0.0.1:8265"], "--address": ["http://x:1"],
                      "--working-dir": [".", f["root"]], "--output": ["out"],
                      "--python": ["python3"], "--no-wait": [None], "--timeout": ["5", "0"]},
            "files": [f["missing_study"], f["text"]],
        },
        "train": {
            "positional": [], "required": [], "pins": ["--data", f["missing"]],
            "flags": {"--width": ["64", "65"], "--depth": ["2"], "--heads": ["4"],
                      "--tpp": ["10"], "--tau": ["0.2"], "--weight-decay": ["0.1"],
                      "--lr": ["0.01"], "--batch-tokens": ["2048"], "--schedule": ["linear"],
                      "--warmup": ["0.05"], "--seed": ["0"], "--device": ["cpu"],
                      "--output": ["c.csv"], "--out": ["c.csv"], "--threads": ["1"],
                      "--peak-tflops": ["989"], "--max-data-bytes": ["1000"],
                      "--inject": ["grad-noise@0.5"], "--resume": [None]},
        },
    }


def _misspell(flag: str, rng: random.Random) -> str:
    """A flag name as a hurried hand types it."""
    name = flag.lstrip("-")
    kind = rng.randrange(7)
    if kind == 0 and len(name) > 1:  # a letter dropped
        i = rng.randrange(len(name))
        name = name[:i] + name[i + 1:]
    elif kind == 1 and len(name) > 1:  # two letters swapped
        i = rng.randrange(len(name) - 1)
        name = name[:i] + name[i + 1] + name[i] + name[i + 2:]
    elif kind == 2:  # a letter added
        i = rng.randrange(len(name) + 1)
        name = name[:i] + rng.choice("aex-_") + name[i:]
    elif kind == 3:
        name = name.replace("-", "_")
    elif kind == 4:
        name = name.upper()
    elif kind == 5:  # the dashes dropped
        return name
    else:  # one dash
        return "-" + name
    return "--" + name


def _argv(command: str, t: dict[str, Any], rng: random.Random,
          other_flags: list[str]) -> list[str]:
    """One command line: a plausible one, then up to three mutations, then the pins."""
    tokens: list[list[str]] = []  # flag and its values, kept together until the end
    positional = list(t["positional"])
    flags = t["flags"]
    chosen = set(t["required"]) | {k for k in flags
                                    if rng.random() < (0.05 if k in RARE else 0.3)}
    for flag in sorted(chosen):
        value = rng.choice(flags[flag])
        tokens.append([flag] if value is None else [flag, *value.split(" ")])
    for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
        kind = rng.choices(range(9), MUTATION_WEIGHTS)[0]
        if kind == 0 and tokens:  # a value swapped for an odd one
            group = rng.choice(tokens)
            if len(group) > 1:
                group[rng.randrange(1, len(group))] = rng.choice(ODD_VALUES)
            else:
                group.append(rng.choice(ODD_VALUES))
        elif kind == 1 and tokens:  # a flag misspelled
            group = rng.choice(tokens)
            group[0] = _misspell(group[0], rng)
        elif kind == 2 and tokens:  # a flag given twice
            group = rng.choice(tokens)
            tokens.append([group[0], rng.choice(ODD_VALUES)] if len(group) > 1
                          else list(group))
        elif kind == 3 and tokens:  # a flag (required or not) dropped, or its value
            group = tokens.pop(rng.randrange(len(tokens)))
            if rng.random() < 0.5:
                tokens.append(group[:1])
        elif kind == 4:  # a flag of another command
            tokens.append([rng.choice(other_flags), rng.choice(ODD_VALUES)])
        elif kind == 5 and positional:  # a positional swapped or dropped
            if rng.random() < 0.5:
                positional[0] = rng.choice(t.get("files", ODD_VALUES))
            else:
                positional.pop()
        elif kind == 6:  # another positional
            positional.append(rng.choice([*t.get("files", []), *ODD_VALUES]))
        elif kind == 7 and tokens:  # --flag=value
            group = rng.choice(tokens)
            if len(group) == 2:
                group[:] = [f"{group[0]}={group[1]}"]
        elif kind == 8 and tokens:  # a value dropped, the next flag read as it
            group = rng.choice(tokens)
            del group[1:]
    rng.shuffle(tokens)
    where = rng.randint(0, len(tokens))  # positionals before, between or after the flags
    flat = [tok for group in tokens[:where] for tok in group] + positional + [
        tok for group in tokens[where:] for tok in group]
    if rng.random() < 0.02:  # the command itself misspelled
        command = _misspell(command, rng).lstrip("-")
    return [command, *flat, *t["pins"]]


def _debug_on(argv: list[str]) -> bool:
    """Whether ``argv`` asks for ``--debug`` (a truncated flag may spell it)."""
    try:
        args, _ = build_parser().parse_known_args(argv)
    except SystemExit:
        return False
    return bool(getattr(args, "debug", False))


def _check(argv: list[str], capsys: pytest.CaptureFixture[bytes]) -> tuple[int, str | None]:
    """Run ``hpo ARGV`` in-process: its exit code, and what went wrong (None: nothing). The
    output is read as bytes: a path that is not UTF-8 prints as its own bytes."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: --help, --version, its own errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except Exception as exc:  # noqa: BLE001 - the failure the fuzz looks for
        capsys.readouterr()
        if isinstance(exc, UsageError) and _debug_on(argv):
            return 2, None  # --debug shows the error's traceback on purpose
        return 1, f"{type(exc).__name__}: {exc}"
    err = capsys.readouterr().err.decode("utf-8", "surrogateescape")
    if "Traceback" in err:
        return code, f"exit {code} with a traceback: {err[-300:]!r}"
    if code not in (0, 2):
        return code, f"exit {code}: {err[-300:]!r}"
    errors = [line for line in err.splitlines() if ": error: " in line]
    if code == 2 and not (errors and errors[0].startswith("hpo")):
        return code, f"exit 2 without an error line: {err[-300:]!r}"
    if code == 2 and len(errors) != 1 and argv[0] not in ("run", "validate", "submit"):
        return code, f"exit 2 with {len(errors)} error lines: {err[-300:]!r}"  # study: per error
    return code, None


def test_mutated_command_lines_exit_0_or_2_without_a_traceback(
        files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    monkeypatch.chdir(tmp_path)  # relative output paths land here
    # one parser for every call (building it is most of a failing call's time; parsing does not
    # change it)
    monkeypatch.setattr(hpo.cli, "build_parser", functools.cache(build_parser))
    templates = _templates(files)
    other_flags = sorted({flag for t in templates.values() for flag in t["flags"]})
    rng = random.Random(SEED)
    names = [c for c, _ in COMMANDS]
    weights = [w for _, w in COMMANDS]
    failures: dict[str, list[str]] = {}
    codes = {0: 0, 2: 0}
    t0 = time.perf_counter()
    for _ in range(CASES):
        command = rng.choices(names, weights)[0]
        argv = _argv(command, templates[command], rng, other_flags)
        code, problem = _check(argv, capsysbinary)
        codes[code] = codes.get(code, 0) + 1
        if problem is not None:
            failures.setdefault(problem.split(":")[0] + " " + command, []).append(
                f"hpo {' '.join(map(repr, argv))}\n    -> {problem}")
    seconds = time.perf_counter() - t0
    report = "\n".join(f"{key} ({len(v)}x), e.g.\n  {v[0]}" for key, v in failures.items())
    # every mutated command line exits 0 or 2 with one error line, never a traceback
    assert not failures, f"{sum(map(len, failures.values()))} of {CASES} failed:\n{report}"
    # the mutations reach past argparse: many calls succeed, many fail in the commands' checks
    assert codes[0] > CASES // 20 and codes[2] > CASES // 2, codes
    # and the fuzz stays a unit test
    assert seconds < 60, seconds
