"""The flags several ``hpo`` commands share, spelled one way everywhere.

=========================  ==============================================================
spelling                   meaning
=========================  ==============================================================
``CURVES...``              curve files, positional (fit-curve, diagnose, eval-predictor,
                           bench); the old ``--curves F...`` gives them instead
``--proxy-max-params P``   runs of at most P parameters are the proxies
``--output PATH``          where to write (run, submit: a folder; fit-curve, train: a file)
``--json OUT``             also write the results as JSON to OUT; ``--json -``: to stdout
``--dashboard URL``        Ray's job-submission (dashboard) address (submit);
                           ``--address`` stays the Ray cluster address of ``hpo run``
=========================  ==============================================================

The old spellings (``--curves F...``, ``--max-params``, ``--out``, ``hpo submit --address``) stay
accepted as hidden aliases (:func:`hidden_alias`), so scripts written for them keep working.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpo._errors import UsageError

__all__ = ["STDOUT", "hidden_alias", "add_curves", "curve_files", "add_json", "output_path",
           "json_path", "write_json", "human_stream"]

#: the value of ``--json`` that means stdout
STDOUT = "-"


def hidden_alias(parser: argparse.ArgumentParser, old: str, of: argparse.Action) -> None:
    """Accept the option string ``old`` as ``of`` (same dest, nargs, type), hidden from help."""
    kwargs: dict[str, Any] = {"dest": of.dest, "nargs": of.nargs, "type": of.type,
                              "metavar": of.metavar, "default": argparse.SUPPRESS,
                              "help": argparse.SUPPRESS}
    if of.const is not None:
        kwargs["const"] = of.const
    parser.add_argument(old, **kwargs)


def add_curves(parser: argparse.ArgumentParser, help: str) -> None:
    """The positional ``CURVES...``, and the old ``--curves F...`` (hidden) of ``bench`` and
    ``eval-predictor``, accepted by every command that reads curves. Read them with
    :func:`curve_files`, which says when neither or both were given."""
    action = parser.add_argument("curves", nargs="+", metavar="CURVES", default=None, help=help)
    action.required = False  # the files may come from --curves instead: curve_files() checks
    # its own dest: the positional, always consumed (empty), would overwrite a shared one
    parser.add_argument("--curves", dest="curves_flag", nargs="+", metavar="FILE",
                        default=None, help=argparse.SUPPRESS)


def curve_files(args: argparse.Namespace) -> list[str]:
    """The curve files given, positional or through the old ``--curves``; :class:`UsageError`
    when neither or both were given."""
    given, old = args.curves, getattr(args, "curves_flag", None)
    if given and old:
        raise UsageError(f"CURVES: give the curve files once, as CURVES..., not also as "
                         f"--curves; got {' '.join(given)!r} and --curves {' '.join(old)!r}")
    files = given or old
    if not files:
        raise UsageError(f"CURVES: no curve file given (the files come first: "
                         f"hpo {getattr(args, 'command', 'COMMAND')} CURVES... --flag value ...)")
    return list(files)


def add_json(parser: argparse.ArgumentParser, what: str, *, bare: bool = False,
             note: str = "") -> None:
    """``--json OUT`` writes ``what`` as JSON to the file OUT, ``--json -`` to stdout; with
    ``bare``, a plain ``--json`` means stdout too. Read it with :func:`json_path`."""
    extra: dict[str, Any] = {"nargs": "?", "const": STDOUT} if bare else {}
    parser.add_argument("--json", default=None, metavar="OUT", **extra,
                        help=f"also write {what} as JSON to the file OUT; --json - prints it to "
                             f"stdout{' (so does a bare --json)' if bare else ''}{note}")


def output_path(flag: str, value: str, *, make_parents: bool = False,
                inputs: Sequence[str] = ()) -> Path:
    """``value`` as a file to write, checked before any work: not empty, not a folder, not one
    of the ``inputs``, in a folder that exists (with ``make_parents``: that can be made, which
    :func:`write_json` does)."""
    if not value.strip():
        raise UsageError(f"{flag}: expected a file path, got {value!r}")
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag}: {value!r} is a folder; give a file path")
    for name in inputs:
        if Path(name).exists() and path.exists() and path.samefile(name):
            raise UsageError(f"{flag}: {value!r} is one of the input files; it would be "
                             "overwritten")
    if not path.parent.is_dir():
        if not make_parents:
            raise UsageError(f"{flag}: folder does not exist: {str(path.parent)!r}")
        existing = next((p for p in path.parents if p.exists()), Path("."))
        if not existing.is_dir():
            raise UsageError(f"{flag}: {str(existing)!r} is a file, not a folder "
                             f"(in {value!r})")
    return path


def json_path(value: str | None, *, make_parents: bool = False,
              inputs: Sequence[str] = ()) -> Path | str | None:
    """The checked ``--json`` target: ``None`` (not given), :data:`STDOUT`, or a file path."""
    if value is None or value == STDOUT:
        return value
    return output_path("--json", value, make_parents=make_parents, inputs=inputs)


def write_json(target: Path | str, data: Any, **dumps: Any) -> None:
    """Write ``data`` as JSON to ``target`` (a path, or :data:`STDOUT`); a file written says so
    on stdout."""
    text = json.dumps(data, **dumps) + "\n"
    if target == STDOUT:
        sys.stdout.write(text)
        return
    try:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(text)
    except OSError as exc:
        raise UsageError(f"--json: cannot write {str(target)!r}: {exc.strerror or exc}") from None
    print(f"wrote {target}")


def human_stream(json_target: Path | str | None) -> Any:
    """Where the human-readable output goes: stderr when the JSON takes stdout, else stdout."""
    return sys.stderr if json_target == STDOUT else sys.stdout
