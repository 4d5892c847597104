"""The ``hpo`` entry point: a closed stdout, and the help texts users read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hpo.cli import EXIT_BROKEN_PIPE, build_parser

REPO = Path(__file__).resolve().parents[2]
# what the ``hpo`` console script runs
ENTRY = "import sys\nfrom hpo.cli import main\nsys.exit(main())"


def _help(command: str) -> str:
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    return " ".join(sub.choices[command].format_help().split())


def test_main_exits_quietly_when_stdout_is_closed_early() -> None:
    # `hpo recipe --json | head -1`, with the reader gone before the first write
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "recipe", "--params", "171M", "--tpp", "20", "--width",
         "640", "--depth", "13", "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    # no traceback, no "Exception ignored" at exit; the code a shell reports for SIGPIPE
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE == 141
    assert err == ""


def test_main_keeps_exit_code_when_stdout_is_open() -> None:
    out = subprocess.run([sys.executable, "-c", ENTRY, "recipe", "--params", "171M", "--tpp",
                          "20", "--width", "640", "--depth", "13", "--json"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    # the whole plan is printed, exit code 0
    assert out.returncode == 0 and out.stdout.lstrip().startswith("{") and out.stderr == ""


def test_run_help_says_an_interrupted_trial_continues_from_its_checkpoint() -> None:
    text = _help("run")
    # resuming continues an interrupted trial's training; it is not re-run from scratch
    assert "an interrupted proxy or trial continues from its last checkpoint" in text
    assert "re-run" not in text
