"""``hpo bench`` on a hand-made sweep with known answers: compute fractions, regrets, best
stopped; real Optuna studies (and one real Ray Tune run, marked slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from hpo import bench
from hpo.bench import BenchGroup, BenchTrial, TrialOutcome
from hpo.cli import main

T = 100
STEPS = np.arange(10, T + 1, 10, dtype=float)  # 10 reports: t^ = 0.1 .. 1.0
# trial -> (loss at each report, final loss). "b" is the true best (1.9) but the worst early
# (the curves cross, as a higher LR's do); "a" leads early; "c" is worse than "a" throughout.
CURVES = {
    "a": (np.linspace(3.0, 2.0, STEPS.size), 2.0),
    "b": (np.linspace(3.4, 1.9, STEPS.size), 1.9),
    "c": (np.linspace(3.2, 2.1, STEPS.size), 2.1),
}


def _group() -> BenchGroup:
    from hpo.predictors import Controls

    trials = []
    for name, (values, final) in CURVES.items():
        controls = Controls(total_steps=T, tpp=20.0, tau=0.2, schedule="linear",
                            warmup_steps=0)
        trials.append(BenchTrial(name, STEPS.copy(), values.copy(), final, T, controls))
    return BenchGroup("sweep", tuple(trials))


def test_group_metrics_compute_regret_best_stopped() -> None:
    g = _group()
    assert g.best == 1
    # a stopped at step 20, b finished, c stopped at 30: (20 + 100 + 30) / 300
    m = bench.group_metrics(g, [TrialOutcome(True, 20), TrialOutcome(False, 100),
                                 TrialOutcome(True, 30)])
    assert m.compute == pytest.approx(0.5)
    assert m.regret == 0.0 and not m.best_stopped and m.chosen == 1
    # the best stopped at step 10: the chosen one is a (2.0 against 1.9)
    m = bench.group_metrics(g, [TrialOutcome(False, 100), TrialOutcome(True, 10),
                                 TrialOutcome(False, 100)])
    assert m.compute == pytest.approx(210 / 300)
    assert m.regret == pytest.approx(0.1 / 1.9)
    assert m.best_stopped and m.chosen == 0 and m.n_stopped == 1
    # every trial stopped: the best last reported value is chosen (c here)
    m = bench.group_metrics(g, [TrialOutcome(True, 10, 3.0), TrialOutcome(True, 10, 3.4),
                                 TrialOutcome(True, 10, 2.9)])
    assert m.chosen == 2 and m.regret == pytest.approx(0.2 / 1.9)
    assert m.compute == pytest.approx(0.1)
    # summary over groups: means and maxima
    s = bench.aggregate([
        bench.GroupMetrics("x", 0.5, 0.0, False, 1, 2, 3),
        bench.GroupMetrics("y", 0.7, 0.02, True, 0, 1, 3),
    ])
    assert s == {"mean_regret": pytest.approx(0.01), "max_regret": 0.02,
                 "mean_compute": pytest.approx(0.6), "best_stopped": 1, "groups": 2}
    # the budget of stopping every loser at t^ = 0.2: (1 + 0.2 * 2) / 3
    assert bench.budget(g) == pytest.approx(1.4 / 3)


def test_compare_to_goal_and_to_each_peer() -> None:
    def row(compute: float, mean: float, mx: float) -> dict:
        return {"mean_compute": compute, "mean_regret": mean, "max_regret": mx,
                "best_stopped": 0, "groups": 2}

    methods = {
        "oracle@0.2": row(0.4, 0.0, 0.0),
        "current_best@0.2": row(0.3, 0.01, 0.02),
        "collapse": row(0.6, 0.0, 0.0),
        "collapse@threshold 0.2": row(0.45, 0.0004, 0.0008),
        "collapse@threshold 0.5": row(0.2, 0.004, 0.008),
        "MedianPruner": row(0.5, 0.0, 0.0),
        "ASHAScheduler": row(0.35, 0.001, 0.003),
        "NopPruner": row(1.0, 0.0, 0.0),
        "empty": {**row(0.1, 0.0, 0.0), "groups": 0},
    }
    c = bench.compare_to_goal(methods)
    goal = c["goal"]
    # the budget is 1.2 x this mode's oracle; the threshold-0.2 row is within it, the default
    # is not, and MedianPruner spends less at the same mean regret
    assert goal["budget"] == pytest.approx(0.48) and goal["oracle"] == pytest.approx(0.4)
    assert goal["met_by"] == ["collapse@threshold 0.2"]
    assert goal["beaten_by"] == ["MedianPruner"] and not goal["met"]
    cheap = {**methods, "collapse": row(0.47, 0.0, 0.001), "MedianPruner": row(0.5, 0.0, 0.0)}
    assert bench.compare_to_goal(cheap)["goal"]["met"]
    peers = c["peers"]
    assert "oracle@0.2" not in peers and "empty" not in peers and "collapse" not in peers
    # the cheapest of our rows with no more regret (mean and max) at no more compute
    assert peers["current_best@0.2"]["matched_by"] == "collapse@threshold 0.5"
    assert peers["NopPruner"]["matched_by"] == "collapse"
    assert peers["NopPruner"]["matched_compute"] == pytest.approx(0.6)
    assert peers["MedianPruner"]["matched_by"] is None
    assert peers["ASHAScheduler"]["matched_by"] is None
    text = bench.format_table({"modes": {"lockstep": {"methods": methods, "comparison": c}}})
    assert "oracle@0.2 (every loser stopped at t^ 0.2) spends 0.400" in text
    assert ("goal (compute <= 1.2 x oracle@0.2 = 0.480 at max regret <= 0.2%, every peer "
            "spending no more has higher mean regret): not met; default spends 0.600 (1.50 x "
            "oracle); peers spending no more at no higher mean regret: MedianPruner") in text
    assert "ASHAScheduler (0.350" in text and "MedianPruner (0.500" in text
    assert text.index("ASHAScheduler (0.350") < text.index("MedianPruner (0.500")


@pytest.mark.parametrize("mode", bench.MODES)
def test_current_best_stops_the_crossing_winner(mode: str) -> None:
    g = _group()
    out = bench.replay_current_best(g, 0.2, mode)
    m = bench.group_metrics(g, out)
    # at t^ = 0.2 a leads, so b (the true best) is stopped at step 20
    assert out[1].stopped and out[1].steps_trained == 20
    assert m.best_stopped and m.chosen == 0
    assert m.regret == pytest.approx(0.1 / 1.9)
    # lockstep: all but a stopped at step 20; sequential: a runs first and finishes, then b
    # and c are both worse at t^ = 0.2 than a was
    assert m.compute == pytest.approx((100 + 20 + 20) / 300)


def test_oracle_reference() -> None:
    g = _group()  # finals a 2.0, b 1.9, c 2.1 in launch order a, b, c
    lock = bench.group_metrics(g, bench.replay_oracle(g, 0.2, "lockstep"))
    # lockstep: every loser stopped at t^ = 0.2, which is the budget
    assert lock.compute == pytest.approx(bench.budget(g)) and lock.regret == 0.0
    seq = bench.replay_oracle(g, 0.2, "sequential")
    # sequential: a is the best so far and must finish, b beats it and finishes, c (worse
    # than both) stops at step 20
    assert [o.stopped for o in seq] == [False, False, True] and seq[2].steps_trained == 20
    m = bench.group_metrics(g, seq)
    assert m.compute == pytest.approx(220 / 300) and m.regret == 0.0


def test_sequential_floor_counts_the_trials_that_must_finish() -> None:
    g = _group()  # finals a 2.0, b 1.9, c 2.1 in launch order a, b, c
    # a (first) and b (5% better than a) must finish; c is worse than a
    assert bench.sequential_floor(g) == pytest.approx(200 / 300)
    # b is within a 6% slack of a: stopping it loses at most that much, so only a must finish
    assert bench.sequential_floor(g, slack=0.06) == pytest.approx(100 / 300)
    # in the order b, a, c only b is better than everything before it
    reordered = BenchGroup("sweep", (g.trials[1], g.trials[0], g.trials[2]))
    assert bench.sequential_floor(reordered) == pytest.approx(100 / 300)
    # trials of unequal length count their own steps: a long best trial weighs more
    long_b = BenchTrial("b", STEPS * 3, g.trials[1].values, 1.9, 3 * T, g.trials[1].controls)
    mixed = BenchGroup("sweep", (g.trials[0], long_b, g.trials[2]))
    assert bench.sequential_floor(mixed) == pytest.approx((100 + 300) / 500)
    # never above what oracle@0.2 spends in the same order, which keeps the same trials
    oracle = bench.group_metrics(g, bench.replay_oracle(g, 0.2, "sequential")).compute
    assert bench.sequential_floor(g) <= oracle
    with pytest.raises(ValueError, match="slack"):
        bench.sequential_floor(g, slack=-0.1)


def test_goal_line_says_when_the_floor_is_above_the_budget() -> None:
    row = {"mean_compute": 0.5, "mean_regret": 0.0, "max_regret": 0.0, "best_stopped": 0,
           "groups": 2}
    oracle = {**row, "mean_compute": 0.3}  # budget 1.2 x 0.3 = 0.36
    methods = {"oracle@0.2": oracle, "collapse": row}
    c = bench.compare_to_goal(methods, floor=0.45)
    assert c["goal"]["floor"] == 0.45 and c["goal"]["attainable"] is False
    text = bench.format_table({"modes": {"sequential": {"methods": methods,
                                                         "comparison": c}}})
    assert "sequential floor 0.450" in text and "no method can meet the goal" in text
    ok = bench.compare_to_goal({**methods, "oracle@0.2": {**row, "mean_compute": 0.4}},
                                floor=0.45)["goal"]
    assert ok["attainable"] is True
    assert bench.compare_to_goal(methods)["goal"]["attainable"] is None


class _PruneTrialAt(optuna.pruners.BasePruner):
    """Prunes the bench trial ``index`` once it reported ``step``."""

    def __init__(self, index: int, step: int) -> None:
        self.index, self.step = index, step

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return (trial.user_attrs.get("bench_trial") == self.index
                and (trial.last_step or 0) >= self.step)


@pytest.mark.parametrize("mode", bench.MODES)
def test_replay_optuna_accounting(mode: str) -> None:
    g = _group()
    # a pruner that stops c at step 30: compute (100 + 100 + 30) / 300, best kept
    out = bench.replay_optuna(g, lambda _: _PruneTrialAt(2, 30), mode)
    m = bench.group_metrics(g, out)
    assert [o.stopped for o in out] == [False, False, True]
    assert m.compute == pytest.approx(230 / 300) and m.regret == 0.0 and not m.best_stopped
    # stopping the best at step 50 costs its half and the regret of a
    m = bench.group_metrics(g, bench.replay_optuna(g, lambda _: _PruneTrialAt(1, 50), mode))
    assert m.compute == pytest.approx(250 / 300)
    assert m.best_stopped and m.regret == pytest.approx(0.1 / 1.9)
    # the full sweep
    m = bench.group_metrics(g, bench.replay_optuna(g, lambda _: optuna.pruners.NopPruner(),
                                                     mode))
    assert m.compute == 1.0 and m.regret == 0.0


def test_replays_see_one_study_name_per_group() -> None:
    # HyperbandPruner picks each trial's bracket from a hash of the study name: a replay
    # names its study after the group, so every replay of a group is the same
    g = _group()
    names: list[str] = []

    class Spy(optuna.pruners.BasePruner):
        def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
            names.append(study.study_name)
            return False

    for mode in bench.MODES * 2:
        bench.replay_optuna(g, lambda _: Spy(), mode)
    assert set(names) == {"bench-sweep"}


def test_lockstep_reports_in_lockstep() -> None:
    g = _group()
    seen: list[tuple[int, int]] = []

    class Spy(optuna.pruners.BasePruner):
        def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
            seen.append((int(trial.last_step), int(trial.user_attrs["bench_trial"])))
            return False

    bench.replay_optuna(g, lambda _: Spy(), "lockstep")
    # every trial reports step k before any reports step k + 1
    assert seen == sorted(seen)
    seen.clear()
    bench.replay_optuna(g, lambda _: Spy(), "sequential")
    # one trial after another
    assert [i for _, i in seen] == sorted(i for _, i in seen)


def _write_curves(path: Path) -> None:
    rows = []
    for name, (values, _) in CURVES.items():
        for s, v in zip(STEPS, values, strict=True):
            rows.append({"run_id": name, "group": "sweep", "n_params": 1e6, "tokens": 2e7,
                         "total_steps": T, "peak_lr": 0.01, "weight_decay": 5.0,
                         "schedule": "linear", "warmup_steps": 0, "step": int(s),
                         "loss": float(v), "split": "train"})
    pd.DataFrame(rows).to_csv(path, index=False)


def test_cli_bench_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    curves = tmp_path / "sweep.csv"
    _write_curves(curves)
    out = tmp_path / "bench.json"
    rc = main(["bench", str(curves), "--no-ray", "--no-knobs", "--quiet",
               "--json", str(out), "--plot", str(tmp_path / "bench.png")])
    assert rc == 0
    data = json.loads(out.read_text())
    keys = {"mean_regret", "max_regret", "mean_compute", "best_stopped", "groups"}
    for mode in ("lockstep", "sequential"):
        methods = data["modes"][mode]["methods"]
        for name in ("collapse", "MedianPruner", "PercentilePruner(25)",
                     "SuccessiveHalvingPruner", "HyperbandPruner",
                     "PatientPruner(MedianPruner)", "NopPruner", "current_best@0.1",
                     "current_best@0.2", "current_best@0.3"):
            assert keys <= set(methods[name]), (mode, name)
            assert methods[name]["groups"] == 1
        # the full sweep: all compute, no regret; current best at 0.2 loses b as above
        assert methods["NopPruner"]["mean_compute"] == 1.0
        assert methods["NopPruner"]["mean_regret"] == 0.0
        assert methods["current_best@0.2"]["max_regret"] == pytest.approx(0.1 / 1.9)
        assert methods["current_best@0.2"]["best_stopped"] == 1
        # without a universal curve (self-calibrating) there is no predicted_best row
        assert not any(name.startswith("predicted_best") for name in methods)
    # the floor of the sequential mode: a then b must finish, c need not
    assert data["modes"]["sequential"]["floor"] == pytest.approx(200 / 300)
    goal = data["modes"]["sequential"]["comparison"]["goal"]
    oracle = data["modes"]["sequential"]["methods"]["oracle@0.2"]["mean_compute"]
    assert goal["budget"] == pytest.approx(1.2 * oracle) and goal["attainable"] is True
    assert "floor" not in data["modes"]["lockstep"]
    assert (tmp_path / "bench.png").stat().st_size > 0
    assert "collapse" in capsys.readouterr().out


def test_cli_bench_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    curves = tmp_path / "sweep.csv"
    _write_curves(curves)
    assert main(["bench", str(tmp_path / "nope.csv")]) == 2
    assert "CURVES: file not found" in capsys.readouterr().err
    assert main(["bench", str(curves), "--group-col", "sweep_id"]) == 2
    assert "--group-col" in capsys.readouterr().err
    assert main(["bench", str(curves), "--modes", "parallel"]) == 2
    assert "--modes" in capsys.readouterr().err
    # checked before anything runs, not as a traceback after the peers' rows, by the pruner's
    # own rule (PrunerSettings), in one line that names the flag and the value
    rule = "must be a non-empty sequence of strictly increasing fractions in (0, 1)"
    assert main(["bench", str(curves), "--checkpoints", "0.3,0.2"]) == 2
    err = capsys.readouterr().err
    assert f"--checkpoints: {rule}, got [0.3, 0.2]" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["bench", str(curves), "--checkpoints", "0.2,0.20"]) == 2
    assert f"--checkpoints: {rule}, got [0.2, 0.2]" in capsys.readouterr().err
    bad = tmp_path / "prior.json"
    bad.write_text('{"coef": {}}')
    assert main(["bench", str(curves), "--prior", str(bad)]) == 2
    assert "--prior: pair prior: missing field 'intercept'" in capsys.readouterr().err
    assert main(["bench", str(curves), "--prior", str(tmp_path / "no.json")]) == 2
    assert "--prior:" in capsys.readouterr().err



def test_cli_bench_names_the_split_a_file_lacks(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    curves = tmp_path / "val_only.csv"
    _write_curves(curves)
    pd.read_csv(curves).assign(split="val").to_csv(curves, index=False)
    assert main(["bench", str(curves), "--no-ray", "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    # one line naming the split asked for (the default train), the file's splits and the fix
    assert len(err) == 1 and err[0].startswith("hpo bench: error: --split: ")
    assert "no rows of split 'train' (the curves have: val); use --split val" in err[0]

def test_resample_groups_draws_distinct_sub_sweeps() -> None:
    base = _group()
    five = BenchGroup("five", base.trials + tuple(
        BenchTrial(f"{t.run_id}2", t.steps, t.values + 0.5, t.final + 0.5, T, t.controls)
        for t in base.trials[:2]))
    drawn = bench.resample_groups([five, base], per_group=8, seed=3)
    subs = [g for g in drawn if g.name.startswith("five~")]
    assert len(subs) == 8 and [g.name for g in subs] == [f"five~{j}" for j in range(1, 9)]
    picks = [tuple(t.run_id for t in g.trials) for g in subs]
    assert len(set(picks)) == 8  # distinct (subset, order) draws
    for g in subs:
        ids = [t.run_id for t in g.trials]
        assert 3 <= len(ids) <= 5 and len(set(ids)) == len(ids)
        # the best of a sub-sweep is its own best trial
        assert g.trials[g.best].final == min(t.final for t in g.trials)
    # a group of 3 has only 3! = 6 distinct draws; asking for more returns those
    small = [g for g in drawn if g.name.startswith("sweep~")]
    assert len(small) == 6
    assert {tuple(t.run_id for t in g.trials) for g in small} == {
        ("a", "b", "c"), ("a", "c", "b"), ("b", "a", "c"), ("b", "c", "a"),
        ("c", "a", "b"), ("c", "b", "a")}
    again = bench.resample_groups([five, base], per_group=8, seed=3)
    assert [[t.run_id for t in g.trials] for g in again] == [
        [t.run_id for t in g.trials] for g in drawn]
    # a group smaller than min_size is drawn whole, in random orders
    whole = bench.resample_groups([base], per_group=2, min_size=4)
    assert [sorted(t.run_id for t in g.trials) for g in whole] == [["a", "b", "c"]] * 2
    with pytest.raises(ValueError, match="per_group"):
        bench.resample_groups([base], per_group=0)


def test_cli_bench_resample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    curves = tmp_path / "sweep.csv"
    _write_curves(curves)
    out = tmp_path / "bench.json"
    rc = main(["bench", str(curves), "--no-ray", "--no-knobs", "--quiet",
               "--modes", "sequential", "--resample", "4", "--seed", "1", "--json", str(out)])
    assert rc == 0
    assert "4 groups (4 random sub-sweeps of each of 1 recorded groups, seed 1)" in (
        capsys.readouterr().out)
    data = json.loads(out.read_text())
    assert data["setup"]["resample"] == {"per_group": 4, "seed": 1, "recorded_groups": 1}
    nop = data["modes"]["sequential"]["methods"]["NopPruner"]
    assert nop["groups"] == 4 and nop["mean_compute"] == 1.0
    assert main(["bench", str(curves), "--resample", "-1"]) == 2
    assert "--resample: must be >= 0, got -1" in capsys.readouterr().err
    assert main(["bench", str(curves), "--resample", "2", "--seed", "-3"]) == 2
    assert "--seed: must be >= 0, got -3" in capsys.readouterr().err


@pytest.mark.slow
def test_replay_ray_sequential_asha(ray_session, tmp_path: Path) -> None:
    from ray.tune.schedulers import ASHAScheduler

    g = _group()
    # ASHA with a rung at t^ = 0.1 (reduction 3): in sequential mode a runs first; b reaches
    # the rung worse than a and is stopped there (step 10); c likewise
    sched = ASHAScheduler(time_attr="t1000", max_t=1000, grace_period=100, reduction_factor=3)
    out = bench.replay_ray(g, sched, "sequential", str(tmp_path))
    m = bench.group_metrics(g, out)
    assert [o.stopped for o in out] == [False, True, True]
    assert m.compute == pytest.approx((100 + 10 + 10) / 300)
    assert m.best_stopped and m.regret == pytest.approx(0.1 / 1.9)


def test_groups_carry_their_optimizer_family_and_sample_with_a_seed() -> None:
    from hpo.predictors import Controls

    rows = []
    for opt in ("adamw", "muon"):
        for size, tag in ((1e6, "p"), (9e6, "t")):
            for g in range(3):
                for lr in (1, 2, 3):
                    rid = f"{opt}-{tag}{g}-{lr}"
                    c = Controls(total_steps=T, tau=0.1 * lr, schedule="linear")
                    for step in STEPS:
                        rows.append({"run_id": rid, "group": f"{opt}-{tag}{g}", "step": step,
                                     "loss": 3.0 + 0.1 * lr + 1.0 * (1 - step / T),
                                     "split": "train", "n_params": size, "total_steps": T,
                                     "tpp": 20.0, "tau": c.tau, "schedule": "linear",
                                     "peak_lr": 1e-3 * lr, "optimizer": opt})
    frame = pd.DataFrame(rows)
    groups = bench.load_groups(frame, ("group",), 5e6, 3, 200)
    assert {g.family for g in groups} == {"adamw", "muon"} and len(groups) == 6
    sample = bench.load_groups(frame, ("group",), 5e6, 3, 200, max_groups=2, seed=1)
    again = bench.load_groups(frame, ("group",), 5e6, 3, 200, max_groups=2, seed=1)
    assert [g.name for g in sample] == [g.name for g in again] and len(sample) == 2
    # a resampled sub-sweep keeps its group's family
    drawn = bench.resample_groups(groups, 2, seed=0)
    assert {g.family for g in drawn} == {"adamw", "muon"}
    # one universal curve per family, each fitted on that family's proxies only
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curves = bench.fit_proxy_curves(frame, 5e6, "train", {"muon"})
    assert set(curves) == {"muon"}
    ids = [r["run_id"] for r in curves["muon"].calibration["runs"]]
    assert ids and all(rid.startswith("muon-p") for rid in ids)
    assert bench.curve_for(curves, groups[-1]) is curves["muon"]
    with pytest.raises(ValueError, match="family 'sgd'"):
        bench.fit_proxy_curves(frame, 5e6, "train", {"sgd"})


def test_load_groups_reads_the_split_asked_for() -> None:
    rows = []
    for name, (values, _) in CURVES.items():
        for s, v in zip(STEPS, values, strict=True):
            base = {"run_id": name, "group": "sweep", "n_params": 1e6, "tokens": 2e7,
                    "total_steps": T, "batch_tokens": 2e5, "peak_lr": 1e-3,
                    "weight_decay": 0.1, "schedule": "linear", "warmup_steps": 0,
                    "step": int(s)}
            rows.append({**base, "loss": float(v), "split": "train"})
            rows.append({**base, "loss": float(v) + 0.5, "split": "val"})
    frame = pd.DataFrame(rows)
    train = bench.load_groups(frame, split="train")[0]
    val = bench.load_groups(frame, split="val")[0]
    for tr, va in zip(train.trials, val.trials, strict=True):
        np.testing.assert_allclose(va.values, tr.values + 0.5)
        assert va.final == pytest.approx(tr.final + 0.5)


def test_cli_bench_split_val_replays_the_val_rows(tmp_path: Path) -> None:
    curves = tmp_path / "sweep.csv"
    _write_curves(curves)
    frame = pd.read_csv(curves)
    # val rows: the same curves 0.5 higher; the bench must replay and score those
    pd.concat([frame, frame.assign(loss=frame["loss"] + 0.5, split="val")]).to_csv(
        curves, index=False)
    out = {}
    for split in ("train", "val"):
        path = tmp_path / f"{split}.json"
        assert main(["bench", str(curves), "--no-ray", "--no-knobs", "--quiet",
                     "--modes", "lockstep", "--split", split, "--json", str(path)]) == 0
        out[split] = json.loads(path.read_text())
    assert out["val"]["setup"]["split"] == "val"
    # current best at 0.2 keeps "a" either way; its regret is relative to the group's best
    # final loss, which the val rows shift by 0.5
    cb = {s: out[s]["modes"]["lockstep"]["methods"]["current_best@0.2"]["max_regret"]
          for s in out}
    assert cb["train"] == pytest.approx(0.1 / 1.9)
    assert cb["val"] == pytest.approx(0.1 / 2.4)


def test_collapse_knobs_are_the_threshold_frontier() -> None:
    from tests.hpo._fakes import LastValuePredictor

    knobs = bench.collapse_knobs()
    from hpo.bench.knobs import FRONTIER_THRESHOLDS

    assert [knobs[f"threshold {t:g}"]["threshold"] for t in FRONTIER_THRESHOLDS] == list(
        FRONTIER_THRESHOLDS)
    assert len(knobs) == len(FRONTIER_THRESHOLDS)
    # every entry builds a pruner with that threshold
    for kwargs in knobs.values():
        pruner = bench.collapse_pruner(None, predictor=LastValuePredictor(), **kwargs)
        assert pruner.judge.threshold == kwargs["threshold"]


@pytest.mark.parametrize("mode", bench.MODES)
def test_shadow_replay_stops_nothing_and_meets_every_verdict_with_its_outcome(
        mode: str) -> None:
    from tests.hpo._fakes import LastValuePredictor

    g = _group()
    verdicts = bench.shadow_verdicts(g, None, mode, {"predictor": LastValuePredictor(0.05)})
    # every trial ran to its end (nothing stopped), so every verdict met its outcome: one per
    # trial and checkpoint judged against a competitor, the lowest stated chance of each
    assert verdicts and len({(v["trial"], v["checkpoint"]) for v in verdicts}) == len(verdicts)
    finals = [t.final for t in g.trials]
    for v in verdicts:
        assert 0 <= v["probability"] <= 1 and v["against"] != v["trial"]
        assert v["won"] == (finals[v["trial"]] < finals[v["against"]])
        # the same-step chance recorded beside the verdict, of the same event
        assert v["same_step"] is None or 0 < v["same_step"] < 1
    assert any(v["same_step"] is not None for v in verdicts)
    table = bench.reliability(verdicts, thresholds=(0.5, 1.0))
    assert sum(r["n"] for r in table["bins"]) == len(verdicts) == table["verdicts"]
    below = table["tail"][1]
    assert below["n"] == len(verdicts) and below["wrong"] == sum(v["won"] for v in verdicts)
    text = bench.format_reliability(table, mode)
    assert text.startswith(f"reliability: {mode} ({len(verdicts)} verdicts")


def test_reliability_bins_count_and_bound_the_observed_rate() -> None:
    verdicts = ([{"probability": 0.001, "won": False}] * 199 + [{"probability": 0.001,
                                                                "won": True}]
                + [{"probability": 0.6, "won": True}] * 3 + [{"probability": 0.6,
                                                             "won": False}])
    table = bench.reliability(verdicts, thresholds=(0.005,))
    low = next(r for r in table["bins"] if r["bin"] == [0.001, 0.005])
    assert low["n"] == 200 and low["observed"] == pytest.approx(0.005)
    # one in 200: the one-sided 95% Clopper-Pearson bound
    assert low["upper"] == pytest.approx(0.0235, abs=5e-4)
    mid = next(r for r in table["bins"] if r["n"] == 4)
    assert mid["observed"] == 0.75 and mid["stated"] == pytest.approx(0.6)
    assert table["tail"][0] == {"threshold": 0.005, "n": 200, "wrong": 1, "rate": 0.005,
                                "upper": low["upper"]}


def test_calibration_error_is_zero_when_stated_is_observed() -> None:
    # each filled bin: stated 0.5 observed 0.5 (two of four won), stated 0 observed 0
    verdicts = ([{"probability": 0.5, "won": True}] * 2 + [{"probability": 0.5, "won": False}] * 2
                + [{"probability": 0.0, "won": False}] * 3)
    table = bench.reliability(verdicts)
    assert table["calibration_error"] == 0.0
    assert ("calibration error (count-weighted mean |stated - observed| over bins): 0"
            in bench.format_reliability(table))


def test_calibration_error_weighs_each_bin_by_its_count() -> None:
    # bin [0.1, 0.2): 4 verdicts at 0.1, 1 won: |0.1 - 0.25| = 0.15; bin [0.5, 0.65): 6 at
    # 0.6, 3 won: |0.6 - 0.5| = 0.1; weighted (4 x 0.15 + 6 x 0.1) / 10 = 0.12
    verdicts = ([{"probability": 0.1, "won": True}] + [{"probability": 0.1, "won": False}] * 3
                + [{"probability": 0.6, "won": True}] * 3
                + [{"probability": 0.6, "won": False}] * 3)
    table = bench.reliability(verdicts, thresholds=(0.05,))
    assert table["calibration_error"] == pytest.approx(0.12)
    assert bench.calibration_error(table["bins"]) == pytest.approx(0.12)
    text = bench.format_reliability(table)
    assert text.splitlines()[-1] == ("  calibration error (count-weighted mean |stated - "
                                     "observed| over bins): 0.12")
    # a table written before the key existed: recomputed from its bins
    old = {k: v for k, v in table.items() if k != "calibration_error"}
    assert bench.format_reliability(old) == text
    # no verdict: no error to state
    empty = bench.reliability([])
    assert empty["calibration_error"] is None
    assert bench.format_reliability(empty).endswith("over bins): -")


def _frame(schedule: dict[str, str] | None = None, last: dict[str, int] | None = None
           ) -> pd.DataFrame:
    """The hand-made sweep as curve-format rows; a run's schedule name and last step may be
    changed."""
    rows = []
    for name, (values, _) in CURVES.items():
        for s, v in zip(STEPS, values, strict=True):
            if s > (last or {}).get(name, T):
                continue
            rows.append({"run_id": name, "group": "sweep", "n_params": 1e6, "tokens": 2e7,
                         "total_steps": T, "batch_tokens": 2e5, "peak_lr": 1e-3,
                         "weight_decay": 0.1, "schedule": (schedule or {}).get(name, "linear"),
                         "warmup_steps": 0, "step": int(s), "loss": float(v),
                         "split": "train"})
    return pd.DataFrame(rows)


def test_load_groups_says_which_runs_it_leaves_out_or_cannot_read() -> None:
    # a run that ends at half its steps is left out, and said so; a run whose schedule the
    # curve format cannot read is kept (the collapse methods never stop it), and said so
    frame = _frame(schedule={"c": "my_own_schedule"}, last={"a": 50})
    with pytest.warns(UserWarning) as caught:
        groups = bench.load_groups(frame, min_trials=2)
    text = [str(w.message) for w in caught]
    assert any("1 run(s) end before 90% of their total_steps" in t and "a (last step 50 of "
               "100)" in t for t in text)
    assert any("schedule the curve format cannot read ('my_own_schedule')" in t for t in text)
    assert [t.run_id for t in groups[0].trials] == ["b", "c"]


def test_cli_bench_replays_a_run_with_an_unreadable_schedule(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    curves = tmp_path / "sweep.csv"
    _frame(schedule={"b": "my_own_schedule"}).to_csv(curves, index=False)
    out = tmp_path / "bench.json"
    # the bench runs to its end, every method over all three trials
    assert main(["bench", str(curves), "--no-ray", "--no-knobs", "--quiet", "--modes",
                 "sequential", "--min-trials", "2", "--json", str(out)]) == 0
    assert "cannot read ('my_own_schedule')" in capsys.readouterr().err


def test_a_final_carried_below_zero_falls_back_to_the_runs_end() -> None:
    # a tail that falls steeply at 90% of the steps: its fit carried to the planned end leaves
    # the positive losses; the final is then the smoothed end where logging stopped
    steps = np.arange(1, 91, dtype=float)
    values = np.where(steps < 80, 3.0, 3.0 - 0.25 * (steps - 79))  # 0.25 at step 90
    rows = [{"run_id": r, "group": "sweep", "n_params": 1e6, "tokens": 2e7, "total_steps": 100,
             "peak_lr": 1e-3, "weight_decay": 0.1, "schedule": "linear", "warmup_steps": 0,
             "step": int(s), "loss": float(v) + 0.01 * k, "split": "train"}
            for k, r in enumerate(("x", "y")) for s, v in zip(steps, values, strict=True)]
    groups = bench.load_groups(pd.DataFrame(rows), min_trials=2)
    assert all(t.final > 0 for t in groups[0].trials)
