"""Training compute in FLOPs, counted as 6 N D (N all parameters, D tokens trained)."""

from __future__ import annotations


def flops(n_params: float, tokens: float) -> float:
    """Training compute, 6 N D."""
    return 6.0 * float(n_params) * float(tokens)
