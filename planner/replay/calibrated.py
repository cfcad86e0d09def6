"""``ppplan replay --calibrate``: judged plans replayed beside two calibration plans, and
each judged plan's prediction calibrated by them.

The calibration plans run the judged plan's own partition and placement with
(interleaved) 1F1B: one with full backwards (F, B), one with each backward split into I
and W, so that every kind a judged plan runs is calibrated like for like
(``calibrate.with_split_kinds``). One launch replays them and the judged plans with
their timed steps alternating (CAL-FULL CAL-SPLIT A B ..., ``replay_interleaved``), so
that load from other jobs falls on calibration and judged steps alike ([Note: runtime
calibration] in ``calibrate``: a calibration taken minutes earlier, under another load,
can be off by tens of percent). Each judged report gains ``calibrated``: its prediction
calibrated (``calibrate.calibrated_plan`` for a plan replayed on its own stage costs,
the re-prediction's table with the calibration for a re-predicted one), the measured
*mean* step it predicts ([Note: mean durations]), and the error. ``benchmarks/replay.py``
calibrates through this module.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from planner.core.errors import InfeasibleError, InputError
from planner.core.plan import Plan
from planner.core.schedule import Schedule, format_schedule
from planner.core.simulate import simulate
from planner.replay.calibrate import Calibration, calibrated_plan, with_split_kinds
from planner.replay.launch import replay_interleaved
from planner.replay.measure import relative_error
from planner.replay.options import ReplayOptions, ReplayResult
from planner.replay.predict import simulate_on_table

__all__ = ["calibration_plans", "replay_calibrated", "CALIBRATION_SOURCE"]

CALIBRATION_SOURCE = ("calibration plans (1F1B with full and with split backwards on the judged plan's "
                      "partition), their timed steps alternating with the judged plans'")


def _with_schedule(plan: Plan, schedule: Schedule, name: str) -> Plan:
    sim = simulate(schedule, plan.parsed_stage_costs())
    predicted = {**plan.predicted, "step_time_s": sim.step_time, "bubble_fraction": sim.bubble_fraction,
                 "busy_s": sim.busy, "peak_memory_bytes": sim.peak_memory_bytes}
    return replace(plan, schedule=format_schedule(schedule), predicted=predicted,
                   solver={**plan.solver, "name": "calibration", "schedule": name})


def calibration_plans(plan: Plan) -> tuple[Plan, Plan]:
    """(full backwards, split backwards) calibration plans on ``plan``'s stages and ranks."""
    from solvers.schedule.generators import interleaved_1f1b

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
        return calibrated_plan(plan, cal).predicted["step_time_s"]
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
    return {"schedule": plan.solver["schedule"], **_figures(plan, result, cal)}


def _calibrated(plan: Plan, result: ReplayResult, cal: Calibration, checks: list[dict[str, Any]]) -> ReplayResult:
    report = {**result.report, "calibrated": {**_figures(plan, result, cal), "source": CALIBRATION_SOURCE,
                                              "calibration": cal.to_dict(), "calibration_plans_in_sample": checks}}
    return replace(result, report=report)
