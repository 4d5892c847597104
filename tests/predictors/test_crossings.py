"""The crossing law: gaps at the same step, whether they closed, the prior and a study's update."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpo.predictors.crossings import (
    CrossingPrior,
    crossing_pairs,
    default_crossing_prior,
    fit_crossing_law,
    fit_crossing_prior,
    level_at,
    load_crossing_prior,
)


def test_crossing_pairs_orients_each_pair_by_the_trial_behind() -> None:
    # trial 0 is behind trial 1 at t^ and ends below it; trial 2 is far behind and stays so
    gaps, closed = crossing_pairs([2.0, 1.8, 3.0], [1.0, 1.1, 2.0], tolerance=0.0)
    assert gaps == pytest.approx([math.log(2.0 / 1.8), math.log(3.0 / 2.0), math.log(3.0 / 1.8)])
    assert closed.tolist() == [True, False, False]


def test_crossing_pairs_tolerance_makes_a_near_tie_not_a_close() -> None:
    # the trial behind ends 0.1% below: a close at tolerance 0, not at 0.2%
    assert crossing_pairs([2.0, 1.9], [0.999, 1.0], 0.0)[1].tolist() == [True]
    assert crossing_pairs([2.0, 1.9], [0.999, 1.0], 0.002)[1].tolist() == [False]


def test_level_at_reads_the_prefix_only() -> None:
    t = np.linspace(0.01, 1.0, 100)
    y = 3.0 - t  # a line: its level at 0.3 is 2.7, whatever comes after
    assert level_at(t, y, 0.3) == pytest.approx(2.7, abs=0.011)
    assert level_at(t, y, 0.015) is None  # fewer than 3 points


def _prior() -> CrossingPrior:
    return CrossingPrior((0.1, 0.2), (-2.0, -2.0), (-0.5, -0.5), (1.0, 1.0), (1.0, 1.0))


def test_a_study_whose_gaps_never_close_becomes_confident_at_large_gaps() -> None:
    prior = _prior()
    rng = np.random.default_rng(0)
    gaps = rng.uniform(0.3, 2.0, 400)
    law = fit_crossing_law(prior, 0.2, gaps, np.zeros(400, dtype=bool), n_eff=400)
    # with the study's evidence, a large gap is less likely to close than the prior says
    assert law.probability(1.5) < prior.law(0.2).probability(1.5)
    assert law.probability(1.5) < 0.02
    # and a law fitted on little evidence stays near the prior (the probit widening)
    few = fit_crossing_law(prior, 0.2, gaps[:3], np.zeros(3, dtype=bool), n_eff=2)
    assert few.probability(1.5) > law.probability(1.5)


def test_a_study_whose_gaps_close_keeps_its_chances_high() -> None:
    prior = _prior()
    gaps = np.linspace(0.05, 1.0, 200)
    closed = np.arange(200) % 2 == 0  # half of every gap size closed
    law = fit_crossing_law(prior, 0.1, gaps, closed, n_eff=50)
    assert 0.3 < law.probability(0.5) < 0.7


def test_without_pairs_the_law_is_the_priors() -> None:
    prior = _prior()
    assert fit_crossing_law(prior, 0.2, np.array([]), np.array([]), 0) == prior.law(0.2)


def test_the_prior_round_trips_and_rejects_a_malformed_file() -> None:
    prior = _prior()
    assert load_crossing_prior(prior.to_dict()) == prior
    with pytest.raises(ValueError, match="crossing prior"):
        load_crossing_prior({"fractions": [0.1], "a": [1.0]})
    with pytest.raises(ValueError, match="one a, b"):
        load_crossing_prior({**prior.to_dict(), "a": [1.0]})


def test_fit_crossing_prior_weighs_sources_and_measures_their_spread() -> None:
    rng = np.random.default_rng(1)
    pairs = {}
    for name, rate in (("rare", 0.05), ("often", 0.3)):
        g = rng.uniform(0.01, 0.5, 300)
        pairs[name] = {0.2: (g, rng.uniform(size=300) < rate)}
    prior = fit_crossing_prior(pairs, min_sd=0.1)
    p = prior.law(0.2).probability(0.1)
    # the pooled law sits between the sources, and their difference shows in its spread
    assert 0.05 < p < 0.3
    assert prior.sd_a[0] > 0.1


def test_the_shipped_prior_loads_and_says_what_it_was_fitted_on() -> None:
    prior = default_crossing_prior()
    assert prior.fractions == (0.1, 0.2, 0.3, 0.4, 0.5)
    assert "nanochat" in prior.meta["fitted_on"]
    # a larger gap closes less often, at every fraction
    for f in prior.fractions:
        assert prior.law(f).probability(0.5) < prior.law(f).probability(0.01)
