"""The bench's output: the text table, the stop explanations and the trade-off plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hpo.bench.data import BenchGroup
from hpo.bench.metrics import RAY_METHODS, base_name, compare_to_goal

__all__ = ["format_table", "format_explanations", "plot_tradeoff"]


def format_table(result: Mapping[str, Any], knobs: bool = False) -> str:
    """The per-mode table: method, mean and max regret (%), mean compute, best stopped."""
    lines = []
    for mode, block in result["modes"].items():
        oracle = block["methods"].get("oracle@0.2")
        lines.append(f"\n[{mode}]" + (f"  oracle@0.2 (every loser stopped at t^ 0.2) spends "
                                       f"{oracle['mean_compute']:.3f}" if oracle else ""))
        header = (f"{'method':<46} {'mean regret':>11} {'max regret':>10} {'compute':>8} "
                  f"{'best stopped':>12}")
        lines.append(header)
        lines.append("-" * len(header))
        for name, m in block["methods"].items():
            if not knobs and "@" in name and not name.startswith(
                    ("current_best", "predicted_best", "oracle")):
                continue
            if m["groups"] == 0:
                continue
            lines.append(
                f"{name:<46} {m['mean_regret']:>10.3%} {m['max_regret']:>10.3%} "
                f"{m['mean_compute']:>8.3f} {m['best_stopped']:>6}/{m['groups']:<5}"
            )
        lines += _comparison_lines(block.get("comparison")
                                   or compare_to_goal(block["methods"], block.get("floor")))
    return "\n".join(lines)


def format_explanations(result: Mapping[str, Any], groups: Sequence[BenchGroup]) -> str:
    """Every stop of the default ``collapse`` row, one line per stopped trial with the
    pruner's sentence, per mode and group (``hpo bench --explain``)."""
    names = {g.name: g for g in groups}
    lines = []
    for mode, block in result["modes"].items():
        entry = block["methods"].get("collapse")
        if entry is None:
            continue
        lines.append(f"[{mode}] collapse stops:")
        for row in entry["per_group"]:
            g = names.get(row["group"])
            for i, why in enumerate(row.get("reasons", [])):
                if why.startswith("stopped"):
                    best = " (the group's best)" if g is not None and i == g.best else ""
                    run = g.trials[i].run_id if g is not None else i
                    lines.append(f"  {row['group']} trial {i} ({run}){best}: {why}")
    return "\n".join(lines)


def _comparison_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The goal line and the peers no row of ours matches, as printed under a mode's table."""
    goal = comparison["goal"]
    if goal["budget"] is None:
        return []
    out = []
    if goal["compute"] is not None:
        beaten = ", ".join(goal["beaten_by"]) or "none"
        ratio = goal["compute"] / goal["oracle"] if goal["oracle"] else float("nan")
        out.append(
            f"goal (compute <= {goal['factor']:g} x oracle@0.2 = {goal['budget']:.3f} at max "
            f"regret <= {goal['max_regret']:.1%}, every peer spending no more has higher mean "
            f"regret): {'met' if goal['met'] else 'not met'}; default spends "
            f"{goal['compute']:.3f} ({ratio:.2f} x oracle); peers spending no more at no "
            f"higher mean regret: {beaten}; our rows within the budget and regret: "
            f"{', '.join(goal['met_by']) or 'none'}")
    if goal.get("floor") is not None:
        verdict = ("within the budget" if goal.get("attainable")
                   else "above the budget: no method can meet the goal in this order")
        out.append(f"sequential floor {goal['floor']:.3f} (trials better than every earlier "
                   f"one by more than {goal['max_regret']:.1%} must finish): {verdict}")
    lost = [(n, p) for n, p in comparison["peers"].items() if p["matched_by"] is None]
    lost.sort(key=lambda x: x[1]["mean_compute"])
    out.append("peers no collapse row matches (as low mean and max regret at no more compute): "
               + (", ".join(f"{n} ({p['mean_compute']:.3f}, {p['mean_regret']:.3%} / "
                            f"{p['max_regret']:.3%})" for n, p in lost) or "none"))
    return out


def plot_tradeoff(result: Mapping[str, Any], path: str) -> None:
    """Mean regret against mean compute, one line per method over its knob, one panel per
    mode; the t^ = 0.2 budget as a vertical line."""
    from hpo._extras import pyplot

    plt = pyplot()

    modes = list(result["modes"])
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        families: dict[str, list[tuple[float, float]]] = {}
        for name, m in result["modes"][mode]["methods"].items():
            if m["groups"] == 0:
                continue
            fam = base_name(name)
            families.setdefault(fam, []).append((m["mean_compute"], 100 * m["mean_regret"]))
        colors = plt.get_cmap("tab20").colors
        for k, (fam, pts) in enumerate(sorted(families.items())):
            pts.sort()
            xs, ys = zip(*pts, strict=True)
            ours = fam.startswith("collapse")
            style = "o-" if ours else ("s:" if fam in RAY_METHODS else ".--")
            if fam == "oracle":
                style = "*"
            ax.plot(xs, ys, style, label=fam, lw=2.5 if ours else 1,
                    color="k" if fam == "collapse" else colors[k % len(colors)])
        if result.get("budget_t0.2") is not None:
            ax.axvline(result["budget_t0.2"], color="k", lw=0.8, ls=":",
                       label="budget: losers stopped at t^=0.2")
        ax.set_xlabel("mean compute (fraction of the full sweep)")
        ax.set_ylabel("mean regret (%)")
        ax.set_yscale("symlog", linthresh=0.05)
        ax.set_ylim(bottom=-0.002)
        ax.set_title(mode)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
