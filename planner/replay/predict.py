"""The prediction a replay is judged against (a simulation of the order that runs), and
``ppplan replay --calibrate``: judged plans replayed beside two calibration plans, each
judged plan's prediction calibrated by them (sections below, each with its notes).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError, InputError
from planner.core.plan import Plan
from planner.core.schedule import Schedule, format_schedule
from planner.core.simulate import SimResult, simulate
from planner.core.stage_costs import StageCosts, stage_costs
from planner.replay.calibrate import (Calibration, calibrated_plan, simulate_with_calibration, torch_first_stage,
                                      with_split_kinds)
from planner.replay.launch import replay_interleaved
from planner.replay.measure import relative_error
from planner.replay.options import ReplayOptions, ReplayResult

__all__ = ["is_exact_replay", "simulate_plan_as_run", "simulate_on_table", "REPREDICTED", "SIMULATED",
           "calibration_plans", "replay_calibrated", "CALIBRATION_SOURCE"]


# ---- the prediction -----------------------------------------------------------------------------
# The prediction a replay is judged against: always a simulation of the order that runs.
#
# A prediction only means something for the same model size on the same device. A
# plan made from a profile measured on this device at the replay's width and sequence
# length (``plan.costs``: source ``measured``, ``device``, ``scale``, ``seq_len``),
# replayed with the real link, is replayed exactly: its schedule is simulated again on
# its own stage costs (``simulate_plan_as_run``; ``planner.core.simulate``, the simulator
# ``ppplan simulate`` runs). Its recorded ``predicted`` is never copied: a plan whose
# order was changed after planning (another framework's order placed in it, fused pairs
# split by hand) would be judged against the prediction of an order that never ran.
# When the recorded figure differs from the simulation, the report keeps both.
#
# Any other plan (analytical, measured elsewhere, or replayed with ``--link emulated``,
# whose link the plan's costs do not hold) keeps its partition and schedule, and its
# step is re-predicted: a cost table measured here (``planner.replay.costs``) -> stage costs for
# the same partition -> ``planner.core.simulate``. With ``--link emulated`` the table
# also holds the link's times and the planner's hiding of fused pairs
# (``planner.replay.costs`` [Note: re-prediction with the link]).
#
# A cost table measured here holds each layer's full backward (``LayerCost.b``); the
# stage costs carry it and the simulator times every B action with it
# (``planner.core.costs`` [Note: full backward]).
#
# [Note: torch first stage] torch's runtime makes ``I`` a no-op on stage 0 (it has no
# input gradient to send) and runs the whole backward in ``W``. When the schedule
# splits stage 0's backward, the re-prediction times stage 0's I as nothing and its W
# as the full backward (``StageCosts.b_time``), which is what the engine executes.
#
# [Note: calibrated prediction] A plan whose ``costs["calibration"]``, or a table whose
# ``meta["calibration"]``, holds a ``calibrate.Calibration`` (measured by a separate
# calibration replay, see [Note: runtime calibration]) is predicted with it: alone
# durations, the measured slowdown while ranks share cores, P2P latency and step
# overhead (``calibrate.simulate_with_calibration``), after the adjustment above.


REPREDICTED = "re-predicted from a profile measured here"
SIMULATED = "the plan's schedule simulated on its stage costs (profile measured on this device at this scale)"


def is_exact_replay(plan: Plan, *, device: str, scale: float, seq_len: int, link: str = "real") -> bool:
    """Whether ``plan`` was made from a profile of this device, width and sequence length,
    and is replayed with the real link (an emulated link's times are in no profile)."""
    c = plan.costs
    return (link == "real" and c.get("source") == "measured" and c.get("device") == device
            and math.isclose(float(c.get("scale", 1.0)), scale)
            and int(c.get("seq_len") or seq_len) == seq_len)


def _summary(sim: SimResult) -> dict[str, Any]:
    return {"step_time_s": sim.step_time, "busy_s": sim.busy,
            "bubble_s": sim.bubble, "bubble_fraction": sim.bubble_fraction}


def _timeline(plan: Plan, sc: StageCosts, cal: dict | None) -> tuple[float, SimResult]:
    """(step seconds, timeline) of ``plan``'s schedule on ``sc``: calibrated when ``cal`` is
    given ([Note: calibrated prediction]), else the core simulator's."""
    if cal:
        return simulate_with_calibration(plan.parsed_schedule(), sc, Calibration.from_dict(cal))
    sim = simulate(plan.parsed_schedule(), sc)
    return sim.step_time, sim


def simulate_plan_as_run(plan: Plan) -> tuple[dict[str, Any], SimResult]:
    """The simulation of ``plan``'s schedule, the order that runs, on its own stage costs as
    torch executes them ([Note: torch first stage]), calibrated when the plan carries a
    calibration; ``ppplan simulate``'s figure and the plan's recorded one beside it."""
    cal = plan.costs.get("calibration")
    step, sim = _timeline(plan, _torch_first_stage(plan.parsed_stage_costs(), plan), cal)
    pred = {**_summary(sim), "step_time_s": step, "peak_memory_bytes": sim.peak_memory_bytes,
            "source": SIMULATED + (", calibrated" if cal else ""),
            "ppplan_simulate_step_time_s": simulate(plan.parsed_schedule(), plan.parsed_stage_costs()).step_time}
    return {**pred, **_recorded(plan, step)}, sim


def _recorded(plan: Plan, step: float) -> dict[str, Any]:
    """The plan's recorded step and whether the simulation of the order that runs (``step``)
    reproduces it; a plan whose order was changed after planning does not."""
    rec = plan.predicted.step_time_s
    return {"recorded_step_time_s": rec,
            "recorded_matches": rec is not None and math.isclose(rec, step, rel_tol=1e-6)}


def _torch_first_stage(sc: StageCosts, plan: Plan) -> StageCosts:
    """See [Note: torch first stage]."""
    return torch_first_stage(sc, plan.parsed_schedule())


def simulate_on_table(plan: Plan, table: CostTable) -> tuple[dict[str, Any], SimResult]:
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
            "plan": {"step_time_s": plan.predicted.step_time_s, "mfu": _plan_mfu(plan),
                     "costs": plan.costs}}
    if cal:
        pred["calibration"] = cal
    return pred, sim


def _plan_mfu(plan: Plan) -> float | None:
    """The plan's own MFU; None for a plan made from a CPU profile, whose CPU times the
    planner divided by its cluster's GPU peak (a meaningless figure, such as 6e-7)."""
    return None if plan.costs.get("device") == "cpu" else plan.predicted.mfu


def _type_costs(table: CostTable) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for lc in table.layers:
        out.setdefault(lc.type, {"f": lc.f, "i": lc.i, "w": lc.w, "b": lc.b, "a2a_f": lc.a2a_f, "a2a_b": lc.a2a_b})
    return out


# ---- ppplan replay --calibrate ------------------------------------------------------------------
# ``ppplan replay --calibrate``: judged plans replayed beside two calibration plans, and
# each judged plan's prediction calibrated by them.
#
# The calibration plans run the judged plan's own partition and placement with
# (interleaved) 1F1B: one with full backwards (F, B), one with each backward split into I
# and W, so that every kind a judged plan runs is calibrated like for like
# (``calibrate.with_split_kinds``). One launch replays them and the judged plans with
# their timed steps alternating (CAL-FULL CAL-SPLIT A B ..., ``replay_interleaved``), so
# that load from other jobs falls on calibration and judged steps alike ([Note: runtime
# calibration] in ``calibrate``: a calibration taken minutes earlier, under another load,
# can be off by tens of percent). Each judged report gains ``calibrated``: its prediction
# calibrated (``calibrate.calibrated_plan`` for a plan replayed on its own stage costs,
# the re-prediction's table with the calibration for a re-predicted one), the measured
# *mean* step it predicts ([Note: mean durations]), and the error. ``benchmarks/replay.py``
# calibrates through this module.


CALIBRATION_SOURCE = ("calibration plans (1F1B with full and with split backwards on the judged plan's "
                      "partition), their timed steps alternating with the judged plans'")


def _with_schedule(plan: Plan, schedule: Schedule, name: str) -> Plan:
    sim = simulate(schedule, plan.parsed_stage_costs())
    predicted = replace(plan.predicted, step_time_s=sim.step_time, bubble_fraction=sim.bubble_fraction,
                        busy_s=sim.busy, peak_memory_bytes=sim.peak_memory_bytes)
    return replace(plan, schedule=format_schedule(schedule), predicted=predicted,
                   solver=replace(plan.solver, name="calibration", schedule=name))


def calibration_plans(plan: Plan) -> tuple[Plan, Plan]:
    """(full backwards, split backwards) calibration plans on ``plan``'s stages and ranks."""
    from solvers.schedule.families.generators import interleaved_1f1b

    vpp = plan.num_stages // plan.pp
    if vpp > 1 and plan.parallel.get("placement", "loop") != "loop":
        raise InputError("--calibrate", f"the calibration plans run interleaved 1F1B, which needs the loop "
                         f"placement; the plan places its stages {plan.parallel.get('placement')!r}",
                         "calibrate with a loop-placed plan of the same model, or replay without --calibrate")
    try:
        full, split = (interleaved_1f1b(plan.pp, vpp, plan.num_microbatches, split_w=s) for s in (False, True))
    except InfeasibleError as exc:
        raise InputError("--calibrate", f"no calibration plan for this plan: {exc}") from None
    return _with_schedule(plan, full, "1f1b"), _with_schedule(plan, split, "1f1b, split I and W")


def replay_calibrated(plans: list[Plan], options: ReplayOptions | None = None) -> list[ReplayResult] | None:
    """Replay ``plans`` (one pipeline size) beside the calibration plans of the first, their
    steps alternating; one result per judged plan on rank 0, with ``calibrated`` in its
    report, else None (a torchrun rank other than 0)."""
    full, split = calibration_plans(plans[0])
    results = replay_interleaved([full, split, *plans], options)
    if results is None:
        return None
    cal = with_split_kinds(Calibration.from_dict({**results[0].report["calibration"],
                                                  "source": "calibration plan, full backwards"}),
                           Calibration.from_dict({**results[1].report["calibration"],
                                                  "source": "calibration plan, split backwards"}))
    checks = [_in_sample(p, r, cal) for p, r in zip((full, split), results[:2])]
    return [_calibrated(p, r, cal, checks) for p, r in zip(plans, results[2:])]


def _calibrated_step(plan: Plan, result: ReplayResult, cal: Calibration) -> float:
    """``plan``'s predicted step under ``cal``, on the costs its replay predicted it with."""
    if result.table is None:
        return calibrated_plan(plan, cal).predicted.step_time_s
    table = result.table
    pred, _ = simulate_on_table(plan, replace(table, meta={**table.meta, "calibration": cal.to_dict()}))
    return pred["step_time_s"]


def _figures(plan: Plan, result: ReplayResult, cal: Calibration) -> dict[str, Any]:
    steps = result.report["measured"]["step_times_s"]
    step = _calibrated_step(plan, result, cal)
    mean = statistics.fmean(steps)
    return {"step_time_s": step, "measured_mean_step_s": mean, "step_time_error": relative_error(mean, step),
            "median_step_time_error": relative_error(result.report["measured"]["step_time_s"], step)}


def _in_sample(plan: Plan, result: ReplayResult, cal: Calibration) -> dict[str, Any]:
    """A calibration plan's own calibrated figures (in-sample: it measured the calibration)."""
    return {"schedule": plan.solver.schedule, **_figures(plan, result, cal)}


def _calibrated(plan: Plan, result: ReplayResult, cal: Calibration, checks: list[dict[str, Any]]) -> ReplayResult:
    report = {**result.report, "calibrated": {**_figures(plan, result, cal), "source": CALIBRATION_SOURCE,
                                              "calibration": cal.to_dict(), "calibration_plans_in_sample": checks}}
    return replace(result, report=report)
