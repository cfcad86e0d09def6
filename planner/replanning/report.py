"""Text form of a ``ReplanResult``: drift per MoE layer and stage, then the decision."""

from __future__ import annotations

from planner.replanning import ReplanResult

__all__ = ["render_report", "layer_range"]

_SHOWN_CHANGE = 0.05
"""Layers whose imbalance moved less than this are summarised in one line."""


def layer_range(first: int, end: int) -> str:
    """A stage's layers in the half-open notation ``plan`` prints: ``[0,6)`` is layers 0..5."""
    return f"[{first},{end})"


def render_report(r: ReplanResult) -> str:
    """Drift table (changed MoE layers, every stage), step times, migration, decision."""
    lines = ["MoE layer  type            imbalance then -> now    MaxVio then -> now"]
    quiet = 0
    for d in r.layers:
        if abs(d.now_imbalance - d.then_imbalance) < _SHOWN_CHANGE:
            quiet += 1
            continue
        lines.append(f"{d.layer:>9}  {d.type:<15} {d.then_imbalance:>9.2f} -> {d.now_imbalance:<8.2f}"
                     f"{d.then_max_vio:>10.2f} -> {d.now_max_vio:.2f}")
    if quiet:
        lines.append(f"  ({quiet} more MoE layers changed imbalance by less than {_SHOWN_CHANGE})")
    lines += ["", "stage rank    layers   F+I+W ms then -> now   change"]
    for s in r.stages:
        lines.append(f"{s.stage:>5} {s.rank:>4} {layer_range(*s.layers):>9}   {s.then_s * 1e3:>10.2f} -> "
                     f"{s.now_s * 1e3:<8.2f}{s.slowdown:>+8.1%}")
    rp = r.plan.extra["replan"]
    fits = "fits memory" if not r.old_problem else f"INVALID: {r.old_problem}"
    gap = f", {r.gap_recovered:.0%} of the gap to the best {r.best_step_s:.4f} s" \
        if r.gap_recovered is not None else ""
    moves = ", ".join(f"{m.layer}:{m.from_rank}->{m.to_rank}" for m in r.migration.moves) or "none"
    lines += [
        "",
        f"old plan, old routing   {r.then_step_s:.4f} s",
        f"old plan, new routing   {r.old_step_s:.4f} s  ({fits})",
        f"re-planned              {r.new_step_s:.4f} s  gain {r.gain:+.1%}{gap}",
        f"stages                  {' '.join(layer_range(a, b) for a, b in r.plan.bounds())}",
        f"moved layers            {moves}",
        f"migration               {r.migration.total_bytes / 1e9:.1f} GB, {r.migration.seconds:.2f} s"
        f" at {r.migration.bandwidth / 1e9:.0f} GB/s per GPU; break-even {rp['break_even_steps']} steps",
        f"recommendation          {'replan' if r.recommended else 'keep'} ({r.reason})",
    ]
    return "\n".join(lines)
