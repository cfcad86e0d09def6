"""The prediction a replay is judged against: the plan's own, or one re-made here.

A prediction only means something for the same model size on the same device. A
plan made from a profile measured on this device at the replay's width and sequence
length (``plan.costs``: source ``measured``, ``device``, ``scale``, ``seq_len``)
is replayed exactly and its prediction is copied. Any other plan (analytical, or
measured elsewhere) keeps its partition and schedule, and its step is re-predicted:
a cost table measured here (``costs_here``) -> stage costs for the same partition ->
``planner.core.simulate``.

[Note: full backward] Split I + W costs more than one full backward (the split walks
the autograd graph twice). For a stage whose every backward is a B action, the
re-prediction scales its I and W so that I + W equals the measured full backward.

[Note: torch first stage] torch's runtime makes ``I`` a no-op on stage 0 (it has no
input gradient to send) and runs the whole backward in ``W``. When the schedule
splits stage 0's backward, the re-prediction moves stage 0's input-gradient time
into its weight-gradient time, which is what the engine executes.

[Note: calibrated prediction] A plan whose ``costs["calibration"]``, or a table whose
``meta["calibration"]``, holds a ``calibrate.Calibration`` (measured by a separate
calibration replay, see [Note: runtime calibration]) is predicted with it: alone
durations, the measured slowdown while ranks share cores, P2P latency and step
overhead (``calibrate.predict``), after the two adjustments above.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from planner.core.costs import CostTable
from planner.core.plan import Plan
from planner.core.simulate import SimResult, simulate
from planner.core.stage_costs import StageCosts, stage_costs
from planner.core.schedule import ActionKind
from planner.replay.calibrate import Calibration, predict, torch_first_stage

__all__ = ["is_exact_replay", "copied_prediction", "repredict", "REPREDICTED"]

REPREDICTED = "re-predicted from a profile measured here"


def is_exact_replay(plan: Plan, *, device: str, scale: float, seq_len: int) -> bool:
    """Whether ``plan`` was made from a profile of this device, width and sequence length."""
    c = plan.costs
    return (c.get("source") == "measured" and c.get("device") == device
            and math.isclose(float(c.get("scale", 1.0)), scale)
            and int(c.get("seq_len") or seq_len) == seq_len)


def _summary(sim: SimResult) -> dict[str, Any]:
    return {"step_time_s": sim.step_time, "busy_s": sim.busy,
            "bubble_s": sim.bubble, "bubble_fraction": sim.bubble_fraction}


def _timeline(plan: Plan, sc: StageCosts, cal: dict | None) -> tuple[float, SimResult]:
    """(step seconds, timeline) of ``plan``'s schedule on ``sc``: calibrated when ``cal`` is
    given ([Note: calibrated prediction]), else the core simulator's."""
    if cal:
        return predict(plan.parsed_schedule(), sc, Calibration.from_dict(cal))
    sim = simulate(plan.parsed_schedule(), sc)
    return sim.step_time, sim


def copied_prediction(plan: Plan) -> tuple[dict[str, Any], SimResult]:
    """The plan's prediction, and the simulated timeline of what torch executes (the trace and
    the calibration compare actions with it; [Note: torch first stage])."""
    cal = plan.costs.get("calibration")
    _, sim = _timeline(plan, _torch_first_stage(plan.parsed_stage_costs(), plan), cal)
    pred = {**_summary(sim), "source": "plan (profile measured on this device at this scale"
            + (", calibrated)" if cal else ")")}
    for key in ("step_time_s", "bubble_fraction", "peak_memory_bytes", "busy_s"):
        if plan.predicted.get(key) is not None:
            pred[key] = plan.predicted[key]
    return pred, sim


def _torch_first_stage(sc: StageCosts, plan: Plan) -> StageCosts:
    """See [Note: torch first stage]."""
    return torch_first_stage(sc, plan.parsed_schedule())


def _full_backward(sc: StageCosts, plan: Plan, table: CostTable) -> StageCosts:
    """See [Note: full backward]."""
    b_of = table.meta.get("full_backward") or {}
    kinds: dict[int, set[str]] = {}
    for acts in plan.parsed_schedule().values():
        for a in acts:
            for p in a.parts:
                if p.kind in (ActionKind.B, ActionKind.I):
                    kinds.setdefault(p.stage, set()).add(p.kind)
    i, w = list(sc.i), list(sc.w)
    for s, (lo, hi) in enumerate(plan.bounds()):
        if kinds.get(s) != {ActionKind.B} or not b_of:
            continue
        b = sum(b_of[table.layers[k].type] for k in range(lo, hi))
        ratio = b / (i[s] + w[s]) if i[s] + w[s] > 0 else 1.0
        i[s], w[s] = i[s] * ratio, w[s] * ratio
    fused = {k: t - sc.i[k[1]] + i[k[1]] for k, t in sc.fused.items()}
    return replace(sc, i=tuple(i), w=tuple(w), fused=fused)


def repredict(plan: Plan, table: CostTable) -> tuple[dict[str, Any], SimResult]:
    """Same partition and schedule, costs measured here; the plan's own figures kept aside."""
    sc = stage_costs(table, plan.bounds(), plan.ranks())
    sc = _torch_first_stage(_full_backward(sc, plan, table), plan)
    cal = table.meta.get("calibration")
    step, sim = _timeline(plan, sc, cal)
    pred = {**_summary(sim), "step_time_s": step, "source": REPREDICTED, "peak_memory_bytes": None,
            "costs": {"device": table.device, "scale": table.scale, "seq_len": table.seq_len,
                      "p2p_latency_s": table.p2p.latency_s, "p2p_bandwidth": table.p2p.bandwidth,
                      "layer_types": _type_costs(table)},
            "plan": {"step_time_s": plan.predicted.get("step_time_s"),
                     "mfu": plan.predicted.get("mfu"), "costs": plan.costs}}
    if cal:
        pred["calibration"] = cal
    return pred, sim


def _type_costs(table: CostTable) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    b_of = table.meta.get("full_backward") or {}
    for lc in table.layers:
        out.setdefault(lc.type, {"f": lc.f, "i": lc.i, "w": lc.w, "b": b_of.get(lc.type)})
    return out
