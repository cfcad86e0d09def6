"""Pictures of a plan: Gantt chart, memory over time, stage costs serial vs post-overlap.

matplotlib is an optional dependency (``pip install 'ppplan[plot]'``), imported inside
``render_png`` only; it draws on an Agg canvas without touching pyplot's global state.
The timeline is ``planner.core.simulate``'s prediction for the plan's embedded costs.
"""

from __future__ import annotations

import io
import os
from typing import Any

from planner.core.errors import InputError
from planner.core.outputs import write_bytes_atomic
from planner.core.plan import Plan
from planner.core.schedule import OVERLAP, ActionKind
from planner.core.simulate import SimResult, simulate

__all__ = ["render_png", "png_bytes", "require_matplotlib", "COLORS"]

COLORS = {ActionKind.F: "#4C72B0", ActionKind.I: "#DD8452", ActionKind.W: "#55A868", ActionKind.B: "#8172B2",
          OVERLAP: "#C44E52"}
"""Bar colour per action kind (B = I + W in one action; OVERLAP = fused F&B pair)."""
_LABELS = {ActionKind.F: "F forward", ActionKind.I: "I input-grad", ActionKind.W: "W weight-grad",
           ActionKind.B: "B full backward", OVERLAP: "F&B overlapped"}
_IDLE = "#ececec"
_MS = 1e3


def require_matplotlib(option: str = "--png") -> None:
    """Raise ``InputError`` naming ``option`` when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(option, "drawing needs matplotlib, which is not installed",
                         "pip install 'ppplan[plot]'") from None


def render_png(plan: Plan, path: str | os.PathLike[str], *, sim: SimResult | None = None,
               option: str = "--png") -> None:
    """Draw ``plan`` to a PNG at ``path`` (written atomically)."""
    write_bytes_atomic(path, png_bytes(plan, sim=sim, option=option), what=option)


def png_bytes(plan: Plan, *, sim: SimResult | None = None, option: str = "--png") -> bytes:
    """``plan`` drawn as PNG bytes (so a command can write them together with its other outputs)."""
    require_matplotlib(option)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sim = sim or simulate(plan.parsed_schedule(), plan.parsed_stage_costs())
    fig = Figure(figsize=(14, 8.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 2, height_ratios=(3, 2))
    _gantt(fig.add_subplot(grid[0, :]), plan, sim)
    _memory(fig.add_subplot(grid[1, 0]), plan, sim)
    _stage_costs(fig.add_subplot(grid[1, 1]), plan)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _gantt(ax: Any, plan: Plan, sim: SimResult) -> None:
    from matplotlib.patches import Patch

    ranks = len(sim.compiled.order)
    bars: dict[tuple[str, float], dict[int, list[tuple[float, float]]]] = {}
    px_per_ms = 1250 / max(sim.step_time * _MS, 1e-9)
    for n, a in enumerate(sim.actions):
        r, t0, dur = sim.rank_of[n], sim.start[n] * _MS, (sim.end[n] - sim.start[n]) * _MS
        shade = 1.0 if (a.stage // plan.pp) % 2 == 0 else 0.6
        bars.setdefault((a.kind, shade), {}).setdefault(r, []).append((t0, dur))
        if dur * px_per_ms >= 9:
            label = "|".join(str(p.microbatch) for p in a.parts)
            ax.text(t0 + dur / 2, r, label, ha="center", va="center", fontsize=6, color="white",
                    clip_on=True)
    mean_px = sum(e - s for s, e in zip(sim.start, sim.end)) * _MS * px_per_ms / max(len(sim.start), 1)
    edge = 0.3 if mean_px >= 6 else 0.0  # white separators only where bars are wide enough
    for (kind, shade), per_rank in bars.items():
        for r, spans in per_rank.items():
            ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=COLORS[kind], alpha=shade,
                           edgecolor="white", linewidth=edge)
    ax.set_facecolor(_IDLE)
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.set_xlim(0, sim.step_time * _MS)
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax.set_xlabel("time (ms)")
    kinds = [k for k in COLORS if any(key[0] == k for key in bars)]
    handles = [Patch(color=COLORS[k], label=_LABELS[k]) for k in kinds]
    handles.append(Patch(color=_IDLE, label="idle (bubble)"))
    if plan.num_stages > plan.pp:
        handles.append(Patch(color="#999999", alpha=0.6, label="lighter: odd virtual chunk"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    name = plan.solver.schedule or plan.solver.name or ""
    ax.set_title(f"{plan.model.get('name', '')}  pp {plan.pp}  vpp {plan.num_stages // plan.pp}  "
                 f"{plan.num_microbatches} microbatches  schedule {name}:  step "
                 f"{sim.step_time * _MS:.1f} ms, bubble {sim.bubble_fraction:.1%} "
                 "(numbers in bars: microbatch, F|B for pairs)", fontsize=10)


def _memory(ax: Any, plan: Plan, sim: SimResult) -> None:
    static = plan.parsed_stage_costs().static_per_rank()
    end = sim.step_time * _MS
    for r, trace in enumerate(sim.memory):
        base = static[r] if r < len(static) else 0
        times = [t * _MS for t, _ in trace] + [end]
        gib = [(base + held) / 2**30 for _, held in trace]
        ax.step(times, gib + gib[-1:], where="post", linewidth=1, label=f"rank {r}")
    limits = plan.memory_limits  # one per rank on a mixed fleet: one dashed line per distinct limit
    for k, limit in enumerate(sorted({v for v in (limits if isinstance(limits, list) else [limits]) if v})):
        ax.axhline(limit / 2**30, color="black", linestyle="--", linewidth=1, label="limit" if k == 0 else None)
    ax.set_xlim(0, end)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("GiB (static + activations)")
    ax.set_title("predicted memory per rank", fontsize=10)
    ax.legend(fontsize=7, ncol=1 if len(sim.memory) <= 9 else 2, frameon=False, loc="upper left",
              bbox_to_anchor=(1.0, 1.0))


def _stage_costs(ax: Any, plan: Plan) -> None:
    sc = plan.stage_costs
    stages = range(plan.num_stages)
    serial = [(sc["f"][s] + sc["i"][s] + sc["w"][s]) * _MS for s in stages]
    fused = {(e["f_stage"], e["b_stage"]): e["time"] for e in sc.get("fused", [])}
    overlap = [(fused.get((s, s), sc["f"][s] + sc["i"][s]) + sc["w"][s]) * _MS for s in stages]
    x = list(stages)
    ax.bar([i - 0.2 for i in x], serial, width=0.4, color="#8c8c8c", label="serial F + I + W")
    ax.bar([i + 0.2 for i in x], overlap, width=0.4, color=COLORS[OVERLAP],
           label="post-overlap (F beside I) + W")
    ax.set_ylim(0, max(serial + overlap) * 1.3)
    ranks = plan.ranks()
    ax.set_xticks(x, [f"s{s}\nr{ranks[s]}" for s in x], fontsize=7 if plan.num_stages <= 16 else 5)
    ax.set_ylabel("ms per microbatch")
    used = any(a.kind == OVERLAP for acts in plan.parsed_schedule().values() for a in acts)
    ax.set_title("stage cost: serial vs post-overlap" + ("" if used else
                 " (this schedule runs serially)"), fontsize=10)
    ax.legend(fontsize=8, frameon=False)
