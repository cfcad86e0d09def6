"""Schedules by name, and the best schedule for given stage costs.

``generate`` draws a named order for the uniform picture (the planner's partition
search needs an order before costs per stage exist). Once stage costs are known,
``best_schedule`` adapts every applicable heuristic to them, optionally improves the
best with CP-SAT, and returns the fastest valid schedule with its lower bound and gap:

1. every generator of the placement (``generate``), as drawn and with W tasks moved
   into the real gaps (``solvers.w_fill.fill_w``), plus the planner's own start;
2. the cost-aware greedy list scheduler (``solvers.list_scheduler``) under the memory
   budget and under p and 2p microbatches of activations, fused and not;
3. ``cpsat``: CP-SAT warm-started from the best of those (``solvers.cpsat_solve``);
   ``auto`` runs it too, within the same time limit, when the best heuristic is more
   than 1% above the lower bound.

Every candidate is simulated (per-rank activation budget, deadlines) and the fastest
is validated, the next if it fails, and so on ([Note: lazy validation]); ties go to
the earlier candidate, so the choice is deterministic.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError, InputError
from planner.core.placement import stage_ranks
from planner.core.schedule import Key, Schedule, provides
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from planner.core.validate import validate
from solvers.deadlines import check_deadlines, earliest_finish
from solvers.dualpipev import dualpipev
from solvers.generators import gpipe, interleaved_1f1b, one_f_one_b
from solvers.list_scheduler import list_schedule
from solvers.lower_bound import step_lower_bound
from solvers.memory_limit import MemoryLimit, rank_activation
from solvers.w_fill import fill_w
from solvers.zero_bubble import zb_h1, zb_h2, zb_v

__all__ = ["ScheduleKind", "SCHEDULES", "SCHEDULE_CHOICES", "generate",
           "candidate_schedules", "check_schedule_option", "ScheduleChoice", "best_schedule",
           "EXACT_FAMILIES", "clear_memo"]

EXACT_FAMILIES = ("gpipe", "1f1b", "1f1b-overlap", "interleaved", "interleaved-overlap")
"""Families a user names to get exactly that order (what Megatron, DeepSpeed or torch's
built-in schedules run): W stays right after its input-gradient, nothing is moved. The
zero-bubble and V families move W by design, so their W-filled versions are theirs too."""


@dataclass(frozen=True)
class ScheduleKind:
    """A named schedule family."""

    make: Callable[[int, int, int], Schedule]
    """(pp, vpp, microbatches) -> schedule."""
    fused: bool = False
    """Whether it runs F and B of different microbatches as OVERLAP_F_B pairs."""
    placement: str = "loop"
    """Stage placement it assumes."""
    vpp: tuple[int, ...] = (1,)
    """Virtual stage counts it supports (empty = any)."""


def _one_stage(fn: Callable[..., Schedule], **kw: bool) -> Callable[[int, int, int], Schedule]:
    return lambda pp, vpp, m: fn(pp, m, **kw)


SCHEDULES: dict[str, ScheduleKind] = {
    "gpipe": ScheduleKind(_one_stage(gpipe)),
    "1f1b": ScheduleKind(_one_stage(one_f_one_b)),
    "1f1b-overlap": ScheduleKind(_one_stage(one_f_one_b, fuse=True), fused=True),
    "interleaved": ScheduleKind(lambda pp, vpp, m: interleaved_1f1b(pp, vpp, m), vpp=()),
    "interleaved-overlap": ScheduleKind(lambda pp, vpp, m: interleaved_1f1b(pp, vpp, m, fuse=True), fused=True,
                                       vpp=()),
    "zb-h1": ScheduleKind(_one_stage(zb_h1)),
    "zb-h2": ScheduleKind(_one_stage(zb_h2)),
    "zbv": ScheduleKind(_one_stage(zb_v), placement="v", vpp=(2,)),
    "dualpipev": ScheduleKind(_one_stage(dualpipev), fused=True, placement="v", vpp=(2,)),
}

SCHEDULE_CHOICES = ("auto", *SCHEDULES, "cpsat")
"""Values of ``--schedule``: a family, ``auto`` (best heuristic, CP-SAT polish) or ``cpsat``."""


def check_schedule_option(name: str, *, vpp: int, placement: str) -> None:
    """``InputError`` for unknown names and shapes a family cannot run."""
    if name in ("auto", "cpsat"):
        return
    kind = SCHEDULES.get(name)
    if kind is None:
        raise InputError("--schedule", f"unknown schedule {name!r}", f"use one of {', '.join(SCHEDULE_CHOICES)}")
    if kind.vpp and vpp not in kind.vpp:
        fix = "use --schedule interleaved for vpp > 1" if kind.vpp == (1,) else \
            f"use --vpp {kind.vpp[0]} --placement {kind.placement}"
        raise InputError("--schedule", f"{name} supports vpp {', '.join(map(str, kind.vpp))}, got {vpp}", fix)
    if kind.placement != placement and vpp > 1:
        raise InputError("--schedule", f"{name} needs --placement {kind.placement}, got {placement}",
                         f"pass --placement {kind.placement}")


def generate(name: str, *, pp: int, vpp: int, microbatches: int) -> Schedule:
    """Generate schedule ``name``; unknown names and unsupported vpp are ``InputError``."""
    kind = SCHEDULES.get(name)
    if kind is None:
        raise InputError("--schedule", f"unknown schedule {name!r}", f"use one of {', '.join(SCHEDULE_CHOICES)}")
    check_schedule_option(name, vpp=vpp, placement=kind.placement)
    return kind.make(pp, vpp, microbatches)


def _applies(kind: ScheduleKind, vpp: int, placement: str) -> bool:
    return (vpp in kind.vpp if kind.vpp else vpp > 1) and (kind.placement == placement or vpp == 1)


def candidate_schedules(name: str, table: CostTable, *, vpp: int, placement: str) -> list[str]:
    """Schedules ``auto`` (and ``cpsat``, for its warm start) try for this shape; a named one alone."""
    if name not in ("auto", "cpsat"):
        return [name]
    names = [n for n, k in SCHEDULES.items() if n != "gpipe" and _applies(k, vpp, placement)]
    has_overlap = any(table.ov(a, a) < table.serial_pair(a, a) - 1e-12 for a in range(table.num_layers))
    return [n for n in names if has_overlap or not SCHEDULES[n].fused]


@dataclass(frozen=True, kw_only=True)
class ScheduleChoice:
    """The chosen schedule and how it compares with the limit."""

    schedule: Schedule
    """Per-rank actions."""
    name: str
    """Where it came from, e.g. ``zb-h2+w-fill``, ``greedy@2p``, ``cpsat-lns(zb-h2+w-fill)``."""
    status: str
    """HEURISTIC (no CP-SAT), OPTIMAL or FEASIBLE (CP-SAT ran), as ``solver.status`` reports."""
    step_time: float
    """Simulated step time, seconds."""
    lower_bound: float
    """``solvers.lower_bound.step_lower_bound`` for these costs and budget."""
    gap: float
    """step_time / lower_bound - 1."""
    wall_s: float
    """Seconds spent choosing."""
    tried: list[dict] = field(default_factory=list)
    """Each candidate's name, step time (or why it was rejected)."""


def _placement(costs: StageCosts) -> str:
    S, pp = costs.num_stages, costs.num_ranks
    return "v" if S > pp and list(costs.ranks) == stage_ranks(S, pp, "v") else "loop"


def _fuses(costs: StageCosts) -> bool:
    return any(t < costs.f[a] + costs.i[b] - 1e-15 for (a, b), t in costs.fused.items())


def _from_start(costs: StageCosts, budget: list[int] | None, deadlines: dict[Key, float],
                families: list[str], start: tuple[str, Schedule] | None, greedy: bool):
    """The start as given and, unless only exact families are asked for, W-filled."""
    exact = not greedy and all(n in EXACT_FAMILIES for n in families)
    if start is not None:
        yield start
        if not exact:
            yield f"{start[0]}+w-fill", fill_w(start[1], costs, act_budget=budget, deadlines=deadlines)


def _drawn(costs: StageCosts, m: int, budget: list[int] | None, deadlines: dict[Key, float],
           families: list[str], greedy: bool):
    """The family orders (as drawn and W-filled) and the greedy list schedules for ``costs``:
    every candidate that does not depend on a start."""
    pp, vpp = costs.num_ranks, costs.num_stages // costs.num_ranks
    place, fuse = _placement(costs), _fuses(costs)
    exact = not greedy and all(n in EXACT_FAMILIES for n in families)
    for name in families:
        kind = SCHEDULES[name]
        if not _applies(kind, vpp, place) or (kind.fused and not fuse):
            continue
        try:
            order = kind.make(pp, vpp, m)
        except InfeasibleError as exc:
            yield name, str(exc)
            continue
        yield name, order
        if exact:
            continue
        for mode in ("eager", "fit"):
            yield f"{name}+w-fill" + ("" if mode == "eager" else "-fit"), \
                fill_w(order, costs, act_budget=budget, deadlines=deadlines, w_mode=mode)
    if not greedy:
        return
    act = rank_activation(costs)
    seen: list[list[int] | None] = []
    for cap in (None, pp, 2 * pp):
        if cap is None and budget is None:
            continue
        b = budget if cap is None else [min(x, cap * a) for x, a in zip(budget or [cap * a for a in act], act)]
        if b in seen:  # the cap is above the memory budget on every rank: same runs again
            continue
        seen.append(b)
        for f in (False, True) if fuse else (False,):
            for mode in ("eager", "fit"):
                label = "greedy" + ("-fused" if f else "") + ("" if cap is None else f"@{cap // pp}p") + \
                    ("" if mode == "eager" else "-fit")
                res = list_schedule(costs, m, act_budget=b, fuse=f, deadlines=deadlines, w_mode=mode)
                yield label, res.schedule if res.schedule is not None else res.reason


def _limits(schedule: Schedule, costs: StageCosts, budget: list[int] | None,
            deadlines: dict[Key, float]) -> tuple[float | None, str]:
    """Simulated step time if the schedule meets the deadlines and the per-rank budget,
    else None and why; one that cannot be simulated (a deadlock, a missing task) is
    sent to the validator for its reason."""
    try:
        sim = simulate(schedule, costs)
    except (ValueError, AssertionError):
        found = validate(schedule, costs)
        return None, str(found[0]) if found else "cannot be simulated"
    if deadlines:
        ends = {k: sim.end[n] for n, a in enumerate(sim.actions) for k in provides(a)}
        for key in sorted(k for k in deadlines if ends[k] > deadlines[k] + 1e-12):
            return None, (f"task {key[0]}{key[1]}{key[2]} ends at {ends[key]:.6g} s, after its deadline "
                          f"{deadlines[key]:.6g} s; its earliest possible finish is "
                          f"{earliest_finish(costs, key):.6g} s")
    if budget is not None:
        for r, (peak, b) in enumerate(zip(sim.peak_act_bytes, budget)):
            if peak > b:
                return None, f"rank {r} holds {peak / 2**30:.2f} GiB of activations, budget {b / 2**30:.2f} GiB"
    return sim.step_time, "valid"


def _verdict(sched: Schedule | str | None, costs: StageCosts, budget: list[int] | None,
             deadlines: dict[Key, float]) -> tuple[float | None, str]:
    """``_limits`` of a drawn candidate; one that could not be drawn carries its reason."""
    if isinstance(sched, dict):
        return _limits(sched, costs, budget, deadlines)
    return None, sched or "does not fit the memory budget"


def _check(schedule: Schedule, costs: StageCosts, m: int, budget: list[int] | None,
           deadlines: dict[Key, float]) -> tuple[float | None, str]:
    """Simulated step time if valid (structure, deadlines, per-rank budget), else None and why."""
    found = validate(schedule, costs, num_microbatches=m)
    if found:
        return None, str(found[0])
    return _limits(schedule, costs, budget, deadlines)


def _gap(step: float, bound: float) -> float:
    """step / bound - 1; float noise below zero (sums in another order) reads as 0."""
    gap = step / bound - 1 if bound > 0 else 0.0
    return 0.0 if -1e-9 < gap < 0 else gap


def _check_options(method: str, time_limit: float, seed: int) -> None:
    if method not in SCHEDULE_CHOICES:
        raise InputError("--schedule", f"unknown schedule {method!r}", f"use one of {', '.join(SCHEDULE_CHOICES)}")
    if not time_limit > 0:
        raise InputError("--time-limit", f"must be > 0 seconds, got {time_limit}", "e.g. --time-limit 10")
    if seed < 0:
        raise InputError("--seed", f"must be >= 0, got {seed}", "e.g. --seed 0")


def _polish(costs: StageCosts, m: int, best: tuple[str, float, Schedule], budget, deadlines, *,
            limit: float, seed: int, workers: int | None, tried: list[dict]):
    """CP-SAT from ``best``; returns (status, the better of the two)."""
    from solvers.cpsat_solve import cpsat_improve  # ortools: only when searching

    name, t, sched = best
    out = cpsat_improve(costs, m, sched, act_budget=budget, deadlines=deadlines, time_limit=limit,
                        seed=seed, workers=workers, fuse=_fuses(costs))
    status = out.status if out.status in ("OPTIMAL", "FEASIBLE") else "FEASIBLE"
    if out.schedule is not None:
        t2, why = _check(out.schedule, costs, m, budget, deadlines)
        tried.append({"schedule": out.method, "step_time_s": t2, "status": why})
        if t2 is not None and t2 < t - 1e-12:
            return status, (f"{out.method}({name})", t2, out.schedule)
    return status, best


_MEMO_SIZE = 16
_memo: OrderedDict[tuple, list[tuple[str, Schedule | str, float | None, str]]] = OrderedDict()
"""[Note: heuristic memo] The start-independent candidates of recent ``best_schedule``
calls, simulated: the joint search schedules the same partition several times (each
finalist's rounds, its polish, the unchanged baseline copies), and the candidates depend
only on the stage costs, the count, the budget, the deadlines and the families asked
for, so they are drawn once. A pure cache: results are the same with or without it.
The planner empties it after each plan (``clear_memo``): it holds hundreds of thousands
of actions, which would slow every later garbage collection of a long-lived process."""


def clear_memo() -> None:
    """Drop the memo of drawn candidates ([Note: heuristic memo])."""
    _memo.clear()


def _memo_key(costs: StageCosts, m: int, budget, deadlines, families: list[str], greedy: bool) -> tuple:
    return (costs.f, costs.i, costs.w, costs.act_bytes, costs.act_w_bytes, costs.static_bytes, costs.out_bytes,
            costs.ranks, tuple(sorted(costs.fused.items())), costs.p2p, m,
            None if budget is None else tuple(budget), tuple(sorted(deadlines.items())), tuple(families), greedy)


def _simulated(costs: StageCosts, m: int, budget, deadlines, families: list[str], greedy: bool):
    """``_drawn``'s candidates with ``_limits``'s verdict each, from the memo when there."""
    key = _memo_key(costs, m, budget, deadlines, families, greedy)
    hit = _memo.get(key)
    if hit is None:
        hit = [(name, sched, *_verdict(sched, costs, budget, deadlines))
               for name, sched in _drawn(costs, m, budget, deadlines, families, greedy)]
        _memo[key] = hit
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    else:
        _memo.move_to_end(key)
    return hit


def _best_candidate(costs: StageCosts, m: int, budget, deadlines, method: str,
                    start: tuple[str, Schedule] | None, tried: list[dict],
                    heuristics: bool = True) -> tuple[str, float, Schedule]:
    """Fastest valid heuristic candidate; ``InfeasibleError`` naming a reason when none is.

    [Note: lazy validation] Every candidate is simulated (step time, memory budget,
    deadlines); the full validator then runs on them fastest first (ties: earlier
    candidate) until one passes, so its cost is paid once per call, not per candidate.
    Candidates slower than the chosen one are recorded as ``simulated`` (not validated).
    """
    families = list(SCHEDULES) if method in ("auto", "cpsat") else [method]
    greedy = method in ("auto", "cpsat")
    ok: list[tuple[float, int, str, Schedule]] = []
    own = [(name, sched, *_verdict(sched, costs, budget, deadlines))
           for name, sched in (_from_start(costs, budget, deadlines, families, start, greedy)
                               if heuristics else [start] if start is not None else [])]
    drawn = _simulated(costs, m, budget, deadlines, families, greedy) if heuristics or start is None else []
    for name, sched, t, why in own + drawn:
        if not isinstance(sched, dict):
            tried.append({"schedule": name, "status": why})
            continue
        tried.append({"schedule": name, "step_time_s": t, "status": why if t is None else "simulated"})
        if t is not None:
            ok.append((t, len(tried) - 1, name, sched))
    for t, k, name, sched in sorted(ok, key=lambda c: (c[0], c[1])):
        found = validate(sched, costs, num_microbatches=m)
        tried[k]["status"] = str(found[0]) if found else "valid"
        if not found:
            return name, t, sched
    reasons = [f"{d['schedule']}: {d['status']}" for d in tried if d["status"] != "valid"]
    why = next((r for r in reasons if "deadline" in r), reasons[0] if reasons else "no candidate")
    raise InfeasibleError(f"no schedule meets the limits ({why}); raise --memory-limit, relax "
                          "--deadline or try --schedule auto")


def best_schedule(costs: StageCosts, *, microbatches: int, memory_limit: MemoryLimit | None = None,
                  deadlines: dict[Key, float] | None = None, method: str = "auto",
                  time_limit: float = 10.0, seed: int = 0, workers: int | None = None,
                  start: tuple[str, Schedule] | None = None, polish: bool = True,
                  heuristics: bool = True) -> ScheduleChoice:
    """The fastest valid schedule for ``costs`` (see the module docstring).

    ``method`` is a family name (its order; for zero-bubble and V families also its
    W-filled versions; see ``EXACT_FAMILIES``), ``auto`` or
    ``cpsat``; ``start`` is an extra (name, schedule) candidate such as the planner's;
    ``polish=False`` skips CP-SAT (heuristics only, for searches that call this often);
    ``heuristics=False`` takes ``start`` as the best heuristic already (it was chosen
    among them for these costs) and only polishes it.
    Raises ``InfeasibleError`` when the memory limit is below one microbatch in flight
    per stage, when a deadline precedes its task's earliest finish, or when no
    candidate meets them.
    """
    t0 = time.perf_counter()
    _check_options(method, time_limit, seed)
    deadlines = deadlines or {}
    budget = None
    if memory_limit is not None:
        memory_limit.check_minimum(costs)
        budget = memory_limit.act_budget(costs)
    check_deadlines(costs, deadlines)
    tried: list[dict] = []
    best = _best_candidate(costs, microbatches, budget, deadlines, method, start, tried, heuristics)
    lb = step_lower_bound(costs, microbatches, act_budget=budget)
    name, t, sched = best
    at_bound = t <= lb * (1 + 1e-9)
    status = "OPTIMAL" if at_bound else "HEURISTIC"  # at the lower bound: nothing to search
    limit = 0.0 if at_bound or not polish else time_limit if method == "cpsat" else \
        time_limit if method == "auto" and t > 1.01 * lb else 0.0
    if limit > 0:
        status, (name, t, sched) = _polish(costs, microbatches, (name, t, sched), budget, deadlines,
                                           limit=limit, seed=seed, workers=workers, tried=tried)
    return ScheduleChoice(schedule=sched, name=name, status=status, step_time=t, lower_bound=lb,
                          gap=_gap(t, lb), wall_s=time.perf_counter() - t0,
                          tried=tried)
