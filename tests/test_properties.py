"""Property tests (hypothesis): generated schedules and plans are valid, never beat the
documented lower bound (``solvers.schedule.search.lower_bound.step_lower_bound``), and corrupting one
action makes the validator fail."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from planner.core.costs import CostTable, LayerCost, P2PCost
from planner.core.errors import InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.schedule import Action, Schedule, predecessors, provides
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from planner.core.validate import validate
from planner.planning import PlanRequest, make_plan
from planner.simulation import validate_plan
from solvers.schedule.families.generators import gpipe, interleaved_1f1b, one_f_one_b
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.search.search import SCHEDULES, generate

FAST = settings(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
TIME = st.floats(min_value=0.0, max_value=10.0, allow_nan=False, allow_infinity=False)
EPS = 1e-9


@st.composite
def stage_costs(draw, pp: int, vpp: int, placement: str = "loop") -> StageCosts:
    """Random per-stage costs; fused F beside I between max(F, I) and F + I."""
    n = pp * vpp
    ranks = stage_ranks(n, pp, placement)
    f = [draw(TIME) for _ in range(n)]
    i = [draw(TIME) for _ in range(n)]
    share = draw(st.floats(min_value=0.0, max_value=1.0))
    fused = {(a, b): max(f[a], i[b]) + share * min(f[a], i[b])
             for a in range(n) for b in range(n) if ranks[a] == ranks[b]}
    act = [draw(st.integers(0, 2**30)) for _ in range(n)]
    return StageCosts(
        f=tuple(f), i=tuple(i), w=tuple(draw(TIME) for _ in range(n)), act_bytes=tuple(act),
        act_w_bytes=tuple(a // 4 for a in act), static_bytes=tuple(draw(st.integers(0, 2**33)) for _ in range(n)),
        out_bytes=tuple(draw(st.integers(0, 2**26)) for _ in range(n)), ranks=tuple(ranks), fused=fused,
        p2p=P2PCost(latency_s=draw(st.floats(0.0, 1e-2)), bandwidth=draw(st.floats(1e8, 1e12))))


def _check_valid_and_bounded(sched: Schedule, costs: StageCosts, m: int) -> float:
    assert validate(sched, costs, num_microbatches=m) == []
    step = simulate(sched, costs).step_time
    assert step >= step_lower_bound(costs, m) * (1 - EPS) - EPS
    return step


@st.composite
def registry_case(draw):
    name = draw(st.sampled_from(sorted(SCHEDULES)))
    kind = SCHEDULES[name]
    pp = draw(st.integers(1, 5))
    vpp = draw(st.sampled_from(kind.vpp)) if kind.vpp else draw(st.integers(1, 3))
    m = draw(st.integers(1, 10))
    return name, pp, vpp, m, draw(stage_costs(pp, vpp, kind.placement))


@FAST
@given(registry_case())
def test_registry_schedules_valid_and_above_lower_bound(case):
    name, pp, vpp, m, costs = case
    event(f"{name} vpp={vpp}")
    try:
        sched = generate(name, pp=pp, vpp=vpp, microbatches=m)
    except InfeasibleError:  # e.g. interleaved needs M divisible by pp
        assume(False)
    _check_valid_and_bounded(sched, costs, m)


GENERATOR_VARIANTS = {
    "gpipe": lambda pp, vpp, m: gpipe(pp, m),
    "gpipe-w": lambda pp, vpp, m: gpipe(pp, m, split_w=True),
    "1f1b": lambda pp, vpp, m: one_f_one_b(pp, m),
    "1f1b-w": lambda pp, vpp, m: one_f_one_b(pp, m, split_w=True),
    "1f1b-fused": lambda pp, vpp, m: one_f_one_b(pp, m, fuse=True),
    "1f1b-fused-w": lambda pp, vpp, m: one_f_one_b(pp, m, fuse=True, split_w=True),
    "interleaved": lambda pp, vpp, m: interleaved_1f1b(pp, vpp, m * pp),
    "interleaved-w": lambda pp, vpp, m: interleaved_1f1b(pp, vpp, m * pp, split_w=True),
}


@st.composite
def generator_case(draw):
    name = draw(st.sampled_from(sorted(GENERATOR_VARIANTS)))
    pp = draw(st.integers(1, 5))
    vpp = draw(st.integers(1, 3)) if name.startswith("interleaved") else 1
    m = draw(st.integers(1, 8))
    sched = GENERATOR_VARIANTS[name](pp, vpp, m)
    m = m * pp if name.startswith("interleaved") else m
    return sched, m, draw(stage_costs(pp, vpp))


@FAST
@given(generator_case())
def test_generator_variants_valid_and_above_lower_bound(case):
    sched, m, costs = case
    _check_valid_and_bounded(sched, costs, m)


def _same_rank_predecessor(sched: Schedule, num_stages: int, rng: random.Random):
    """(rank, position of an action, position of a same-rank predecessor of it), or None."""
    options = []
    for r, acts in sched.items():
        where = {key: pos for pos, a in enumerate(acts) for key in provides(a)}
        for pos, a in enumerate(acts):
            options += [(r, pos, where[key]) for key in predecessors(a, num_stages) if key in where]
    return rng.choice(options) if options else None


def _corrupt(sched: Schedule, how: str, costs: StageCosts, rng: random.Random) -> bool:
    """Apply one corruption in place; False when this schedule offers none of that kind."""
    ranks = [r for r, acts in sched.items() if acts]
    r = rng.choice(ranks)
    acts = sched[r]
    k = rng.randrange(len(acts))
    if how == "drop":
        del acts[k]
    elif how == "duplicate":
        acts.insert(rng.randrange(len(acts) + 1), acts[k])
    elif how == "move":
        others = [q for q in sched if q != r]
        if not others:
            return False
        q = rng.choice(others)
        sched[q].insert(rng.randrange(len(sched[q]) + 1), acts.pop(k))
    else:  # swap an action with one it depends on, on the same rank
        found = _same_rank_predecessor(sched, costs.num_stages, rng)
        if found is None:
            return False
        r, a, b = found
        sched[r][a], sched[r][b] = sched[r][b], sched[r][a]
    return True


@FAST
@given(generator_case(), st.sampled_from(["swap", "drop", "duplicate", "move"]), st.randoms())
def test_corrupting_one_action_fails_validation(case, how, rng):
    sched, m, costs = case
    assert validate(sched, costs, num_microbatches=m) == []
    assume(_corrupt(sched, how, costs, rng))
    event(how)
    assert validate(sched, costs, num_microbatches=m) != []


_TYPES = ("dense", "moe", "linear+moe")


@st.composite
def cost_tables(draw) -> CostTable:
    """A random small table: embedding, 2..10 decoder layers of 3 types, head."""
    n = draw(st.integers(2, 10))
    types = [draw(st.sampled_from(_TYPES)) for _ in range(n)]
    per_type = {t: (draw(TIME), draw(TIME), draw(TIME), draw(TIME)) for t in _TYPES}
    layers = [LayerCost(type="embedding", role="embedding", f=draw(TIME), i=0.0, w=0.0, out_bytes=1 << 20)]
    for t in types:
        f, i, w, a2a = per_type[t]
        moe = t.endswith("moe")
        layers.append(LayerCost(type=t, f=f, i=i, w=w, a2a_f=a2a if moe else 0.0, a2a_b=a2a if moe else 0.0,
                                act_bytes=1 << 24, act_w_bytes=1 << 22, param_bytes=1 << 26,
                                out_bytes=1 << 20, flops=1e12))
    layers.append(LayerCost(type="head", role="head", f=draw(TIME), i=draw(TIME), w=draw(TIME)))
    serial = {lc.type: lc for lc in layers}
    share = draw(st.floats(0.0, 1.0))
    pairs = {(a, b): max(serial[a].serial_f, serial[b].serial_i)
             + share * min(serial[a].serial_f, serial[b].serial_i)
             for a in set(types) for b in set(types)}
    return CostTable(model="random", source="user", layers=tuple(layers), pairs=pairs,
                     p2p=P2PCost(latency_s=draw(st.floats(0.0, 1e-3)), bandwidth=1e10))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cost_tables(), st.integers(1, 4), st.integers(1, 2), st.integers(1, 4))
def test_make_plan_on_random_tables(table, pp, vpp, per_rank):
    assume(pp * vpp <= table.num_layers)
    m = pp * per_rank
    plan = make_plan(table, PlanRequest(pp=pp, vpp=vpp, microbatches=m, work_s=0.1))
    assert validate_plan(plan) == []
    costs = plan.parsed_stage_costs()
    step = simulate(plan.parsed_schedule(), costs).step_time
    assert step == plan.predicted.step_time_s
    assert step >= step_lower_bound(costs, m) * (1 - EPS) - EPS
    assert sorted(a for a, _ in plan.bounds()) == [a for a, _ in plan.bounds()]


def test_corruptions_cover_fused_actions():
    # The swap corruption on a fused schedule swaps a fused action with its own dependency.
    sched = one_f_one_b(2, 6, fuse=True)
    assert any(a.kind == "OVERLAP_F_B" for a in sched[0])
    found = _same_rank_predecessor({0: sched[0]}, 2, random.Random(0))
    assert found is not None
    r, a, b = found
    assert isinstance(sched[r][a], Action) and a != b
