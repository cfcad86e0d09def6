"""A step's timeline when the pipeline ranks share CPU cores (replays on one machine).

``planner.core.simulate`` gives every action a fixed duration: right when each rank
owns its device. Replayed on CPU, the ranks are processes on one machine's cores,
shared with each other and with whatever else runs there; an action then runs
slower while another rank computes (measured: about 2x with two ranks on two cores
and one core taken by another job). This module re-times a schedule with that
effect and nothing else changed:

- each action has an amount of *work*: its duration when it runs alone (the stage
  costs given);
- while it runs, it progresses at rate ``1 / (1 + (c[kind] - 1) x b / (R - 1))``,
  where b of the other R - 1 ranks are computing at that moment and ``c[kind]`` is
  the measured slowdown of an action of that kind while all others compute (1 = no
  sharing): alone it takes its work, beside every other rank c times its work.
  Linear in b is an assumption; with two ranks only b = 0 or 1 occur;
- everything else is as in ``planner.core.simulate``: per-rank order, dependencies
  from ``compile_schedule``, a point-to-point delay on every edge between ranks.

It is event driven: time advances to the next action end or the next moment a
waiting action's inputs have arrived, and every running action's remaining work
shrinks at its current rate in between.
"""

from __future__ import annotations

from dataclasses import replace

from planner.core.schedule import ActionKind, Schedule
from planner.core.simulate import SimResult, simulate
from planner.core.stage_costs import StageCosts

__all__ = ["simulate_shared"]

_EPS = 1e-12


def simulate_shared(schedule: Schedule, costs: StageCosts, slowdown: dict[str, float]) -> SimResult:
    """Simulate ``schedule`` with ``costs`` as alone durations and ``slowdown[kind]`` while all
    other ranks compute (module docstring). Memory figures are those of the fixed-duration
    simulation; the critical path is left empty."""
    base = simulate(schedule, costs)
    comp = base.compiled
    n = len(comp.actions)
    work = [base.end[k] - base.start[k] for k in range(n)]
    delay = [costs.p2p_time(s) for s in range(costs.num_stages)] + [0.0]
    ranks = len(comp.order)
    extra = [slowdown.get(a.kind, slowdown.get(ActionKind.F, 1.0)) - 1.0 for a in comp.actions]
    start, end = [0.0] * n, [float("inf")] * n
    pos = [0] * ranks
    running: dict[int, int] = {}  # rank -> node
    free_at = [0.0] * ranks
    t = 0.0
    while True:
        pending = []
        for r in range(ranks):
            if r in running or pos[r] >= len(comp.order[r]):
                continue
            node = comp.order[r][pos[r]]
            deps = [(d, b) for d, b in zip(comp.deps[node], comp.bounds[node]) if d != n]
            if all(end[d] < float("inf") for d, _ in deps):
                ready = max([free_at[r], *(end[d] + delay[b] for d, b in deps)])
                if ready <= t + _EPS:
                    running[r] = node
                    start[node] = t
                else:
                    pending.append(ready)
        if not running:
            if not pending:
                break
            t = min(pending)
            continue
        busy = len(running)
        rate = {r: 1.0 / (1.0 + extra[k] * (busy - 1) / max(1, ranks - 1)) for r, k in running.items()}
        step = min(work[k] / rate[r] for r, k in running.items())
        nxt = min([t + step, *pending])
        for r, k in list(running.items()):
            work[k] -= rate[r] * (nxt - t)
            if work[k] <= _EPS * max(1.0, nxt):
                end[k], free_at[r] = nxt, nxt
                pos[r] += 1
                del running[r]
        t = nxt
    if any(e == float("inf") for e in end):
        raise ValueError("shared-core simulation stalled: the schedule does not finish")
    busy_time = [sum(end[k] - start[k] for k in row) for row in comp.order]
    shared = replace(base, step_time=max(end, default=0.0), start=start, end=end, busy=busy_time)
    shared.memory, shared.critical_path = base.memory, []  # cached properties, set: see the docstring
    return shared
