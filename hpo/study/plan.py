"""The proxy plan of a study: the proxy runs its universal curve is fitted on, one per width,
seed and combination of the ``proxies.vary`` values."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hpo.study.checks import check_before_run
from hpo.study.formatting import params_text
from hpo.study.schema import Study

# check_before_run and params_text: hpo.cli.run imports them from this module
__all__ = ["ProxySpec", "check_before_run", "params_text", "plan_proxies"]


@dataclass(frozen=True)
class ProxySpec:
    """One planned proxy run."""

    run_id: str
    width: int
    depth: int
    seed: int
    overrides: tuple[tuple[str, Any], ...]  # recipe settings varied for this proxy


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def plan_proxies(study: Study) -> list[ProxySpec]:
    """The proxy runs: widths x seeds x every combination of the ``vary`` values."""
    depth = study.proxies["depth"] or study.model["depth"]
    vary = study.proxies["vary"]
    names = sorted(vary)
    out = []
    for width, seed in itertools.product(study.proxies["widths"], study.proxies["seeds"]):
        for combo in itertools.product(*(vary[n] for n in names)):
            overrides = tuple(zip(names, combo, strict=True))
            tag = "".join(f"-{n}{_fmt(v)}" for n, v in overrides)
            out.append(ProxySpec(f"proxy-w{width}d{depth}{tag}-s{seed}", width, depth, seed,
                                 overrides))
    return out
