from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from hpo.predictors import (
    Controls,
    EmpiricalCurve,
    HybridCurve,
    PaperCurve,
    fit_universal_curve,
    load_universal_curve,
    runs_from_frame,
)
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)  # b_c, b_e, q_c, q_e


def test_paper_curve_fit_recovers_known_parameters():
    runs = runs_from_frame(paper_family(TRUE))
    curve = PaperCurve(t_min=0.05).fit(runs)
    p = curve.to_dict()["params"]
    # noise-free curves of the paper form: the fit finds the generating parameters
    assert p["b_c"] == pytest.approx(TRUE[0], rel=0.05)
    assert p["b_e"] == pytest.approx(TRUE[1], abs=0.03)
    assert p["q_c"] == pytest.approx(TRUE[2], rel=0.05)
    assert p["q_e"] == pytest.approx(TRUE[3], abs=0.03)


def test_paper_curve_predicts_held_out_controls():
    curve = PaperCurve(t_min=0.05).fit(runs_from_frame(paper_family(TRUE)))
    target = runs_from_frame(make_run("t", 3e7, 3000, 1.5e-3, 30.0, TRUE))[0]
    t = target.t_hat
    lhat = curve.predict(t, target.controls)
    truth = target.losses / 3.0
    assert np.max(np.abs(lhat[t > 0.05] / truth[t > 0.05] - 1)) < 2e-3


def test_empirical_curve_reproduces_shared_shape_and_size_trend():
    # two sizes whose log normalized curves differ linearly in log n_params (TPP unknown)
    frames = []
    for n in (1e7, 4e7):
        df = make_run(f"n{n:g}", n, 2000, 1e-3, 20.0, TRUE)
        t = df["step"] / 2000
        df["loss"] = df["loss"] * np.exp(0.01 * math.log(n / 1e7) * (1 - t))
        df["tokens"] = np.nan
        frames.append(df)
    import pandas as pd

    curve = EmpiricalCurve().fit(runs_from_frame(pd.concat(frames)))
    target = runs_from_frame(make_run("x", 1.6e8, 2000, 1e-3, 20.0, TRUE).assign(tokens=np.nan))[0]
    t = np.array([0.2, 0.5, 1.0])
    base = runs_from_frame(frames[0])[0]
    lhat = curve.predict(t, target.controls)
    l0 = np.interp(t, base.t_hat, base.losses) / base.losses[-1]
    expected = l0 * np.exp(0.01 * math.log(16) * (1 - t))
    # the linear trend in log n_params extrapolates to the bigger size (up to the smoothing)
    np.testing.assert_allclose(lhat, expected, rtol=2e-3)
    assert "TPP unknown" in " ".join(curve.notes)


def _lr_run(run_id: str, base_lr: float, shift: float = 0.03) -> pd.DataFrame:
    """A run at ``base_lr`` and tau 0.2 whose log normalized curve moves by ``shift`` per
    log LR, most early in training (a higher LR is worse early and better after the decay)."""
    df = make_run(run_id, 1e7, 2000, base_lr, 20.0, TRUE)
    df["weight_decay"] = 1.0 / (0.2 * base_lr * 2000)
    df["base_lr"] = base_lr
    t = df["step"] / 2000
    df["loss"] = df["loss"] * np.exp(shift * math.log(base_lr / 0.01) * (1 - t))
    return df


def test_empirical_curve_follows_the_base_lr_where_the_proxies_vary_it():
    frames = [_lr_run(f"lr{lr:g}", lr) for lr in (0.005, 0.01, 0.02)]
    curve = EmpiricalCurve().fit(runs_from_frame(pd.concat(frames)))
    assert "log_lr" in curve.covariates
    t = np.array([0.2, 0.3, 0.5])
    for lr in (0.005, 0.02, 0.014):
        target = runs_from_frame(_lr_run("x", lr))[0]
        truth = np.interp(t, target.t_hat, target.losses) / target.losses[-1]
        # each LR gets its own curve (the proxies' mean would be off by up to 2% at t^ 0.2)
        np.testing.assert_allclose(curve.predict(t, target.controls), truth, rtol=2e-3)
    # proxies at one LR carry no LR term, and a run without a base LR is still predicted
    one = EmpiricalCurve().fit(runs_from_frame(pd.concat([_lr_run("a", 0.01)] * 1)))
    assert "log_lr" not in one.covariates
    bare = runs_from_frame(_lr_run("y", 0.02).drop(columns="base_lr"))[0]
    assert np.isfinite(one.predict(t, bare.controls)).all()


def test_empirical_curve_without_matching_schedule_raises():
    curve = EmpiricalCurve().fit(runs_from_frame(paper_family(TRUE)))
    with pytest.raises(ValueError, match="no proxy run has a schedule matching 'constant'"):
        curve.predict(np.array([0.5]), Controls(total_steps=2000, tpp=20.0, tau=5.0,
                                                schedule="constant"))


def test_hybrid_curve_transfers_to_new_schedule():
    curve = HybridCurve().fit(runs_from_frame(paper_family(TRUE)))
    target = runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, schedule="cosine"))[0]
    lhat = curve.predict(target.t_hat, target.controls)
    truth = target.losses / target.losses[-1]
    # the paper form is exact here, so the schedule transfer is nearly exact too
    assert np.max(np.abs(lhat / truth - 1)[target.t_hat > 0.05]) < 5e-3


@pytest.mark.parametrize("form", [PaperCurve, EmpiricalCurve, HybridCurve])
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_of_run_is_predict_with_the_runs_part_worked_out_once(form, schedule, monkeypatch):
    curve = form().fit(runs_from_frame(paper_family(TRUE)))
    target = runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, schedule=schedule))[0]
    if form is EmpiricalCurve and schedule == "cosine":  # no proxy ran it: raised at once
        with pytest.raises(ValueError, match="no proxy run has a schedule matching"):
            curve.of_run(target.controls)
        return
    expected = curve.predict(target.t_hat, target.controls)
    emp = curve if form is EmpiricalCurve else getattr(curve, "empirical", None)
    calls = []
    if emp is not None:
        real = emp.grid_curve
        monkeypatch.setattr(emp, "grid_curve", lambda *a, **k: calls.append(1) or real(*a, **k))
    lhat = curve.of_run(target.controls)
    got = np.array([lhat(np.array([t]))[0] for t in target.t_hat[::50]])
    np.testing.assert_array_equal(got, expected[::50])
    assert len(calls) == (0 if emp is None else 1)


def test_universal_curve_json_round_trip(tmp_path):
    curve = fit_universal_curve(paper_family(TRUE), form="default")
    assert curve.calibration is not None and len(curve.calibration["errors"]) > 0
    path = tmp_path / "curve.json"
    curve.to_json(path)
    data = json.loads(path.read_text())
    assert data["format_version"] == 1 and data["form"] == "hybrid"
    assert set(data["ranges"]) >= {"tpp", "tau", "n_params", "total_steps"}
    back = load_universal_curve(path)
    c = runs_from_frame(paper_family(TRUE))[4].controls
    t = np.linspace(0.05, 1, 20)
    np.testing.assert_allclose(back.predict(t, c), curve.predict(t, c), rtol=1e-6)


def test_universal_curve_warns_outside_fitted_range():
    curve = fit_universal_curve(paper_family(TRUE), form="paper", calibrate=False)
    far = Controls(total_steps=2000, tpp=400.0, tau=5.0, schedule="linear", n_params=1e7)
    with pytest.warns(UserWarning, match="outside its fitted range: tpp=400"):
        curve.predict(np.array([0.5]), far)
    # warns once per control
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        curve.predict(np.array([0.5]), far)



def _one_tpp_family() -> pd.DataFrame:
    """Proxies at TPP 20 (the recipe): sizes 1e7-1.3e7, 150-190 steps, tau 0.5-2."""
    frames = []
    for i, (n_params, total) in enumerate(((1e7, 150), (1.15e7, 170), (1.3e7, 190))):
        for j, tau in enumerate((0.5, 1.0, 2.0)):
            lr = 1.0 / (tau * 0.1 * total)  # make_run's weight decay is 0.1
            frames.append(make_run(f"p{i}{j}", n_params, total, lr, 20.0, TRUE, every=5,
                                   final=4.0 - 0.1 * i))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("form", ["paper", "empirical", "hybrid"])
def test_universal_curve_range_check_ignores_size_and_length_at_one_tpp(form: str) -> None:
    curve = fit_universal_curve(_one_tpp_family(), form=form, calibrate=False)
    t = np.array([0.2, 0.5, 1.0])
    # a larger, longer target at the proxies' TPP and tau: no extrapolation, no warning
    target = Controls(total_steps=400, tpp=20.0, tau=1.0, schedule="linear", n_params=4e7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert curve.check_range(target) == []
        curve.predict(t, target)
    # tau far outside the proxies' 0.5-2: a genuine extrapolation still warns
    far = target.with_(tau=20.0)
    with pytest.warns(UserWarning, match=r"outside its fitted range: tau=20 not in \[0.5, 2\]"):
        curve.predict(t, far)
    assert curve.check_range(far) == ["tau"]


def test_universal_curve_range_check_keeps_total_steps_where_tpp_is_unknown() -> None:
    curve = fit_universal_curve(_one_tpp_family().drop(columns="tokens"), calibrate=False)
    # without TPP, total_steps and n_params stand in for it: their ranges are checked
    assert {"total_steps", "n_params"} <= set(curve.shape_controls())
    target = Controls(total_steps=400, tau=1.0, schedule="linear", n_params=4e7)
    with pytest.warns(UserWarning, match="outside its fitted range"):
        assert set(curve.check_range(target)) == {"total_steps", "n_params"}

def test_fit_universal_curve_rejects_unknown_form_and_no_usable_run():
    with pytest.raises(ValueError, match="unknown curve form"):
        fit_universal_curve(paper_family(TRUE), form="bogus")
    one_point = paper_family(TRUE).groupby("run_id").head(1)
    with pytest.raises(ValueError, match="no usable proxy run"):
        fit_universal_curve(one_point)


def test_load_universal_curve_rejects_unknown_version():
    with pytest.raises(ValueError, match="format_version"):
        load_universal_curve({"format_version": 99, "form": "paper", "params": {}})


def test_load_universal_curve_names_the_file_it_cannot_read(tmp_path):
    csv = tmp_path / "proxies.csv"
    csv.write_text("run_id,step,loss\nr0,0,5.0\n")
    other = tmp_path / "summary.json"
    other.write_text(json.dumps({"best": None}))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format_version": 99, "form": "paper", "params": {}}))
    cases = [
        (csv, "is not a universal-curve JSON"),
        (other, "is not a universal-curve JSON"),
        (tmp_path / "missing.json", "universal-curve file not found"),
        (old, "format_version 99, this version reads 1"),
    ]
    for path, needle in cases:
        with pytest.raises(ValueError) as info:
            load_universal_curve(path)
        # a ValueError (not a bare JSONDecodeError) naming the file, what is wrong and the fix
        assert type(info.value) is ValueError
        assert needle in str(info.value) and repr(str(path)) in str(info.value)
        assert "hpo fit-curve" in str(info.value)
