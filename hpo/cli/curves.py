"""``hpo fit-curve`` and ``hpo eval-predictor``: universal curves and held-out evaluation.

``hpo fit-curve CURVES... --output curve.json [--proxy-max-params P]`` fits a universal curve on
the runs given (optionally only the proxies, those with n_params <= P) and writes its JSON.

``hpo eval-predictor CURVES... --proxy-max-params P [P2 ...] --at 0.1,0.2,0.3
[--split val|train ...] [--max-targets N] [--json OUT|-]`` treats each file as a source: it fits
on the file's proxies (n_params <= P), predicts every other complete run's final loss from each
prefix fraction with every method, prints a table per source and the median over sources.

The flags are spelled as in :mod:`hpo.cli._flags`; the old ``--out``, ``--max-params`` and
``--curves F...`` still work.

Heavy lifting lives in :mod:`hpo.predictors`; this module only parses, validates and prints.
"""

from __future__ import annotations

import argparse
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo.cli._flags import (
    add_curves,
    add_json,
    curve_files,
    hidden_alias,
    human_stream,
    json_path,
    output_path,
    write_json,
)

__all__ = ["add_parser", "run_fit_curve", "run_eval_predictor", "parse_count", "parse_fractions"]

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9}


def parse_count(flag: str, text: str) -> float:
    """A positive count such as ``93e6``, ``93M`` or ``1.5B``; ``UsageError`` naming ``flag``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgG]?)\s*", text)
    if not m:
        raise UsageError(f"{flag}: expected a positive number like 93e6 or 93M, got {text!r}")
    value = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag}: must be > 0, got {text!r}")
    return value


def parse_fractions(flag: str, text: str) -> tuple[list[float], list[str]]:
    """Comma-separated fractions in (0, 1): values and the labels as given."""
    labels = [p.strip() for p in text.split(",") if p.strip()]
    if not labels:
        raise UsageError(f"{flag}: expected fractions like 0.1,0.2,0.3, got {text!r}")
    values = []
    for lab in labels:
        try:
            v = float(lab)
        except ValueError:
            raise UsageError(f"{flag}: {lab!r} is not a number (in {text!r})") from None
        if not 0 < v < 1:
            raise UsageError(f"{flag}: fractions must be in (0, 1), got {lab!r}")
        values.append(v)
    if len(set(labels)) != len(labels):
        raise UsageError(f"{flag}: repeated fraction in {text!r}")
    return values, labels


def read_split(flag: str, paths: Sequence[str], split: str) -> Any:
    """The curve files ``paths`` as one validated frame that has rows of ``split``: the one check
    every command that reads curves makes. Raises :class:`UsageError` naming ``flag`` for a
    missing or malformed file, and ``--split`` (with the splits the files have) for a split
    they lack."""
    from hpo.predictors import read_curves, require_split

    if split not in ("train", "val"):
        raise UsageError(f"--split: expected train or val, got {split!r}")
    for p in paths:
        if not Path(p).exists():
            raise UsageError(f"{flag}: file not found: {p!r}")
    try:
        frame = read_curves(list(paths))
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    try:
        require_split(frame, split, source=" ".join(map(str, paths)), hint="--split {split}")
    except ValueError as exc:
        raise UsageError(f"--split: {exc}") from None
    return frame


def run_fit_curve(args: argparse.Namespace) -> int:
    """``hpo fit-curve``: fit a universal curve and write its JSON."""
    from hpo.predictors import fit_universal_curve, runs_from_frame

    files = curve_files(args)
    if args.output is None:
        raise UsageError("--output: required, the file to write the fitted curve to "
                         "(e.g. --output curve.json)")
    out = output_path("--output", args.output, inputs=files)
    max_params = (parse_count("--proxy-max-params", args.proxy_max_params)
                  if args.proxy_max_params is not None else None)
    df = read_split("CURVES", files, args.split)
    runs = runs_from_frame(df, split=args.split)
    if max_params is not None:
        runs = [r for r in runs if r.controls.n_params is not None
                and r.controls.n_params <= max_params]
        if not runs:
            raise UsageError(f"--proxy-max-params: no run with n_params <= "
                             f"{args.proxy_max_params!r}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            curve = fit_universal_curve(runs, calibrate=not args.no_calibrate)
    except ValueError as exc:
        raise UsageError(f"CURVES: {exc}") from None
    curve.to_json(out)
    print(f"fitted a {curve.form} universal curve on {curve.n_proxies} run(s) -> {out}")
    for note in curve.notes:
        print(f"note: {note}")
    return 0


def _per_file(flag: str, values: list[str], n: int) -> list[str]:
    """One value for every file, or one per file."""
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise UsageError(f"{flag}: give one value or one per file ({n}), got {len(values)}: "
                         f"{' '.join(values)}")
    return values


def source_name(path: str) -> str:
    """A source's name: its file name without the curve-format suffixes."""
    name = Path(path).name
    for suffix in (".gz", ".csv", ".parquet", ".pq"):
        name = name.removesuffix(suffix)
    return name


def run_eval_predictor(args: argparse.Namespace) -> int:
    """``hpo eval-predictor``: a held-out evaluation table per source (and JSON)."""
    from hpo.predictors.evaluate import Source, evaluate_sources, format_sources

    files = curve_files(args)
    n = len(files)
    proxy_max = [parse_count("--proxy-max-params", v)
                 for v in _per_file("--proxy-max-params", args.proxy_max_params, n)]
    splits = _per_file("--split", args.split, n)
    fractions, labels = parse_fractions("--at", args.at)
    if args.level is None:
        from hpo.predictors.predict import LEVEL

        args.level = LEVEL
    if not 0 < args.level < 1:
        raise UsageError(f"--level: must be in (0, 1), got {args.level!r}")
    if args.max_targets is not None and args.max_targets < 1:
        raise UsageError(f"--max-targets: must be >= 1, got {args.max_targets!r}")
    target = json_path(args.json, inputs=files)
    names = [source_name(p) for p in files]
    if len(set(names)) != n:
        raise UsageError(f"CURVES: two files have one name: {' '.join(files)}")
    sources = [Source(name, read_split("CURVES", [path], sp), pm, sp)
               for name, path, pm, sp in zip(names, files, proxy_max, splits, strict=True)]
    try:
        result = evaluate_sources(
            sources, fractions, level=args.level, fraction_labels=labels,
            max_targets=args.max_targets, seed=args.seed,
        )
    except ValueError as exc:
        raise UsageError(f"CURVES / --proxy-max-params / --split: {exc}") from None
    print(format_sources(result), file=human_stream(target))
    if target is not None:
        write_json(target, result, indent=1, default=float)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fit-curve`` and ``eval-predictor``; returns the ``fit-curve`` parser."""
    fit = subparsers.add_parser(
        "fit-curve",
        help="fit a universal normalized loss curve on proxy runs",
        description="Fit a universal curve on the runs in CURVES (curve format) and write JSON.",
    )
    add_curves(fit, "curve files (.csv, .csv.gz, .parquet) in the curve format")
    output = fit.add_argument("--output", default=None, metavar="CURVE_JSON",
                              help="where to write the fitted curve (JSON); required")
    hidden_alias(fit, "--out", output)  # its old spelling
    proxy_max = fit.add_argument("--proxy-max-params", default=None, metavar="P",
                                 help="runs with n_params <= P are the proxies: fit on them "
                                      "only (e.g. 93e6 or 93M; default: every run)")
    hidden_alias(fit, "--max-params", proxy_max)  # its old spelling
    fit.add_argument("--split", default="train", help="curve split to fit on: train or val")
    fit.add_argument("--no-calibrate", action="store_true",
                     help="skip the cross-fitted calibration of the prediction intervals")
    fit.set_defaults(func=run_fit_curve)

    ev = subparsers.add_parser(
        "eval-predictor",
        help="evaluate final-loss predictors on held-out runs",
        description="Runs with n_params <= P are proxies; every other complete run is a target "
        "predicted from each prefix fraction by every method.",
    )
    add_curves(ev, "curve files (curve format); each file is a source of its own, with its own "
                   "proxies")
    ev.add_argument("--proxy-max-params", required=True, nargs="+", metavar="P",
                    help="runs with n_params <= P are proxies (e.g. 150e6 or 93M): one value, "
                    "or one per file")
    ev.add_argument("--at", default="0.1,0.2,0.3",
                    help="comma-separated prefix fractions (default 0.1,0.2,0.3)")
    ev.add_argument("--split", nargs="+", default=["train"],
                    help="curve split to use, train or val: one, or one per file")
    ev.add_argument("--max-targets", type=int, default=None, metavar="N",
                    help="evaluate a seeded random sample of at most N targets per source")
    ev.add_argument("--seed", type=int, default=0, help="seed of the target sample (default 0)")
    add_json(ev, "the results", note=", and the tables to stderr")
    ev.add_argument("--level", type=float, default=None,
                    help="predictive-interval level (default: the predictors' LEVEL, 0.8)")
    ev.set_defaults(func=run_eval_predictor)
    return fit
