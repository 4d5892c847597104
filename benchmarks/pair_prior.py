"""The pair prior, learned where the truth at target scale is known, and chosen leave one
source out.

    .venv/bin/python benchmarks/pair_prior.py rows benchmarks/results/prior   # predict targets
    .venv/bin/python benchmarks/pair_prior.py fit benchmarks/results/prior    # choose, fit, ship

``rows``: every target of every source (runs larger than the source's proxies, in its sweep
groups), predicted by the collapse predictor from its proxies' universal curve at t^ 0.1-0.5;
one row per (target, t^) with the prediction's evidence (``hpo.predictors.prior.FEATURES``),
its LR and its signed log error against the known final (``rows.csv.gz``). Each source runs
twice: without and with the LR shape covariate (``base_lr``; ``peak_lr`` where the source
records no base LR).

``fit``: pairs of one sweep group at one t^ give pair errors; for each candidate feature set
and each source held out, the prior is fitted on the other sources (each weighted alike) and
scored on the held-out one (log-likelihood, 80% coverage, and the reliability of the stated
P(a ends below b) with its calibration error); features are added forward while they improve
the held-out log-likelihood on most sources. The chosen set is fitted on every source and
written to ``predictors/pair_prior.json`` (the package's default), and each leave-one-out fit
to ``<out>/without_<source>.json`` for the bench.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import stdtr

from hpo.bench.data import fit_proxy_curves, load_groups
from hpo.predictors import CollapsePredictor
from hpo.predictors.io import read_curves
from hpo.predictors.prior import (
    FEATURES,
    PairPrior,
    fit_pair_prior,
    pair_log_scales,
    setting_distance,
)

ROOT = Path(__file__).resolve().parents[1]
CURVES = ROOT.parent / "shared" / "data" / "curves"
#: name: (file, proxy_max_params, split, group columns)
SOURCES = {
    "lr_scheduling": (CURVES / "lr_scheduling.csv.gz", 94e6, "val", ("group",)),
    "multipowerlaw": (CURVES / "multipowerlaw.csv.gz", 1.5e8, "train",
                      ("n_params", "total_steps")),
    "nanochat": (CURVES / "nanochat.csv.gz", 1e8, "train", ("group",)),
    "marin": (CURVES / "marin.csv.gz", 1.5e8, "val", ("group",)),
    "cpu_quickstart": (ROOT / "benchmarks/data/quickstart_family.csv.gz", 5e4, "train",
                       ("group",)),
    "cpu_sweep": (ROOT / "benchmarks/data/cpu_sweep.csv.gz", 3e4, "train", ("group",)),
    "cpu_sweep_w64": (ROOT / "benchmarks/data/cpu_sweep_w64.csv.gz", 9e4, "train", ("group",)),
}
FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5)
#: the CPU sweeps are one source family for leave-one-source-out (same code, data, recipe)
HOLDOUT = {"cpu_quickstart": "cpu", "cpu_sweep": "cpu", "cpu_sweep_w64": "cpu"}
LEVEL = 0.8


def _frame(path: Path, lr_covariate: bool) -> pd.DataFrame:
    df = read_curves(path)
    if "base_lr" not in df.columns:
        df = df.assign(base_lr=df["peak_lr"] if lr_covariate else np.nan)
    elif not lr_covariate:
        df = df.assign(base_lr=np.nan)
    return df


def rows(out: Path) -> None:
    """Predict every target of every source at ``FRACTIONS``; write ``rows.csv.gz``."""
    records = []
    for name, (path, proxy_max, split, cols) in SOURCES.items():
        if not path.exists():
            print(f"skip {name}: {path} not found", file=sys.stderr)
            continue
        for lr_cov in (False, True):
            t0 = time.time()
            frame = _frame(path, lr_cov)
            groups = load_groups(frame, cols, proxy_max, min_trials=2, split=split,
                                 keep_fractions=FRACTIONS)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                curves = fit_proxy_curves(frame, proxy_max, split, {g.family for g in groups})
            preds = {fam: CollapsePredictor(c) for fam, c in curves.items()}
            for g in groups:
                for trial in g.trials:
                    for f in FRACTIONS:
                        keep = trial.steps <= f * trial.total_steps + 1e-9
                        rec = {"source": name, "lr_covariate": lr_cov, "group": g.name,
                               "family": g.family, "run_id": trial.run_id, "f": f,
                               "lr": trial.controls.base_lr or trial.controls.peak_lr,
                               "tau": trial.controls.tau,
                               "final": trial.final}
                        try:
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore")
                                p = preds[g.family].predict(trial.steps[keep],
                                                            trial.values[keep], trial.controls)
                        except ValueError as exc:
                            rec["declined"] = str(exc).split(";")[0][:80]
                        else:
                            rec.update(pred=p.final, err=math.log(p.final / trial.final),
                                       half=math.log(p.upper / p.final), **p.evidence)
                        records.append(rec)
            print(f"{name} lr_covariate={lr_cov}: {len(groups)} groups "
                  f"({time.time() - t0:.0f} s)", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame.from_records(records).to_csv(out / "rows.csv.gz", index=False)


# ---------------------------------------------------------------------------- pairs and fits
def pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Every pair of predicted targets of one group at one t^ (a, b with a's run id first)."""
    ok = df[df["err"].notna()]
    out = []
    for _, g in ok.groupby(["source", "group", "family", "f"], sort=False):
        if len(g) < 2:
            continue
        r = g.to_dict("records")
        for i in range(len(r)):
            for j in range(i + 1, len(r)):
                out.append((r[i], r[j]))
    if not out:
        return pd.DataFrame(columns=[f"{c}_{s}" for c in df.columns for s in "ab"])
    a = pd.DataFrame([p[0] for p in out]).reset_index(drop=True)
    b = pd.DataFrame([p[1] for p in out]).reset_index(drop=True)
    return pd.concat([a.add_suffix("_a"), b.add_suffix("_b")], axis=1)


def _x(p: pd.DataFrame, side: str, feats: tuple[str, ...], default_lps: float) -> np.ndarray:
    cols = []
    for f in feats:
        v = p[f"{f}_{side}"].astype(float).to_numpy()
        if f == "log_proxy_scale":
            v = np.where(np.isfinite(v), v, default_lps)
        cols.append(np.nan_to_num(v))
    return np.column_stack(cols) if cols else np.zeros((len(p), 0))


def _distances(p: pd.DataFrame) -> np.ndarray:
    """The pairs' settings' distances (``hpo.predictors.prior.setting_distance``; an unknown
    LR or tau is NaN in the rows)."""
    cols = [np.nan_to_num(p[c].astype(float).to_numpy()) for c in ("lr_a", "lr_b", "tau_a",
                                                                    "tau_b")]
    return np.array([setting_distance(*v) for v in zip(*cols, strict=True)])


def _arrays(p: pd.DataFrame, feats: tuple[str, ...], default_lps: float):
    d = (p["err_a"] - p["err_b"]).to_numpy(float)
    dlr = _distances(p)
    return d, _x(p, "a", feats, default_lps), _x(p, "b", feats, default_lps), dlr


def fit(p: pd.DataFrame, feats: tuple[str, ...], use_distance: bool, meta=None):
    lps = p["log_proxy_scale_a"].astype(float)
    default_lps = float(np.nanmedian(lps)) if lps.notna().any() else math.log(0.01)
    d, xa, xb, dlr = _arrays(p, feats, default_lps)
    w = 1.0 / p.groupby("holdout_a")["err_a"].transform("size").to_numpy(float)
    return fit_pair_prior(d, xa, xb, dlr, feats, weights=w, use_distance=use_distance,
                          default_log_proxy_scale=default_lps, meta=meta)


def score(prior, p: pd.DataFrame) -> dict:
    """Held-out scores of ``prior`` on pairs ``p``."""
    feats = tuple(prior.coef)
    d, xa, xb, dlr = _arrays(p, feats, prior.default_log_proxy_scale)
    params = np.array([prior.intercept, *[prior.coef[f] for f in feats], prior.distance_slope])
    s = np.exp(pair_log_scales(params, xa, xb, dlr))
    z = d / s
    dof = prior.dof
    ll = float(np.mean(stats.t.logpdf(z, dof) - np.log(s)))
    q = float(stats.t.ppf(0.5 + LEVEL / 2, dof))
    cover = float(np.mean(np.abs(z) <= q))
    # stated P(a ends below b) against what happened, both orders of each pair
    r = np.log(p["pred_a"] / p["pred_b"]).to_numpy(float)
    stated = stdtr(dof, -r / s)  # P(d > r)
    won = (p["final_a"] < p["final_b"]).to_numpy()
    stated = np.concatenate([stated, 1 - stated])
    won = np.concatenate([won, ~won])
    return {"loglik": ll, "cover80": cover, "n": int(d.size), **reliability(stated, won)}


BINS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5)


def reliability(stated: np.ndarray, won: np.ndarray) -> dict:
    """Calibration error (count-weighted mean |stated - observed| over the bins of the lower
    half, where stops are decided) and wrong / n below 0.05."""
    low = stated < 0.5
    err, n = 0.0, 0
    bins = []
    for lo, hi in zip(BINS[:-1], BINS[1:], strict=True):
        m = (stated >= lo) & (stated < hi)
        if m.sum():
            obs = float(won[m].mean())
            err += m.sum() * abs(float(stated[m].mean()) - obs)
            n += int(m.sum())
            bins.append((lo, hi, int(m.sum()), float(stated[m].mean()), obs))
    below = stated < 0.05
    return {"cal_error": err / max(n, 1), "below05": f"{int(won[below].sum())}/{int(below.sum())}",
            "bins": bins, "n_low": int(low.sum())}


THRESHOLDS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
#: a threshold is safe on a source when its lockstep replay's mean regret is at most this
MAX_MEAN_REGRET = 0.0005


def side_scales(df: pd.DataFrame, prior) -> np.ndarray:
    """Each predicted row's side of ``prior``."""
    feats = [f for f in FEATURES if f in df.columns]
    return np.array([prior.side_scale({f: (None if pd.isna(r[f]) else float(r[f]))
                                       for f in feats}) if pd.notna(r["err"]) else np.nan
                     for r in df.to_dict("records")])


def lockstep(df: pd.DataFrame, prior, threshold: float) -> pd.DataFrame:
    """The rule in lockstep on every group of ``df`` (rows of one source, with ``side``):
    at each t^ of ``FRACTIONS`` every running trial with a prediction is judged against every
    other running one; it stops when its chance to end below the strongest is under
    ``threshold``. Per group: compute (fraction of the sweep trained), regret (of the best
    survivor against the group's best), and whether the best was stopped."""
    out = []
    for _, g in df.groupby(["group", "family"], sort=False):
        finals = g.groupby("run_id")["final"].first()
        if len(finals) < 2:
            continue
        alive = set(finals.index)
        spent = {r: 1.0 for r in finals.index}
        for f in FRACTIONS:
            at = g[(g["f"] == f) & g["run_id"].isin(alive) & g["err"].notna()]
            at = at.set_index("run_id")
            stop = []
            for me, r in at.iterrows():
                ps = []
                for other, o in at.iterrows():
                    if other == me:
                        continue
                    widen = math.exp(prior.distance_slope * setting_distance(
                        *np.nan_to_num([r["lr"], o["lr"], r["tau"], o["tau"]])))
                    s = max(r["side"], o["side"]) * widen
                    ps.append(float(stdtr(prior.dof, -math.log(r["pred"] / o["pred"]) / s)))
                if ps and min(ps) < threshold:
                    stop.append(me)
            for me in stop:
                alive.discard(me)
                spent[me] = f
        best = float(finals.min())
        kept = float(finals[list(alive)].min())
        out.append({"compute": sum(spent.values()) / len(spent), "regret": kept / best - 1,
                    "best_stopped": finals.idxmin() not in alive,
                    "oracle": (1 + 0.2 * (len(finals) - 1)) / len(finals)})
    return pd.DataFrame(out)


def _load_rows(out: Path) -> pd.DataFrame:
    """``rows.csv.gz`` of ``out`` with the columns the fit uses (``log_halfwidth``,
    ``holdout``)."""
    df = pd.read_csv(out / "rows.csv.gz", keep_default_na=False, na_values=[""])
    df["family"] = df["family"].fillna("").astype(str)
    df["group"] = df["group"].astype(str)
    df["log_halfwidth"] = np.log(df["half"].clip(lower=1e-6))
    df["holdout"] = df["source"].map(lambda s: HOLDOUT.get(s, s))
    return df


def _ordered(pr: pd.DataFrame) -> float:
    """The share of pairs ``pr`` whose finals differ by more than 0.2% that the predictions
    order as the finals."""
    gap = np.abs(np.log(pr["final_a"] / pr["final_b"])) > 0.002
    right = (pr["pred_a"] < pr["pred_b"]) == (pr["final_a"] < pr["final_b"])
    return float(right[gap].mean())


def _source_table(df: pd.DataFrame) -> list[str]:
    """The lines of the predictions per source at t^ 0.2: targets judged, median |err| and
    pairs ordered, without and with the LR covariate."""
    lines = []
    lines.append("## Predictions per source at t^ 0.2: share of targets judged, median |err|, "
                 "pairs ordered")
    lines.append("Judged with 3 points: what a rule that declines prefixes with fewer than 3 "
                 "points after the warmup, or steeper than the curve, would judge.\n")
    lines.append("| source | LR covariate | targets | judged (2 points) | judged with 3 points "
                 "| median abs err | pairs ordered (gap > 0.2%) |")
    lines.append("|---|---|---|---|---|---|---|")
    for (src, lrc), g in df[df["f"] == 0.2].groupby(["source", "lr_covariate"], sort=False):
        pr = pairs(g) if g["err"].notna().sum() > 1 else pd.DataFrame()
        acc = float("nan")
        if len(pr):
            acc = _ordered(pr)
        strict = g["err"].notna() & (g["inv_points"] <= 1 / 3 + 1e-9) & (g["steep"] == 0)
        lines.append(f"| {src} | {lrc} | {len(g)} | {g['err'].notna().mean():.2f} | "
                     f"{strict.mean():.2f} | {np.nanmedian(np.abs(g['err'])):.2%} | "
                     f"{acc:.3f} |")
    lines.append("")
    return lines


def _lr_covariate(df: pd.DataFrame) -> tuple[list[str], bool]:
    """The lines of the LR covariate's leave-one-source-out choice (on the pairs-ordered
    accuracy over t^ 0.1-0.3), and whether the product uses it (it wins on most sources)."""
    lines = []
    chosen_lr: dict[str, bool] = {}
    acc = {}
    for (src, lrc), g in df[df["f"] <= 0.3].groupby(["source", "lr_covariate"]):
        acc[(src, lrc)] = _ordered(pairs(g))
    srcs = sorted({s for s, _ in acc})
    lines.append("## The LR covariate, leave one source out (pairs ordered, t^ 0.1-0.3)")
    lines.append("| held out | on the others: with wins on | held-out with / without | "
                 "chosen for it |")
    lines.append("|---|---|---|---|")
    for h in srcs:
        others = [s for s in srcs if HOLDOUT.get(s, s) != HOLDOUT.get(h, h)]
        wins = sum(acc[(s, True)] > acc[(s, False)] for s in others)
        choose = wins > len(others) / 2
        chosen_lr[h] = choose
        lines.append(f"| {h} | {wins} of {len(others)} | {acc[(h, True)]:.3f} / "
                     f"{acc[(h, False)]:.3f} | {'with' if choose else 'without'} |")
    wins_all = sum(acc[(s, True)] > acc[(s, False)] for s in srcs)
    use_cov = wins_all > len(srcs) / 2
    lines.append(f"\nIn-sample on all: with wins on {wins_all} of {len(srcs)}: the product "
                 f"{'uses' if use_cov else 'does not use'} the covariate.\n")
    return lines, use_cov


def _loso(p: pd.DataFrame, holdouts: list[str], feats: tuple[str, ...],
          lr_term: bool) -> dict[str, dict]:
    """Each source of ``holdouts`` held out: the scores on it of the prior with ``feats`` (and
    the LR term where ``lr_term``) fitted on the other sources' pairs."""
    out = {}
    for h in holdouts:
        train, test = p[p["holdout_a"] != h], p[p["holdout_a"] == h]
        out[h] = score(fit(train, feats, lr_term), test)
    return out


def _forward_selection(p: pd.DataFrame,
                       holdouts: list[str]) -> tuple[list[str], tuple[str, ...], bool]:
    """The lines of the forward selection on the held-out log-likelihood, the features chosen
    and whether the LR term is."""
    lines = []
    cands: list[tuple[str, ...]] = []
    chosen: tuple[str, ...] = ()
    use_distance = False
    lines.append("## Features, forward selection (held-out mean log-likelihood per source)")
    lines.append("| features | LR term | " + " | ".join(holdouts) + " | better on |")
    lines.append("|---|---|" + "---|" * len(holdouts) + "---|")
    base = _loso(p, holdouts, chosen, use_distance)
    lines.append("| (none) | no | " + " | ".join(f"{base[h]['loglik']:.3f}" for h in holdouts)
                 + " | - |")
    options = [("lr", None)] + [("f", f) for f in FEATURES]
    while True:
        best = None
        for kind, f in options:
            if kind == "lr" and use_distance or kind == "f" and f in chosen:
                continue
            feats = chosen + ((f,) if kind == "f" else ())
            lr_term = use_distance or kind == "lr"
            sc = _loso(p, holdouts, feats, lr_term)
            better = sum(sc[h]["loglik"] > base[h]["loglik"] for h in holdouts)
            gain = float(np.mean([sc[h]["loglik"] - base[h]["loglik"] for h in holdouts]))
            label = ", ".join(feats) or "(none)"
            lines.append(f"| {label} | {'yes' if lr_term else 'no'} | "
                         + " | ".join(f"{sc[h]['loglik']:.3f}" for h in holdouts)
                         + f" | {better} of {len(holdouts)} |")
            if better > len(holdouts) / 2 and gain > 0 and (best is None or gain > best[0]):
                best = (gain, feats, lr_term, sc)
        if best is None:
            break
        _, chosen, use_distance, base = best
        cands.append(chosen)
        lines.append(f"| **kept: {', '.join(chosen)}{' + LR' if use_distance else ''}** | | | |")
    lines.append("")
    lines.append(f"Chosen: features {list(chosen)}, LR term {'yes' if use_distance else 'no'}.\n")
    return lines, chosen, use_distance


def _held_out_scores(p: pd.DataFrame, holdouts: list[str], chosen: tuple[str, ...],
                     use_distance: bool, out: Path) -> list[str]:
    """The lines of the chosen prior's scores with each source held out (its reliability
    bins beneath); each held-out fit is written to ``out/without_<source>.json``."""
    lines = []
    lines.append("## The chosen prior, each source held out")
    lines.append("| held out | pairs | 80% coverage | calibration error (stated < 0.5) | "
                 "below 0.05: wrong / n | log-lik |")
    lines.append("|---|---|---|---|---|---|")
    for h in holdouts:
        train, test = p[p["holdout_a"] != h], p[p["holdout_a"] == h]
        prior = fit(train, chosen, use_distance, meta={"held_out": h})
        sc = score(prior, test)
        (out / f"without_{h}.json").write_text(json.dumps(prior.to_dict(), indent=1) + "\n")
        lines.append(f"| {h} | {sc['n']} | {sc['cover80']:.2f} | {sc['cal_error']:.3f} | "
                     f"{sc['below05']} | {sc['loglik']:.3f} |")
        bins = "; ".join(f"[{lo:g},{hi:g}) {st:.3f}->{ob:.3f} ({n})"
                         for lo, hi, n, st, ob in sc["bins"])
        lines.append(f"|  | bins: {bins} | | | | |")
    return lines


def _safe_thresholds(rows_h: pd.DataFrame, prior: PairPrior, holdouts: list[str],
                     h: str) -> list[float]:
    """The thresholds of ``THRESHOLDS`` whose lockstep replay of ``rows_h`` has a mean regret
    of at most ``MAX_MEAN_REGRET`` on every source but ``h``."""
    safe = []
    for t in THRESHOLDS:
        ok = True
        for s2 in holdouts:
            if s2 == h:
                continue
            res = lockstep(rows_h[rows_h["holdout"] == s2], prior, t)
            ok = ok and (res.empty or res["regret"].mean() <= MAX_MEAN_REGRET)
        if ok:
            safe.append(t)
    return safe


def _threshold_table(p: pd.DataFrame, data: pd.DataFrame, holdouts: list[str],
                     chosen: tuple[str, ...], use_distance: bool,
                     out: Path) -> tuple[list[str], dict[str, float]]:
    """The lines of the threshold chosen leave one source out and its lockstep replay on the
    held-out source, and the threshold chosen for each; each held-out fit is written to
    ``out/without_<source>.json`` with its threshold."""
    # the threshold, leave one source out: on the other sources (with the prior fitted
    # without the held-out one), the largest threshold whose lockstep replay has a mean regret
    # of at most MAX_MEAN_REGRET on each; then the held-out source at that threshold
    lines = []
    lines.append("\n## The threshold, leave one source out (lockstep replay of every group)")
    lines.append(f"The largest threshold with a mean regret <= {MAX_MEAN_REGRET:.2%} on each "
                 "other source.\n")
    lines.append("| held out | threshold chosen on the others | groups | compute | oracle@0.2 "
                 "| x oracle | mean / max regret | best stopped |")
    lines.append("|---|---|---|---|---|---|---|---|")
    chosen_t = {}
    for h in holdouts:
        prior = fit(p[p["holdout_a"] != h], chosen, use_distance)
        rows_h = data.assign(side=side_scales(data, prior))
        safe = _safe_thresholds(rows_h, prior, holdouts, h)
        t = max(safe) if safe else min(THRESHOLDS)
        chosen_t[h] = t
        held = dataclasses.replace(prior, meta={"held_out": h, "threshold": t})
        (out / f"without_{h}.json").write_text(json.dumps(held.to_dict(), indent=1) + "\n")
        res = lockstep(rows_h[rows_h["holdout"] == h], prior, t)
        lines.append(f"| {h} | {t:g} | {len(res)} | {res['compute'].mean():.3f} | "
                     f"{res['oracle'].mean():.3f} | "
                     f"{res['compute'].mean() / res['oracle'].mean():.2f} | "
                     f"{res['regret'].mean():.3%} / {res['regret'].max():.3%} | "
                     f"{int(res['best_stopped'].sum())} |")
    return lines, chosen_t


def _frontier(p: pd.DataFrame, data: pd.DataFrame, holdouts: list[str],
              chosen: tuple[str, ...], use_distance: bool) -> list[str]:
    """The lines of each source's lockstep replay at every threshold of ``THRESHOLDS``, with
    the prior fitted without it."""
    lines = []
    lines.append("\nThe frontier per source (the prior fitted without it): compute, mean / "
                 "max regret, best stopped")
    lines.append("| held out | " + " | ".join(f"T={t:g}" for t in THRESHOLDS) + " |")
    lines.append("|---|" + "---|" * len(THRESHOLDS))
    for h in holdouts:
        prior = fit(p[p["holdout_a"] != h], chosen, use_distance)
        rows_h = data[data["holdout"] == h]
        rows_h = rows_h.assign(side=side_scales(rows_h, prior))
        cells = []
        for t in THRESHOLDS:
            res = lockstep(rows_h, prior, t)
            cells.append(f"{res['compute'].mean():.3f}, {res['regret'].mean():.3%} / "
                         f"{res['regret'].max():.2%}, {int(res['best_stopped'].sum())}")
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    return lines


def _with_threshold(full: PairPrior, data: pd.DataFrame,
                    chosen_t: dict[str, float]) -> PairPrior:
    """``full`` with the largest threshold whose lockstep replay has a mean regret of at most
    ``MAX_MEAN_REGRET`` on every source in sample (0 where none has) and ``chosen_t`` in its
    meta."""
    safe_all = [t for t in THRESHOLDS if all(
        lockstep(r, full, t)["regret"].mean() <= MAX_MEAN_REGRET
        for _, r in data.assign(side=side_scales(data, full)).groupby("holdout"))]
    return dataclasses.replace(full, meta={**full.meta, "threshold": max(safe_all or [0.0]),
                                           "threshold_by_held_out_source": chosen_t})


def fit_main(out: Path) -> None:
    df = _load_rows(out)
    lines = []
    # declines and the LR covariate, per source
    lines += _source_table(df)
    # the LR covariate: leave one source out, on the pairs-ordered accuracy over t^ 0.1-0.3
    lr_lines, use_cov = _lr_covariate(df)
    lines += lr_lines
    data = df[df["lr_covariate"] == use_cov]
    p = pairs(data)
    holdouts = sorted(p["holdout_a"].unique())
    # forward selection on the held-out log-likelihood
    sel_lines, chosen, use_distance = _forward_selection(p, holdouts)
    lines += sel_lines
    # per held-out source with the chosen set
    lines += _held_out_scores(p, holdouts, chosen, use_distance, out)
    full = fit(p, chosen, use_distance, meta={
        "fitted_on": holdouts, "pairs": int(len(p)), "lr_covariate": use_cov,
        "made_by": "benchmarks/pair_prior.py fit benchmarks/results/prior"})
    sc = score(full, p)
    lines.append(f"| (in-sample, all) | {sc['n']} | {sc['cover80']:.2f} | "
                 f"{sc['cal_error']:.3f} | {sc['below05']} | {sc['loglik']:.3f} |")
    t_lines, chosen_t = _threshold_table(p, data, holdouts, chosen, use_distance, out)
    lines += t_lines
    lines += _frontier(p, data, holdouts, chosen, use_distance)
    full = _with_threshold(full, data, chosen_t)
    lines.append(f"\nIn-sample (the prior fitted on all, every source): threshold "
                 f"{full.meta['threshold']:g}.")
    lines.append("\nShipped prior: " + json.dumps(full.to_dict()))
    (ROOT / "predictors" / "pair_prior.json").write_text(
        json.dumps(full.to_dict(), indent=1) + "\n")
    (out / "fit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

if __name__ == "__main__":
    cmd, out = sys.argv[1], Path(sys.argv[2])
    {"rows": rows, "fit": fit_main}[cmd](out)
