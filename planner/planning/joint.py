"""Joint search, phases 2 and 3: refine the best screened candidates together, polish the finalists."""

from __future__ import annotations

import time
from dataclasses import replace

from planner.core.errors import InfeasibleError
from planner.progress import note
from solvers.joint import alternate
from solvers.schedule.search.budget import Deadline, meter_of
from solvers.schedule.search.search import ScheduleChoice
from planner.planning.records import Evaluation, Trial, evaluate, memory_limit_of, pinned_of, simulate_bounds
from planner.planning.steps import as_chosen, choose_schedule, refine, settle

__all__ = ["JOINT_SHORTLIST", "JOINT_ROUNDS", "JOINT_POLISHED", "POLISH_SHARE", "WINNER_SHARE", "POLISH_WITHIN",
           "joint_refine", "shortlist", "polish_finalists", "to_polish"]

JOINT_SHORTLIST = 3
"""Screened (microbatches, schedule, partition) candidates refined jointly."""
JOINT_ROUNDS = 3
"""Bound on schedule <-> partition alternation rounds per finalist."""
JOINT_POLISHED = 2
"""Fastest finalists whose schedule CP-SAT polishes; finalists that started from a
baseline partition are polished too."""
POLISH_SHARE = 0.4
"""Share of ``--work`` the CP-SAT polish of all finalists gets together (see
``WINNER_SHARE``); screening and joint refinement are bounded by counts and take the
rest on the reference machine."""
WINNER_SHARE = 0.6
"""Share of the polish budget given to the fastest finalist on top of its even part of the
rest (the window search keeps improving with time where memory allows many microbatches
in flight, and one long search goes further than two short ones)."""
POLISH_WITHIN = 0.05
"""Finalists more than this share slower than the fastest (after joint refinement) get the
heuristics only: CP-SAT polish gained 0-3% on these models, so they would not win."""


def joint_refine(trials: list[Trial], tried: list[dict],
                 deadline: Deadline | None = None) -> tuple[list[Trial], dict]:
    """Joint search, phase 2: alternate schedule choice and boundary moves on the best few
    screened candidates (``solvers.joint.alternate``); returns them fastest first.

    Phase 1 is the screening in ``make_plan`` (every microbatch count x schedule family,
    each with its partition candidates and the fitting baselines simulated); the baseline
    partitions that fit are candidates here too, so a partition that only wins once the
    schedule adapts to it is not lost. Phase 3 (``polish_finalists``) gives the best
    ``JOINT_POLISHED`` CP-SAT. This phase is bounded by counts (finalists, rounds, moves),
    not by the clock, so the plan depends only on the inputs and the seed; the clock
    bounds only the CP-SAT parts, in its deterministic time. ``deadline`` is the phase's
    wall deadline ([Note: kept budget] in ``solvers.schedule.search.budget``): once it passes,
    the finalists not yet refined keep their screened state.
    """
    finalists = shortlist(trials, deadline)
    # a baseline partition is also kept as it is, so phase 3 polishes it unchanged too
    as_is = [replace(t, origin=f"{t.origin} (as is)") for t in finalists if t.origin != "screen"]
    info: dict = {"rounds": 0, "evaluated": 0, "finalists": []}
    for t in finalists:
        if deadline is not None and not deadline.affords(2):
            break
        entry = {"phase": "joint", "microbatches": t.req.microbatches, "recompute": t.req.recompute,
                 "start": t.name, "origin": t.origin,
                 "start_stage_layers": [b - a for a, b in t.bounds], "start_step_time_s": t.step}
        info["finalists"].append(entry)
        moved = refine(t, deadline=deadline)  # boundaries under the screened order first
        info["rounds"] += moved["rounds"]
        info["evaluated"] += moved["evaluated"]
        res = alternate(t.table, t.bounds, t.part.model.ranks, (t.name, t.schedule),
                        microbatches=t.req.microbatches, memory_limit=memory_limit_of(t.req),
                        deadlines=t.req.deadlines, pinned=pinned_of(t), max_rounds=JOINT_ROUNDS,
                        seed=t.req.seed, deadline=deadline, objective=t.req.objective, meter=meter_of(deadline))
        entry.update(status="valid", schedule=res.name, step_time_s=res.step_time,
                     stage_layers=[b - a for a, b in res.bounds], rounds=res.history)
        tried.append(entry)
        if res.improved:  # by the request's objective
            t.bounds, t.schedule, t.name, t.step = res.bounds, res.schedule, res.name, res.step_time
            t.settled = res.settled
        else:
            t.settled = res.settled and res.bounds == t.bounds and res.name == t.name
        note(f"{len(tried)} candidates, best {min(f.step for f in finalists):.4g} s")
    note(f"best {min(f.step for f in finalists):.4g} s")
    return sorted(finalists, key=lambda t: t.step) + as_is, info


def shortlist(trials: list[Trial], deadline: Deadline | None = None) -> list[Trial]:
    """The ``JOINT_SHORTLIST`` fastest distinct (recompute, microbatches, partition) starts among the
    screened trials and their fitting baseline partitions (same schedule order), then the
    fitting baseline partitions of the best trial not already in (a partition that only
    wins once the schedule adapts to it, e.g. with CP-SAT, is not lost). Baseline starts
    are not simulated past ``deadline``."""
    pool = list(trials)
    for t in trials:
        for label, (bounds, fits) in t.baselines.items():
            if fits and bounds != t.bounds and not (deadline is not None and deadline.expired()):
                step = simulate_bounds(t.table, t.compiled, bounds, t.part.model.ranks, memory_limit_of(t.req),
                                       meter=meter_of(deadline))
                if step < float("inf"):
                    pool.append(replace(t, bounds=bounds, step=step, origin=label))
    pool.sort(key=lambda t: t.step)
    out: list[Trial] = []

    def add(t: Trial) -> None:
        if all(_start(t) != _start(f) for f in out):
            out.append(t)

    for t in pool:
        if len(out) == JOINT_SHORTLIST:
            break
        add(t)
    best = trials[0]
    for t in pool:
        if t.origin != "screen" and _start(t)[:2] == _start(best)[:2] and t.name == best.name:
            add(t)
    return out


def _start(t: Trial) -> tuple:
    """What makes two candidates the same start: (recompute, microbatches, partition)."""
    return t.req.recompute, t.req.microbatches, tuple(t.bounds)


def _polish_limit(t: Trial, lead: Trial, hopeful: int) -> float:
    """CP-SAT seconds for finalist ``t``: for auto an even part of (1 - ``WINNER_SHARE``) of
    the polish budget, plus ``WINNER_SHARE`` of it for the fastest (``lead``); otherwise the
    whole work budget (one finalist)."""
    if t.req.schedule != "auto":
        return t.req.work_s
    part = (1 - WINNER_SHARE) / hopeful + (WINNER_SHARE if t is lead else 0.0)
    return t.req.work_s * POLISH_SHARE * part


def polish_finalists(finalists: list[Trial], tried: list[dict],
                     deadline: Deadline | None = None) -> tuple[Trial, Evaluation, ScheduleChoice]:
    """Phase 3: re-choose each finalist's order for its stage costs (heuristics, and CP-SAT
    for auto/cpsat on those within ``POLISH_WITHIN`` of the fastest, sharing
    ``POLISH_SHARE`` of the work budget: ``choose_schedule``); the fastest valid result wins.
    Past ``deadline`` the remaining finalists are dropped (the first, the fastest after
    joint refinement, is always kept; [Note: kept budget] in ``solvers.schedule.search.budget``)."""
    best, refused = None, None
    fastest = min(t.step for t in finalists)
    hopeful = [t for t in finalists if t.step <= fastest * (1 + POLISH_WITHIN)]
    lead = next(t for t in finalists if t.step == fastest)
    done: set = set()
    for t in finalists:
        key = (*_start(t), t.name)
        if key in done:  # an "as is" copy that refinement left unchanged: same result again
            continue
        done.add(key)
        guarded = _guarded(t)
        if best is not None and deadline is not None and deadline.expired() and not guarded:
            continue  # a guarded finalist later in the list is still polished
        t0 = time.perf_counter()
        ev = evaluate(t.table, t.req, t.bounds, t.schedule, meter=meter_of(deadline))
        if deadline is not None:
            deadline.budget.measured(time.perf_counter() - t0)
        valid = not ev.violations  # else only a re-chosen order can save this finalist
        goal = t.req.objective
        if valid and deadline is not None and not deadline.affords(2) and not guarded:  # keep the order
            choice = as_chosen(t, ev)
        else:
            try:
                choice = choose_schedule(t, ev, _polish_limit(t, lead, len(hopeful)), polish=t in hopeful,
                                         heuristics=not (t.settled and valid), deadline=deadline, guard=guarded)
            except InfeasibleError as exc:
                if valid:
                    raise
                refused = exc
                continue
        if choice.schedule != t.schedule:
            other = evaluate(t.table, t.req, t.bounds, choice.schedule, meter=meter_of(deadline))
            if not other.violations and (not valid or other.time_for(goal) < ev.time_for(goal) * (1 - 1e-9)):
                t.name, t.schedule, ev, valid = choice.name, choice.schedule, other, True
        if not valid:
            continue
        ev = settle(t, ev, deadline)
        if len(finalists) > 1:
            tried.append({"phase": "polish", "origin": t.origin, "microbatches": t.req.microbatches,
                          "recompute": t.req.recompute,
                          "schedule": t.name,
                          "status": "valid", "step_time_s": ev.sim.step_time,
                          "stage_layers": [b - a for a, b in t.bounds]})
        if best is None or ev.time_for(goal) < best[1].time_for(goal) * (1 - 1e-9):
            best = (t, ev, choice)
    if best is None:  # the search's own reason when it found no order for them; else a bug
        raise refused or RuntimeError("internal: no finalist passes the validator")
    return best


def _guarded(t: Trial) -> bool:
    """Whether ``t`` started from the serial or FLOPs baseline partition: polished even once the
    work budget is spent (its order and that order's W-fill, a bounded few evaluations), so
    the joint plan is not behind planning that partition on its own (``--partition serial``),
    which gives one partition the whole budget."""
    return t.origin != "screen" and not t.origin.startswith("uniform")


def to_polish(finalists: list[Trial]) -> list[Trial]:
    """The ``JOINT_POLISHED`` fastest finalists, and every finalist that started from the
    serial or FLOPs baseline partition (so the joint plan is never behind planning that
    baseline partition with the best schedule)."""
    return finalists[:JOINT_POLISHED] + [t for t in finalists[JOINT_POLISHED:] if _guarded(t)]
