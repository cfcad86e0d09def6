"""Exact partition DPs against brute force; uniform splits; pinned stage sizes."""

from __future__ import annotations

import random

import pytest

from planner.core.errors import InfeasibleError, InputError
from solvers.partition.ranges import k_best_partitions, minmax_partition, uniform_partition
from solvers.partition.pins import StagePins, pinned_cuts, pins_allow
from partition_helpers import all_partitions


def _random_cost(seed: int, n: int, S: int):
    rng = random.Random(seed)
    table = {(s, a, b): rng.uniform(0, 10) for s in range(S) for a in range(n) for b in range(a + 1, n + 1)}
    return lambda s, a, b: table[s, a, b]


@pytest.mark.parametrize("seed", range(12))
def test_minmax_matches_brute_force_with_position_dependent_cost(seed):
    n, S = 7 + seed % 3, 2 + seed % 3
    cost = _random_cost(seed, n, S)
    rng = random.Random(100 + seed)
    banned = {(s, a, b) for s in range(S) for a in range(n) for b in range(a + 1, n + 1) if rng.random() < 0.2}
    feasible = lambda s, a, b: (s, a, b) not in banned  # noqa: E731
    value = lambda p: max(cost(s, a, b) for s, (a, b) in enumerate(p))  # noqa: E731
    ok = [p for p in all_partitions(n, S) if all(feasible(s, a, b) for s, (a, b) in enumerate(p))]
    if not ok:
        with pytest.raises(InfeasibleError):
            minmax_partition(n, S, cost, feasible)
        return
    best = min(value(p) for p in ok)
    got = minmax_partition(n, S, cost, feasible)
    assert value(got) == pytest.approx(best)
    # lexicographic tie-break: among the optima, the smallest sum of squares
    sq = lambda p: sum(cost(s, a, b) ** 2 for s, (a, b) in enumerate(p))  # noqa: E731
    lex = minmax_partition(n, S, cost, feasible, tie_break=lambda s, a, b: cost(s, a, b) ** 2)
    assert value(lex) == pytest.approx(best)
    assert sq(lex) == pytest.approx(min(sq(p) for p in ok if value(p) <= best + 1e-12))


@pytest.mark.parametrize("seed", range(8))
def test_k_best_matches_sorted_brute_force(seed):
    n, S, k = 8, 3, 5
    cost = _random_cost(seed, n, S)
    values = sorted(max(cost(s, a, b) for s, (a, b) in enumerate(p)) for p in all_partitions(n, S))
    got = k_best_partitions(n, S, cost, k)
    assert [v for v, _ in got] == pytest.approx(values[:k])
    assert len({tuple(b) for _, b in got}) == k
    for v, b in got:
        assert max(cost(s, x, y) for s, (x, y) in enumerate(b)) == pytest.approx(v)


def test_too_many_stages_is_infeasible():
    with pytest.raises(InfeasibleError, match="cannot fill"):
        minmax_partition(3, 4, lambda s, a, b: 1.0)


ROLES = ["embedding"] + ["decoder"] * 10 + ["mtp", "head"]


def test_uniform_split_and_pins():
    assert uniform_partition(ROLES, 4) == [(0, 4), (4, 7), (7, 9), (9, 13)]
    assert uniform_partition(ROLES, 4, first=1, last=0) == [(0, 2), (2, 7), (7, 11), (11, 13)]
    assert uniform_partition(ROLES, 4, first=0)[0] == (0, 1)


def test_pinned_cuts_fix_boundaries_and_the_dp_respects_them():
    cuts = pinned_cuts(StagePins(first=2, last=1), ROLES, 4)
    assert cuts == {1: 3, 3: 10}
    bounds = minmax_partition(len(ROLES), 4, lambda s, a, b: b - a, pins_allow(cuts))
    assert bounds[0] == (0, 3) and bounds[-1] == (10, 13)


@pytest.mark.parametrize("pins, stages, match", [
    (StagePins(first=11), 3, r"--first-stage-layers: 11 is not in 0\.\.10"),
    (StagePins(first=5, last=5), 4, r"leave layers \[6, 6\) for 2 middle"),
    (StagePins(first=3, last=2), 2, "must meet"),
    (StagePins(last=1), 1, "at least 2 stages"),
])
def test_bad_pins_name_the_option(pins, stages, match):
    with pytest.raises(InputError, match=match):
        pinned_cuts(pins, ROLES, stages)
