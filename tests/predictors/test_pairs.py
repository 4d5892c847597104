"""The pair law (hpo.predictors.pairs): pair errors of one sweep's proxies, a Student-t fitted
to them, the collapse predictor's side of it, and the law of one pair's error."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from hpo.predictors.pairs import (
    MIN_PAIRS,
    PairErrorLaw,
    ProxyPairScale,
    fit_proxy_pair_scale,
    normal_scale,
    pair_errors,
    pair_scale_from_interval,
)


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


def test_fit_proxy_pair_scale_measures_the_pairs_median_error_not_the_sweeps():
    rng = np.random.default_rng(0)
    # 40 sweeps of 6 proxies: a large shared error per sweep, a t_3 pair error of scale 0.01
    groups = {}
    for g in range(40):
        shared = rng.normal(0, 0.2)
        own = 0.01 / math.sqrt(2) * stats.t.rvs(3, size=(6, 2), random_state=rng)
        groups[f"g{g}"] = shared + own
    cal = _calibration(groups)
    law = fit_proxy_pair_scale(cal)
    assert law is not None and law.within_sweep
    # the shared error cancels: the scale is the pairs' median |d|, not the sweeps' 0.2
    assert law.scale(0.1) == pytest.approx(float(np.median(np.abs(pair_errors(cal, 0)))))
    assert 0.004 < law.scale(0.15) < 0.02
    assert law.n_pairs == 2 * 40 * 15


def test_fit_proxy_pair_scale_falls_back_to_every_pair():
    # proxies that ran no sweep: every pair is used (their errors share less: cautious)
    lone = _calibration({f"g{k}": np.array([[0.01 * k, 0.01 * k]]) for k in range(MIN_PAIRS)})
    law = fit_proxy_pair_scale(lone)
    assert law is not None and not law.within_sweep
    assert fit_proxy_pair_scale({"fractions": [0.1], "runs": []}) is None
    assert fit_proxy_pair_scale(None) is None


def test_proxy_pair_scale_interpolates_and_round_trips():
    law = ProxyPairScale((0.1, 0.3), (0.02, 0.01), 10)
    assert law.scale(0.2) == pytest.approx(0.015)
    assert law.scale(0.05) == 0.02 and law.scale(0.9) == 0.01
    d = law.to_dict()
    assert ProxyPairScale(tuple(d["fractions"]), tuple(d["scales"]), d["n_pairs"],
                   d["within_sweep"]) == law


def test_pair_error_law_sf_is_scipys_student_t_survival_function() -> None:
    xs = [*np.random.default_rng(0).normal(0.0, 5.0, 2000), 0.0, 40.0, -40.0,
          math.inf, -math.inf]
    for dof in (1.0, 2.5, 7.3, 30.0, 1e6, math.inf):
        law = PairErrorLaw(1.0, dof)
        # the same numbers to the last bit, so that no verdict at the threshold moves
        assert [law.sf(x) for x in xs] == [float(stats.t.sf(x, dof)) for x in xs]
        assert [law.cdf(x) for x in xs] == [float(stats.t.cdf(x, dof)) for x in xs]
    # a scale divides x; the half-width at a level is the scaled t quantile
    law = PairErrorLaw(0.02, 4.0)
    assert law.sf(0.03) == pytest.approx(stats.t.sf(1.5, 4.0))
    assert law.halfwidth(0.8) == pytest.approx(0.02 * stats.t.ppf(0.9, 4.0))
    # no positive scale: all of d at 0
    for zero in (PairErrorLaw(0.0), PairErrorLaw(math.nan)):
        assert (zero.sf(-1e-9), zero.sf(0.0), zero.cdf(0.0), zero.cdf(-1e-9)) == (1, 0, 1, 0)


def test_pair_error_law_of_two_sides_is_the_wider_scale_with_the_smaller_dof() -> None:
    narrow, wide = PairErrorLaw(0.01, 4.0), PairErrorLaw(0.03, 9.0)
    assert narrow.combine(wide) == wide.combine(narrow) == PairErrorLaw(0.03, 4.0)
    assert narrow.combine(PairErrorLaw(0.02)) == PairErrorLaw(0.02, 4.0)
    # a study's rescaling: the scale times its factor, the same tail
    assert narrow.rescaled(2.0) == PairErrorLaw(0.02, 4.0)
    assert PairErrorLaw(0.01).rescaled(2.0).dof == math.inf


@pytest.mark.parametrize("level", [0.5, 0.8, 0.9, 0.95])
def test_without_a_pair_law_a_side_is_its_interval_read_as_a_normal(level: float) -> None:
    z = stats.norm.ppf(0.5 + level / 2)
    # one prediction's normal scale, and a pair of two independent ones: sqrt(2) x as wide
    assert normal_scale(0.04, level) == 0.04 / z
    law = PairErrorLaw.from_interval(0.04, level)
    assert law == PairErrorLaw(math.sqrt(2.0) * 0.04 / z, math.inf)
    assert pair_scale_from_interval(0.04, level) == law.scale
    # a side with a measured scale keeps it; none (0, NaN, infinite) falls back to the interval
    assert PairErrorLaw.side(0.01, 5.0, 0.04, level) == PairErrorLaw(0.01, 5.0)
    for none in (0.0, math.nan, math.inf):
        assert PairErrorLaw.side(none, 5.0, 0.04, level) == law
