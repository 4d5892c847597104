"""The README's Optuna example runs as pasted and prints what the README shows."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> tuple[str, str]:
    """The first ``python`` block under "The pruner in your Optuna study" and the output
    block after it."""
    text = README.read_text()
    section = text[text.index("## The pruner in your Optuna study"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    shown = re.search(r"```\n(.*?)```", section[code.end():], re.S)
    assert shown is not None
    return code.group(1), shown.group(1)


def test_the_optuna_example_prints_what_the_readme_shows() -> None:
    code, shown = _example()
    out = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out):
        warnings.simplefilter("ignore")  # the curve's range warnings go to stderr
        exec(compile(code, "README example", "exec"), {"__name__": "readme_example"})
    # the steps trained, the best trial and the stopped trial's sentence, as pasted
    assert out.getvalue() == shown
