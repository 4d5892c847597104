"""Per-source evaluation on a hand-made corpus of two synthetic sources with known answers."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from hpo.predictors import evaluate_predictors
from hpo.predictors.evaluate import (
    Source,
    evaluate_sources,
    format_sources,
    format_table,
    median_over_sources,
    shifted_summary,
)
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


def _source_a() -> pd.DataFrame:
    """Proxies of 1e7-4e7 params and two targets that follow the same paper curve exactly."""
    targets = [make_run(f"a_t{i}", 8e7, 2000, lr, 20.0, TRUE, final=2.5 + 0.1 * i, every=40)
               for i, lr in enumerate((0.7e-3, 1.4e-3))]
    return pd.concat([paper_family(TRUE, every=40), *targets], ignore_index=True)


def _source_b() -> pd.DataFrame:
    """Two optimizers, each a family of its own: the 'sgd' targets follow another curve than
    the 'adam' proxies, and only 'sgd' proxies can predict them; a third optimizer has a target
    and no proxy."""
    other = (0.6, 0.5, 0.8, -0.2)
    parts = []
    for opt, params in (("adam", TRUE), ("sgd", other)):
        fam = paper_family(params, every=40)
        fam["run_id"] = f"{opt}_" + fam["run_id"]
        fam["optimizer"] = opt
        parts.append(fam)
        for i, lr in enumerate((0.7e-3, 1.4e-3, 1.0e-3)):
            t = make_run(f"{opt}_t{i}", 9e7, 2000, lr, 20.0, params, final=3.0, every=40)
            t["optimizer"] = opt
            parts.append(t)
    lonely = make_run("lion_t0", 9e7, 2000, 1e-3, 20.0, TRUE, every=40)
    lonely["optimizer"] = "lion"
    parts.append(lonely)
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def corpus() -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return evaluate_sources(
            [Source("a", _source_a(), 5e7), Source("b", _source_b(), 5e7)], (0.2, 0.3),
            forms=("default",), peers=("last_value",),
        )


def test_each_source_has_its_own_targets_and_families(corpus: dict) -> None:
    a, b = corpus["sources"]["a"], corpus["sources"]["b"]
    # source a: one family, 9 proxies, 2 targets
    assert a["families"] == {"": 9} and sorted(a["targets"]) == ["a_t0", "a_t1"]
    # source b: adam and sgd are families with 9 proxies each; lion has none, so its target
    # is left out with a note, never predicted from another optimizer's proxies
    assert b["families"] == {"adam": 9, "lion": 0, "sgd": 9}
    assert len(b["targets"]) == 6 and "lion_t0" not in b["targets"]
    assert any("'lion'" in n and "without a proxy" in n for n in b["notes"])
    rows = {r["run_id"]: r["family"] for r in b["per_target"]}
    assert rows["sgd_t0"] == "sgd" and rows["adam_t2"] == "adam"


def test_collapse_predicts_the_known_curve_within_its_interval(corpus: dict) -> None:
    for name in ("a", "b"):
        s = corpus["sources"][name]["methods"]["collapse"]["0.2"]
        # the targets follow their family's curve exactly: errors are tiny and all covered
        assert s["max_abs_rel_err"] < 0.01 and s["coverage"] == 1.0 and s["declined"] == 0
    # the last value of a decaying curve is far above the final loss: the peer is worse
    lv = corpus["sources"]["a"]["methods"]["last_value"]["0.2"]
    assert lv["median_abs_rel_err"] > 0.05


def test_median_over_sources_is_the_median_of_the_per_source_summaries(corpus: dict) -> None:
    med = corpus["median_over_sources"]
    for method in ("collapse", "last_value"):
        for lab in ("0.2", "0.3"):
            per = [corpus["sources"][n]["methods"][method][lab] for n in ("a", "b")]
            # with two sources the median is the mean of the two
            assert med[method][lab]["n_sources"] == 2
            assert med[method][lab]["max_abs_rel_err"] == pytest.approx(
                np.mean([p["max_abs_rel_err"] for p in per]))
            assert med[method][lab]["coverage"] == pytest.approx(
                np.mean([p["coverage"] for p in per]))
    assert median_over_sources(corpus["sources"]) == med
    text = format_sources(corpus)
    assert "== a:" in text and "== b:" in text and "== median over 2 sources" in text


def test_per_target_records_carry_error_and_half_width(corpus: dict) -> None:
    row = corpus["sources"]["a"]["per_target"][0]
    p = row["predictions"]["collapse"]["0.2"]
    # the error is log(pred / true) and the half-width is positive
    assert abs(p["log_err"]) < 0.01 and p["half"] > 0
    # the targets have twice the largest proxy's parameters, TPP and tau inside the ranges
    assert row["extrapolation"] == pytest.approx(math.log(2))


def test_a_declined_prediction_is_counted_with_its_reason() -> None:
    # a target logged only at two points, the first at t^ 0: too few points at t^ 0.2
    sparse = make_run("sparse", 8e7, 2000, 1e-3, 20.0, TRUE, final=2.5, every=1000)
    frame = pd.concat([paper_family(TRUE, every=40), sparse], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate_predictors(frame, 5e7, (0.2,), forms=("default",), peers=("last_value",))
    s = res["methods"]["collapse"]["0.2"]
    assert s["n"] == 0 and s["declined"] == 1
    reason = res["per_target"][0]["predictions"]["collapse"]["0.2"]["declined"]
    assert reason and sum(res["declined"]["collapse"]["0.2"].values()) == 1


def test_max_targets_samples_with_a_seed() -> None:
    frame = _source_b()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = evaluate_predictors(frame, 5e7, (0.3,), peers=(), max_targets=2, seed=1)
        two = evaluate_predictors(frame, 5e7, (0.3,), peers=(), max_targets=2, seed=1)
    # the same seed draws the same targets, and the note says a sample was evaluated
    assert one["targets"] == two["targets"] and len(one["targets"]) == 2
    assert any("2 of 6 targets" in n for n in one["notes"])


def test_a_file_without_the_split_names_the_splits_it_has() -> None:
    frame = _source_a()
    frame["split"] = "val"
    with pytest.raises(ValueError, match="split 'train'.*val"):
        evaluate_predictors(frame, 5e7, (0.2,), peers=())


def test_pairwise_summary_orders_the_pairs_of_one_sweep() -> None:
    from hpo.predictors.evaluate import pairwise_summary

    def row(run: str, group: str, final: float, err: float) -> dict:
        return {"run_id": run, "family": "", "group": group, "true_final": final,
                "predictions": {"m": {"0.2": {"log_err": err, "half": 0.01,
                                              "pair_scale": 0.01, "pair_dof": None}}}}

    rows = [row("a", "g", 3.0, 0.0), row("b", "g", 3.1, 0.05), row("c", "g", 3.2, 0.0),
            row("d", "h", 2.0, 0.3)]  # d is a sweep of its own: no pair
    out = pairwise_summary(rows, ["m"], ["0.2"])["m"]["0.2"]
    # a-b: predicted log ratio off by 0.05, wrong side; a-c and b-c ordered right
    assert out["n_pairs"] == 3 and out["order_accuracy"] == pytest.approx(2 / 3)
    assert out["median_ratio_err"] == pytest.approx(0.05)
    # a normal of scale 0.01 at 80% holds |d| <= 0.0128: a-c only
    assert out["ratio_coverage"] == pytest.approx(1 / 3)
    # one sweep of three: predictions b > c > a against finals a < b < c
    assert out["n_sweeps"] == 1 and out["spearman"] == pytest.approx(0.5)


def test_pairwise_coverage_reads_a_side_without_a_pair_law_from_its_interval() -> None:
    from scipy import stats

    from hpo.predictors.evaluate import pairwise_summary

    def row(run: str, err: float, half: float, scale: float | None) -> dict:
        return {"run_id": run, "family": "", "group": "g", "true_final": 3.0,
                "predictions": {"m": {"0.2": {"log_err": err, "half": half,
                                              "pair_scale": scale, "pair_dof": None}}}}

    # b has no pair law: its side is its interval as a normal, sqrt(2) x 0.05 / z(0.9) wide,
    # wider than a's measured 0.01, so the pair's scale is b's (|d| = 0.05 is covered)
    b_side = math.sqrt(2) * 0.05 / stats.norm.ppf(0.9)
    assert 0.05 <= b_side * stats.norm.ppf(0.9)
    for scale in (0.0, None, float("nan")):
        rows = [row("a", 0.0, 0.001, 0.01), row("b", 0.05, 0.05, scale)]
        for pair in (rows, rows[::-1]):
            out = pairwise_summary(pair, ["m"], ["0.2"], level=0.8)["m"]["0.2"]
            assert out["ratio_coverage"] == 1.0


def test_evaluate_reports_the_pairwise_table(corpus: dict) -> None:
    res = corpus["sources"]["b"]
    pw = res["pairwise"]["collapse"]["0.2"]
    assert set(pw) == {"order_accuracy", "n_pairs", "spearman", "n_sweeps",
                       "median_ratio_err", "ratio_coverage"}
    assert "within-sweep pairs" in format_sources(corpus)


def test_shifted_summary_replays_each_sweep_as_the_pruner_shifts_it() -> None:
    from hpo.predictors.shift import study_shift

    # sweep a: every target predicted 10% high; sweep b: one target (nothing before it)
    row = [{"group": "a", "predictions": {"m": {"0.2": {"log_err": math.log(1.1),
                                                        "half": 0.05}}}}] * 4
    lone = {"group": "b", "predictions": {"m": {"0.2": {"log_err": 0.3, "half": 0.05}}}}
    out = shifted_summary([*row, lone], ["m"], ["0.2"])["m"]["0.2"]
    # the first target of each sweep is not counted; the others move by what came before
    assert out["n"] == 3
    moved = [math.log(1.1) - study_shift([math.log(1.1)] * i).shift for i in (1, 2, 3)]
    assert out["median_abs_rel_err"] == pytest.approx(math.expm1(moved[1]))
    assert out["signed_raw"] == pytest.approx(0.1)
    assert 0 < out["signed"] < 0.02 and out["coverage"] == 1.0  # raw: none inside (10% > 5%)
    # tau 0 moves nothing
    still = shifted_summary([*row, lone], ["m"], ["0.2"], tau=0.0)["m"]["0.2"]
    assert still["median_abs_rel_err"] == pytest.approx(0.1) and still["coverage"] == 0


def test_evaluate_reports_the_shifted_errors(corpus: dict) -> None:
    res = corpus["sources"]["b"]
    assert set(res["shifted"]) == set(res["methods"])
    assert "shifted" in format_table(res).splitlines()[0]


def test_a_peer_that_predicts_a_subset_is_compared_on_it() -> None:
    # the twin predicts only the target whose LR a proxy ran; the default, both targets
    targets = [make_run(f"t{i}", 8e7, 2000, lr, 20.0, TRUE, final=2.5 + 0.1 * i, every=40)
               for i, lr in enumerate((1e-3, 0.7e-3))]
    frame = pd.concat([paper_family(TRUE, every=40), *targets], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate_predictors(frame, 5e7, (0.3,), peers=("twin",))
    twin, default = res["methods"]["twin"]["0.3"], res["methods"]["collapse"]["0.3"]
    assert (twin["n"], twin["declined"], default["n"]) == (1, 1, 2)
    (row,) = [r for r in res["per_target"] if "log_err" in r["predictions"]["twin"]["0.3"]]
    assert twin["default_median_same_targets"] == pytest.approx(
        abs(math.expm1(row["predictions"]["collapse"]["0.3"]["log_err"])))
    assert default["default_median_same_targets"] == default["median_abs_rel_err"]
    assert "on the targets the row's method" in format_table(res)
