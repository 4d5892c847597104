"""The pair law (hpo.predictors.pairs): pair errors of one sweep's proxies, a Student-t fitted
to them, and the collapse predictor's side of it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from hpo.predictors.pairs import MIN_PAIRS, PairLaw, fit_pair_law, pair_errors


def _calibration(errors_by_group: dict[str, np.ndarray], fractions=(0.1, 0.2)) -> dict:
    runs = []
    for g, errs in errors_by_group.items():
        for k, row in enumerate(errs):
            runs.append({"run_id": f"{g}{k}", "group": g,
                         "errors": [None if x is None else float(x) for x in row]})
    return {"fractions": list(fractions), "runs": runs}


def test_pair_errors_pair_the_runs_of_one_sweep():
    cal = _calibration({"g": np.array([[0.10, 0.05], [0.12, -0.05], [0.08, None]]),
                        "h": np.array([[0.9, 0.9]])})
    d = pair_errors(cal, 0)
    # three pairs inside g; h's lone run pairs with nobody (its shared error cancels nothing)
    assert sorted(np.round(np.abs(d), 6)) == [0.02, 0.02, 0.04]
    assert pair_errors(cal, 1).size == 1  # c has no error at 0.2
    assert pair_errors(cal, 0, within_sweep=False).size == 6
    assert pair_errors(None, 0).size == 0


def test_fit_pair_law_recovers_a_heavy_tailed_law():
    rng = np.random.default_rng(0)
    # 40 sweeps of 6 proxies: a large shared error per sweep, a t_3 pair error of scale 0.01
    # (each run's own part 0.01 / sqrt(2) x t_3 ... read here through the pairs it makes)
    groups = {}
    for g in range(40):
        shared = rng.normal(0, 0.2)
        own = 0.01 / math.sqrt(2) * stats.t.rvs(3, size=(6, 2), random_state=rng)
        groups[f"g{g}"] = shared + own
    law = fit_pair_law(_calibration(groups))
    assert law is not None and law.within_sweep
    # the shared error cancels: the scale is the pairs', not the sweeps' 0.2
    assert 0.004 < law.scale(0.15) < 0.02
    assert 1.5 < law.dof < 10
    # the tail it states holds the pairs it was fitted on
    d = np.abs(pair_errors(_calibration(groups), 0))
    assert np.mean(d > law.scale(0.1) * stats.t.isf(0.01, law.dof)) < 0.04


def test_fit_pair_law_falls_back_to_every_pair_and_bounds_the_dof():
    # proxies that ran no sweep: every pair is used (their errors share less: cautious)
    lone = _calibration({f"g{k}": np.array([[0.01 * k, 0.01 * k]]) for k in range(MIN_PAIRS)})
    law = fit_pair_law(lone)
    assert law is not None and not law.within_sweep
    # three proxies give two independent pair errors: the law has at most 2 dof
    assert law.dof <= 2
    assert fit_pair_law({"fractions": [0.1], "runs": []}) is None
    assert fit_pair_law(None) is None


def test_pair_law_interpolates_and_round_trips():
    law = PairLaw((0.1, 0.3), (0.02, 0.01), 4.0, 10)
    assert law.scale(0.2) == pytest.approx(0.015)
    assert law.scale(0.05) == 0.02 and law.scale(0.9) == 0.01
    assert law.sf(0.0) == pytest.approx(0.5)
    d = law.to_dict()
    assert PairLaw(tuple(d["fractions"]), tuple(d["scales"]), d["dof"], d["n_pairs"],
                   d["within_sweep"]) == law


def test_collapse_predictions_carry_their_side_of_the_pair_law():
    from hpo.predictors import CollapsePredictor, fit_universal_curve, runs_from_frame
    from tests.predictors._synth import paper_family

    frame = paper_family(noise=0.002)
    curve = fit_universal_curve(frame, form="paper")
    pred = CollapsePredictor(curve)
    law = pred.pair_law
    assert law is not None and law.n_pairs > 0
    run = runs_from_frame(frame)[4]
    keep = run.t_hat <= 0.2
    p = pred.predict(run.steps[keep], run.losses[keep], run.controls)
    # inside the proxies' ranges: the law's own scale at the prefix's t^, and its dof
    assert p.widening == 1.0
    assert p.pair_scale == pytest.approx(law.scale(p.t_hat))
    assert p.pair_dof == law.dof


def test_a_new_schedule_and_extrapolation_widen_the_pair_scale():
    from hpo.predictors import CollapsePredictor, fit_universal_curve
    from hpo.predictors.predict import PAIR_WIDENING, halfwidth_from_errors
    from tests.predictors._synth import paper_family

    curve = fit_universal_curve(paper_family(noise=0.002), form="paper")
    pred = CollapsePredictor(curve)
    law = pred.pair_law
    cal = curve.calibration
    base, dof = pred._pair_side(0.2, 0.0, cal)
    assert base == pytest.approx(law.scale(0.2)) and dof == law.dof
    # a run log(2) beyond the proxies: the scale grows by 1 + PAIR_WIDENING log 2
    far, _ = pred._pair_side(0.2, math.log(2), cal)
    assert far == pytest.approx(base * (1 + PAIR_WIDENING * math.log(2)))
    # a run whose schedule no proxy ran is read on the new-schedule calibration: its pair scale
    # grows as its interval does
    wide = {"fractions": cal["fractions"],
            "errors": [[None if e is None else 3 * e for e in errs] for errs in cal["errors"]]}
    ratio = halfwidth_from_errors(wide, 0.2, 0.8) / halfwidth_from_errors(cal, 0.2, 0.8)
    assert ratio == pytest.approx(3.0)
    assert pred._pair_side(0.2, 0.0, wide)[0] == pytest.approx(3 * base)
