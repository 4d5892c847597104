"""The training loop: callback stops, exact checkpoint/resume, and the curve it writes."""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hpo.models.recipe import lr_multiplier
from hpo.models.training import CURVE_COLUMNS, TrainConfig, TrainPoint, train, write_curve


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models train fastest on one thread, and far faster than on two on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(**overrides) -> TrainConfig:
    """A model that trains ~23 steps in well under a second."""
    base = TrainConfig(width=32, depth=1, heads=2, context=16, base_width=32, base_depth=1,
                       tpp=0.2, batch_tokens=256, lr=0.01, tau=0.3, warmup=0.1,
                       max_data_bytes=200_000, eval_every=5, eval_batches=2, device="cpu")
    return replace(base, **overrides)


def test_train_runs_exactly_T_steps_and_reports_points() -> None:
    points: list[TrainPoint] = []
    result = train(tiny(), callback=points.append)
    T = result.recipe.total_steps
    # every step logged once, in order; val on every 5th step and at T
    assert [p.step for p in points] == list(range(1, T + 1))
    assert result.status == "completed" and result.steps == T
    assert {p.step for p in points if p.val_loss is not None} == \
        {s for s in range(1, T + 1) if s % 5 == 0 or s == T}
    last = points[-1]
    assert last.t_hat == 1.0 and last.tokens == T * 256 and last.lr == 0.0
    assert math.isfinite(result.final_train_loss) and result.final_val_loss is not None
    assert result.tokens_per_s > 0 and result.mfu is None  # no MFU on CPU


def test_callback_can_stop_the_run() -> None:
    seen: list[int] = []

    def stop_at_7(point: TrainPoint) -> bool:
        seen.append(point.step)
        return point.step == 7

    result = train(tiny(), callback=stop_at_7)
    # the run ends right after the step whose callback asked to stop
    assert seen == list(range(1, 8))
    assert result.status == "stopped" and result.steps == 7
    assert max(r["step"] for r in result.rows) == 7


class _Crash(Exception):
    pass


def test_resume_after_crash_equals_uninterrupted_run(tmp_path: Path) -> None:
    full = train(tiny())
    ckpt = tmp_path / "run.pt"

    def crash_at_12(point: TrainPoint) -> None:
        if point.step == 12:
            raise _Crash

    # checkpoints every 5 steps: the crash at 12 loses steps 11-12, redone after the resume
    with pytest.raises(_Crash):
        train(tiny(checkpoint=str(ckpt), checkpoint_every=5), callback=crash_at_12)
    steps_after: list[int] = []
    resumed = train(tiny(checkpoint=str(ckpt), checkpoint_every=5, resume=True),
                    callback=lambda p: steps_after.append(p.step))
    assert steps_after[0] == 11
    # the resumed run's curve equals the uninterrupted one bitwise (CPU, same seed)
    assert resumed.rows == full.rows
    assert resumed.status == "completed"


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path: Path) -> None:
    ckpt = tmp_path / "run.pt"
    train(tiny(checkpoint=str(ckpt)), callback=lambda p: p.step == 3)
    with pytest.raises(ValueError, match="checkpoint"):
        train(tiny(checkpoint=str(ckpt), resume=True, lr=0.02))


def test_curve_has_every_column_and_consistent_tau(tmp_path: Path) -> None:
    # CompleteP at twice the base width: hidden LR halves, hidden weight decay doubles
    cfg = tiny(width=64, heads=4, out=str(tmp_path / "c.csv.gz"), run_id="r1", group="g1")
    result = train(cfg)
    with gzip.open(cfg.out, "rt", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0])[: len(CURVE_COLUMNS)] == CURVE_COLUMNS
    # every control column filled on every row; train and val rows
    assert all(row[c] != "" for row in rows for c in CURVE_COLUMNS)
    assert {row["split"] for row in rows} == {"train", "val"}
    row = rows[-1]
    T, peak, lam = int(row["total_steps"]), float(row["peak_lr"]), float(row["weight_decay"])
    assert (row["run_id"], row["group"], row["schedule"]) == ("r1", "g1", "linear")
    assert int(row["n_params"]) == result.n_params
    assert float(row["tokens"]) == T * int(row["batch_tokens"])
    # peak_lr and weight_decay as applied to hidden weights: they give back tau
    assert 1.0 / (peak * lam * T) == pytest.approx(0.3, rel=1e-12)
    assert peak == pytest.approx(0.01 / 2) and lam == pytest.approx(result.recipe.weight_decay * 2)
    # the base LR, the same for this setting at every width, in an extra column
    assert float(row["base_lr"]) == pytest.approx(0.01)
    # lr is the hidden LR of each step's update
    W = int(float(row["warmup_steps"]))
    for r in rows:
        assert float(r["lr"]) == pytest.approx(peak * lr_multiplier(int(r["step"]), T, W))


def test_weight_decay_instead_of_tau() -> None:
    result = train(tiny(tau=None, weight_decay=0.5), callback=lambda p: p.step >= 2)
    row = result.rows[0]
    assert row["weight_decay"] == 0.5  # base = hidden at the base width
    assert result.tau == pytest.approx(1.0 / (0.01 * 0.5 * result.recipe.total_steps))


def test_write_curve_plain_csv_round_trips_floats(tmp_path: Path) -> None:
    rows = [{c: "" for c in CURVE_COLUMNS} | {"peak_lr": 0.1 / 3, "loss": 2.0 / 7, "extra": 1}]
    path = write_curve(rows, tmp_path / "sub" / "c.csv")
    with open(path, newline="") as fh:
        back = list(csv.DictReader(fh))
    # floats written at full precision; extra columns kept after the standard ones
    assert float(back[0]["peak_lr"]) == 0.1 / 3 and float(back[0]["loss"]) == 2.0 / 7
    assert list(back[0])[-1] == "extra"


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"tpp": -1.0}, "tpp=-1.0"),
    ({"activation": "tanh"}, "activation='tanh'"),
    ({"width": 31}, "width=31"),
    ({"data": "/no/such/path"}, "/no/such/path"),
    ({"batch_tokens": 100}, "batch_tokens=100"),
    ({"tau": 0.2, "weight_decay": 0.1}, "weight_decay=0.1"),
    ({"schedule": "exp"}, "schedule='exp'"),
    ({"out": "curve.txt"}, "out='curve.txt'"),
])
def test_config_rejects_bad_values_naming_them(overrides: dict, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        tiny(**overrides)
    assert needle in str(info.value)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device, and torch sees none on this machine")


@pytest.mark.gpu
@needs_cuda
def test_cuda_bf16_run_reports_mfu() -> None:
    result = train(tiny(device="cuda"), callback=lambda p: p.step >= 10)
    assert result.mfu is not None and 0 < result.mfu < 1
    assert math.isfinite(result.final_train_loss)


@pytest.mark.gpu
@needs_cuda
def test_cuda_compiled_run_matches_eager_and_resumes(tmp_path: Path) -> None:
    # same init and batches; compiled and eager bf16 kernels round differently, so the curves
    # agree closely rather than bitwise, and so does a run resumed from a CUDA checkpoint
    eager = train(tiny(device="cuda"))
    compiled = train(tiny(device="cuda", compile=True))
    assert compiled.steps == eager.steps == eager.recipe.total_steps
    assert compiled.final_train_loss == pytest.approx(eager.final_train_loss, rel=0.02)
    assert compiled.mfu is not None and 0 < compiled.mfu < 1
    ckpt = str(tmp_path / "run.pt")
    stopped = train(tiny(device="cuda", checkpoint=ckpt, checkpoint_every=5),
                    callback=lambda p: p.step == 12)
    assert stopped.status == "stopped" and stopped.steps == 12
    resumed = train(tiny(device="cuda", checkpoint=ckpt, checkpoint_every=5, resume=True))
    assert resumed.status == "completed" and resumed.steps == eager.steps
    assert resumed.final_train_loss == pytest.approx(eager.final_train_loss, rel=0.02)


def test_bf16_autocast_path_runs_on_cpu() -> None:
    # the autocast branch used on CUDA, exercised here on CPU
    result = train(tiny(dtype="bfloat16"), callback=lambda p: p.step >= 3)
    assert result.steps == 3 and math.isfinite(result.final_train_loss)
