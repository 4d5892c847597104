"""The ``hpo`` entry point: a closed stdout, and the help texts users read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hpo.cli import EXIT_BROKEN_PIPE, build_parser

REPO = Path(__file__).resolve().parents[3]
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


def test_main_debug_shows_the_traceback_of_bad_input(tmp_path: Path) -> None:
    import pytest

    from hpo._errors import UsageError
    from hpo.cli import main
    from tests.hpo._studies import write_study

    path = write_study(tmp_path, reference="no_such_sweep.json")
    # without --debug: one line and exit 2; with it, the error itself propagates (a traceback)
    assert main(["validate", str(path)]) == 2
    with pytest.raises(UsageError, match="reference"):
        main(["--debug", "validate", str(path)])
    # after the command too, as every other flag
    with pytest.raises(UsageError, match="reference"):
        main(["validate", str(path), "--debug"])


def test_run_unreachable_address_exit_2_in_seconds_without_ray(
        tmp_path: Path, capsys, monkeypatch) -> None:
    import socket
    import time

    from hpo.cli import main
    from tests.hpo._studies import write_study

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray = sys.modules.get("ray")
    if ray is not None:  # imported by an earlier test: make sure it is not started here
        def no_init(*args, **kwargs):
            raise AssertionError("ray.init called")

        monkeypatch.setattr(ray, "init", no_init)
    address = f"127.0.0.1:{port}"
    t0 = time.monotonic()
    code = main(["run", str(write_study(tmp_path)), "--address", address, "--workers", "2"])
    out, err = capsys.readouterr()
    # exit 2 within seconds (not Ray's minutes of reconnecting), one line naming the flag, and
    # nothing said about the workers before it
    assert code == 2 and time.monotonic() - t0 < 10
    assert err.count("\n") == 1 and f"--address={address!r}" in err and "Traceback" not in err
    assert "workers:" not in out
    # Ray was neither imported nor started, and nothing was trained or written
    assert ray is not None or "ray" not in sys.modules
    assert not (tmp_path / "out").exists()


def test_a_warning_during_a_command_prints_as_one_line(monkeypatch, capsys) -> None:
    import warnings

    import hpo.cli.run
    from hpo.cli import main
    from hpo.pruning._predict import WarnOnce

    def validate(args) -> int:
        # the pruner's fail-open warning, through its own channel
        WarnOnce("CollapsePruner")("fit_failed", "trial 2 at t^=0.219: no prediction,\n"
                                                 "fit_failed; not stopped (fail open)")
        warnings.warn("an old option", DeprecationWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(hpo.cli.run, "run_validate", validate)
    before = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["validate", "study.yaml"]) == 0
    err = capsys.readouterr().err
    # one line per warning, named by the command; no source file, line or code
    assert err.splitlines() == [
        "hpo validate: warning: CollapsePruner: trial 2 at t^=0.219: no prediction, "
        "fit_failed; not stopped (fail open)",
        "hpo validate: warning (DeprecationWarning): an old option"]
    # outside the command, Python's display is back (library users keep it)
    assert warnings.showwarning is before
