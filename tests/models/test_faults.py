"""Fault injection in the training loop: each fault leaves the curve alone before its start step
and changes it from there, faulty runs resume exactly, and bad specs are refused."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from hpo.models.training import (
    DATA_REPEAT_BATCHES,
    FAULTS,
    LR_SPIKE_FACTOR,
    Fault,
    TrainPoint,
    TrainResult,
    _lossy_cross_entropy,
    parse_fault,
    train,
)
from tests.models.test_train import _one_thread, tiny  # noqa: F401 (_one_thread: autouse)


@functools.cache
def _run(tpp: float = 0.2, inject: str | None = None) -> TrainResult:
    """An uninterrupted tiny run, trained once per session (the tests only read it)."""
    return train(tiny(tpp=tpp, inject=inject))


def _curve(rows: list[dict]) -> list[dict]:
    """Rows without the columns a fault adds or renames, for comparing with a clean run."""
    return [{k: v for k, v in r.items() if k not in ("inject", "run_id")} for r in rows]


def _first_difference(rows: list[dict], clean: list[dict]) -> int:
    a, b = _curve(rows), _curve(clean)
    assert len(a) == len(b)
    return next(int(x["step"]) for x, y in zip(a, b, strict=True) if x != y)


# the first step whose rows differ from the clean run's, relative to the start step s: the train
# loss at s is computed before update s, so only faults that change the batch or the loss itself
# show at s; grad-noise changes update s (seen at s + 1); data-repeat's first draws are the clean
# run's batches, and tiny()'s 2-step window ends before they repeat (the sampler, 4 draws ahead
# after it, changes step s + 2)
_FIRST_DIFF = {"lr-spike": 0, "data-repeat": 2, "grad-noise": 1, "precision": 0, "restart": 0}


@pytest.mark.parametrize("kind", FAULTS)
def test_fault_changes_the_curve_only_from_its_start_step(kind: str) -> None:
    clean, faulty = _run(), _run(inject=f"{kind}@0.5")
    T = clean.recipe.total_steps
    s = Fault(kind, 0.5).start_step(T)
    assert s == math.ceil(0.5 * T)
    # bitwise the clean curve before s, different from s + offset, and at the end
    assert _first_difference(faulty.rows, clean.rows) == s + _FIRST_DIFF[kind]
    assert faulty.rows[-1]["loss"] != clean.rows[-1]["loss"]
    assert faulty.status == "completed" and faulty.steps == T


def test_lr_spike_multiplies_the_lr_for_its_window() -> None:
    clean, spiked = _run(), _run(inject="lr-spike@0.5")
    T = clean.recipe.total_steps
    s = parse_fault("lr-spike@0.5").start_step(T)
    window = parse_fault("lr-spike@0.5").steps(T)
    assert list(window) == [s]  # max(1, round(0.02 * 23)) = 1 step
    lr = {r["step"]: r["lr"] for r in spiked.rows if r["split"] == "train"}
    lr0 = {r["step"]: r["lr"] for r in clean.rows if r["split"] == "train"}
    # 10x at the start step, the schedule's own LR everywhere else
    assert lr[s] == pytest.approx(LR_SPIKE_FACTOR * lr0[s], rel=1e-12)
    assert all(lr[k] == lr0[k] for k in lr if k not in window)
    # the loss at s is that of the batch before the spiked update
    train_loss = {r["step"]: r["loss"] for r in spiked.rows if r["split"] == "train"}
    assert train_loss[s] == next(r["loss"] for r in clean.rows
                                 if r["step"] == s and r["split"] == "train")


def test_data_repeat_cycles_over_the_batches_drawn_at_the_start() -> None:
    # T = 58: a 6-step window, longer than the 4 batches it cycles over
    clean, repeated = _run(tpp=0.5), _run(tpp=0.5, inject="data-repeat@0.5")
    T = clean.recipe.total_steps
    window = parse_fault("data-repeat@0.5").steps(T)
    assert len(window) == max(1, round(0.1 * T)) > DATA_REPEAT_BATCHES
    # the window's first 4 steps train on the batches the clean run saw there; the 5th repeats
    assert _first_difference(repeated.rows, clean.rows) == window[0] + DATA_REPEAT_BATCHES


def test_fault_rows_carry_the_spec_and_the_run_id_its_suffix() -> None:
    result = train(tiny(inject="restart@0.25"), callback=lambda p: p.step >= 2)
    assert result.run_id.endswith("-inject-restart@0.25")
    assert all(r["inject"] == "restart@0.25" for r in result.rows)
    # a clean run has no inject column; an explicit run id is kept as given
    assert "inject" not in train(tiny(), callback=lambda p: True).rows[0]
    assert train(tiny(inject="restart@0.25", run_id="r"), callback=lambda p: True).run_id == "r"


class _Crash(Exception):
    pass


@pytest.mark.parametrize(("inject", "tpp", "crash_at", "resumed_from"), [
    ("grad-noise@0.5", 0.2, 13, 10),  # checkpoint before the start step (12)
    ("grad-noise@0.5", 0.2, 17, 15),  # checkpoint after it: the noise generator's state
    ("data-repeat@0.5", 0.5, 32, 30),  # checkpoint inside the window (29-34): its batches
    ("restart@0.5", 0.2, 17, 15),  # checkpoint after the restart: its sampler
])
def test_faulty_run_resumes_bitwise(tmp_path: Path, inject: str, tpp: float, crash_at: int,
                                    resumed_from: int) -> None:
    full = _run(tpp=tpp, inject=inject)
    ckpt = str(tmp_path / "run.pt")

    def crash(point: TrainPoint) -> None:
        if point.step == crash_at:
            raise _Crash

    with pytest.raises(_Crash):
        train(tiny(tpp=tpp, inject=inject, checkpoint=ckpt, checkpoint_every=5), callback=crash)
    steps: list[int] = []
    resumed = train(tiny(tpp=tpp, inject=inject, checkpoint=ckpt, checkpoint_every=5,
                         resume=True), callback=lambda p: steps.append(p.step))
    assert steps[0] == resumed_from + 1
    # the resumed faulty run equals the uninterrupted one bitwise (CPU), so reruns do too
    assert resumed.rows == full.rows


def test_resume_refuses_a_checkpoint_of_the_clean_run(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "run.pt")
    train(tiny(checkpoint=ckpt, run_id="r"), callback=lambda p: p.step == 3)
    # the same run id, but the fault is part of the run's identity
    with pytest.raises(ValueError, match="checkpoint"):
        train(tiny(checkpoint=ckpt, run_id="r", resume=True, inject="grad-noise@0.5"))


def test_parse_fault_reads_kind_and_fraction() -> None:
    fault = parse_fault("grad-noise@0.25")
    assert fault == Fault("grad-noise", 0.25) and str(fault) == "grad-noise@0.25"
    # start step max(1, ceil(T * total)); open-ended faults run to the end, restart acts once
    assert fault.start_step(100) == 25 and fault.steps(100) == range(25, 101)
    assert Fault("precision", 0.001).start_step(100) == 1
    assert Fault("restart", 0.5).steps(10) == range(5, 6)
    assert Fault("data-repeat", 0.95).steps(100) == range(95, 101)  # clipped at the end


@pytest.mark.parametrize("spec", ["foo@0.5", "lr-spike@1.5", "lr-spike", "lr-spike@x",
                                  "lr-spike@0", "lr-spike@nan", "lr-spike@0.5@1", ""])
def test_config_rejects_bad_inject_naming_it(spec: str) -> None:
    with pytest.raises(ValueError) as info:
        tiny(inject=spec)
    message = str(info.value)
    assert message.startswith("inject must be KIND@T with KIND one of lr-spike, data-repeat, "
                              "grad-noise, precision, restart and T in (0, 1)")
    assert message.endswith(f"but got inject={spec!r}.")


def test_lossy_cross_entropy_rounds_the_value_and_passes_the_gradient_straight() -> None:
    torch.manual_seed(0)
    logits = (3 * torch.randn(2, 5, 7)).requires_grad_()
    targets = torch.randint(7, (2, 5))
    loss = _lossy_cross_entropy(logits, targets, 0.5)
    # the value is the model's cross entropy at the rounded logits ...
    rounded = (torch.round(logits.detach() / 0.5) * 0.5).requires_grad_()
    reference = F.cross_entropy(rounded.flatten(0, 1), targets.reshape(-1))
    assert torch.equal(loss.detach(), reference.detach())
    # ... and the gradient w.r.t. the logits is the one at the rounded logits
    loss.backward()
    reference.backward()
    assert torch.allclose(logits.grad, rounded.grad, rtol=0, atol=1e-7)
    assert loss.item() != pytest.approx(F.cross_entropy(logits.flatten(0, 1),
                                                        targets.reshape(-1)).item(), rel=1e-6)
