"""The text of params and losses in a study's progress lines."""

from __future__ import annotations

from typing import Any


def params_text(params: dict[str, Any]) -> str:
    """``{name=value, ...}``, sorted by name, floats to 4 significant digits."""
    return "{" + ", ".join(f"{k}={fmt_param(v)}" for k, v in sorted(params.items())) + "}"


def fmt_param(v: Any) -> str:
    """One param value: a float to 4 significant digits, anything else as ``str``."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def fmt_number(x: Any) -> str:
    """A loss to 4 decimals, or ``n/a`` for ``None``."""
    return "n/a" if x is None else f"{float(x):.4f}"
