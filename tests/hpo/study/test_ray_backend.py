"""The Ray backend's trainable: it keeps its training checkpoint at a path of its trial, so a
trial that Ray starts again continues from it instead of from step 0."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("ray")

from hpo.models.training import TrainConfig  # noqa: E402


def _flaky(config: dict, *, marker: str, how: str = "raise", **kwargs) -> None:
    """The backend's trainable; on its first attempt it dies right after the first report once
    a training checkpoint exists: it raises, or its worker process is SIGKILLed (a preempted
    node)."""
    from ray import tune

    from hpo.study.ray_backend import _trainable

    first = not Path(marker).exists()
    original = tune.report
    ckpt = Path(kwargs["checkpoint_dir"]) / f"{tune.get_context().get_trial_id()}.pt"

    def report(metrics: dict, checkpoint=None) -> None:
        original(metrics, checkpoint=checkpoint)
        if first and ckpt.exists():
            Path(marker).write_text(str(metrics["step"]))
            if how == "sigkill":
                import os
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("simulated preemption")

    tune.report = report
    try:
        _trainable(config, **kwargs)
    finally:
        tune.report = original


@pytest.mark.slow
@pytest.mark.parametrize("how", ["raise", "sigkill"])
def test_a_restored_trial_continues_from_its_checkpoint(ray_session, tmp_path: Path,
                                                         how: str) -> None:
    from ray import tune

    base = dataclasses.asdict(TrainConfig(
        width=32, depth=1, heads=2, context=16, base_width=32, base_depth=1, tpp=1.0,
        batch_tokens=256, lr=0.01, tau=0.3, warmup=0.1, max_data_bytes=200_000, eval_every=10,
        eval_batches=2, device="cpu", checkpoint_every=20))
    marker = tmp_path / "died_at"

    class Seen(tune.Callback):
        steps: list[int] = []

        def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
            self.steps.append(int(result["step"]))

    seen = Seen()
    trainable = tune.with_parameters(_flaky, marker=str(marker), how=how, base=base,
                                     report_points=50, objective="train_loss", threads=1,
                                     checkpoint_dir=str(tmp_path / "checkpoints"))
    tuner = tune.Tuner(
        trainable,
        param_space={"lr": 0.01},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), name="resume", verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=1),
                                  callbacks=[seen]),
    )
    result = tuner.fit()[0]
    assert result.error is None
    died_at = int(marker.read_text())
    final = result.metrics
    # the second attempt started from the checkpoint written before the first one died, kept
    # at the trial's own path
    assert 0 < final["resumed_from_step"] <= died_at
    assert [p.stem for p in (tmp_path / "checkpoints").iterdir()] == [result.metrics["trial_id"]]
    assert final["t_hat"] == 1.0 and final["step"] > died_at
    steps = seen.steps
    assert steps[-1] == final["step"]
    # nothing before the checkpoint was trained twice: the retry's first report comes after it
    retry = steps[steps.index(died_at) + 1:]
    assert retry[0] > final["resumed_from_step"]
