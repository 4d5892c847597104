"""Recipe maths (TPP -> steps, tau <-> lambda) and the LR schedules."""

from __future__ import annotations

import math

import pytest

from hpo.models.config import GPTConfig
from hpo.models.recipe import (
    count_params,
    hidden_lr_wd,
    lr_multiplier,
    make_recipe,
    tau_for_weight_decay,
    weight_decay_for_tau,
)
from hpo.predictors.schedules import parse_schedule


@pytest.mark.parametrize("mults", [(1.0, 1.0, 1.0), (4.0, 1.0, 1.0), (2.0, 3.0, 1.0),
                                   (0.5, 2.0, 0.5)])
def test_tau_weight_decay_round_trip(mults: tuple[float, float, float]) -> None:
    lam = weight_decay_for_tau(0.2, 0.01, 1000, *mults)
    # solving for lambda then recomputing tau gives tau back
    assert tau_for_weight_decay(lam, 0.01, 1000, *mults) == pytest.approx(0.2, rel=1e-12)
    eta_h, lam_h = hidden_lr_wd(0.01, lam, *mults)
    assert 1.0 / (eta_h * lam_h * 1000) == pytest.approx(0.2, rel=1e-12)


def test_tau_is_width_invariant_under_completep() -> None:
    # with alpha = 1, eta_h * lambda_h = eta * lambda whatever m_N and m_L
    for m_n in (0.5, 1.0, 8.0):
        for m_l in (1.0, 4.0):
            eta_h, lam_h = hidden_lr_wd(0.02, 0.3, m_n, m_l, 1.0)
            assert eta_h == pytest.approx(0.02 / m_n)
            assert lam_h == pytest.approx(0.3 * m_n)
            assert eta_h * lam_h == pytest.approx(0.02 * 0.3)
    # depth-muP (alpha = 1/2): eta_h * lambda_h = eta * lambda * m_L^-1/2
    eta_h, lam_h = hidden_lr_wd(0.02, 0.3, 2.0, 4.0, 0.5)
    assert eta_h * lam_h == pytest.approx(0.02 * 0.3 / 2.0)


def test_make_recipe_steps_tokens_and_lambda() -> None:
    r = make_recipe(n_params=123_457, tpp=20, batch_tokens=2048, lr=0.01, tau=0.2, warmup=0.05)
    # T = ceil(D / B); the run trains T * B >= D tokens, less than one batch more
    assert r.total_steps == math.ceil(20 * 123_457 / 2048)
    assert r.tokens == r.total_steps * 2048
    assert 0 <= r.tokens - 20 * 123_457 < 2048
    assert r.warmup_steps == round(0.05 * r.total_steps)
    # lambda gives the requested tau exactly (base = hidden at multiplier 1)
    assert r.weight_decay == pytest.approx(1.0 / (0.2 * 0.01 * r.total_steps), rel=1e-12)
    assert 1.0 / (r.hidden_lr * r.hidden_weight_decay * r.total_steps) == pytest.approx(
        0.2, rel=1e-12)


def test_make_recipe_from_weight_decay_gives_tau() -> None:
    r = make_recipe(n_params=10_000, tpp=10, batch_tokens=1000, lr=0.02, weight_decay=0.1,
                    width_mult=2.0)
    assert r.total_steps == 100
    assert r.tau == pytest.approx(1.0 / (0.01 * 0.2 * 100), rel=1e-12)
    # no weight decay: infinite timescale
    r0 = make_recipe(n_params=10_000, tpp=10, batch_tokens=1000, lr=0.02, weight_decay=0.0)
    assert r0.tau == math.inf


def test_make_recipe_from_config_counts_all_parameters() -> None:
    torch = pytest.importorskip("torch")
    from hpo.models.gpt import GPT

    for act, pos in (("gelu", "learned"), ("swiglu", "rope"), ("relu2", "alibi")):
        cfg = GPTConfig(width=48, depth=3, heads=4, context=32, activation=act, position=pos,
                        base_width=24, base_depth=1)
        torch.manual_seed(0)
        model = GPT(cfg)
        # the analytic count equals the model's (embeddings and head included)
        assert count_params(cfg) == model.num_params()
        r = make_recipe(cfg=cfg, tpp=5, batch_tokens=512, lr=0.01, tau=0.3)
        assert r.n_params == model.num_params()
        # the recipe's hidden LR / WD are the model's
        assert (r.hidden_lr, r.hidden_weight_decay) == pytest.approx(
            model.hidden_lr_wd(r.lr, r.weight_decay))


def test_make_recipe_warmup_steps_and_cap() -> None:
    base = dict(n_params=1000, tpp=10, batch_tokens=100, lr=0.01, tau=0.2)  # T = 100
    assert make_recipe(**base, warmup=0.1).warmup_steps == 10
    assert make_recipe(**base, warmup=7).warmup_steps == 7
    assert make_recipe(**base, warmup=0).warmup_steps == 0
    assert make_recipe(**base, warmup=500).warmup_steps == 99  # capped below T


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"tpp": -1.0}, "tpp=-1.0"),
    ({"tpp": 0}, "tpp=0"),
    ({"lr": 0.0}, "lr=0.0"),
    ({"batch_tokens": 0}, "batch_tokens=0"),
    ({"n_params": -5}, "n_params=-5"),
    ({"tau": -0.1}, "tau=-0.1"),
    ({"warmup": -1}, "warmup=-1"),
    ({"schedule": "cosine:2"}, "schedule='cosine:2'"),
    ({"tau": None}, "exactly one of tau and weight_decay"),
    ({"weight_decay": 0.1}, "exactly one of tau and weight_decay"),
])
def test_make_recipe_rejects_bad_values_naming_them(kwargs: dict, needle: str) -> None:
    base = dict(n_params=1000, tpp=10, batch_tokens=100, lr=0.01, tau=0.2)
    with pytest.raises(ValueError) as info:
        make_recipe(**{**base, **kwargs})
    assert needle in str(info.value)


@pytest.mark.parametrize("name", ["linear", "cosine", "cosine:0.1", "wsd:linear:0.2",
                                  "wsd:sqrt:0.3", "constant"])
def test_schedule_warmup_peak_range_and_monotone_decay(name: str) -> None:
    T, W = 200, 20
    values = [lr_multiplier(s, T, W, name) for s in range(T + 1)]
    # linear warmup from 0 to the peak 1 at step W
    assert values[0] == 0.0
    assert values[10] == pytest.approx(0.5)
    assert values[W] == 1.0
    # in [0, 1] and non-increasing after warmup
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a >= b - 1e-15 for a, b in zip(values[W:], values[W + 1:], strict=False))


@pytest.mark.parametrize(("name", "end"), [("linear", 0.0), ("cosine", 0.0), ("cosine:0.1", 0.1),
                                           ("wsd:linear:0.2", 0.0), ("wsd:sqrt:0.2", 0.0),
                                           ("constant", 1.0)])
def test_schedule_endpoints(name: str, end: float) -> None:
    assert lr_multiplier(100, 100, 0, name) == pytest.approx(end, abs=1e-15)
    assert lr_multiplier(0, 100, 0, name) == 1.0  # no warmup: peak from the start


def test_schedule_midpoints() -> None:
    # linear: half way through the decay is half the peak
    assert lr_multiplier(60, 110, 10, "linear") == pytest.approx(0.5)
    assert lr_multiplier(50, 100, 0, "cosine:0.2") == pytest.approx(0.6)
    # WSD: stable until the last 20% of training, then cooldown
    assert lr_multiplier(80, 100, 0, "wsd:linear:0.2") == 1.0
    assert lr_multiplier(90, 100, 0, "wsd:linear:0.2") == pytest.approx(0.5)
    assert lr_multiplier(90, 100, 0, "wsd:sqrt:0.2") == pytest.approx(1 - math.sqrt(0.5))


def test_schedule_matches_predictors_reading_of_the_name() -> None:
    np = pytest.importorskip("numpy")
    schedules = pytest.importorskip("hpo.predictors.schedules")
    T, W = 150, 9
    steps = np.arange(T + 1)
    for name in ("linear", "cosine", "cosine:0.1", "wsd:linear:0.3", "wsd:sqrt:0.2", "constant"):
        ours = np.array([lr_multiplier(int(s), T, W, name) for s in steps])
        # what a curve reader computes from (schedule, warmup_steps, total_steps)
        theirs = schedules.schedule_from_name(name, T, W, steps / T)
        assert np.abs(ours - theirs).max() < 1e-12, name


@pytest.mark.parametrize("name", ["cos", "linear:0.1", "wsd:0.2", "wsd:exp:0.2", "cosine:x",
                                  "wsd:linear:0", ""])
def test_parse_schedule_rejects_unknown_names(name: str) -> None:
    with pytest.raises(ValueError, match="schedule"):
        parse_schedule(name)


def test_lr_multiplier_rejects_warmup_not_below_total() -> None:
    with pytest.raises(ValueError, match="warmup_steps=100"):
        lr_multiplier(5, 100, 100)
