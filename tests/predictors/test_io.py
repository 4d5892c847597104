from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hpo.predictors import (
    controls_from_run,
    fit_universal_curve,
    read_curves,
    require_split,
    run_arrays,
    runs_from_frame,
)
from hpo.predictors.io import validate_curves


def _frame(**overrides) -> pd.DataFrame:
    df = pd.DataFrame({
        "run_id": "a", "total_steps": 100, "step": [10, 20, 30, 40], "loss": [4.0, 3.5, 3.2, 3.0],
        "n_params": 1e6, "tokens": 2e7, "peak_lr": 1e-3, "weight_decay": 0.1,
        "schedule": "linear", "warmup_steps": 5, "split": "train", "extra": "ignored",
    })
    for k, v in overrides.items():
        df[k] = v
    return df


def test_read_curves_csv_gz_and_parquet_round_trip(tmp_path):
    df = _frame()
    df.to_csv(tmp_path / "c.csv.gz", index=False)
    df.to_parquet(tmp_path / "c.parquet")
    a = read_curves(tmp_path / "c.csv.gz")
    b = read_curves([tmp_path / "c.parquet"])
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    assert "extra" in a.columns  # extra columns are kept and ignored


def test_read_curves_missing_column_is_named(tmp_path):
    _frame().drop(columns=["total_steps"]).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(ValueError, match="missing required column.*total_steps"):
        read_curves(tmp_path / "c.csv")


def test_read_curves_same_run_in_two_files_raises(tmp_path):
    _frame().to_csv(tmp_path / "a.csv", index=False)
    _frame().to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(ValueError, match="appears in both"):
        read_curves([tmp_path / "a.csv", tmp_path / "b.csv"])


def test_validate_curves_drops_nan_losses_with_warning():
    df = _frame(loss=[4.0, np.nan, 3.2, np.inf])
    with pytest.warns(UserWarning, match="dropped 2 row"):
        out = validate_curves(df)
    assert out["loss"].tolist() == [4.0, 3.2]


def test_validate_curves_sorts_steps_out_of_order():
    out = validate_curves(_frame(step=[30, 10, 40, 20], loss=[3.2, 4.0, 3.0, 3.5]))
    assert out["step"].tolist() == [10, 20, 30, 40]
    assert out["loss"].tolist() == [4.0, 3.5, 3.2, 3.0]


def test_validate_curves_run_longer_than_total_steps_raises():
    with pytest.raises(ValueError, match="longer than its total_steps: step 400 > total_steps"):
        validate_curves(_frame(step=[10, 20, 30, 400]))


def test_validate_curves_inconsistent_total_steps_raises():
    with pytest.raises(ValueError, match="one positive integer per run"):
        validate_curves(_frame(total_steps=[100, 100, 200, 100]))


def test_single_point_run_is_kept_but_not_fittable():
    df = validate_curves(_frame().iloc[:1])
    runs = runs_from_frame(df)
    assert len(runs) == 1 and runs[0].steps.size == 1 and not runs[0].complete


def test_run_arrays_averages_duplicate_steps():
    df = _frame(step=[10, 10, 20, 30], loss=[4.0, 3.0, 3.2, 3.0])
    steps, losses = run_arrays(validate_curves(df))
    np.testing.assert_array_equal(steps, [10, 20, 30])
    np.testing.assert_allclose(losses, [3.5, 3.2, 3.0])


def test_controls_from_run_derives_tpp_tau_and_schedule():
    c = controls_from_run(validate_curves(_frame()))
    assert c.tpp == pytest.approx(20.0)
    assert c.tau == pytest.approx(1 / (1e-3 * 0.1 * 100))
    assert c.lr_schedule is None and c.schedule == "linear"
    # unknown weight decay -> tau unknown
    assert controls_from_run(validate_curves(_frame(weight_decay=np.nan))).tau is None


def test_controls_from_run_reads_an_optional_base_lr_column():
    # CompleteP: the hidden-weight peak_lr depends on the width, the base LR does not
    assert controls_from_run(validate_curves(_frame())).base_lr is None
    c = controls_from_run(validate_curves(_frame(base_lr=0.01, peak_lr=0.005)))
    assert c.base_lr == pytest.approx(0.01) and c.peak_lr == pytest.approx(0.005)
    assert controls_from_run(validate_curves(_frame(base_lr=np.nan))).base_lr is None


def test_controls_from_run_uses_lr_column_and_ramps_before_first_point():
    # a source's own schedule name: the logged LR is the only description of the schedule
    df = _frame(lr=[1.0, 1.0, 0.5, 0.0], schedule="source_specific")
    c = controls_from_run(validate_curves(df))
    assert c.lr_schedule is not None and c.lr_schedule.size == 101
    # warmup_steps=5 ends before the first logged step 10: ramp, then hold
    np.testing.assert_allclose(c.eta(np.array([0.0, 0.025, 0.05, 0.1, 0.3, 0.4, 1.0])),
                               [0.0, 0.5, 1.0, 1.0, 0.5, 0.0, 0.0])


def test_controls_of_a_stopped_run_take_the_named_schedule_not_the_held_last_lr():
    total = 100
    steps = np.arange(1, 31)  # stopped at 30% of a linear decay to zero
    lr = 0.01 * (1 - steps / total)
    frame = pd.DataFrame({"run_id": "r", "total_steps": total, "schedule": "linear",
                          "warmup_steps": 0, "step": steps, "lr": lr, "loss": 3.0,
                          "split": "train"})
    controls = controls_from_run(frame)
    # the LR keeps decaying to zero after the stop, as the schedule's name says
    assert controls.eta(np.array([0.5, 1.0])) == pytest.approx([0.5, 0.0], abs=1e-9)
    # a source's own schedule name cannot be evaluated: the logged LR is held after the stop
    custom = controls_from_run(frame.assign(schedule="source_specific"))
    assert custom.eta(np.array([1.0]))[0] == pytest.approx(lr[-1] / lr.max())


def test_require_split_names_the_splits_the_frame_has():
    df = pd.concat([_frame(split="val"), _frame(run_id="b", split="eval")])
    # the split asked for, the splits present and a hint formatted with one of them
    with pytest.raises(ValueError, match=r"^f\.csv: no rows of split 'train' \(the curves "
                       r"have: eval, val\); use --split val$"):
        require_split(df, "train", source="f.csv", hint="--split {split}")
    require_split(df, "val")
    require_split(df, None)
    # rows without a split are train rows, as validate_curves reads them
    require_split(_frame().drop(columns="split"), "train")


def test_fit_universal_curve_on_a_frame_without_train_rows_names_the_split():
    from tests.predictors._synth import paper_family

    df = paper_family().assign(split="val")
    # not "no usable proxy run": the frame has rows, only not of the train split fitting uses
    with pytest.raises(ValueError, match=r"no rows of split 'train' \(the curves have: val\); "
                       r"use runs_from_frame\(frame, split='val'\)"):
        fit_universal_curve(df, calibrate=False)
    with pytest.raises(ValueError, match="no rows of split 'train'"):
        fit_universal_curve([g for _, g in df.groupby("run_id")], calibrate=False)
    # the suggested way fits
    assert fit_universal_curve(runs_from_frame(df, split="val"), calibrate=False).n_proxies == 9
