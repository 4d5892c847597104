"""evaluate_predictors on synthetic curves: the default method split by whether a target's
controls lie inside the proxies' ranges."""

from __future__ import annotations

import warnings

import pandas as pd

from predictors import evaluate_predictors
from predictors.evaluate import format_table
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


def test_targets_outside_the_proxies_tau_range_are_reported_apart() -> None:
    # proxies: tau 2.5-10 (T 2000, LR 0.5e-3..2e-3); "inside" has tau 5, "far" tau 50
    inside = make_run("inside", 8e7, 2000, 1e-3, 20.0, TRUE, final=2.5, every=40)
    far = make_run("far", 8e7, 2000, 1e-4, 20.0, TRUE, final=2.6, every=40)
    frame = pd.concat([paper_family(TRUE, every=40), inside, far], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate_predictors(frame, 5e7, (0.2, 0.3), forms=("default",),
                                  peers=("last_value",))
    outside = {r["run_id"]: r["outside_ranges"] for r in res["per_target"]}
    assert outside == {"inside": [], "far": ["tau"]}
    split = res["by_range"]
    assert split["method"] == "collapse" and split["controls"] == ["tau", "tpp"]
    for lab in ("0.2", "0.3"):
        assert split["inside"][lab]["n"] == 1 and split["outside"][lab]["n"] == 1
        total = res["methods"]["collapse"][lab]
        assert total["n"] == 2
        assert total["max_abs_rel_err"] == max(split["inside"][lab]["max_abs_rel_err"],
                                               split["outside"][lab]["max_abs_rel_err"])
    table = format_table(res)
    assert "collapse[in range]" in table and "collapse[outside]" in table
