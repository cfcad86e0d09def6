"""Virtual-stage boundaries (vpp > 1) moved several at once, scored by the simulator.

With several stages per rank, one boundary moved by one layer (``solvers.partition.refine``)
often changes nothing on the critical path: the better partition shifts a run of boundaries
together. This search adds, under one compiled schedule order:

- a start: the balanced F+B split (min-max of serial F + B per stage over all pp x vpp
  stages), the first step of the auto-partitioner proposed for torch.distributed.pipelining
  (pytorch PR #179212, from torchtitan PR #2113,
  ``torchtitan/experiments/autopartition/infra/_partition.py``);
- moves around a stage c: its first layer to c - 1 with stages 0..c - 1 re-balanced over
  the prefix ending at that layer, or its last layer to c + 1 with stages 0..c re-balanced
  over the prefix before it (the PR's moves), the same two with the suffix re-balanced,
  each boundary of c shifted by one layer, and a layer of c passed to any farther stage
  with every boundary between shifted by one;
- the search: from each start, breadth-first over the moves around the critical stage
  (``critical_stage``) while it does not move right (the PR's search), then descent from
  the best partition that fits memory: the moves around the critical stage first, every
  stage's moves when none of those improves.

Every candidate is simulated; only those within the memory limit (``fits``) are kept. The
search is bounded by ``max_evaluations`` simulations, ``MAX_ACTIONS`` re-timed actions and
the caller's work budget (``stop``),
not by wall time (``deadline`` is only the plan's wall cap), so the same inputs give the same
partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from planner.core.costs import CostTable
from planner.core.placement import Bounds
from planner.core.schedule import ActionKind
from planner.core.meter import WorkMeter
from planner.core.simulate import Compiled, SimResult, simulate_compiled
from planner.core.stage_costs import StageCosts, stage_costs

__all__ = ["MAX_EVALUATIONS", "MAX_ACTIONS", "JointResult", "balanced_split", "critical_stage", "pass_layer", "stage_moves",
           "joint_moves"]

MAX_EVALUATIONS = 400
"""Simulations one joint search may spend (each re-times one compiled order)."""
MAX_ACTIONS = 300_000
"""Actions one joint search may re-time in all (counted by the plan's ``planner.core.meter.WorkMeter``):
3 reference seconds at ``solvers.schedule.search.budget.ACTIONS_PER_WORK_S``, so a large
schedule gets fewer simulations and leaves the rest of the joint phase its share."""


@dataclass(frozen=True)
class JointResult:
    """Outcome of ``joint_moves``."""

    bounds: Bounds
    """Fastest partition found that fits (the given one when none beats it)."""
    step_time: float
    """Its simulated step time (inf when nothing fits)."""
    rounds: int
    """Improving moves taken."""
    evaluated: int
    """Partitions simulated."""


def critical_stage(sim: SimResult) -> int:
    """The stage with the most time on the critical path between its first backward and its
    last forward (the steady phase; the whole path when it has no such span)."""
    path = sim.critical_path
    kinds = [_kind(sim.actions[n]) for n in path]
    back = [k for k, kind in enumerate(kinds) if kind in (ActionKind.I, ActionKind.B)]
    fwd = [k for k, kind in enumerate(kinds) if kind == ActionKind.F]
    lo, hi = (back[0], fwd[-1]) if back and fwd and back[0] <= fwd[-1] else (0, len(path) - 1)
    busy: dict[int, float] = {}
    for n in path[lo:hi + 1]:
        s = sim.actions[n].stage
        busy[s] = busy.get(s, 0.0) + sim.end[n] - sim.start[n]
    return max(sorted(busy), key=lambda s: busy[s]) if busy else 0


def _kind(action) -> str:
    """A fused pair counts as its backward part."""
    return action.sub[1].kind if action.sub else action.kind


def balanced_split(prefix: Sequence[float], lo: int, hi: int, first: int, count: int,
                   fixed: dict[int, int]) -> Bounds | None:
    """Stages ``first .. first + count - 1`` over layers [lo, hi) minimising the largest
    weight (``prefix``: prefix sums of per-layer weights); ``fixed`` maps a boundary index
    (stage k starts there) to its layer. Ties: the earliest start of each stage counted from
    the last (as the PR's DP). None when no split respects the sizes and ``fixed``."""
    n = hi - lo
    if count < 1 or n < count:
        return None
    p = np.asarray(prefix[lo:hi + 1], dtype=float) - prefix[lo]
    inf = np.inf
    span = p[None, :] - p[:, None]  # span[a, e] = weight of [lo + a, lo + e)
    valid = np.triu(np.ones((n + 1, n + 1), dtype=bool), 1)
    best = np.full(n + 1, inf)
    best[0] = 0.0
    cuts = []
    for j in range(count):
        cand = np.where(valid, np.maximum(best[:, None], span), inf)
        start = fixed.get(first + j)
        if start is not None:
            mask = np.full(n + 1, True)
            if lo <= start <= hi:
                mask[start - lo] = False
            cand[mask, :] = inf
        end = fixed.get(first + j + 1) if j + 1 < count else None
        arg = np.argmin(cand, axis=0)
        best = cand[arg, np.arange(n + 1)]
        if end is not None:
            keep = best.copy()
            best = np.full(n + 1, inf)
            if lo < end <= hi:
                best[end - lo] = keep[end - lo]
        cuts.append(arg)
    if best[n] == inf:
        return None
    out, e = [], n
    for j in range(count - 1, -1, -1):
        a = int(cuts[j][e])
        out.append((lo + a, lo + e))
        e = a
    return out[::-1]


def pass_layer(bounds: Bounds, c: int, t: int, fixed: Collection[int]) -> Bounds | None:
    """``bounds`` with one layer of stage ``c`` passed to stage ``t`` (its last layer when t > c,
    its first when t < c) and every boundary between them shifted by one layer, so the stages
    between keep their sizes; None when ``c`` would be empty or a boundary in ``fixed`` (stage k
    starts at boundary k) would move."""
    span = range(c + 1, t + 1) if t > c else range(t + 1, c + 1)
    a, b = bounds[c]
    if b - a < 2 or t == c or any(k in fixed for k in span):
        return None
    cuts = [lo for lo, _ in bounds] + [bounds[-1][1]]
    shift = -1 if t > c else 1
    cuts = [x + shift if k in span else x for k, x in enumerate(cuts)]
    return [(cuts[k], cuts[k + 1]) for k in range(len(bounds))]


def stage_moves(bounds: Bounds, c: int, prefix: Sequence[float], fixed: dict[int, int]) -> list[Bounds]:
    """Distinct partitions one move around stage ``c`` (module doc), in a fixed order."""
    S, out = len(bounds), []
    a, b = bounds[c]
    n = bounds[-1][1]
    if b - a > 1:
        if c > 0 and c not in fixed:  # first layer to c - 1, prefix re-balanced
            head = balanced_split(prefix, 0, a + 1, 0, c, fixed)
            if head is not None:
                out.append(head + [(a + 1, b)] + list(bounds[c + 1:]))
        if c < S - 1 and c + 1 not in fixed:  # last layer to c + 1, prefix re-balanced
            head = balanced_split(prefix, 0, b - 1, 0, c + 1, fixed)
            if head is not None:
                out.append(head + [(b - 1, bounds[c + 1][1])] + list(bounds[c + 2:]))
        if c < S - 1 and c + 1 not in fixed:  # last layer to c + 1, suffix re-balanced
            tail = balanced_split(prefix, b - 1, n, c + 1, S - c - 1, fixed)
            if tail is not None:
                out.append(list(bounds[:c]) + [(a, b - 1)] + tail)
        if c > 0 and c not in fixed:  # first layer to c - 1, suffix re-balanced
            tail = balanced_split(prefix, a + 1, n, c, S - c, fixed)
            if tail is not None:
                out.append(list(bounds[:c - 1]) + [(bounds[c - 1][0], a + 1)] + tail)
    for k, d in ((c, -1), (c + 1, 1), (c, 1), (c + 1, -1)):  # a boundary of c by one layer
        if 0 < k < S and k not in fixed:
            cut = bounds[k][0] + d
            if bounds[k - 1][0] < cut < bounds[k][1]:
                new = list(bounds)
                new[k - 1], new[k] = (bounds[k - 1][0], cut), (cut, bounds[k][1])
                out.append(new)
    for t in sorted(range(S), key=lambda t: (abs(t - c), t)):  # a layer of c to a farther stage
        if abs(t - c) > 1 and (moved := pass_layer(bounds, c, t, fixed)) is not None:
            out.append(moved)
    unique: dict[tuple, Bounds] = {}
    for m in out:
        if m != bounds:
            unique.setdefault(tuple(m), m)
    return list(unique.values())


def joint_moves(table: CostTable, comp: Compiled, bounds: Bounds, ranks: list[int], *,
                fits: Callable[[StageCosts, list[int]], bool] | None = None,
                pinned: frozenset[int] = frozenset(), max_evaluations: int = MAX_EVALUATIONS,
                deadline: float | None = None, stop: Callable[[], bool] | None = None,
                meter: WorkMeter | None = None) -> JointResult:
    """Search chunk boundaries jointly from ``bounds`` and the balanced F+B split (module doc).

    ``stop`` (the planner's work budget, e.g. ``Deadline.expired``) is asked before each new
    simulation; so is the wall ``deadline`` (``perf_counter`` time). Each simulation is charged
    to ``meter`` (the plan's ``WorkMeter``), which ``stop`` reads."""
    prefix = [0.0]
    for weight in [lc.serial_f + lc.serial_b for lc in table.layers]:  # summed as the PR's DP sums them
        prefix.append(prefix[-1] + weight)
    fixed = {k: bounds[k][0] for k in pinned}
    max_evaluations = min(max_evaluations, max(2, MAX_ACTIONS // max(1, len(comp.actions))))
    seen: dict[tuple, tuple[float, bool, int]] = {}

    def score(b: Bounds) -> tuple[float, bool, int] | None:
        key = tuple(b)
        if key not in seen:
            if (len(seen) >= max_evaluations or (deadline is not None and time.perf_counter() > deadline)
                    or (stop is not None and seen and stop())):
                return None
            sc = stage_costs(table, b, ranks)
            sim = simulate_compiled(comp, sc, meter=meter)
            seen[key] = (sim.step_time, fits is None or fits(sc, sim.peak_memory_bytes), critical_stage(sim))
        return seen[key]

    first = score(list(bounds))
    best, best_t = list(bounds), first[0] if first and first[1] else float("inf")

    def offer(b: Bounds, r: tuple[float, bool, int]) -> bool:
        nonlocal best, best_t
        if r[1] and r[0] < best_t * (1 - 1e-9):
            best, best_t = b, r[0]
            return True
        return False

    start = balanced_split(prefix, 0, len(table.layers), 0, len(bounds), fixed)
    for root in ([start] if start is not None else []) + [list(bounds)]:
        r = score(root)
        if r is None:
            break
        offer(root, r)
        queue = [(root, r[2])]
        while queue:  # the PR's search: moves around the critical stage while it does not move right
            parts, c = queue.pop(0)
            if c == 0:
                continue
            for cand in stage_moves(parts, c, prefix, fixed)[:2]:
                if tuple(cand) in seen:
                    continue
                rc = score(cand)
                if rc is None:
                    queue = []
                    break
                offer(cand, rc)
                if rc[2] <= c:
                    queue.append((cand, rc[2]))
    rounds = 0
    while best_t < float("inf"):  # descent: the critical stage's moves first, then every stage's
        crit = seen[tuple(best)][2]
        order = [crit] + [s for s in range(len(best)) if s != crit]
        improved, exhausted = False, False
        for c in order:
            for cand in stage_moves(best, c, prefix, fixed):
                rc = score(cand)
                if rc is None:
                    exhausted = True
                    break
                improved |= offer(cand, rc)
            if improved or exhausted:
                break
        if not improved:
            break
        rounds += 1
    return JointResult(best, best_t, rounds, len(seen))
