"""The ``hpo`` command line.

Each subcommand lives in its own module ``hpo.cli.<name>`` that defines
``add_parser(subparsers) -> argparse.ArgumentParser`` and ``run(args) -> int``. Modules load lazily
so ``hpo --help`` and light commands never import torch or ray.

Bad input raises :class:`hpo._errors.UsageError`; the CLI prints one line naming the flag and the
value and exits with code 2 (a study file with several errors: one line each). ``hpo --debug
COMMAND`` shows the traceback instead. A flag argparse itself rejects (unknown, missing its
value, not a number) is one line too, ``hpo COMMAND: error: ...``, exit code 2. A command that
needs an extra that is not installed (torch for ``hpo train``) says which in one line and exits
with 1.

The flags are spelled one way across the commands (the table in :mod:`hpo.cli._flags`); the old
spellings stay accepted, hidden from ``--help``.

A warning prints as one line, ``hpo COMMAND: warning: ...``, without Python's source line
(:func:`one_line_warnings`); ``--debug`` keeps Python's format.

Output cut short (``hpo recipe --json | head -1``: the reader closes the pipe) ends the command
quietly, no traceback, with exit code 141 (128 + SIGPIPE), what a shell reports for unix tools
killed by SIGPIPE, so ``set -o pipefail`` scripts can still tell the output was cut.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn, TextIO

from hpo._errors import UsageError
from hpo._extras import MissingExtra

__all__ = ["main", "build_parser", "one_line_warnings"]

#: exit code when stdout is closed early (128 + SIGPIPE, as a shell reports ``yes | head -1``)
EXIT_BROKEN_PIPE = 141

# subcommand name -> module implementing it
_COMMANDS: dict[str, str] = {
    "train": "hpo.cli.train",
    "fit-curve": "hpo.cli.curves",
    "eval-predictor": "hpo.cli.curves",
    "run": "hpo.cli.run",
    "validate": "hpo.cli.run",
    "submit": "hpo.cli.run",
    "recipe": "hpo.cli.recipe",
    "bench": "hpo.cli.bench",
    "diagnose": "hpo.cli.diagnose",
}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="hpo",
        description="Early-stopping HPO for LLM training from universal (collapsed) loss curves.",
    )
    from hpo import __version__

    parser.add_argument("--version", action="version", version=f"collapse-hpo {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on bad input, show the traceback instead of the one-line error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    seen: set[str] = set()
    for module_name in _COMMANDS.values():
        if module_name in seen:
            continue
        seen.add(module_name)
        importlib.import_module(module_name).add_parser(sub)
    parser.error = _one_line_error(parser, "hpo")  # type: ignore[method-assign]
    for name, command in sub.choices.items():  # also after the command: hpo run --debug ...
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="on bad input, show the traceback instead of the one-line "
                                  "error")
        command.error = _one_line_error(command, f"hpo {name}")  # type: ignore[method-assign]
    return parser


def _one_line_error(parser: argparse.ArgumentParser, prog: str) -> Callable[[str], NoReturn]:
    """argparse's ``error`` for ``parser``: one line, ``PROG: error: MESSAGE``, exit code 2
    (argparse's own prints the usage first)."""

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{prog}: error: {' '.join(message.split())}\n")

    return error


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hpo`` console script; returns the process exit code.

    A closed stdout (``| head``) ends the command quietly with :data:`EXIT_BROKEN_PIPE`.
    """
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a closed pipe fails here, not at interpreter exit
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a broken pipe elsewhere (a socket): a real error, keep its traceback
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    with _printable_arguments():
        return _run_command(argv)


def _run_command(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    error = _one_line_error(parser, f"hpo {args.command}")  # named with the command
    if extra:
        error(f"unrecognized arguments: {' '.join(extra)}")
    flag = _given_dash_dash(argv)
    if flag is not None:
        error(f"argument {flag}: expected one argument")
    try:
        with contextlib.nullcontext() if args.debug else one_line_warnings(args.command):
            return int(args.func(args) or 0)
    except UsageError as exc:
        if args.debug:
            raise
        first, *more = exc.report_lines()
        print(f"hpo {args.command}: error: {first}", *more, sep="\n", file=sys.stderr)
        return 2
    except MissingExtra as exc:
        if args.debug:
            raise
        print(f"hpo {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"hpo {args.command}: interrupted", file=sys.stderr)
        return 130


@contextlib.contextmanager
def one_line_warnings(command: str) -> Iterator[None]:
    """While a command runs, a warning prints as one line on stderr,
    ``hpo COMMAND: warning: MESSAGE`` (its category named unless it is a plain ``UserWarning``),
    without the source file and line Python's default format adds. Which warnings show is still
    up to the warnings filters; the previous display is restored on exit, so library users
    keep Python's."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        kind = "" if category is UserWarning else f" ({category.__name__})"
        text = " ".join(str(message).split())
        try:
            print(f"hpo {command}: warning{kind}: {text}", file=file or sys.stderr, flush=True)
        except OSError:
            pass  # stderr gone: a warning is not worth failing the command over

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _given_dash_dash(argv: Sequence[str]) -> str | None:
    """The flag of an ``--flag=--`` before the ``--`` that ends the flags: argparse (3.11) reads
    it as an empty list, not as the value ``--`` nor as a missing value, for every kind of
    flag; None when there is none."""
    for arg in argv:
        if arg == "--":
            return None
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and eq and value == "--":
            return flag
    return None


@contextlib.contextmanager
def _printable_arguments() -> Iterator[None]:
    """While a command runs, what it echoes from the command line prints whatever it holds: an
    argument that is not valid UTF-8 (a file name; Python reads its bytes as lone surrogates)
    goes to stdout as those bytes (``surrogateescape``, as Python does under the C locale) and
    to stderr escaped (``backslashreplace``), not as a UnicodeEncodeError at the first print.
    The streams' previous error handlers are restored on exit."""
    changed = []
    for stream, errors in ((sys.stdout, "surrogateescape"), (sys.stderr, "backslashreplace")):
        old = getattr(stream, "errors", None)
        if old in (None, errors, "surrogateescape", "backslashreplace") or not hasattr(
                stream, "reconfigure"):
            continue  # a StringIO holds any str; a tolerant handler stays
        try:
            stream.reconfigure(errors=errors)
        except (OSError, ValueError):
            continue
        changed.append((stream, old))
    try:
        yield
    finally:
        for stream, old in changed:
            with contextlib.suppress(OSError, ValueError):
                stream.reconfigure(errors=old)


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone (poll reports an error on the pipe); True when that
    cannot be told."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return True


def _silence_stdout() -> None:
    """Point stdout at devnull, so that flushing what is left at exit cannot fail again
    (the recipe of the Python docs, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout without a file descriptor (replaced in-process): nothing left to flush
