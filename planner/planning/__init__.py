"""The main job: from costs and a cluster to a validated, simulated ``Plan``.

Passes chained in one place:

0. first plan (``planner.planning.first_plan``): 1F1B within the memory budget, validated
   and reported at once; the passes below improve on it and never read it;
1. screen (``planner.planning.steps.screen``): for each cost table (one, or one per
   recomputation mode with ``recompute: auto``), each microbatch count (one, or every
   feasible count with ``--microbatches auto``) and each candidate schedule family,
   partition candidates from the method's solver (``solvers.partition.search``) plus
   the fitting baseline partitions are simulated under that family's order (compiled
   once); the fastest that fits memory is that (count, family)'s trial;
2. refine: by default the joint search (``planner.planning.joint``) takes the best
   trials and baseline partitions and alternates schedule choice with boundary moves
   (``solvers.joint``); with a fixed family or method, the best trial's boundaries are
   moved under its order (``solvers.partition.refine``);
3. polish: each finalist's order is re-chosen for its stage costs
   (``solvers.schedule.search.search.best_schedule``, CP-SAT for auto/cpsat), the baseline
   partitions are re-simulated under the final order (the plan never loses to one that
   fits), and the fastest valid finalist is the plan, with baselines beside it.

Every candidate tried is recorded under ``solver.candidates``; ``solver.winner`` says
why the winner won.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from itertools import zip_longest
from dataclasses import replace

from planner.core.costs import CostTable
from planner.core.errors import BudgetExhausted, InfeasibleError
from planner.core.plan import Plan
from planner.planning.assembly import baselines_section, to_plan
from planner.planning.first_plan import report_first_plan, report_screened
from planner.progress import heard, note, phase
from solvers.schedule.search.budget import ACTIONS_PER_WORK_S, Deadline, WallBudget
from solvers.microbatches import MicrobatchOption, microbatch_options, table_for
from solvers.schedule.search.search import candidate_schedules, clear_memo
from planner.planning.joint import joint_refine, polish_finalists, to_polish
from planner.planning.steps import failure_reason, record_schedule, refine, screen, why_winner
from planner.planning.under_budget import screen_under_budget
from planner.planning.records import BASELINES, Evaluation, PlanRequest, Trial, evaluate, memory_limit_of

__all__ = ["PlanRequest", "Evaluation", "make_plan", "evaluate", "BASELINES", "SCREEN_SHARE", "screen_budget"]

SCREEN_SHARE = 0.15
"""Share of ``--work`` the screening's partition solvers (CP-SAT for vpp > 1) get
together, in wall-like seconds (``solvers.partition.virtual.WALL_PER_DET``). Their result
is a step *estimate* that the simulator re-ranks and the joint search refines, so a
near-optimal estimate buys little: on Qwen3-235B pp 8 and 16 with vpp 2 the plan came
out the same or faster with 0.5 deterministic s per solve as with 3.3 s."""


def screen_budget(req: PlanRequest, solves: int) -> float:
    """Wall-like CP-SAT seconds for one of ``solves`` screening partition solves."""
    return req.work_s * SCREEN_SHARE / solves


def _options(req: PlanRequest) -> list[MicrobatchOption]:
    if not req.search_microbatches:
        return [MicrobatchOption(count=req.microbatches, size=req.microbatch_size)]
    batch = req.batch_per_replica or req.microbatches * req.microbatch_size
    return microbatch_options(batch, pp=req.pp)


def make_plan(table: CostTable, req: PlanRequest, *,
              variants: Sequence[tuple[CostTable, PlanRequest]] = (),
              budget: WallBudget | None = None) -> Plan:
    """Plan ``table`` under ``req``: best valid (microbatches, schedule, partition), with baselines.

    With the defaults (``schedule="auto"``, ``partition="overlap"``) this is the joint
    search (``planner.planning.joint``); otherwise the one fixed family or method is
    planned directly. ``variants`` are further (table, request) pairs screened and
    searched alongside, e.g. the same model under another recomputation mode: the plan
    is the fastest over all of them. The search spends ``req.work_s`` ([Note: work budget]
    in ``solvers.schedule.search.budget``); ``budget`` is the wall-clock cap of the whole plan
    (default: ``req.time_limit_s`` from ``req.started_s``, or from now; none when that is
    None; [Note: kept budget]): each phase stops at its share of it.
    """
    if budget is None:
        budget = WallBudget(req.time_limit_s, start=req.started_s, work_actions=req.work_s * ACTIONS_PER_WORK_S)
    try:
        return _make_plan(table, req, variants, budget)
    finally:
        clear_memo(budget.meter)  # [Note: heuristic memo]


def _make_plan(table: CostTable, req: PlanRequest, variants: Sequence[tuple[CostTable, PlanRequest]],
               budget: WallBudget) -> Plan:
    t0 = time.perf_counter()
    tried: list[dict] = []
    budget.mark("costs")
    per_table = [[(tab, replace(breq, microbatches=opt.count, microbatch_size=opt.size), name)
                  for opt in _options(breq) for tab in [table_for(base, opt)]
                  for name in _screen_families(candidate_schedules(breq.schedule, tab, vpp=breq.vpp,
                                                                   placement=breq.placement))]
                 for base, breq in _screen_order([(table, req), *variants])]
    # round-robin over the tables: a screening cut short has tried each table's first jobs
    jobs = [job for group in zip_longest(*per_table) for job in group if job is not None]
    # [Note: first plan]: the same plan with or without it, so only made when someone hears of it
    first = report_first_plan(jobs[0][0], jobs[0][1]) if jobs and heard() else None
    phase("screening")
    trials = _screen_all(jobs, tried, budget.phase("screen"), want_first=first is None and heard())
    budget.mark("screen")
    joint = req.schedule == "auto" and req.partition == "overlap"
    phase("joint refinement")
    if joint:
        finalists, moves = joint_refine(trials, tried, budget.phase("joint"))
        finalists = to_polish(finalists)
    else:
        finalists = trials[:1]
        moves = refine(finalists[0], deadline=budget.phase("joint"))
    budget.mark("joint")
    phase("polish")
    best, ev, choice = polish_finalists(finalists, tried, budget.phase("polish"))
    budget.mark("polish")
    phase("baselines")
    note(f"best {ev.sim.step_time:.4g} s")
    baselines = baselines_section(best, ev, evaluate, [label for label, _ in BASELINES],
                                  budget.phase("baselines"))
    budget.mark("baselines")
    plan = to_plan(best, ev, baselines, tried, moves, time.perf_counter() - t0)
    budget.mark("assembly")
    phase("validating")
    plan.solver = replace(plan.solver, budget={"work": req.work_s, **budget.record()}, winner=why_winner(plan, tried))
    record_schedule(plan, choice, memory_limit_of(req))
    return plan




def _screen_all(jobs: list, tried: list[dict], deadline: Deadline, *, want_first: bool = False) -> list[Trial]:
    """Phase 1 over every (table, count, family) job, fastest first; jobs left when the
    screening deadline passes are recorded as skipped (at least one trial is kept). When
    no family's order fits, each (table, count) is screened under the memory budget
    (``planner.planning.under_budget``) before anything is declared infeasible. With
    ``want_first`` (no first plan before the search), the first trial is reported as the
    first plan if it validates ([Note: first plan])."""
    trials: list[Trial] = []
    shapes: dict = {}
    for k, (tab, r, name) in enumerate(jobs):
        if trials and deadline.expired():
            tried.extend({"microbatches": jr.microbatches, "schedule": jn, "status": "skipped",
                          "reason": "search budget reached while screening"} for _, jr, jn in jobs[k:])
            break
        trial = screen(tab, r, name, tried, deadline.cap(screen_budget(r, len(jobs)), floor=0.1), shapes,
                       deadline.budget)
        if trial is not None:
            trials.append(trial)
            note(f"screening {k + 1}/{len(jobs)}, best {min(t.step for t in trials):.4g} s")
            if want_first:  # one try: an evaluation each is not worth more ([Note: first plan])
                want_first = False
                if report_screened(trial.table, trial.req, trial.bounds, trial.name, trial.schedule) is not None:
                    phase("screening")
    if not trials:
        trials = _screen_under_budget(jobs, tried, deadline)
        if want_first:
            report_screened(trials[0].table, trials[0].req, trials[0].bounds, trials[0].name, trials[0].schedule)
    trials.sort(key=lambda t: t.step)  # stable: ties keep enumeration order
    return trials


def _screen_under_budget(jobs: list, tried: list[dict], deadline: Deadline) -> list[Trial]:
    """Each distinct (table, count) of ``jobs`` screened under the memory budget; infeasible
    only when every one was proven so ([Note: unproven] in solvers.partition.search)."""
    pairs = list({(id(tab), r.microbatches): (tab, r) for tab, r, _ in jobs}.values())
    own: list[dict] = []
    trials = [t for tab, r in pairs
              if (t := screen_under_budget(tab, r, own, deadline.cap(screen_budget(r, len(pairs)), floor=0.1),
                                           deadline)) is not None]
    tried.extend(own)
    if trials:
        return trials
    reasons = own + [t for t in tried if t not in own]  # the budgeted screening's reasons first
    if any(t.get("status") == "budget" for t in reasons):
        raise BudgetExhausted(f"every screened (microbatches, schedule) failed, some only for want of "
                              f"budget: {failure_reason(reasons)}")
    raise InfeasibleError(failure_reason(reasons))


SCREEN_FIRST = ("1f1b-overlap", "interleaved-overlap", "dualpipev", "zb-h2", "zbv", "zb-h1")
"""Families screened first, in this order, then the rest as ``candidate_schedules`` lists
them: the ones that win most often (fused where overlap pays, then zero bubble), so a
screening that its work budget stops early ([Note: work budget]) has them. A family over
memory yields no trial and the next is screened; with budget for every job the order only
breaks exact ties."""


def _screen_families(names: list[str]) -> list[str]:
    return sorted(names, key=lambda n: SCREEN_FIRST.index(n) if n in SCREEN_FIRST else len(SCREEN_FIRST))


def _screen_order(pairs: list[tuple[CostTable, PlanRequest]]) -> list[tuple[CostTable, PlanRequest]]:
    """The (table, request) pairs in screening order: the least compute (e.g. no
    recomputation: the fastest plan when it fits), then the least activation memory per
    microbatch (e.g. full recomputation: the likeliest to fit), then the rest as given.
    Jobs are taken round-robin over the tables in this order, so when the screening's wall
    deadline cuts it short ([Note: kept budget]) both the likely fastest and the likely
    fitting table have been screened; with time for every job the order only breaks
    exact ties."""
    if len(pairs) < 3:
        return sorted(pairs, key=lambda p: _compute(p[0]))
    fast = min(range(len(pairs)), key=lambda k: (_compute(pairs[k][0]), k))
    lean = min((k for k in range(len(pairs)) if k != fast),
               key=lambda k: (sum(lc.act_bytes for lc in pairs[k][0].layers), k))
    return [pairs[fast], pairs[lean]] + [p for k, p in enumerate(pairs) if k not in (fast, lean)]


def _compute(table: CostTable) -> float:
    """Serial compute of one microbatch through every layer (F + I + W)."""
    return sum(lc.f + lc.i + lc.w for lc in table.layers)
