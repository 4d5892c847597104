"""The residual monitor on the shared real curves and the CPU family: no alert on clean runs,
and a slow drift caught before the raw loss shows it; the choice of BAND_SIGMAS.

For each source, the reference is the universal curve fitted (and calibrated: its residual
band) on the source's proxies (``_sources.SOURCES``; per family, ``hpo.bench.data.family_key``:
each study of the quickstart seeds, each optimizer where a file mixes several; ``cpu``: the CPU
family of ``diagnose_faults.py``, width-32 proxies and the five clean width-48 seeds as
targets). Every complete run of the source, proxies and targets, is monitored clean; then each
clean target is monitored again with a slow drift injected into its recorded losses: from
t^ = 0.5 the loss is multiplied by 1 + 0.02 (t^ - 0.5) / 0.5 (+2% by the end, +1% at t^ 0.75,
while the raw loss still falls). The raw-loss rule (smoothed loss more than x above its running
minimum) is given the smallest x without a false alert on the source's clean runs.

Beside the +2% drift, larger ones (``--drifts``): the smallest the monitor catches by t^ 0.75.

The allowance a clean target needs: for each clean target, the smallest multiple of its
family's misfit allowance (with and without the widening for a run beyond the proxies) that
keeps it inside its bands; each source held out, the law takes the largest multiple the other
sources' clean targets need (at least 1, so that no proxy alerts) and is checked on the source.

Siblings: a run's level against the median level of its sweep's other clean runs (same group
and optimizer family, at least 3 of them with a level at that t^), the reference's shared misfit
cancelled. A run alerts where that difference leaves k times its own noise plus c times the
largest such excess of its clean siblings; c in ``SIBLING_C``, and each source held out, the
smallest c without a false alert on the other sources.

The same runs under other values of k (``BAND_SIGMAS``, ``--sigmas``): the held-out proxies'
traces are recorded once per source and the allowances measured again for each k, and the
rule applied to each run's recorded level, jump and noise (checked to give the product's
alerts at the product's k). Leave one source out: k is the smallest value without a false alert
on the other sources' clean runs, and is checked on the source left out.

    python benchmarks/diagnose_drift.py --json benchmarks/results/diagnose/drift.json \
        > benchmarks/results/diagnose/drift.txt
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hpo.predictors.calibrate as calibrate  # noqa: E402
import hpo.predictors.monitor as monitor  # noqa: E402
from benchmarks._sources import SOURCES, load_sources  # noqa: E402
from hpo.bench import fit_proxy_curves  # noqa: E402
from hpo.bench.data import family_key  # noqa: E402
from hpo.diagnose import clean_raw_x, diagnose_run  # noqa: E402
from hpo.predictors import (  # noqa: E402
    ResidualMonitor,
    raw_loss_alert,
    read_curves,
    reference_band,
)
from hpo.predictors.evaluate import Source  # noqa: E402
from hpo.predictors.io import runs_from_frame  # noqa: E402
from hpo.predictors.monitor import planned  # noqa: E402

DRIFT_FROM, DRIFT_BY_END = 0.5, 0.02
#: the drift sizes (by the end) of the sensitivity table
DRIFTS = (0.02, 0.05, 0.1, 0.2)
CAUGHT_BEFORE = 0.75
#: the multiples of the siblings' largest clean excess tried by the sibling rule
SIBLING_C = (1.0, 2.0, 3.0, 5.0)
#: the fewest clean siblings with a level at a t^ for the sibling rule to judge it
MIN_SIBLINGS = 3
SIGMAS = (2.5, 3.0, 3.5, 4.0)
CPU_DIR = Path(__file__).resolve().parent / "results" / "diagnose" / "cpu"
QUICKSTART_DATA = Path(__file__).resolve().parent / "data" / "quickstart_seeds.csv.gz"


def drifted(t_hat: np.ndarray, losses: np.ndarray, by_end: float = DRIFT_BY_END) -> np.ndarray:
    """The losses with the slow drift of this benchmark injected (``by_end`` at t^ 1)."""
    ramp = np.clip((t_hat - DRIFT_FROM) / (1 - DRIFT_FROM), 0.0, None)
    return losses * (1 + by_end * ramp)


def cpu_source() -> Source:
    """The CPU family: width-32 proxies (seeds 0-2) and the clean width-48 seeds (0-4)."""
    paths = sorted(CPU_DIR.glob("w32_s?.csv.gz")) + sorted(CPU_DIR.glob("w48_s?.csv.gz"))
    frame = read_curves(paths)
    return Source("cpu", frame, float(frame.loc[frame["group"] == "w32", "n_params"].max()),
                  "train")


def quickstart_source() -> Source:
    """The quickstart study at 3 seeds (``benchmarks/quickstart_seeds.sh``, collected by
    ``--write-quickstart``): each seed's nine width-32 proxies and nine width-48 trials run to
    their end, one study (a ``study`` column) each."""
    frame = read_curves([QUICKSTART_DATA])
    return Source("quickstart", frame, 50_000.0, "train")


def write_quickstart(root: Path, seeds: list[int]) -> None:
    """``QUICKSTART_DATA`` from the study folders ``root/seed<N>``: every proxy, and every trial's
    whole curve (a stopped trial's ``--verify`` continuation), run ids prefixed by the seed."""
    import pandas as pd

    frames = []
    for seed in seeds:
        out = root / f"seed{seed}"
        paths = sorted((out / "proxies").glob("*.csv.gz"))
        for path in sorted((out / "trials").glob("*.csv.gz")):
            stem = path.name.removesuffix(".csv.gz")
            if "-" in stem or not (out / "trials" / f"{stem}-verify.csv.gz").exists():
                paths.append(path)
        frame = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
        frame["run_id"] = f"s{seed}-" + frame["run_id"].astype(str)
        frame["study"] = f"seed{seed}"
        frames.append(frame)
    QUICKSTART_DATA.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_csv(QUICKSTART_DATA, index=False)


def families_of(frame) -> dict[str, str]:
    """Each run's family (:func:`hpo.bench.data.family_key`: its study, its optimizer), fitted
    on its own proxies; ``""`` for every run of a file of one family."""
    first = frame.assign(_family=family_key(frame).to_numpy()).drop_duplicates("run_id")
    return dict(zip(first["run_id"], first["_family"], strict=True))


@dataclass
class Trace:
    """One run monitored without bands: its rows (t^, level, jump, noise) from the alignment
    window on, the widening of its allowances, whether its jump is judged and the end of the
    alignment window it was measured with (no alert before)."""

    rows: np.ndarray
    widening: float
    matched: bool
    after: float


def measure(curve, run, losses: np.ndarray,
            window: tuple[float, float] | None = None) -> Trace | None:
    """The monitor's trace of ``run`` with ``losses`` against ``curve`` (the planned schedule,
    as ``diagnose_run``), aligned on ``window`` (``None``: the product's); ``None`` where it
    has none."""
    mon = ResidualMonitor(curve, planned(run.controls), threshold=math.inf, align_window=window)
    try:
        mon.run(run.steps, losses)
    except ValueError:
        return None
    if mon.state.l_final is None:
        return None
    hist = np.array(mon.state.history, dtype=float).reshape(-1, 7)
    return Trace(hist[:, [0, 2, 3, 4]], mon.widening, mon.matched, mon.align_window[1])


def first_alert(tr: Trace, band, k: float) -> float | None:
    """The module's rule at k on a recorded trace (its alerts are the product's at
    ``BAND_SIGMAS``)."""
    t, level, jump, noise = tr.rows.T
    noise = np.where(np.isfinite(noise), noise, band.noise)
    a_level, a_jump = band.allowances(tr.matched)
    hit = np.abs(level) > np.maximum(k * noise + tr.widening * a_level, monitor.MIN_BAND)
    if tr.matched:
        jb = np.maximum(k * monitor._JUMP_NOISE * noise + tr.widening * a_jump,
                        monitor.MIN_BAND)
        hit |= np.isfinite(jump) & (np.abs(jump) > jb)
    hit &= t > tr.after
    i = np.nonzero(hit)[0]
    return float(t[i[0]]) if i.size else None


def fit_with_traces(fit: Callable[[], Any],
                    window: tuple[float, float] | None = None) -> tuple[Any, list]:
    """``fit()`` (a universal curve fitted with its calibration) with the monitor's alignment
    ``window`` (``None``: the product's), and the held-out proxies' traces its residual band
    was measured on. The calibration's two monitor functions are wrapped while it runs: the
    traces are not kept on the curve."""
    seen: list = []

    def trace(curve: Any, controls: Any, steps: np.ndarray,
              losses: np.ndarray) -> np.ndarray | None:
        return monitor.held_out_trace(curve, controls, steps, losses, align_window=window)

    def band(traces: Any) -> dict[str, Any]:
        rows = list(traces)
        seen.extend(rows)
        return monitor.calibrate_monitor(rows, align_window=window)

    hooks = {"held_out_trace": trace, "calibrate_monitor": band}
    kept = {name: getattr(calibrate, name) for name in hooks}
    try:
        for name, hook in hooks.items():
            setattr(calibrate, name, hook)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            curve = fit()
    finally:
        for name, original in kept.items():
            setattr(calibrate, name, original)
    return curve, seen


def band_at(traces: list, k: float, window: tuple[float, float] | None = None):
    """The residual band measured on ``traces`` with k = ``k`` and the alignment ``window``."""
    cal = monitor.calibrate_monitor(traces, align_window=window, band_sigmas=k)
    return monitor.ResidualBand(cal["noise"], cal["level"], cal["jump"],
                                cal["level_transfer"], cal["jump_transfer"])


def first_alert_scaled(tr: Trace, band, level_mult: float, jump_mult: float,
                       widen: bool) -> float | None:
    """The product's rule at ``BAND_SIGMAS`` with the misfit allowances times ``level_mult`` and
    ``jump_mult``, widened for a run beyond the proxies (``widen``) or not."""
    scaled = monitor.ResidualBand(band.noise, band.level * level_mult, band.jump * jump_mult,
                                  band.level_transfer * level_mult,
                                  band.jump_transfer * jump_mult)
    return first_alert(tr if widen else replace(tr, widening=1.0), scaled, monitor.BAND_SIGMAS)


def allowance_needed(tr: Trace, band, widen: bool) -> tuple[float, float]:
    """(level, jump): the smallest multiples of the family's allowances that keep ``tr``
    inside its bands at ``BAND_SIGMAS`` (0: its noise band alone does; inf: no multiple does)."""
    t, level, jump, noise = tr.rows.T
    k = monitor.BAND_SIGMAS
    noise = np.where(np.isfinite(noise), noise, band.noise)
    after = t > tr.after
    a_level, a_jump = band.allowances(tr.matched)
    w = tr.widening if widen else 1.0

    def need(excess: np.ndarray, allowance: float) -> float:
        excess = excess[np.isfinite(excess)]
        top = float(np.max(excess, initial=0.0))
        if top <= 0:
            return 0.0
        return top / (w * allowance) if allowance > 0 else math.inf

    nl = need(np.abs(level[after]) - np.maximum(k * noise[after], monitor.MIN_BAND), a_level)
    nj = 0.0
    if tr.matched:
        nj = need(np.abs(jump[after]) - np.maximum(k * monitor._JUMP_NOISE * noise[after],
                                                   monitor.MIN_BAND), a_jump)
    return nl, nj


def sibling_differences(records: list[dict], i: int, trace: Trace | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t^, level minus the median level of the other records, noise) of record ``i`` (its
    ``trace``, default its clean one) where at least ``MIN_SIBLINGS`` others have a level."""
    tr = trace or records[i]["clean"]
    t, level, _, noise = tr.rows.T
    others = np.array([np.interp(t, r["clean"].rows[:, 0], r["clean"].rows[:, 1],
                                 left=np.nan, right=np.nan)
                       for j, r in enumerate(records) if j != i])
    ok = (t > tr.after) & np.isfinite(noise)
    if not others.size:
        return t[:0], t[:0], t[:0]
    ok &= np.isfinite(others).sum(axis=0) >= MIN_SIBLINGS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an all-NaN column is masked out by ok
        median = np.nanmedian(others, axis=0)
    return t[ok], (level - median)[ok], noise[ok]


def sibling_rule(records: list[dict], c: float) -> dict:
    """The sibling rule with multiple ``c`` on the clean targets of one source: false alerts,
    and the drift (``DRIFT_BY_END``) caught on the clean ones."""
    k = monitor.BAND_SIGMAS
    groups: dict = {}
    for r in records:
        if not r["proxy"]:
            groups.setdefault((r["family"], r["group"]), []).append(r)
    out = {"judged": 0, "false": 0, "clean": 0, "caught": 0, "caught_end": 0}
    for members in groups.values():
        if len(members) < MIN_SIBLINGS + 1:
            continue
        diffs = [sibling_differences(members, i) for i in range(len(members))]
        excess = [float(np.max(np.abs(d) - k * n, initial=0.0)) for _, d, n in diffs]
        for i, r in enumerate(members):
            if not diffs[i][0].size:
                continue
            allowance = c * max(excess[:i] + excess[i + 1:])
            out["judged"] += 1
            if excess[i] > allowance:
                out["false"] += 1
                continue
            bad = r["drifts"].get(DRIFT_BY_END)
            if bad is None:
                continue
            out["clean"] += 1
            t, d, n = sibling_differences(members, i, bad)
            hit = np.nonzero(np.abs(d) > k * n + allowance)[0]
            if hit.size:
                out["caught_end"] += 1
                out["caught"] += bool(t[hit[0]] < CAUGHT_BEFORE)
    return out


def _fit_families(src: Source, split: str, families: dict[str, str], sigmas: tuple[float, ...],
                  window: tuple[float, float] | None
                  ) -> tuple[dict[str, Any], dict[str, dict[float, monitor.ResidualBand]]]:
    """Per family of ``families`` with proxies: its universal curve fitted on ``split``, and
    the residual band measured on its held-out proxies' traces at each k of ``sigmas``."""
    frame = src.frame
    curves, bands = {}, {}
    for fam in sorted(set(families.values())):
        try:
            curve, traces = fit_with_traces(
                lambda fam=fam: fit_proxy_curves(frame, src.proxy_max_params, split=split,
                                                 families=[fam])[fam], window)
        except ValueError:
            continue  # a family without proxies
        curves[fam] = curve
        bands[fam] = {k: band_at(traces, k, window) for k in sigmas}
    return curves, bands


def _monitor_runs(src: Source, split: str, families: dict[str, str], curves: dict[str, Any],
                  drifts: tuple[float, ...], window: tuple[float, float] | None
                  ) -> tuple[list[tuple], list[dict], int]:
    """Every complete run of a fitted family monitored clean and (targets) drifted: rows
    (run_id, family, proxy, product diagnosis, clean trace, drifted trace, drifted diagnosis,
    run), records (the traces of the allowance, drift-size and sibling tables) and how often
    the recorded-trace rule differs from the product's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [r for r in runs_from_frame(src.frame, split=split, min_points=3) if r.complete]
    rows = []  # (run_id, family, proxy, product diagnosis, clean trace, drifted trace, raw)
    records: list[dict] = []  # the traces the allowance, drift-size and sibling tables use
    mismatched = 0
    for run in runs:
        family = families.get(run.run_id, "")
        curve = curves.get(family)
        if curve is None:
            continue
        proxy = run.controls.n_params is not None and \
            run.controls.n_params <= src.proxy_max_params
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = diagnose_run(run, curve, align_window=window)
            if d.max_abs_residual is None:
                continue  # no point after the alignment window, or controls it cannot predict
            clean = measure(curve, run, run.losses, window)
            bad_run = None if proxy else replace(run, losses=drifted(run.t_hat, run.losses))
            bad = None if bad_run is None else measure(curve, bad_run, bad_run.losses, window)
            d_bad = None if bad_run is None else diagnose_run(bad_run, curve,
                                                              align_window=window)
        band = reference_band(curve)
        if clean is None or first_alert(clean, band, monitor.BAND_SIGMAS) != d.alert_t:
            mismatched += 1
        if bad is not None and first_alert(bad, band, monitor.BAND_SIGMAS) != d_bad.alert_t:
            mismatched += 1
        rows.append((run.run_id, family, proxy, d, clean, bad, d_bad, run))
        if clean is not None:
            sized = {} if proxy else {x: bad if x == DRIFT_BY_END else measure(
                curve, run, drifted(run.t_hat, run.losses, x), window) for x in drifts}
            records.append({"run_id": run.run_id, "family": family, "group": run.group,
                            "proxy": proxy, "clean": clean, "drifts": sized,
                            "band": band, "alert_t": d.alert_t})
    return rows, records, mismatched


def _counts_by_k(rows: list[tuple], bands: dict[str, dict[float, monitor.ResidualBand]],
                 sigmas: tuple[float, ...]) -> dict[float, dict[str, int]]:
    """Per k of ``sigmas``, the recorded-trace rule on ``rows``: false alerts on the clean
    proxies and targets, and the drift caught before ``CAUGHT_BEFORE`` on the clean targets."""
    by_k = {}
    for k in sigmas:
        c = {"false_proxies": 0, "proxies": 0, "false_targets": 0, "targets": 0, "caught": 0,
             "clean_targets": 0}
        for _, family, proxy, _, clean, bad, _, _ in rows:
            false = clean is not None and first_alert(clean, bands[family][k], k) is not None
            key = "proxies" if proxy else "targets"
            c[key] += 1
            c["false_" + key] += false
            if not proxy and not false and bad is not None:
                c["clean_targets"] += 1
                hit = first_alert(bad, bands[family][k], k)
                c["caught"] += hit is not None and hit < CAUGHT_BEFORE
        by_k[k] = c
    return by_k


def _product(rows: list[tuple], raw_x: float, window: tuple[float, float] | None) -> dict:
    """The product's own diagnoses of ``rows`` (at ``BAND_SIGMAS``): false alerts, the drift
    caught, its level bands on the targets, and the raw-loss rule at ``raw_x`` on the drift."""
    targets = [r for r in rows if not r[2]]
    clean_targets = [r for r in targets if r[3].alert_t is None]
    caught = [r[6].alert_t for r in clean_targets if r[6] is not None]
    early = [a for a in caught if a is not None and a < CAUGHT_BEFORE]
    raw_t = [raw_loss_alert(r[7].t_hat, drifted(r[7].t_hat, r[7].losses), raw_x,
                            align_window=window) for r in targets]
    level_bands = [float(r[3].threshold) for r in targets] or [math.nan]
    return {
        "false_proxies": sum(1 for r in rows if r[2] and r[3].alert_t is not None),
        "proxies": sum(1 for r in rows if r[2]),
        "false_targets": len(targets) - len(clean_targets), "targets": len(targets),
        "caught": len(early), "clean_targets": len(clean_targets),
        "median_alert_t": float(np.median([a if a is not None else math.inf
                                           for a in caught])) if caught else math.nan,
        "level_band_targets": [min(level_bands), max(level_bands)],
        "raw_caught": sum(1 for a in raw_t if a is not None and a < CAUGHT_BEFORE),
        "false_alerts": {r[0]: {"alert_t": r[3].alert_t, "kind": r[3].alert_kind}
                         for r in rows if r[3].alert_t is not None},
        "drift_alerts": {r[0]: {"alert_t": r[6].alert_t, "kind": r[6].alert_kind}
                         for r in clean_targets if r[6] is not None
                         and r[6].alert_t is not None},
    }


def run_source(src: Source, split_wanted: str, sigmas: tuple[float, ...],
               drifts: tuple[float, ...] = DRIFTS,
               window: tuple[float, float] | None = None) -> dict:
    """Everything this benchmark measures on one source, with the monitor's alignment
    ``window`` (``None``: the product's)."""
    frame = src.frame
    split = split_wanted if (frame["split"] == split_wanted).any() else src.split
    families = families_of(frame)
    curves, bands = _fit_families(src, split, families, sigmas, window)
    rows, records, mismatched = _monitor_runs(src, split, families, curves, drifts, window)
    raw_x = clean_raw_x([r[7] for r in rows], align_window=window) if rows else math.nan
    out = {"split": split, "runs": len(rows), "raw_rule_x": raw_x, "mismatched": mismatched,
           "by_k": {}, "product": {}, "_records": records}
    out["by_k"] = _counts_by_k(rows, bands, sigmas)
    # the product (BAND_SIGMAS): its own diagnoses
    out["product"] = _product(rows, raw_x, window)
    out["bands"] = {fam: {"noise": b[monitor.BAND_SIGMAS].noise,
                          "level": b[monitor.BAND_SIGMAS].level,
                          "jump": b[monitor.BAND_SIGMAS].jump,
                          "level_transfer": b[monitor.BAND_SIGMAS].level_transfer,
                          "jump_transfer": b[monitor.BAND_SIGMAS].jump_transfer}
                    for fam, b in bands.items() if monitor.BAND_SIGMAS in b}
    return out


def leave_one_out(results: dict[str, dict], sigmas: tuple[float, ...]) -> list[tuple]:
    """For each source: k chosen on the others (the smallest without a false alert on their
    clean runs; the largest tried where none is) and what it gives on the source."""
    rows = []
    for name, res in results.items():
        others = [r for n, r in results.items() if n != name]
        safe = [k for k in sigmas if all(o["by_k"][k]["false_proxies"] == 0
                                         and o["by_k"][k]["false_targets"] == 0
                                         for o in others)]
        k = min(safe) if safe else max(sigmas)
        rows.append((name, k, res["by_k"][k]))
    return rows


def drift_sizes(records: list[dict]) -> dict:
    """For each drift size: the clean targets, how many alert before ``CAUGHT_BEFORE`` and by
    the end, and the median first alert (inf where fewer than half alert)."""
    clean = [r for r in records if not r["proxy"] and r["alert_t"] is None]
    out = {}
    for x in sorted({x for r in clean for x in r["drifts"]}):
        alerts = [first_alert(r["drifts"][x], r["band"], monitor.BAND_SIGMAS)
                  if r["drifts"].get(x) is not None else None for r in clean]
        ts = [math.inf if a is None else a for a in alerts]
        out[x] = {"clean": len(clean), "caught": sum(t < CAUGHT_BEFORE for t in ts),
                  "caught_end": sum(math.isfinite(t) for t in ts),
                  "median_alert_t": float(np.median(ts)) if ts else math.nan}
    return out


def allowance_law(results: dict[str, dict], widen: bool) -> list[dict]:
    """Each source held out: the multiples of the allowances its clean targets need (largest),
    the multiples the other sources' need (at least 1), and what those give on the source."""
    needs = {}
    for name, res in results.items():
        pairs = [allowance_needed(r["clean"], r["band"], widen)
                 for r in res["_records"] if not r["proxy"]]
        needs[name] = (max((p[0] for p in pairs), default=0.0),
                       max((p[1] for p in pairs), default=0.0))
    rows = []
    for name, res in results.items():
        others = [needs[o] for o in results if o != name]
        ml = max([1.0] + [n[0] for n in others])
        mj = max([1.0] + [n[1] for n in others])
        false = caught = clean = 0
        records = res["_records"]
        for r in records:
            if first_alert_scaled(r["clean"], r["band"], ml, mj, widen) is not None:
                false += 1
                continue
            bad = r["drifts"].get(DRIFT_BY_END)
            if bad is not None:
                clean += 1
                hit = first_alert_scaled(bad, r["band"], ml, mj, widen)
                caught += hit is not None and hit < CAUGHT_BEFORE
        rows.append({"source": name, "needs": needs[name], "level_mult": ml, "jump_mult": mj,
                     "false": false, "runs": len(records), "caught": caught, "clean": clean})
    return rows


def sibling_table(results: dict[str, dict]) -> tuple[dict, list[tuple]]:
    """The sibling rule at each c of ``SIBLING_C`` on each source, and each source held out:
    the smallest c without a false alert on the others (``None`` where none is)."""
    by_c = {name: {c: sibling_rule(res["_records"], c) for c in SIBLING_C}
            for name, res in results.items()}
    loso = []
    for name in results:
        safe = [c for c in SIBLING_C if all(by_c[o][c]["false"] == 0 for o in results
                                            if o != name)]
        c = min(safe) if safe else None
        loso.append((name, c, None if c is None else by_c[name][c]))
    return by_c, loso


def _parse_args() -> argparse.Namespace:
    """The command line's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="*", default=["cpu", "quickstart", *SOURCES])
    parser.add_argument("--split", default="train",
                        help="split monitored where a source has it (Marin: val only)")
    parser.add_argument("--sigmas", nargs="*", type=float, default=list(SIGMAS),
                        help="values of k (BAND_SIGMAS) to compare")
    parser.add_argument("--drifts", nargs="*", type=float, default=list(DRIFTS),
                        help="drift sizes by the end of the sensitivity table (fractions)")
    parser.add_argument("--align-window", nargs=2, type=float, default=None,
                        metavar=("LO", "HI"), help="the monitor's alignment window to measure "
                        f"(default: the product's, {monitor.ALIGN_WINDOW})")
    parser.add_argument("--write-quickstart", type=Path, default=None, metavar="ROOT",
                        help="first collect the quickstart seeds' curves from ROOT/seed<N> "
                             f"(benchmarks/quickstart_seeds.sh) into {QUICKSTART_DATA.name}")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args()


def _print_product(results: dict[str, dict], window: tuple[float, float]) -> None:
    """Print the drift benchmark's header and the product's table per source."""
    print(f"Drift +{100 * DRIFT_BY_END:g}% by the end from t^ {DRIFT_FROM}; caught means an "
          f"alert before t^ {CAUGHT_BEFORE}. k = {monitor.BAND_SIGMAS:g}; alignment window "
          f"t^ {window[0]:g}-{window[1]:g}.\n")
    print("| source | split | level band on targets % | clean proxies: false alerts | clean "
          "targets: false alerts | drift caught < 0.75 (of clean targets) | median alert t^ "
          "| raw rule x % | raw rule caught < 0.75 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, res in results.items():
        p = res["product"]
        lo, hi = p["level_band_targets"]
        print(f"| {name} | {res['split']} | {100 * lo:.2f}-{100 * hi:.2f} | "
              f"{p['false_proxies']} of {p['proxies']} | {p['false_targets']} of "
              f"{p['targets']} | {p['caught']} of {p['clean_targets']} | "
              f"{p['median_alert_t']:.2f} | {100 * res['raw_rule_x']:.2f} | "
              f"{p['raw_caught']} of {p['targets']} |")


def _print_allowances(results: dict[str, dict]) -> None:
    """Print each family's residual band at ``BAND_SIGMAS``."""
    print("\nAllowances at k (log units; transfer: runs whose schedule no proxy ran):\n")
    print("| source | family | noise | level | jump | level, transfer | jump, transfer |")
    print("|---|---|---|---|---|---|---|")
    for name, res in results.items():
        for fam, b in res["bands"].items():
            print(f"| {name} | {fam or '-'} | {100 * b['noise']:.3f}% | {100 * b['level']:.2f}% "
                  f"| {100 * b['jump']:.2f}% | {100 * b['level_transfer']:.2f}% | "
                  f"{100 * b['jump_transfer']:.2f}% |")


def _print_drift_sizes(results: dict[str, dict]) -> dict[str, dict]:
    """Print the drift-size table; the drift sizes' results per source
    (:func:`drift_sizes`)."""
    print(f"\nDrift sizes: +x by the end from t^ {DRIFT_FROM}, on the clean targets:\n")
    print("| source | drift by the end | caught < 0.75 | caught by the end | median alert t^ |")
    print("|---|---|---|---|---|")
    sizes = {name: drift_sizes(res["_records"]) for name, res in results.items()}
    for name, by_x in sizes.items():
        for x, c in by_x.items():
            print(f"| {name} | +{100 * x:g}% | {c['caught']} of {c['clean']} | "
                  f"{c['caught_end']} of {c['clean']} | {c['median_alert_t']:.2f} |")
    return sizes


def _print_allowance_law(results: dict[str, dict]) -> dict[bool, list[dict]]:
    """Print the allowance law's table; its rows with and without the widening (keys
    ``True``, ``False``: :func:`allowance_law`)."""
    laws = {widen: allowance_law(results, widen) for widen in (True, False)}
    print("\nThe allowance clean targets need, in multiples of the proxies' (largest over the "
          "source's clean targets; with / without the widening for a run beyond the proxies), "
          "and each source held out: the multiples the other sources need, checked on it:\n")
    print("| source | level need | jump need | held out, widened: multiples / false alerts / "
          "drift caught < 0.75 | held out, not widened: multiples / false alerts / caught |")
    print("|---|---|---|---|---|")
    for a, b in zip(laws[True], laws[False], strict=True):
        print(f"| {a['source']} | {a['needs'][0]:.2f} / {b['needs'][0]:.2f} | "
              f"{a['needs'][1]:.2f} / {b['needs'][1]:.2f} | "
              f"{a['level_mult']:.2f}, {a['jump_mult']:.2f} / {a['false']} of {a['runs']} / "
              f"{a['caught']} of {a['clean']} | {b['level_mult']:.2f}, {b['jump_mult']:.2f} / "
              f"{b['false']} of {b['runs']} / {b['caught']} of {b['clean']} |")
    return laws


def _print_siblings(results: dict[str, dict]) -> tuple[dict, list[tuple]]:
    """Print the sibling rule's tables; its results per source and c, and each source held
    out (:func:`sibling_table`)."""
    by_c, sib_loso = sibling_table(results)
    print(f"\nSiblings (clean targets of one group with at least {MIN_SIBLINGS} others): "
          "false alerts, and the drift caught before 0.75 / by the end:\n")
    print("| source | c | judged | false alerts | drift caught < 0.75 | by the end |")
    print("|---|---|---|---|---|---|")
    for name, rows_c in by_c.items():
        for c, r in rows_c.items():
            print(f"| {name} | {c:g} | {r['judged']} | {r['false']} | {r['caught']} of "
                  f"{r['clean']} | {r['caught_end']} of {r['clean']} |")
    print("\nSiblings, each source held out (c: the smallest without a false alert on the "
          "others):\n")
    print("| source left out | c chosen | false alerts | drift caught < 0.75 |")
    print("|---|---|---|---|")
    for name, c, r in sib_loso:
        if r is None:
            print(f"| {name} | none (every c alerts on another source) | - | - |")
        else:
            print(f"| {name} | {c:g} | {r['false']} of {r['judged']} | {r['caught']} of "
                  f"{r['clean']} |")
    return by_c, sib_loso


def _print_other_k(results: dict[str, dict], sigmas: tuple[float, ...]) -> None:
    """Print the rule at each k of ``sigmas`` per source, and k chosen leaving one source
    out."""
    print("\nOther k on the same runs:\n")
    print("| source | k | false alerts: proxies | false alerts: targets | drift caught < 0.75 "
          "(of clean targets) |")
    print("|---|---|---|---|---|")
    for name, res in results.items():
        for k, c in res["by_k"].items():
            print(f"| {name} | {k:g} | {c['false_proxies']} of {c['proxies']} | "
                  f"{c['false_targets']} of {c['targets']} | {c['caught']} of "
                  f"{c['clean_targets']} |")
    print("\nLeave one source out: k chosen on the others, checked on the source:\n")
    print("| source left out | k chosen | false alerts: proxies | false alerts: targets | "
          "drift caught < 0.75 |")
    print("|---|---|---|---|---|")
    for name, k, c in leave_one_out(results, sigmas):
        print(f"| {name} | {k:g} | {c['false_proxies']} of {c['proxies']} | "
              f"{c['false_targets']} of {c['targets']} | {c['caught']} of "
              f"{c['clean_targets']} |")


def _write_json(path: Path, results: dict[str, dict], sizes: dict[str, dict],
                laws: dict[bool, list[dict]], by_c: dict, sib_loso: list[tuple]) -> None:
    """Write every table's results to ``path`` as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"drift": {"from": DRIFT_FROM, "by_end": DRIFT_BY_END},
            "band_sigmas": monitor.BAND_SIGMAS,
            "sources": {n: {**{key: v for key, v in r.items() if key != "_records"},
                            "by_k": {f"{k:g}": c for k, c in r["by_k"].items()},
                            "drift_sizes": {f"{x:g}": c for x, c in sizes[n].items()},
                            "siblings": {f"{c:g}": v for c, v in by_c[n].items()}}
                        for n, r in results.items()},
            "allowance_law": {"widened": laws[True], "not_widened": laws[False]},
            "siblings_held_out": [{"source": n, "c": c, **(r or {})}
                                  for n, c, r in sib_loso]}
    path.write_text(json.dumps(data, indent=1) + "\n")


def main() -> None:
    args = _parse_args()
    if args.write_quickstart is not None:
        write_quickstart(args.write_quickstart, [0, 1, 2])
    window = monitor.ALIGN_WINDOW if args.align_window is None else tuple(args.align_window)
    sigmas = tuple(sorted(set(args.sigmas) | {monitor.BAND_SIGMAS}))
    drifts = tuple(sorted(set(args.drifts) | {DRIFT_BY_END}))
    local = {"cpu": cpu_source, "quickstart": quickstart_source}
    named = [s for s in args.sources if s not in local]
    sources = [local[s]() for s in args.sources if s in local] + \
        (load_sources(named) if named else [])
    results = {src.name: run_source(src, args.split, sigmas, drifts, window)
               for src in sources}
    _print_product(results, window)
    _print_allowances(results)
    sizes = _print_drift_sizes(results)
    laws = _print_allowance_law(results)
    by_c, sib_loso = _print_siblings(results)
    _print_other_k(results, sigmas)
    bad = {n: r["mismatched"] for n, r in results.items() if r["mismatched"]}
    if bad:
        print(f"\nrecorded-trace rule differs from the product's on: {bad}")
    if args.json:
        _write_json(args.json, results, sizes, laws, by_c, sib_loso)

if __name__ == "__main__":
    main()
