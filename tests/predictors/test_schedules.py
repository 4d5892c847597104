from __future__ import annotations

import json

import numpy as np
import pytest

from hpo.predictors import Controls, schedule_from_name


def test_schedule_from_name_shapes():
    t = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    # linear decays to zero, constant stays at peak
    np.testing.assert_allclose(schedule_from_name("linear", 100, 0, t), 1 - t)
    np.testing.assert_allclose(schedule_from_name("constant", 100, 0, t), 1.0)
    # cosine:0.1 ends at 0.1 of the peak, half-way at 0.55
    cos = schedule_from_name("cosine:0.1", 100, 0, t)
    np.testing.assert_allclose(cos[[0, 2, 4]], [1.0, 0.55, 0.1])
    # wsd:linear:0.2 holds the peak until 80 %, then decays linearly to zero
    wsd = schedule_from_name("wsd:linear:0.2", 100, 0, np.array([0.5, 0.8, 0.9, 1.0]))
    np.testing.assert_allclose(wsd, [1.0, 1.0, 0.5, 0.0], atol=1e-12)
    sq = schedule_from_name("wsd:sqrt:0.5", 100, 0, np.array([0.5, 0.75, 1.0]))
    np.testing.assert_allclose(sq, [1.0, 1 - np.sqrt(0.5), 0.0], atol=1e-12)


def test_schedule_from_name_warmup_ramps_linearly():
    eta = schedule_from_name("constant", 100, 10, np.array([0.0, 0.05, 0.1, 0.5]))
    np.testing.assert_allclose(eta, [0.0, 0.5, 1.0, 1.0])


def test_schedule_from_name_unknown_raises():
    with pytest.raises(ValueError, match="schedule='constant_24000'.*lr column"):
        schedule_from_name("constant_24000", 100, 0, np.zeros(1))
    with pytest.raises(ValueError, match=r"0 <= F <= 1.*schedule='cosine:1.5'"):
        schedule_from_name("cosine:1.5", 100, 0, np.zeros(1))


@pytest.mark.parametrize("name", ["linear", "cosine", "cosine:0", "cosine:0.1", "wsd:linear:0.2",
                                  "wsd:sqrt:1", "constant", " Linear "])
def test_parse_schedule_is_the_one_grammar(name: str) -> None:
    from hpo.models.recipe import lr_multiplier
    from hpo.predictors.schedules import parse_schedule
    from hpo.study.schema import _schedule

    kind, frac = parse_schedule(name)
    assert kind in ("linear", "cosine", "wsd:linear", "wsd:sqrt", "constant") and 0 <= frac <= 1
    # the study schema and the recipe accept exactly what the predictors evaluate
    assert _schedule(name) is None
    assert lr_multiplier(50, 100, 0, name) == pytest.approx(
        float(schedule_from_name(name, 100, 0, np.array([0.5]))[0]))


@pytest.mark.parametrize("name", ["wsd:linear:0", "cosine:2", "cosine:x", "wsd:cubic:0.2",
                                  "linear:0.1", "constant_24000", 3])
def test_every_reader_rejects_the_same_names(name: object) -> None:
    from hpo.models.recipe import lr_multiplier
    from hpo.predictors.schedules import parse_schedule
    from hpo.study.schema import _schedule

    with pytest.raises(ValueError, match="schedule must be one of"):
        parse_schedule(name)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        lr_multiplier(50, 100, 0, name)  # type: ignore[arg-type]
    assert _schedule(name).startswith("must be one of linear")


def test_controls_eta_prefers_lr_values_over_name():
    lr = np.linspace(2.0, 0.0, 11)  # any units; normalized to peak 1
    c = Controls(total_steps=10, schedule="constant", lr_schedule=lr)
    np.testing.assert_allclose(c.eta(np.array([0.0, 0.5, 1.0])), [1.0, 0.5, 0.0])


def test_controls_eta_without_schedule_raises():
    with pytest.raises(ValueError, match="LR schedule is unknown"):
        Controls(total_steps=10).eta(np.array([0.5]))
    assert not Controls(total_steps=10, schedule="bogus").has_schedule


def test_controls_validation_rejects_bad_values():
    with pytest.raises(ValueError, match="total_steps"):
        Controls(total_steps=0)
    with pytest.raises(ValueError, match="tau"):
        Controls(total_steps=10, tau=-1.0)
    with pytest.raises(ValueError, match="lr_schedule"):
        Controls(total_steps=10, lr_schedule=np.ones(5))
    # NaN from a table means unknown
    assert Controls(total_steps=10, tpp=float("nan")).tpp is None


def test_controls_dict_round_trip_through_json():
    c = Controls(total_steps=4, tpp=20.0, tau=0.2, schedule="linear", warmup_steps=1.0,
                 lr_schedule=np.array([0.0, 1.0, 0.5, 0.25, 0.0]), n_params=1e6)
    back = Controls.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back == c
    np.testing.assert_array_equal(back.lr_schedule, c.lr_schedule)
    with pytest.raises(ValueError, match="unknown Controls field"):
        Controls.from_dict({"total_steps": 3, "bogus": 1})
