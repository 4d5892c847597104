from __future__ import annotations

import math

import numpy as np
import pytest

from predictors import Controls, RunCurve, TransferPredictor, paired_tolerance, same_setting

T = {1e4: 200, 2e4: 400, 4e4: 800}  # steps per size (a fixed TPP: steps grow with size)
WIDTH = {1e4: 16, 2e4: 24, 4e4: 32}
SHAPE = {0.003: 3.0, 0.01: 2.0, 0.03: 1.2}  # base LR -> how much the loss falls after t^ 0.1


def _shape(t: np.ndarray, lr: float) -> np.ndarray:
    """L / L_final of one setting: the same at every size, different for every LR."""
    return 1.0 + SHAPE[lr] * np.exp(-4.0 * t) * (1.0 - t) + 0.3 * (1.0 - t)


def _run(size: float, lr: float, final: float, noise: float = 0.0, seed: int = 0) -> RunCurve:
    total = T[size]
    steps = np.arange(10, total + 1, 10, dtype=float)
    losses = final * _shape(steps / total, lr)
    if noise:
        losses = losses * np.exp(np.random.default_rng(seed).normal(0.0, noise, losses.size))
    controls = Controls(total_steps=total, tpp=20.0, tau=0.2, schedule="linear", warmup_steps=0,
                        n_params=size, peak_lr=lr * 32 / WIDTH[size], base_lr=lr,
                        weight_decay=1.0 / (0.2 * lr * 32 / WIDTH[size] * total))
    return RunCurve(f"n{size:g}-lr{lr:g}", steps, losses, controls, group=f"n{size:g}")


def _proxies(noise: float = 0.0) -> list[RunCurve]:
    return [_run(size, lr, 3.0 - 0.2 * k + 0.1 * j, noise, seed=10 * k + j)
            for k, size in enumerate((1e4, 2e4)) for j, lr in enumerate(SHAPE)]


def test_same_setting_matches_base_lr_across_widths() -> None:
    a, b = _run(1e4, 0.01, 3.0).controls, _run(4e4, 0.01, 2.5).controls
    assert a.peak_lr != b.peak_lr and same_setting(a, b)
    assert not same_setting(a, _run(4e4, 0.03, 2.5).controls)
    # without base_lr the peak LR decides; with neither LR known the setting cannot be told
    bare = Controls(total_steps=800, tpp=20.0, tau=0.2, schedule="linear", n_params=4e4)
    assert not same_setting(bare, bare)
    plain = Controls(total_steps=800, tpp=20.0, tau=0.2, schedule="linear", peak_lr=0.01)
    assert same_setting(plain, plain)
    assert not same_setting(plain, Controls(total_steps=800, tpp=20.0, tau=0.4,
                                            schedule="linear", peak_lr=0.01))
    assert not same_setting(plain, Controls(total_steps=800, tpp=20.0, tau=0.2,
                                            schedule="cosine", peak_lr=0.01))


def test_exact_transfer_when_the_setting_collapses_across_sizes() -> None:
    model = TransferPredictor(_proxies())
    target = _run(4e4, 0.03, 2.4)
    # the counterpart is the same LR at the largest proxy size below the target
    assert [p.run_id for p in model.counterparts(target.controls)] == ["n20000-lr0.03"]
    for frac in (0.1, 0.2, 0.5):
        keep = target.t_hat <= frac
        p = model.predict(target.steps[keep], target.losses[keep], target.controls)
        assert p.final == pytest.approx(2.4, rel=2e-3)
        assert p.lower < 2.4 < p.upper and p.level == 0.8 and p.method == "collapse-transfer"
        assert p.t_hat == pytest.approx(target.t_hat[keep][-1])
    # another LR's shape would be wrong by far more: the match is what makes it exact
    other = TransferPredictor([r for r in _proxies() if "lr0.03" not in r.run_id] + [
        _run(2e4, 0.01, 2.9)])
    with pytest.raises(ValueError, match="no proxy ran this setting"):
        other.predict(target.steps[:20], target.losses[:20], target.controls)


def test_calibration_is_leave_one_size_out_and_feeds_the_paired_rule() -> None:
    model = TransferPredictor(_proxies(noise=0.01))
    runs = model.calibration["runs"]
    # only the larger proxies have a counterpart (at the smaller size)
    assert sorted(r["run_id"] for r in runs) == ["n20000-lr0.003", "n20000-lr0.01",
                                                 "n20000-lr0.03"]
    assert len(runs[0]["errors"]) == len(model.calibration["fractions"])
    errs = np.array([[e for e in r["errors"]] for r in runs], dtype=float)
    assert np.all(np.abs(errs) < 0.05)  # 1% noise per point, averaged over the window
    tol = paired_tolerance(model.calibration, [0.1, 0.2], by=("group",))
    assert set(tol) == {0.1, 0.2} and all(0 < d < 0.1 for d in tol.values())
    # the interval widens with the calibration errors' spread
    quiet = TransferPredictor(_proxies())
    target = _run(4e4, 0.01, 2.4, noise=0.01, seed=99)
    keep = target.t_hat <= 0.2
    wide = model.predict(target.steps[keep], target.losses[keep], target.controls)
    narrow = quiet.predict(target.steps[keep], target.losses[keep], target.controls)
    assert math.log(wide.upper / wide.final) > math.log(narrow.upper / narrow.final)


def test_window_averages_noisy_training_losses() -> None:
    proxies = _proxies()
    errors = {}
    for window in (0.0125, 0.1):  # one or two points, or eight
        model = TransferPredictor(proxies, window=window)
        errs = []
        for seed in range(30):  # 5% noise per point, as per-batch training losses
            target = _run(4e4, 0.01, 2.4, noise=0.05, seed=seed)
            keep = target.t_hat <= 0.3
            p = model.predict(target.steps[keep], target.losses[keep], target.controls)
            errs.append(abs(math.log(p.final / 2.4)))
        errors[window] = float(np.mean(errs))
    assert errors[0.1] < 0.7 * errors[0.0125] and errors[0.1] < 0.02


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="level"):
        TransferPredictor(_proxies(), level=1.0)
    with pytest.raises(ValueError, match="window"):
        TransferPredictor(_proxies(), window=0.0)
    with pytest.raises(ValueError, match="n_params"):
        TransferPredictor([])
    # one proxy size: nothing has a counterpart, so nothing calibrates the interval
    model = TransferPredictor([r for r in _proxies() if r.run_id.startswith("n10000")])
    target = _run(4e4, 0.01, 2.4)
    with pytest.raises(ValueError, match="calibrates"):
        model.predict(target.steps[:20], target.losses[:20], target.controls)
