"""The prediction a replay is judged against: the plan's own, or one re-made here.

A prediction only means something for the same model size on the same device. A
plan made from a profile measured on this device at the replay's width and sequence
length (``plan.costs``: source ``measured``, ``device``, ``scale``, ``seq_len``)
is replayed exactly and its prediction is copied. Any other plan (analytical, or
measured elsewhere) keeps its partition and schedule, and its step is re-predicted:
a cost table measured here (``costs_here``) -> stage costs for the same partition ->
``planner.core.simulate``. With ``--link emulated`` the table also holds the link's
times and the planner's hiding of fused pairs (``planner.replay.link`` [Note:
re-prediction with the link]).

A cost table measured here holds each layer's full backward (``LayerCost.b``); the
stage costs carry it and the simulator times every B action with it
(``planner.core.costs`` [Note: full backward]).

[Note: torch first stage] torch's runtime makes ``I`` a no-op on stage 0 (it has no
input gradient to send) and runs the whole backward in ``W``. When the schedule
splits stage 0's backward, the re-prediction times stage 0's I as nothing and its W
as the full backward (``StageCosts.b_time``), which is what the engine executes.

[Note: calibrated prediction] A plan whose ``costs["calibration"]``, or a table whose
``meta["calibration"]``, holds a ``calibrate.Calibration`` (measured by a separate
calibration replay, see [Note: runtime calibration]) is predicted with it: alone
durations, the measured slowdown while ranks share cores, P2P latency and step
overhead (``calibrate.predict``), after the adjustment above.
"""

from __future__ import annotations

import math
from typing import Any

from planner.core.costs import CostTable
from planner.core.plan import Plan
from planner.core.simulate import SimResult, simulate
from planner.core.stage_costs import StageCosts, stage_costs
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


def repredict(plan: Plan, table: CostTable) -> tuple[dict[str, Any], SimResult]:
    """Same partition and schedule, costs measured here; the plan's own figures kept aside."""
    sc = stage_costs(table, plan.bounds(), plan.ranks())
    sc = _torch_first_stage(sc, plan)
    cal = table.meta.get("calibration")
    step, sim = _timeline(plan, sc, cal)
    pred = {**_summary(sim), "step_time_s": step, "source": REPREDICTED, "peak_memory_bytes": None,
            "costs": {"device": table.device, "scale": table.scale, "seq_len": table.seq_len,
                      "p2p_latency_s": table.p2p.latency_s, "p2p_bandwidth": table.p2p.bandwidth,
                      "layer_types": _type_costs(table), "link": table.meta.get("link"),
                      "f_plus_b_before_after_s": table.meta.get("f_plus_b_before_after_s")},
            "plan": {"step_time_s": plan.predicted.get("step_time_s"),
                     "mfu": plan.predicted.get("mfu"), "costs": plan.costs}}
    if cal:
        pred["calibration"] = cal
    return pred, sim


def _type_costs(table: CostTable) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for lc in table.layers:
        out.setdefault(lc.type, {"f": lc.f, "i": lc.i, "w": lc.w, "b": lc.b, "a2a_f": lc.a2a_f, "a2a_b": lc.a2a_b})
    return out
