"""Synthetic curves in the curve format with known parameters, for tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpo.predictors.curves import paper_g
from hpo.predictors.schedules import schedule_from_name


def paper_curve(t: np.ndarray, eta: np.ndarray, eta1: float, b: float, q: float) -> np.ndarray:
    """Paper Eq. 4 normalized curve."""
    return paper_g(t, eta, b, q) / paper_g(np.ones(1), np.array([eta1]), b, q)[0]


def make_run(
    run_id: str,
    n_params: float,
    total_steps: int,
    peak_lr: float,
    tpp: float,
    params: tuple[float, float, float, float] = (0.3, 0.5, 1.2, -0.2),
    schedule: str = "linear",
    warmup: int = 0,
    final: float = 3.0,
    noise: float = 0.0,
    every: int = 10,
    seed: int = 0,
) -> pd.DataFrame:
    """A run following the paper form with b = b_c tau^b_e, q = q_c tpp^q_e."""
    b_c, b_e, q_c, q_e = params
    wd = 0.1
    tau = 1.0 / (peak_lr * wd * total_steps)
    b, q = b_c * tau**b_e, q_c * tpp**q_e
    steps = np.arange(every, total_steps + 1, every)
    t = steps / total_steps
    eta = schedule_from_name(schedule, total_steps, warmup, t)
    eta1 = schedule_from_name(schedule, total_steps, warmup, np.ones(1))[0]
    loss = final * paper_curve(t, eta, eta1, b, q)
    if noise:
        loss = loss * (1 + noise * np.random.default_rng(seed).standard_normal(loss.size))
    return pd.DataFrame(
        {
            "run_id": run_id,
            "group": f"{n_params:g}",
            "n_params": n_params,
            "tokens": tpp * n_params,
            "total_steps": total_steps,
            "batch_tokens": tpp * n_params / total_steps,
            "peak_lr": peak_lr,
            "weight_decay": wd,
            "schedule": schedule,
            "warmup_steps": warmup,
            "step": steps,
            "lr": peak_lr * eta,
            "loss": loss,
            "split": "train",
        }
    )


def paper_family(
    params=(0.3, 0.5, 1.2, -0.2), noise: float = 0.0, every: int = 10
) -> pd.DataFrame:
    """Nine runs spanning tau and TPP, linear decay, following the paper form exactly."""
    frames = []
    i = 0
    for n_params, tpp in ((1e7, 10.0), (2e7, 20.0), (4e7, 40.0)):
        for lr in (0.5e-3, 1e-3, 2e-3):
            frames.append(
                make_run(f"r{i}", n_params, 2000, lr, tpp, params, final=4.0 - 0.2 * i / 9,
                         noise=noise, seed=i, every=every)
            )
            i += 1
    return pd.concat(frames, ignore_index=True)
