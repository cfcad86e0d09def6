"""CP-SAT schedule model over every (stage, microbatch, kind) task.

``build_model`` adds, in a fixed order, interval tasks, per-rank no-overlap, precedences,
symmetry breaking, activation memory, W deadlines, optional fused F&B intervals, the
makespan objective and the best heuristic as hint. The horizon is the warm start's
makespan in ticks, so the model only holds schedules at least as good as the warm start.
Symmetry breaking restricts the search to microbatch-ordered schedules (every generator
in ``solvers`` produces one); OPTIMAL is meant within that class, while the reported gap
is always against the independent ``solvers.schedule.search.lower_bound``. Fine for a
few hundred tasks; larger instances go through ``solvers.schedule.cpsat.lns``.

[Note: reservoir as cumulative] Every allocation is released by a later event of the
same microbatch, so the reservoir "level <= limit" equals a cumulative constraint over
the allocation lifetimes; ``add_cumulative`` propagates it in near-linear time where
``add_reservoir_constraint`` expands into pairwise literals (``_memory``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from planner.core.meter import WorkMeter
from planner.core.schedule import OVERLAP, Action, ActionKind, Key, Schedule, predecessors, provides
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from solvers.schedule.cpsat.common import ACCEPTED, Ticks, configure, retime, sort_key, split_b

__all__ = ["ScheduleData", "Task", "ScheduleModel", "build_model", "solve_model", "extract_schedule"]


@dataclass(frozen=True, kw_only=True)
class ScheduleData:
    """Everything the model is built from."""

    costs: StageCosts
    """Per-stage costs and placement."""
    microbatches: int
    """Microbatches per step."""
    hint: Schedule
    """Warm start (a valid schedule); its makespan is the horizon."""
    activation_limit: list[int | None] | None = None
    """Activation bytes each rank may hold; None = unlimited."""
    deadlines: dict[Key, float] = field(default_factory=dict)
    """Latest end of a task (usually W), seconds from the step's start."""
    fuse: bool = False
    """Allow fused OVERLAP_F_B pairs where they are cheaper."""


@dataclass(frozen=True)
class Task:
    """One unit of work in the model."""

    start: cp_model.IntVar
    end: cp_model.IntVar
    interval: cp_model.IntervalVar
    """Present unless the task runs inside a fused pair."""
    solo: cp_model.IntVar | int
    """1 when the task runs alone (always 1 without fusion)."""


@dataclass
class ScheduleModel:
    """A built model and what extraction needs."""

    model: cp_model.CpModel
    data: ScheduleData
    ticks: Ticks
    horizon: int
    tasks: dict[Key, Task]
    pairs: dict[tuple[Key, Key], tuple[cp_model.IntVar, cp_model.IntervalVar]]
    makespan: cp_model.IntVar


def _keys(costs: StageCosts, m: int) -> list[Key]:
    return [(s, k, mb) for s in range(costs.num_stages) for k in "FIW" for mb in range(m)]


def build_model(data: ScheduleData, meter: WorkMeter | None = None) -> ScheduleModel:
    """The model of the module docstring, built in a fixed order:

    data -> horizon -> ``tasks[(stage, kind, mb)] = Task(start, end, interval)`` ->
    per-rank ``add_no_overlap`` -> precedences (``planner.core.schedule.predecessors``,
    P2P ticks across ranks) -> symmetry breaking (per stage, F, I and W in microbatch
    order) -> activation memory per rank (``_memory``: F allocates ``act_bytes`` at its
    start, I frees ``act_bytes - act_w_bytes`` from its start, W frees ``act_w_bytes`` at its
    end) -> W deadlines -> optional fused F&B intervals (an F and an I of another microbatch on
    one rank may share one interval of the fused duration; the solver chooses which pairs)
    -> objective (makespan) -> hints (the best heuristic, re-timed in ticks).
    """
    c, m = data.costs, data.microbatches
    ticks = Ticks.for_makespan(c, simulate(data.hint, c, meter=meter).step_time)
    timed = retime(split_b(data.hint), ticks)
    horizon = timed.makespan
    hinted_end = {k: e for row in timed.rows.values() for a, _, e in row for k in provides(a)}
    model = cp_model.CpModel()
    tasks = _tasks(model, c, m, ticks, horizon, fused_keys=_fusable(c) if data.fuse else set())
    pairs = _pairs(model, data, ticks, horizon, tasks) if data.fuse else {}
    _no_overlap(model, c, tasks, pairs)
    _precedences(model, c, tasks, ticks)
    _symmetry(model, c, m, tasks)
    if data.activation_limit is not None:
        _memory(model, c, m, tasks, data.activation_limit, horizon)
    for key, deadline in data.deadlines.items():  # the warm start meets them in seconds
        model.add(tasks[key].end <= max(int(deadline / ticks.unit), hinted_end[key]))
    makespan = model.new_int_var(0, horizon, "makespan")
    model.add_max_equality(makespan, [t.end for t in tasks.values()])
    model.minimize(makespan)
    sm = ScheduleModel(model, data, ticks, horizon, tasks, pairs, makespan)
    _hint(sm, timed.rows, horizon)
    return sm


def _fusable(c: StageCosts) -> set[tuple[int, str]]:
    out: set[tuple[int, str]] = set()
    for (a, b), t in c.fused.items():
        if c.ranks[a] == c.ranks[b] and t < c.f[a] + c.i[b]:
            out |= {(a, ActionKind.F), (b, ActionKind.I)}
    return out


def _tasks(model, c: StageCosts, m: int, ticks: Ticks, horizon: int, *, fused_keys) -> dict[Key, Task]:
    tasks = {}
    for key in _keys(c, m):
        s, kind, mb = key
        d = ticks.action(Action(s, kind, mb))
        start = model.new_int_var(0, horizon - d, f"start_{s}{kind}{mb}")
        end = model.new_int_var(d, horizon, f"end_{s}{kind}{mb}")
        if (s, kind) in fused_keys:
            solo = model.new_bool_var(f"solo_{s}{kind}{mb}")
            iv = model.new_optional_interval_var(start, d, end, solo, f"task_{s}{kind}{mb}")
            model.add(end == start + d).only_enforce_if(solo)
        else:
            solo = 1
            iv = model.new_interval_var(start, d, end, f"task_{s}{kind}{mb}")
        tasks[key] = Task(start, end, iv, solo)
    return tasks


def _pairs(model, data: ScheduleData, ticks: Ticks, horizon: int, tasks: dict[Key, Task]):
    """Optional fused intervals for F(a, m1) beside I(b, m2), offsets near the hint's."""
    c, m = data.costs, data.microbatches
    offsets = {f.microbatch - b.microbatch for acts in data.hint.values() for a in acts
               if a.kind == OVERLAP for f, b in [a.sub]}
    offsets = {d + e for d in offsets for e in (-1, 0, 1)} or set(range(1, 2 * c.num_ranks + 1))
    pairs, member = {}, {key: [] for key, t in tasks.items() if not isinstance(t.solo, int)}
    for (a, b), t in sorted(c.fused.items()):
        if c.ranks[a] != c.ranks[b] or t >= c.f[a] + c.i[b]:
            continue
        d = ticks.of(t)
        for m1 in range(m):
            for m2 in sorted(m1 - o for o in offsets if 0 <= m1 - o < m and o != 0):
                fk, ik = (a, ActionKind.F, m1), (b, ActionKind.I, m2)
                name = f"{a}F{m1}_{b}I{m2}"
                on = model.new_bool_var(f"fuse_{name}")
                start = model.new_int_var(0, horizon - d, f"pstart_{name}")
                iv = model.new_optional_interval_var(start, d, start + d, on, f"pair_{name}")
                for key in (fk, ik):
                    model.add(tasks[key].start == start).only_enforce_if(on)
                    model.add(tasks[key].end == start + d).only_enforce_if(on)
                    member[key].append(on)
                pairs[(fk, ik)] = (on, iv)
    for key, ons in member.items():
        model.add(tasks[key].solo + sum(ons) == 1)
    return pairs


def _no_overlap(model, c: StageCosts, tasks: dict[Key, Task], pairs) -> None:
    per_rank: list[list[cp_model.IntervalVar]] = [[] for _ in range(c.num_ranks)]
    for (s, _, _), t in tasks.items():
        per_rank[c.ranks[s]].append(t.interval)
    for (fk, _), (_, iv) in pairs.items():
        per_rank[c.ranks[fk[0]]].append(iv)
    for ivs in per_rank:
        model.add_no_overlap(ivs)


def _precedences(model, c: StageCosts, tasks: dict[Key, Task], ticks: Ticks) -> None:
    for key, t in tasks.items():
        rank = c.ranks[key[0]]
        for pred in predecessors(Action(*key), c.num_stages):
            model.add(t.start >= tasks[pred].end + ticks.delay(pred, rank))


def _symmetry(model, c: StageCosts, m: int, tasks: dict[Key, Task]) -> None:
    """Per stage, F, I and W of microbatch mb start no later than those of mb + 1."""
    for s in range(c.num_stages):
        for kind in "FIW":
            for mb in range(m - 1):
                model.add(tasks[(s, kind, mb)].start <= tasks[(s, kind, mb + 1)].start)


def _memory(model, c: StageCosts, m: int, tasks: dict[Key, Task], limit: list[int | None],
            horizon: int) -> None:
    """Per-rank activation reservoir, as lifetimes: [F start, I start) holds act - act_w,
    [F start, W end) holds act_w [Note: reservoir as cumulative]. An input-gradient's release
    counts from its start: alone on its rank that moves no peak, and in a fused pair it is the
    simulator's rule (``planner.core.stage_costs.memory_order``). Intervals are half-open, so
    a release and an allocation at the same tick are allowed, as in the simulator; CP-SAT
    expands ``add_reservoir_constraint`` into pairwise precedence literals, quadratic in the
    tasks per rank, which ``add_cumulative`` avoids."""
    for r in range(c.num_ranks):
        if limit[r] is None:
            continue
        lifetimes, demands = [], []
        for s in (s for s in range(c.num_stages) if c.ranks[s] == r):
            for mb in range(m):
                f = tasks[(s, ActionKind.F, mb)]
                for kind in (ActionKind.I, ActionKind.W):
                    demand = c.released(kind, s)
                    if demand > 0:
                        t = tasks[(s, kind, mb)]
                        end = t.start if kind == ActionKind.I else t.end
                        size = model.new_int_var(0, horizon, f"held_{s}{kind}{mb}")
                        lifetimes.append(model.new_interval_var(f.start, size, end, f"mem_{s}{kind}{mb}"))
                        demands.append(demand)
        model.add_cumulative(lifetimes, demands, limit[r])


def _hint(sm: ScheduleModel, timed: dict[int, list[tuple[Action, int, int]]], horizon: int) -> None:
    fused_on = set()
    for row in timed.values():
        for a, start, end in row:
            if a.kind == OVERLAP:
                f, b = a.sub
                fused_on.add(((f.stage, ActionKind.F, f.microbatch), (b.stage, ActionKind.I, b.microbatch)))
            for p in a.parts:
                t = sm.tasks[(p.stage, p.kind, p.microbatch)]
                sm.model.add_hint(t.start, start)
                sm.model.add_hint(t.end, end)
                if not isinstance(t.solo, int):
                    sm.model.add_hint(t.solo, a.kind != OVERLAP)
    for pair, (on, _) in sm.pairs.items():
        sm.model.add_hint(on, pair in fused_on)
    sm.model.add_hint(sm.makespan, horizon)


@dataclass
class SolveResult:
    """Solver outcome."""

    status: str
    """OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN or MODEL_INVALID."""
    solver: cp_model.CpSolver
    wall_s: float
    deterministic_time: float


def solve_model(sm: ScheduleModel, *, time_limit: float, seed: int, workers: int = 8,
                deterministic: bool = True, wall_s: float | None = None) -> SolveResult:
    """Solve with the limits of ``solvers.schedule.cpsat.common.configure``."""
    solver = cp_model.CpSolver()
    configure(solver, time_limit=time_limit, seed=seed, workers=workers, deterministic=deterministic,
              wall_s=wall_s)
    status = solver.solve(sm.model)
    return SolveResult(solver.status_name(status), solver, solver.wall_time, solver.deterministic_time)


def extract_schedule(sm: ScheduleModel, res: SolveResult) -> Schedule | None:
    """Per-rank action lists ordered by the solution's start times; None unless OPTIMAL/FEASIBLE."""
    if res.status not in ACCEPTED:
        return None
    c, v = sm.data.costs, res.solver.value
    rows: dict[int, list[tuple[tuple[int, int, int], Action]]] = {r: [] for r in range(c.num_ranks)}
    in_pair = set()
    for (fk, ik), (on, _) in sm.pairs.items():
        if res.solver.boolean_value(on):
            act = Action.fused(Action(*fk), Action(*ik))
            start = v(sm.tasks[fk].start)
            rows[c.ranks[fk[0]]].append((sort_key(act, start, v(sm.tasks[fk].end), c.num_stages), act))
            in_pair |= {fk, ik}
    for key, t in sm.tasks.items():
        if key not in in_pair:
            act = Action(*key)
            rows[c.ranks[key[0]]].append((sort_key(act, v(t.start), v(t.end), c.num_stages), act))
    return {r: [a for _, a in sorted(row, key=lambda x: x[0])] for r, row in rows.items()}

