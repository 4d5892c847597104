"""Errors the CLI turns into one line and exit code 2."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(ValueError):
    """Bad user input: the message names the flag or field and the value given.

    The CLI prints ``hpo <command>: error: <message>`` and exits with code 2, no traceback
    (``hpo --debug <command>`` shows the traceback instead).
    """

    def report_lines(self) -> list[str]:
        """What the CLI prints after ``hpo <command>: error: ``: one line, then any more."""
        return [str(self)]
