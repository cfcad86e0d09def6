"""The one-pass ``simulate`` (topological order and timing together, memory trace and
critical path on first read) against the two-pass path it replaced (``compile_schedule``,
then ``simulate_compiled``, the same timing pass) and against the model's rules
written out plainly (issue 19, item 5).

Schedules: 1F1B with split W (zb-h1), interleaved, fused OVERLAP_F_B (1F1B and
interleaved), V placement (zbv, and dualpipev, fused), each also with random swaps of
two actions, most of which deadlock or leave a dependency unmet.
"""

from __future__ import annotations

import pickle
import random
from dataclasses import replace

import pytest

from planner.core.compiled import compile_unordered
from planner.core.costs import P2PCost
from planner.core.p2p import crossed_boundary
from planner.core.placement import stage_ranks
from planner.core.schedule import ActionKind, Schedule, predecessors, provides
from planner.core.simulate import (
    DeadlockError,
    SimResult,
    compile_schedule,
    durations,
    simulate,
    simulate_compiled,
)
from planner.core.stage_costs import StageCosts
from solvers.schedule.families.registry import SCHEDULES

CASES = [("zb-h1", 3, 1, 4), ("1f1b", 4, 1, 9), ("interleaved", 2, 2, 4), ("interleaved", 4, 3, 8),
         ("1f1b-overlap", 3, 1, 4), ("1f1b-overlap", 4, 1, 9), ("interleaved-overlap", 2, 2, 4),
         ("zbv", 2, 2, 4), ("zbv", 4, 2, 8), ("dualpipev-list", 2, 2, 4), ("dualpipev-list", 4, 2, 10),
         ("dualpipev", 2, 2, 4), ("dualpipev", 4, 2, 10)]
"""(schedule family, pp, vpp, microbatches)."""

TOPO = {
    ("zb-h1", 3, 1, 4): [0, 1, 2, 12, 13, 24, 25, 26, 27, 28, 29, 14, 15, 16, 17, 18, 30, 31, 32, 3, 4, 5,
                         6, 7, 19, 20, 21, 8, 9, 33, 34, 35, 22, 23, 10, 11],
    ("interleaved", 2, 2, 4): [0, 1, 16, 17, 2, 3, 4, 18, 19, 20, 21, 22, 5, 6, 7, 8, 23, 24, 25, 26, 27, 9,
                               10, 11, 12, 28, 29, 30, 13, 14, 31, 15],
    ("1f1b-overlap", 3, 1, 4): [0, 1, 2, 3, 8, 9, 10, 15, 16, 17, 11, 12, 18, 19, 13, 14, 4, 5, 6, 7],
    ("interleaved-overlap", 2, 2, 4): [0, 1, 13, 14, 2, 3, 4, 15, 16, 17, 5, 6, 18, 19, 7, 8, 20, 21, 9, 10,
                                       22, 23, 11, 12],
    ("zbv", 2, 2, 4): [0, 1, 24, 25, 26, 27, 2, 3, 4, 5, 28, 29, 30, 31, 32, 33, 34, 6, 7, 8, 9, 10, 11, 12,
                       35, 36, 37, 13, 14, 15, 16, 38, 39, 40, 41, 42, 43, 17, 18, 19, 20, 21, 44, 45, 46,
                       47, 22, 23],
    ("dualpipev-list", 2, 2, 4): [0, 1, 2, 23, 24, 25, 26, 3, 4, 5, 6, 7, 27, 28, 29, 30, 31, 8, 9, 10, 11, 12,
                             32, 33, 34, 35, 36, 37, 38, 39, 13, 14, 15, 16, 17, 18, 19, 40, 41, 42, 43, 44,
                             20, 21, 22],
}
"""Topological order the two-pass compiler found (``compile_schedule`` at b6b444a): the one
pass must visit the nodes in the same order."""


def _costs(pp: int, vpp: int, placement: str, seed: int) -> StageCosts:
    rng = random.Random(seed)
    n = pp * vpp
    ranks = stage_ranks(n, pp, placement)
    f = tuple(rng.choice((1.0, 2.0, rng.uniform(1e-3, 2e-3))) for _ in range(n))
    i = tuple(rng.choice((1.0, 2.0, rng.uniform(1e-3, 3e-3))) for _ in range(n))
    fused = {(a, b): 0.8 * (f[a] + i[b]) for a in range(n) for b in range(n)
             if ranks[a] == ranks[b] and rng.random() < 0.7}
    return StageCosts(f=f, i=i, w=tuple(rng.choice((0.0, 0.5, rng.uniform(5e-4, 1e-3))) for _ in range(n)),
                      act_bytes=tuple(rng.randrange(1 << 20, 1 << 28) for _ in range(n)),
                      act_w_bytes=tuple(rng.randrange(0, 1 << 20) for _ in range(n)),
                      static_bytes=(1 << 33,) * n,
                      out_bytes=tuple(rng.randrange(0, 1 << 24) for _ in range(n)),
                      ranks=tuple(ranks), fused=fused, p2p=P2PCost(latency_s=1e-5, bandwidth=5e10))


def _case(name: str, pp: int, vpp: int, m: int) -> tuple[Schedule, StageCosts]:
    kind = SCHEDULES[name]
    return kind.make(pp, vpp, m), _costs(pp, vpp, kind.placement, seed=pp * 100 + m)


def _swapped(sched: Schedule, rng: random.Random) -> Schedule:
    out = {r: list(row) for r, row in sched.items()}
    row = out[rng.choice(sorted(out))]
    i, j = rng.randrange(len(row)), rng.randrange(len(row))
    row[i], row[j] = row[j], row[i]
    return out


def _outcome(run) -> tuple:
    """What a simulation returns or raises, comparable with ``==``."""
    try:
        sim = run()
    except DeadlockError as exc:
        return "deadlock", str(exc), exc.blocked
    except ValueError as exc:
        return "error", str(exc)
    return ("ok", sim.compiled.topo, sim.start, sim.end, sim.step_time, sim.busy, sim.peak_act_bytes,
            sim.peak_memory_bytes, sim.memory, sim.critical_path)


def _two_passes(sched: Schedule, costs: StageCosts) -> SimResult:
    return simulate_compiled(compile_schedule(sched, costs.num_stages, costs.ranks), costs)


def _by_the_rules(sched: Schedule, costs: StageCosts):
    """Start, end and memory trace per node from the module docstring's rules, running the
    ranks in turn until none can move; and where each blocked rank stopped."""
    dur = durations(compile_unordered(sched, costs.num_stages, costs.ranks), costs)
    ended: dict = {}
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    base, pos, free = {}, {r: 0 for r in sched}, {r: 0.0 for r in sched}
    for r in sorted(sched):
        base[r] = sum(len(sched[q]) for q in sched if q < r)
    moved = True
    while moved:
        moved = False
        for r in sorted(sched):
            while pos[r] < len(sched[r]):
                action, node = sched[r][pos[r]], base[r] + pos[r]
                need = predecessors(action, costs.num_stages)
                if any(k not in ended for k in need):
                    break
                t = free[r]
                for k in need:
                    e, at = ended[k]
                    t = max(t, e if at == r else e + costs.p2p_time(crossed_boundary(k[0], k[1])))
                start[node], end[node] = t, t + dur[node]
                free[r] = end[node]
                ended.update((k, (end[node], r)) for k in provides(action))
                pos[r] += 1
                moved = True
    blocked = {r: p for r, p in pos.items() if p < len(sched[r])}
    return start, end, blocked, _trace(sched, costs, base, start, end) if not blocked else None


def _trace(sched, costs, base, start, end) -> list[list[tuple[float, int]]]:
    """Per rank: F allocates at its start, I/W/B free at their end (module docstring); in a
    fused pair the backward part frees first, and at the pair's start (Megatron's combined
    1F1B replaces one microbatch's activations layer by layer)."""
    out = []
    for r in range(max(costs.ranks) + 1):
        held, trace = 0, [(0.0, 0)]
        for p, action in enumerate(sched.get(r, [])):
            fused = len(action.parts) > 1
            parts = sorted(action.parts, key=lambda a: a.kind == ActionKind.F) if fused else action.parts
            for part in parts:
                if part.kind == ActionKind.F:
                    held += costs.act_bytes[part.stage]
                    trace.append((start[base[r] + p], held))
                else:
                    held -= costs.released(part.kind, part.stage)
                    trace.append((start[base[r] + p] if fused else end[base[r] + p], held))
        out.append(trace)
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_one_pass_equals_two_passes(case):
    sched, costs = _case(*case)
    one, two = _outcome(lambda: simulate(sched, costs)), _outcome(lambda: _two_passes(sched, costs))
    assert one[0] == "ok" and one == two
    if case in TOPO:
        assert one[1] == TOPO[case]
    comp = simulate(sched, costs).compiled
    again = compile_schedule(sched, costs.num_stages, costs.ranks)
    assert comp.wait_columns == again.wait_columns and comp.topo == again.topo
    assert simulate_compiled(comp, costs).end == one[3]  # re-timing what simulate compiled


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_swapped_actions_give_the_same_result_or_error_both_ways(case):
    sched, costs = _case(*case)
    rng = random.Random(str(case))
    seen = set()
    for _ in range(12):
        bad = _swapped(sched, rng)
        one, two = _outcome(lambda: simulate(bad, costs)), _outcome(lambda: _two_passes(bad, costs))
        assert one == two
        seen.add(one[0])
    assert "deadlock" in seen


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_times_and_memory_follow_the_rules(case):
    sched, costs = _case(*case)
    rng = random.Random(7)
    for s in [sched] + [_swapped(sched, rng) for _ in range(8)]:
        try:
            sim = simulate(s, costs)
        except DeadlockError as exc:
            assert _by_the_rules(s, costs)[2] == exc.blocked
            continue
        start, end, blocked, trace = _by_the_rules(s, costs)
        assert not blocked
        assert sim.start == [start[n] for n in range(len(start))]
        assert sim.end == [end[n] for n in range(len(end))]
        assert sim.memory == trace
        assert sim.peak_act_bytes == [max(0, max(held for _, held in t)) for t in trace]


def test_an_empty_rank_between_two_busy_ones():
    costs = replace(_costs(2, 1, "loop", 3), ranks=(0, 2))
    sched = {r: list(row) for r, row in zip((0, 2), SCHEDULES["1f1b"].make(2, 1, 3).values())}
    sim = simulate(sched, costs)
    assert _outcome(lambda: sim) == _outcome(lambda: _two_passes(sched, costs))
    assert sim.busy[1] == 0 and sim.memory[1] == [(0.0, 0)] and sim.peak_act_bytes[1] == 0


def test_detail_is_computed_on_first_read_and_kept():
    sched, costs = _case("1f1b-overlap", 3, 1, 4)
    sim = simulate(sched, costs)
    assert "memory" not in vars(sim) and "critical_path" not in vars(sim)
    copy = pickle.loads(pickle.dumps(sim))
    memory, path = sim.memory, sim.critical_path
    assert sim.memory is memory and vars(sim)["critical_path"] is path
    assert copy.memory == memory and copy.critical_path == path
    assert replace(sim, busy=list(sim.busy)).memory == memory  # a copy computes its own
    assert simulate_compiled(sim.compiled, costs, detail=False).memory == []
    with pytest.raises(AttributeError, match="no attribute 'memroy'"):
        sim.memroy  # noqa: B018
