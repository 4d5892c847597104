"""``hpo diagnose``: the collapse residual of runs trained anywhere, against a reference curve.

``hpo diagnose CURVES... --reference curve.json [--split train|val] [--threshold X]
[--plot OUT.png] [--json OUT|-]`` monitors every run of the curve files with the residual rule
(:mod:`hpo.predictors.monitor`) and prints one row per run: its threshold, its largest residual
and the t^ of its first alert. The JSON holds, per run, ``alert_t`` (null where nothing fired),
``max_abs_residual``, ``threshold`` and the residual over t^.
"""

from __future__ import annotations

import argparse
import math

from hpo._errors import UsageError
from hpo.cli._flags import (
    add_curves,
    add_json,
    curve_files,
    human_stream,
    json_path,
    output_path,
    write_json,
)
from hpo.cli.curves import read_split

__all__ = ["add_parser", "run"]

_DESCRIPTION = """\
Monitor each run in CURVES against the reference universal curve (fitted on proxies by
`hpo fit-curve` or `hpo run`): the run is aligned on t^ 0.1-0.3, and its residual
log L - log(L_final * lhat(t^)), averaged over the last 5% of t^, alerts where it leaves the
threshold band. The threshold is calibrated on the reference's proxies so that none of them
alerts, and widens for a run beyond the proxies' size, TPP or tau as its prediction interval
does; --threshold sets one for every run instead.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``diagnose``."""
    p = subparsers.add_parser(
        "diagnose", help="flag runs that drift off the universal curve (collapse residual)",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_curves(p, "curve files (.csv, .csv.gz, .parquet) in the curve format")
    p.add_argument("--reference", required=True, metavar="CURVE_JSON",
                   help="the universal curve to compare against (hpo fit-curve's JSON, or a "
                        "study's universal_curve.json)")
    p.add_argument("--split", default="train", help="curve split to monitor: train or val")
    p.add_argument("--threshold", type=float, default=None, metavar="X",
                   help="a fixed alert threshold on the level in log units (0.01: 1%% of the "
                        "loss) for every run, no jump (default: the reference's calibrated "
                        "bands, each run's noise plus the misfit allowance)")
    p.add_argument("--plot", default=None, metavar="OUT.png",
                   help="also plot the residuals against the threshold band")
    add_json(p, "each run's alert, largest residual and residual over t^",
             note=", and the table to stderr")
    p.set_defaults(func=run)
    return p


def summary_line(diagnoses: list) -> str:
    """The line under the table: how many of the judged runs alert (and where), and the runs
    that could not be judged, with why (``RunDiagnosis.note``)."""
    alerts = [d for d in diagnoses if d.alert_t is not None]
    unjudged = [d for d in diagnoses if d.note is not None]
    judged = len(diagnoses) - len(unjudged)
    line = (f"{len(alerts)} of {judged} judged run(s) alert"
            + (": " + ", ".join(f"{d.run_id} at t^ {d.alert_t:.2f}" for d in alerts)
               if alerts else ""))
    if unjudged:
        line += (f"; {len(unjudged)} run(s) could not be judged: "
                 + ", ".join(f"{d.run_id} ({d.note})" for d in unjudged))
    return line


def run(args: argparse.Namespace) -> int:
    """Validate, monitor every run, print the table; returns 0."""
    from hpo.diagnose import diagnose_runs, format_diagnoses
    from hpo.predictors import load_universal_curve, reference_band, runs_from_frame

    files = curve_files(args)
    if args.threshold is not None and not (math.isfinite(args.threshold) and args.threshold > 0):
        raise UsageError(f"--threshold: must be a finite number > 0, "
                         f"got {args.threshold!r}")
    plot = None if args.plot is None else output_path("--plot", args.plot,
                                                      inputs=[*files, args.reference])
    target = json_path(args.json, inputs=[*files, args.reference])
    out = human_stream(target)
    try:
        curve = load_universal_curve(args.reference)
    except ValueError as exc:
        raise UsageError(f"--reference: {exc}") from None
    if args.threshold is None and reference_band(curve) is None:
        raise UsageError(f"--reference: {args.reference!r} has no residual band (fitted "
                         "without calibration, or on fewer than 3 proxies); refit it with "
                         "`hpo fit-curve` or give --threshold")
    frame = read_split("CURVES", files, args.split)
    runs = runs_from_frame(frame, split=args.split, min_points=1)
    if plot is not None:
        from hpo._extras import require

        require("matplotlib", "plots")  # before the work, not after it
    diagnoses = diagnose_runs(runs, curve, args.threshold)
    print(format_diagnoses(diagnoses), file=out)
    print(summary_line(diagnoses), file=out)
    if plot is not None:
        from hpo.diagnose import plot_residuals

        plot_residuals(diagnoses, str(plot))
        print(f"wrote {plot}", file=out)
    if target is not None:
        band = reference_band(curve)
        data = {"reference": str(args.reference), "split": args.split,
                "threshold": args.threshold,
                "band": None if args.threshold is not None or band is None else vars(band),
                "runs": {d.run_id: d.to_dict() for d in diagnoses}}
        write_json(target, data, indent=1)
    return 0
