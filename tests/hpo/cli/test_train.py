"""``hpo train``: help, bad input as one line with exit code 2, and a real tiny run."""

from __future__ import annotations

import csv
import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from hpo.cli import main

ROOT = Path(__file__).resolve().parents[3]
TINY = ["--width", "32", "--depth", "1", "--heads", "2", "--context", "16", "--base-width", "32",
        "--base-depth", "1", "--batch-tokens", "256", "--tpp", "0.2", "--max-data-bytes",
        "200000", "--device", "cpu", "--eval-every", "5", "--eval-batches", "2"]
FLAGS = ["--width", "--depth", "--heads", "--tpp", "--tau", "--lr", "--batch-tokens",
         "--context", "--schedule", "--warmup", "--seed", "--data", "--output", "--weight-decay",
         "--activation", "--position", "--parametrization", "--base-width", "--base-depth",
         "--ffn-ratio", "--device", "--compile", "--eval-every", "--checkpoint", "--resume",
         "--run-id", "--group", "--alpha", "--grad-clip", "--val-fraction", "--max-data-bytes",
         "--dtype", "--peak-tflops", "--threads", "--log-every", "--eval-batches",
         "--checkpoint-every", "--inject"]


def test_train_help_documents_every_flag_and_lr(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in FLAGS:
        assert flag in out, flag
    # --lr is the base LR, and the help says how it is applied
    assert "BASE peak LR" in out and "lr * base_width / width" in out
    # --inject names every fault kind
    from hpo.models.training import FAULTS

    assert all(kind in "".join(out.split()) for kind in FAULTS)  # wrapping may split at "-"
    # the flags are grouped by what they set, one titled group each, in this order
    titles = ["model shape:", "recipe:", "data:", "hardware:", "logging and output:",
              "checkpoint and resume:", "fault injection:"]
    lines = out.splitlines()
    at = [lines.index(title) for title in titles]
    assert at == sorted(at)
    # each flag sits in its group: the checkpoint flags under "checkpoint and resume"

    def group_of(flag: str) -> str:
        line = next(i for i, text in enumerate(lines) if text.split()[:1] == [flag])
        return titles[max(k for k, i in enumerate(at) if i < line)]

    assert group_of("--checkpoint") == group_of("--resume") == "checkpoint and resume:"
    assert group_of("--output") == "logging and output:"


@pytest.mark.parametrize(("argv", "needles"), [
    (["--tpp", "-1"], ["--tpp", "-1"]),
    (["--activation", "tanh"], ["--activation", "tanh"]),
    (["--data", "/no/such/data"], ["--data", "/no/such/data"]),
    (["--width", "65", "--heads", "4"], ["--width", "65", "--heads"]),
    (["--tpp", "abc"], ["--tpp", "abc"]),
    (["--schedule", "exp"], ["--schedule", "exp"]),
    (["--batch-tokens", "100", "--context", "64"], ["--batch-tokens", "100"]),
    (["--tau", "0.2", "--weight-decay", "0.1"], ["--tau", "--weight-decay"]),
    (["--output", "curve.txt"], ["--output", "curve.txt"]),
    (["--lr", "0"], ["--lr", "0"]),
    (["--inject", "foo@0.5"], ["--inject: must be KIND@T", "got 'foo@0.5'"]),
    (["--inject", "lr-spike@1.5"], ["--inject", "lr-spike@1.5"]),
])
def test_train_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                            needles: list[str]) -> None:
    try:
        code = main(["train", *argv])
    except SystemExit as exc:  # argparse type errors exit from the parser
        code = exc.code
    err = capsys.readouterr().err
    # exit code 2, exactly one line naming the flag and the value, no traceback
    assert code == 2
    assert err.startswith("hpo train: error: ") and err.count("\n") == 1
    assert all(n in err for n in needles), err
    assert "Traceback" not in err


def test_train_writes_curve_and_one_summary_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "curve.csv.gz"
    assert main(["train", *TINY, "--tau", "0.25", "--output", str(out), "--run-id", "cli"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # one line with the final losses and throughput
    assert len(lines) == 1 and "val loss" in lines[0] and "tokens/s" in lines[0]
    with gzip.open(out, "rt", newline="") as fh:
        rows = list(csv.DictReader(fh))
    row = rows[-1]
    assert row["run_id"] == "cli" and row["step"] == row["total_steps"]
    tau = 1.0 / (float(row["peak_lr"]) * float(row["weight_decay"]) * int(row["total_steps"]))
    assert tau == pytest.approx(0.25, rel=1e-12)


def test_train_inject_marks_the_curve_and_the_default_run_id(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "curve.csv"
    assert main(["train", *TINY, "--inject", "grad-noise@0.5", "--output", str(out)]) == 0
    assert "-inject-grad-noise@0.5: completed" in capsys.readouterr().out
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    # every row names the fault, and the default run id ends in it
    assert all(r["inject"] == "grad-noise@0.5" for r in rows)
    assert rows[0]["run_id"].endswith("-inject-grad-noise@0.5")


def test_train_bad_input_in_a_real_process() -> None:
    proc = subprocess.run([sys.executable, "-m", "hpo", "train", "--tpp", "-5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "hpo train: error: --tpp: must be a finite number > 0, got -5.0"]
