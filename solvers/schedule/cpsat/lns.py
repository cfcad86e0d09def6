"""Large-neighbourhood search with CP-SAT: re-optimise time windows of a schedule.

Plain CP-SAT over all tasks stalls past a few hundred tasks, so large instances are
improved window by window around the incumbent (the best heuristic to start with), in
the manner of LNS (Shaw 1998, "Using Constraint Programming and Local Search Methods to
Solve Vehicle Routing Problems"). A window's model (``_build``) frees the actions that
start in it, freezes those before it and keeps the per-rank order after it, so its
objective is the exact makespan; the hint is the incumbent. Fused OVERLAP_F_B actions
move as one unit. Each window is solved by one deterministic worker, so the search is
reproducible for a seed.

[Note: work clock] The budget is counted in *work seconds*, not in CP-SAT's
deterministic time, which counts neither model building nor presolve: a window costs
``WORK_S_PER_VAR`` x its model's variables plus ``DET_TO_WORK`` x the deterministic
seconds its solve used. Both terms are reproducible, so ``time_limit`` is about that
many seconds on the reference machine and the search is deterministic.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from planner.core.meter import WorkMeter
from planner.core.schedule import OVERLAP, Key, Schedule, predecessors, provides
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from solvers.schedule.cpsat.common import ACCEPTED, Ticks, Timed, configure, retime, sort_key, split_b

__all__ = ["LnsResult", "lns_improve", "WORK_S_PER_VAR", "DET_TO_WORK"]

WORK_S_PER_VAR = 3.5e-4
"""Work seconds charged per window-model variable (build + solve on the 2-core reference
machine; see [Note: work clock]). Fitted with ``DET_TO_WORK`` on windows of 8 to 32
actions per rank of the Qwen3-235B pp 8 vpp 2, Qwen3-Next pp 8 and DeepSeek-V3 pp 8
plans, each window's build, solve, extraction and re-simulation timed on a quiet machine."""
MAX_ACTIONS_PER_RANK = 32
"""Largest window (actions per rank) the search grows to."""
DET_TO_WORK = 3.2
"""Work seconds per deterministic second of a window's solve ([Note: work clock])."""
MIN_WINDOW_S = 0.05
"""Smallest deterministic time a window gets when the budget is nearly spent; each window
otherwise gets ``window_time``, or what is left of the budget if less, so the search ends
within about one small window of ``time_limit``."""

Node = tuple[int, int]
"""(rank, position) of an action in the incumbent."""


@dataclass
class LnsResult:
    """Outcome of the search."""

    schedule: Schedule
    """Best schedule found (the input, B split into I and W, when nothing improved)."""
    step_time: float
    """Its simulated step time, seconds."""
    windows: int = 0
    """Windows solved."""
    improved: int = 0
    """Windows that improved the incumbent."""
    deterministic_time: float = 0.0
    """Solver deterministic time spent."""
    work_s: float = 0.0
    """Work seconds charged ([Note: work clock])."""
    history: list[float] = field(default_factory=list)
    """Step time after each improvement."""


@dataclass
class _Graph:
    """The incumbent's timing DAG: arcs (successor, delay ticks) per node."""

    timed: Timed
    succ: dict[Node, list[tuple[Node, int]]]
    preds: dict[Node, list[tuple[Node, int]]]

    @staticmethod
    def of(timed: Timed, ticks: Ticks) -> "_Graph":
        S = ticks.costs.num_stages
        where = {key: (r, k) for r, row in timed.rows.items()
                 for k, (a, _, _) in enumerate(row) for key in provides(a)}
        succ: dict[Node, list[tuple[Node, int]]] = {n: [] for n in timed.topo}
        preds: dict[Node, list[tuple[Node, int]]] = {n: [] for n in timed.topo}
        for r, row in timed.rows.items():
            for k, (a, _, _) in enumerate(row):
                for key in predecessors(a, S):
                    arc = (where[key], ticks.delay(key, r))
                    preds[(r, k)].append(arc)
                    succ[where[key]].append(((r, k), arc[1]))
        return _Graph(timed, succ, preds)


def _tails(g: _Graph, after: set[Node]) -> dict[Node, int]:
    """q_x: longest path from x's end through after-window actions (rank order + DAG arcs)."""
    rows = g.timed.rows
    q: dict[Node, int] = {}
    for n in reversed(g.timed.topo):
        arcs = list(g.succ[n])
        r, k = n
        if k + 1 < len(rows[r]):
            arcs.append(((r, k + 1), 0))
        best = 0
        for u, d in arcs:
            if u in after:
                a, st, en = rows[u[0]][u[1]]
                best = max(best, d + en - st + q[u])
        q[n] = best
    return q


@dataclass
class _Window:
    model: cp_model.CpModel
    starts: dict[Node, cp_model.IntVar]
    """Start var of each free action."""


def _build(g: _Graph, ticks: Ticks, t0: int, t1: int, limit: list[int | None] | None,
           deadlines: dict[Key, float]) -> _Window | None:
    """The model of window [t0, t1) of the incumbent, re-timed in ticks.

    Actions starting before t0 (the prefix) are frozen at their times. Actions starting
    in the window are free: an interval each, any order on their rank (``add_no_overlap``),
    precedences (``predecessors``, P2P ticks), W deadlines, and a reservoir per rank over
    the window's memory events from the level the prefix leaves (outside the window the
    order is unchanged, so memory there is as in the incumbent). Actions after the window
    keep their per-rank order, so they run as early as their inputs allow and the makespan
    is exactly ``max(end_x + q_x)`` over prefix and window actions x (``q_x``: ``_tails``).
    The model holds only the window's tasks; None when it frees fewer than two.
    """
    c, rows, horizon = ticks.costs, g.timed.rows, g.timed.makespan
    free = {(r, k) for r, row in rows.items() for k, (_, st, _) in enumerate(row) if t0 <= st < t1}
    if len(free) < 2:
        return None
    after = {(r, k) for r, row in rows.items() for k, (_, st, _) in enumerate(row) if st >= t1}
    q = _tails(g, after)
    model = cp_model.CpModel()
    starts, ends = {}, {}
    for r, row in rows.items():
        for k, (a, st, en) in enumerate(row):
            if (r, k) in free:
                v = model.new_int_var(0, horizon - (en - st), f"start_r{r}_{k}")
                starts[(r, k)], ends[(r, k)] = v, v + (en - st)
                model.add_hint(v, st)
            elif st < t0:
                ends[(r, k)] = en
    makespan = model.new_int_var(0, horizon, "makespan")
    floor = max([ends[n] + q[n] for n in ends if n not in free] + [0] +
                [rows[n[0]][n[1]][2] - rows[n[0]][n[1]][1] + q[n] for n in after if not _has_pred(g, n)])
    model.add(makespan >= floor)
    for n in free:
        model.add(makespan >= ends[n] + q[n])
        for p, d in g.preds[n]:
            model.add(starts[n] >= ends[p] + d)
        a, _, en = rows[n[0]][n[1]]
        for key in provides(a):
            if key in deadlines:
                model.add(ends[n] <= max(int(deadlines[key] / ticks.unit), en))
    for r, row in rows.items():
        mine = sorted(k for rr, k in free if rr == r)
        if mine:
            _rank(model, r, row, starts, ends, mine, t0)
            if limit is not None and limit[r] is not None:
                _reservoir(model, c, r, row, starts, ends, mine, t0, limit[r])
    model.minimize(makespan)
    model.add_hint(makespan, horizon)
    return _Window(model, starts)


def _has_pred(g: _Graph, n: Node) -> bool:
    return n[1] > 0 or bool(g.preds[n])


def _rank(model, r: int, row, starts, ends, mine: list[int], t0: int) -> None:
    """No overlap on the rank after its frozen prefix; one (stage, kind) keeps microbatch order."""
    fixed_end = max((en for _, st, en in row if st < t0), default=0)
    ivs = []
    groups: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for k in mine:
        a, st, en = row[k]
        model.add(starts[(r, k)] >= fixed_end)
        ivs.append(model.new_interval_var(starts[(r, k)], en - st, ends[(r, k)], f"iv_r{r}_{k}"))
        if a.kind != OVERLAP:
            groups.setdefault((a.stage, a.kind), []).append((a.microbatch, k))
    model.add_no_overlap(ivs)
    for items in groups.values():
        items.sort()
        for (_, k0), (_, k1) in zip(items, items[1:]):
            model.add(starts[(r, k0)] <= starts[(r, k1)])


def _reservoir(model, c: StageCosts, r: int, row, starts, ends, mine: list[int], t0: int,
               limit: int) -> None:
    level = sum(c.allocates(a) - c.frees(a) for a, st, _ in row if st < t0)
    times, changes = [0], [level]
    for k in mine:
        a = row[k][0]
        if c.allocates(a):
            times.append(starts[(r, k)])
            changes.append(c.allocates(a))
        if c.frees(a):
            times.append(ends[(r, k)])
            changes.append(-c.frees(a))
    model.add_reservoir_constraint(times, changes, 0, limit)


def _extract(timed: Timed, win: _Window, solver: cp_model.CpSolver, num_stages: int) -> Schedule:
    """Prefix, the window's actions by solved start, then the unchanged rest (free positions
    of a rank are contiguous since its actions are in start order)."""
    out: Schedule = {}
    for r, row in timed.rows.items():
        ks = [k for k in range(len(row)) if (r, k) in win.starts]
        if not ks:
            out[r] = [a for a, _, _ in row]
            continue
        mid = []
        for k in ks:
            a, st, en = row[k]
            t = solver.value(win.starts[(r, k)])
            mid.append((sort_key(a, t, t + en - st, num_stages), a))
        mid.sort(key=lambda x: x[0])
        out[r] = [a for a, _, _ in row[:ks[0]]] + [a for _, a in mid] + [a for a, _, _ in row[ks[-1] + 1:]]
    return out


def lns_improve(costs: StageCosts, schedule: Schedule, *, activation_limit: list[int | None] | None = None,
                deadlines: dict[Key, float] | None = None, time_limit: float, seed: int = 0,
                actions_per_rank: int = 8, window_time: float = 1.0,
                wall_s: float | None = None, meter: WorkMeter | None = None) -> LnsResult:
    """Improve ``schedule`` window by window within ``time_limit`` work seconds ([Note: work clock]).

    Pass p uses windows of ``size`` (x1.5 on odd passes) actions per rank, shifted by a
    third of a window per pass; ``size`` starts at ``actions_per_rank`` and doubles after
    two passes without gain (a larger neighbourhood escapes what small windows cannot), up
    to ``MAX_ACTIONS_PER_RANK``; two passes without gain at that size end the search.
    Its simulations are charged to ``meter``.
    """
    deadlines = deadlines or {}
    best = split_b(schedule)
    best_t = simulate(best, costs, meter=meter).step_time
    result = LnsResult(best, best_t, history=[best_t])
    t_start = time.perf_counter()
    wall_cap = math.inf  # [Note: deterministic search]: the work clock alone, unless the user capped wall time
    if wall_s is not None:  # [Note: kept budget] in solvers.schedule.search.budget
        wall_cap = t_start + wall_s
    idle_passes, p, size = 0, 0, actions_per_rank
    while result.work_s < time_limit and time.perf_counter() < wall_cap:
        if idle_passes == 2:
            if size >= MAX_ACTIONS_PER_RANK:
                break
            idle_passes, size = 0, min(2 * size, MAX_ACTIONS_PER_RANK)
        ticks = Ticks.for_makespan(costs, best_t)
        g = _Graph.of(retime(best, ticks), ticks)
        per_rank = max(len(row) for row in g.timed.rows.values())
        span = max(2, g.timed.makespan * size * (2 + p % 2) // (2 * per_rank))
        t0 = -((p * span) // 3) % span - span // 2
        gained = False
        while t0 < g.timed.makespan and result.work_s < time_limit \
                and time.perf_counter() < wall_cap:
            win = _build(g, ticks, max(0, t0), t0 + span, activation_limit, deadlines)
            t0 += span // 2
            if win is None:
                continue
            left = (time_limit - result.work_s) / DET_TO_WORK  # the last window ends near the budget
            found = _solve(win, g, costs, seed, min(window_time, max(MIN_WINDOW_S, left)), result,
                           None if wall_cap == math.inf else wall_cap - time.perf_counter(), meter)
            if found is not None and found[1] < best_t * (1 - 1e-9):
                best, best_t, gained = found[0], found[1], True
                result.improved += 1
                result.history.append(best_t)
                g = _Graph.of(retime(best, ticks), ticks)
        idle_passes = 0 if gained else idle_passes + 1
        p += 1
    result.schedule, result.step_time = best, best_t
    return result


def _solve(win: _Window, g: _Graph, costs: StageCosts, seed: int, limit: float,
           result: LnsResult, wall_s: float | None, meter: WorkMeter | None) -> tuple[Schedule, float] | None:
    solver = cp_model.CpSolver()
    configure(solver, time_limit=limit, seed=seed, workers=1, wall_s=wall_s)
    solver.parameters.cp_model_probing_level = 0  # small models: probing costs more than it finds
    status = solver.status_name(solver.solve(win.model))
    result.windows += 1
    result.work_s += WORK_S_PER_VAR * len(win.model.proto.variables) + DET_TO_WORK * solver.deterministic_time
    result.deterministic_time += solver.deterministic_time
    if status not in ACCEPTED or solver.objective_value >= g.timed.makespan:
        return None
    cand = _extract(g.timed, win, solver, costs.num_stages)
    return cand, simulate(cand, costs, meter=meter).step_time
