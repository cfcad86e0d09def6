"""A schedule lowered to integer arrays: the structural half of the simulator.

``compile_schedule`` numbers the actions rank by rank, resolves each one's
dependencies (from ``planner.core.schedule.DEPENDENCIES``, the one definition), finds
a topological order and detects deadlock. The result depends on the schedule's shape
only, so ``planner.core.simulate.simulate_compiled`` can re-time it under many cost
sets without compiling again. ``compile_unordered`` stops before the order, and
``run_in_order`` finds the order and times the nodes in one pass (what every timing runs).

[Note: flat unit index] Unit of work (stage, kind, microbatch) lives at
``(stage * 3 + row[kind]) * M + microbatch`` of one flat array (M = microbatches), so
dependencies are found with array arithmetic over all actions at once (numpy) instead
of building and hashing one key tuple per action. A fused OVERLAP_F_B action is
treated as its two parts; the dependencies one part satisfies for the other are
dropped, as ``predecessors`` does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from planner.core.order_pass import order_and_time
from planner.core.p2p import crossed_boundary
from planner.core.schedule import DEPENDENCIES, OVERLAP, Action, ActionKind, Schedule, predecessors

__all__ = ["Compiled", "DeadlockError", "compile_schedule", "compile_sound", "compile_unordered",
           "run_in_order", "KIND_CODES"]

MAX_DEPS = 3
"""Most dependencies of one action: a fused (F;B) needs F(s-1), F(s') and I(s'+1)."""
KIND_CODES = {ActionKind.F: 0, ActionKind.I: 1, ActionKind.W: 2, ActionKind.B: 3}
"""Code of each plain kind in ``Compiled.units`` (``stage * 4 + code``)."""
_CODE_OF = {**KIND_CODES, OVERLAP: -1}
_ROW = np.array([0, 1, 2, 1])
"""Row in the flat unit index of the unit each kind code completes first (B: I, then W)."""


class DeadlockError(ValueError):
    """The schedule cannot make progress: each blocked rank waits for work that never comes."""

    def __init__(self, message: str, blocked: dict[int, int]) -> None:
        super().__init__(message)
        self.blocked = blocked
        """Rank -> position of the action it is stuck on."""


@dataclass(frozen=True, eq=False)
class Compiled:
    """A schedule lowered to integer arrays; node n is ``actions[n]`` on ``rank_of[n]``."""

    actions: list[Action]
    """All actions, numbered rank by rank."""
    rank_of: list[int]
    """Rank of each node."""
    order: list[list[int]]
    """Nodes of each rank in execution order (consecutive node numbers)."""
    topo: list[int]
    """All nodes in an order where each comes after its rank predecessor and its dependencies
    (empty until ``run_in_order`` fills it; ``compile_schedule`` always has)."""
    dep_array: np.ndarray
    """(nodes x 3) dependency nodes, padded with the sentinel ``len(actions)``."""
    bound_array: np.ndarray
    """(nodes x 3) stage boundary each dependency crosses between ranks, or -1 when local."""
    wait_array: np.ndarray
    """(nodes x 2, or 3 when some node needs three) the dependencies a node may wait for,
    sentinel-padded ([Note: earlier same-rank dependencies])."""
    wait_bound_array: np.ndarray
    """Stage boundary each of ``wait_array`` crosses between ranks, or -1."""
    units: list[int]
    """``stage * 4 + KIND_CODES[kind]`` of each plain node; -1 for a fused node."""
    fused: list[tuple[int, int, int, bool]]
    """``(node, forward stage, backward stage, backward is B)`` of each OVERLAP_F_B node."""
    memory_events: tuple[np.ndarray, np.ndarray, list[int]]
    """Every memory change, rank by rank in order (a fused node's backward part first): its unit
    code, its time's index into ``start + end`` (n for an F part, which allocates at the start,
    and for both parts of a fused node; len + n otherwise), and where each rank's changes begin
    (one more: the end)."""

    @functools.cached_property
    def wait_columns(self) -> tuple[list[list[int]], list[list[int]]]:
        """``wait_array`` and ``wait_bound_array`` as 1 to 3 lists, one per dependency slot some
        node uses (the timing kernel's input, ``planner.core.order_pass``)."""
        n = len(self.actions)
        width = 1 if (self.wait_array[:, 1:] == n).all() else self.wait_array.shape[1]
        return self.wait_array[:, :width].T.tolist(), self.wait_bound_array[:, :width].T.tolist()

    @functools.cached_property
    def deps(self) -> list[tuple[int, ...]]:
        """Up to 3 dependency nodes per node, padded with the sentinel."""
        return list(zip(*self.dep_array.T.tolist()))

    @functools.cached_property
    def bounds(self) -> list[tuple[int, ...]]:
        """Stage boundary each dependency crosses between ranks (its P2P cost), or -1 when local."""
        return list(zip(*self.bound_array.T.tolist()))


def compile_schedule(schedule: Schedule, num_stages: int,
                     ranks: tuple[int, ...] | list[int]) -> Compiled:
    """Resolve dependencies and find a topological order; raises ``DeadlockError`` when the
    ranks cannot all finish and ``ValueError`` when a needed unit of work is never run
    (or an action names a stage outside ``0..num_stages-1`` or a negative microbatch)."""
    comp = _compile(schedule, num_stages, ranks, None)
    run_in_order(comp, [0.0] * len(comp.actions), None)
    return comp


def compile_unordered(schedule: Schedule, num_stages: int,
                      ranks: tuple[int, ...] | list[int]) -> Compiled:
    """``compile_schedule`` without the topological order (``topo`` empty, no deadlock check):
    ``run_in_order`` finds both while timing the nodes. Raises ``ValueError`` like it."""
    return _compile(schedule, num_stages, ranks, None)


class _Unsound(ValueError):
    """A structural check of ``compile_sound`` failed."""


def compile_sound(schedule: Schedule, num_stages: int, ranks: tuple[int, ...] | list[int],
                  microbatches: int) -> Compiled | None:
    """``compile_schedule`` of a schedule that passes the validator's structural checks, in
    array form: every part on the rank of its stage, every (stage, F/I/W, microbatch) of
    ``microbatches`` done exactly once, every same-rank dependency earlier on the rank.
    None when one fails (or a unit is missing): ``planner.core.validate`` then finds and
    describes it. Raises ``DeadlockError`` like ``compile_schedule``."""
    try:
        comp = _compile(schedule, num_stages, ranks, microbatches)
    except ValueError:  # _Unsound, a missing unit or a stage out of range
        return None
    run_in_order(comp, [0.0] * len(comp.actions), None)
    return comp


def _sound(nodes: _Nodes, flat: np.ndarray, dep: np.ndarray, local: np.ndarray, ranks,
           m: int) -> bool:
    """The checks of ``compile_sound`` (the validator's placement, coverage and rank order)."""
    n = len(nodes.actions)
    where = np.asarray(ranks, dtype=np.int64)
    rank = nodes.rank[:n]
    if nodes.m != m or (where[nodes.stage] != rank).any() or (where[nodes.b_stage] != rank[nodes.fused]).any():
        return False
    if n and (np.bincount(flat, minlength=nodes.num_stages * 3 * m) != 1).any():
        return False
    later = (dep != n) & (dep > np.arange(n)[:, None])  # nodes are numbered along each rank
    return not (later & local).any()


def _compile(schedule: Schedule, num_stages: int, ranks: tuple[int, ...] | list[int],
             check_m: int | None) -> Compiled:
    """Everything but the topological order (``run_in_order``)."""
    actions, rank_of, order = _number(schedule, ranks)
    nodes = _Nodes(actions, order, num_stages)
    flat, owner = _provided(nodes)
    dep, bnd, local = _dependencies(nodes, _unit_nodes(nodes, flat, owner))
    if check_m is not None and not _sound(nodes, flat, dep, local, ranks, check_m):
        raise _Unsound("fails a structural check")
    waits, wait_bnd = _waits(nodes, dep, bnd, local)
    units = np.where(nodes.code >= 0, nodes.stage * 4 + nodes.code, -1)
    return Compiled(actions, rank_of, order, [], dep, bnd, waits, wait_bnd, units.tolist(),
                    nodes.fused_list(), _memory_events(nodes, units, order))


def run_in_order(comp: Compiled, dur: list[float], delay: list[float] | None, *,
                 ready: list[float] | None = None, keep_order: bool = True) -> tuple[list[float], list[float]]:
    """Run the ranks as far as their dependencies allow, timing each node as it runs
    (``planner.core.order_pass.order_and_time``): returns (start, end) per node and, with
    ``keep_order``, fills ``comp.topo`` with the order it ran the nodes in. ``dur`` per node,
    ``delay`` per stage boundary plus a trailing 0 for -1 (None: no P2P delay), ``ready``
    the time each rank may start (default 0). Raises ``DeadlockError`` when the ranks cannot
    all finish."""
    n = len(comp.actions)
    cols, bounds = comp.wait_columns
    if delay is None:
        gaps = [[0.0] * n] * len(cols)
    else:  # the few delay floats shared: the pass ran a twentieth faster than on tolist's copies
        gaps = [list(map(delay.__getitem__, col)) for col in bounds]
    first = [row[0] if row else 0 for row in comp.order]
    stop = [row[-1] + 1 if row else 0 for row in comp.order]
    topo: list[int] = comp.topo if keep_order else []
    del topo[:]
    start, end, pos = order_and_time(first, stop, cols, gaps, dur, topo, ready)
    blocked = {r: p - first[r] for r, p in enumerate(pos) if p < stop[r]}
    if blocked:
        raise DeadlockError("deadlock: " + ", ".join(
            f"rank {r} stuck at position {p} ({comp.actions[comp.order[r][p]]})" for r, p in blocked.items()),
            blocked)
    del end[n]
    return start, end


def _waits(nodes: _Nodes, dep: np.ndarray, bnd: np.ndarray,
           local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dependencies a node may wait for, compacted to 2 columns (3 if some node needs
    them), sentinel-padded, with their boundaries. [Note: earlier same-rank dependencies]
    A dependency earlier on the same rank has ended before the node's rank predecessor
    ends (the rank is serial), so it can neither block the node nor set its start."""
    n = len(nodes.actions)
    wait = (dep != n) & (~local | (dep > np.arange(n)[:, None]))
    return _compact3(wait, dep, n, 2), _compact3(wait, bnd, -1, 2)


def _compact3(keep: np.ndarray, values: np.ndarray, pad: int, least: int) -> np.ndarray:
    """Per row, the kept ones of ``values``'s 3 columns moved to the front in order, ``pad``
    after them; ``least`` columns or more, 3 when some row keeps three. Unrolled: on every
    node a stable argsort and two gathers cost ten times as much, a scatter to each kept
    entry's slot three times."""
    k0, k1, k2 = keep.T
    v0, v1, v2 = values.T
    tail = np.where(k2, v2, pad)
    first = np.where(k0, v0, np.where(k1, v1, tail))
    second = np.where(k0, np.where(k1, v1, tail), np.where(k1, tail, pad))
    both = k0 & k1
    third = [np.where(both, tail, pad)] if least == 3 or (both & k2).any() else []
    return np.stack([first, second, *third], axis=1)


def _number(schedule: Schedule, ranks: tuple[int, ...] | list[int]):
    """Nodes numbered rank by rank: actions, rank of each, node numbers per rank."""
    actions: list[Action] = []
    rank_of: list[int] = []
    nr = max(max(ranks) + 1, max(schedule, default=-1) + 1)
    order: list[list[int]] = [[] for _ in range(nr)]
    for r in sorted(schedule):
        lo = len(actions)
        actions.extend(schedule[r])
        rank_of.extend([r] * (len(actions) - lo))
        order[r] = list(range(lo, len(actions)))
    return actions, rank_of, order


def _column(values: list[int]) -> np.ndarray:
    return np.fromiter(values, np.int64, len(values))


class _Nodes:
    """Per-node numpy columns: kind code (-1 fused), stage, microbatch, rank; and the two
    parts (forward, backward) of each fused node."""

    def __init__(self, actions: list[Action], order: list[list[int]], num_stages: int) -> None:
        n = len(actions)
        self.actions, self.num_stages = actions, num_stages
        # List comprehensions: a column took 0.7 of the time ``map(attrgetter(...))`` took.
        self.code = _column([_CODE_OF[a.kind] for a in actions])
        self.stage, self.mb = _column([a.stage for a in actions]), _column([a.microbatch for a in actions])
        self.rank = np.append(np.repeat(np.arange(len(order)), [len(row) for row in order]), -1)
        """Rank of each node, and -1 for the sentinel."""
        self.fused = np.flatnonzero(self.code < 0)
        bwd = [actions[k].sub[1] for k in self.fused.tolist()]  # the forward part is the node's own
        self.b_code = _column([KIND_CODES[b.kind] for b in bwd])
        self.b_stage, self.b_mb = _column([b.stage for b in bwd]), _column([b.microbatch for b in bwd])
        stages = np.concatenate([self.stage, self.b_stage])
        mbs = np.concatenate([self.mb, self.b_mb])
        if n and (stages.min() < 0 or stages.max() >= num_stages or mbs.min() < 0):
            bad = next(k for k, a in enumerate(actions) if any(
                not 0 <= p.stage < num_stages or p.microbatch < 0 for p in a.parts))
            raise ValueError(f"rank {self.rank[bad]}: action {actions[bad]} has a stage outside "
                             f"0..{num_stages - 1} or a negative microbatch")
        self.m = int(mbs.max()) + 1 if n else 0
        """Microbatch count spanned (the M of the flat unit index)."""

    def flat(self, stage: np.ndarray, row: np.ndarray | int, mb: np.ndarray) -> np.ndarray:
        """Flat unit index (see the module note)."""
        return (stage * 3 + row) * self.m + mb

    def fused_list(self) -> list[tuple[int, int, int, bool]]:
        """``Compiled.fused``."""
        return list(zip(self.fused.tolist(), self.stage[self.fused].tolist(),
                        self.b_stage.tolist(), (self.b_code == 3).tolist()))


def _provided(nodes: _Nodes) -> tuple[np.ndarray, np.ndarray]:
    """Flat unit index of every unit some node completes, and that node."""
    code, stage, mb, fz = nodes.code, nodes.stage, nodes.mb, nodes.fused
    plain = np.flatnonzero(code >= 0)
    b = plain[code[plain] == 3]
    fb = fz[nodes.b_code == 3]
    flat = np.concatenate([
        nodes.flat(stage[plain], _ROW[code[plain]], mb[plain]),
        nodes.flat(stage[b], 2, mb[b]),  # B also completes W
        nodes.flat(stage[fz], 0, mb[fz]),  # a fused node completes its F,
        nodes.flat(nodes.b_stage, 1, nodes.b_mb),  # its backward's I
        nodes.flat(nodes.b_stage[nodes.b_code == 3], 2, nodes.b_mb[nodes.b_code == 3])])  # and W
    return flat, np.concatenate([plain, b, fz, fz, fb])


def _unit_nodes(nodes: _Nodes, flat: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Flat unit index -> node completing it (-1 if none); later nodes win, as in a dict."""
    where = np.full(nodes.num_stages * 3 * nodes.m, -1, dtype=np.int64)
    where[flat] = owner
    if np.count_nonzero(where >= 0) < flat.size:  # duplicates: replay in node order
        for f, k in sorted(zip(flat.tolist(), owner.tolist()), key=lambda fk: fk[1]):
            where[f] = k
    return where


@functools.cache
def _rule_tables(num_stages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (kind code, stage, slot) from ``DEPENDENCIES``: predecessor stage and row
    (-1 = no predecessor) and the stage boundary it crosses: F(s-1) -> F(s) crosses
    boundary s-1, I(s+1) -> I(s) crosses boundary s. Rules outside the stages are dropped."""
    stage = np.full((4, num_stages, MAX_DEPS), -1, dtype=np.int64)
    row, bound = stage.copy(), stage.copy()
    for kind, code in KIND_CODES.items():
        for s in range(num_stages):
            found = [(t, k) for off, k in DEPENDENCIES[kind] if 0 <= (t := s + off) < num_stages]
            for j, (t, k) in enumerate(found):
                stage[code, s, j], row[code, s, j] = t, "FI".index(k)
                bound[code, s, j] = crossed_boundary(t, k)
    for a in (stage, row, bound):
        a.flags.writeable = False
    return stage, row, bound


def _lookup(nodes: _Nodes, where: np.ndarray, code: np.ndarray, stage: np.ndarray,
            mb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dependency nodes (n = none, -1 = missing), boundaries and flat units, per slot."""
    n = len(nodes.actions)
    at = code * nodes.num_stages + stage  # one gather per table, not a 2-index fancy index
    st, row, bound = (a.reshape(-1, MAX_DEPS).take(at, axis=0) for a in _rule_tables(nodes.num_stages))
    valid = st >= 0
    flat = np.where(valid, nodes.flat(st, row, mb[:, None]), -1)
    dep = np.where(valid, where[np.where(valid, flat, 0)], n)
    return dep, np.where(valid, bound, -1), flat


def _dependencies(nodes: _Nodes, where: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nodes x 3) dependency nodes (sentinel-padded), crossed boundaries (-1 local) and
    whether each is on the node's own rank."""
    n = len(nodes.actions)
    if nodes.fused.size:
        dep = np.full((n, MAX_DEPS), n, dtype=np.int64)
        bnd = np.full((n, MAX_DEPS), -1, dtype=np.int64)
        plain = np.flatnonzero(nodes.code >= 0)
        dep[plain], bnd[plain], _ = _lookup(nodes, where, nodes.code[plain], nodes.stage[plain],
                                            nodes.mb[plain])
        _fused_dependencies(nodes, where, dep, bnd)
    else:  # every node plain: the lookup is the whole table
        dep, bnd, _ = _lookup(nodes, where, nodes.code, nodes.stage, nodes.mb)
    bad = np.flatnonzero((dep < 0).any(axis=1))
    if bad.size:
        k = int(bad[0])
        key = predecessors(nodes.actions[k], nodes.num_stages)[int(np.argmax(dep[k] < 0))]
        raise ValueError(f"rank {nodes.rank[k]}: action {nodes.actions[k]} needs "
                         f"{key[0]}{key[1]}{key[2]}, which no rank runs")
    local = nodes.rank[dep] == nodes.rank[:n, None]
    bnd[local | (dep == n)] = -1
    return dep, bnd, local


def _fused_dependencies(nodes: _Nodes, where: np.ndarray, dep: np.ndarray, bnd: np.ndarray) -> None:
    """Fill the rows of fused nodes: both parts' dependencies, minus the units the node
    completes itself, compacted to the first slots in ``predecessors`` order."""
    fz = nodes.fused
    f_dep, f_bnd, f_flat = _lookup(nodes, where, np.zeros_like(fz), nodes.stage[fz], nodes.mb[fz])
    b_dep, b_bnd, b_flat = _lookup(nodes, where, nodes.b_code, nodes.b_stage, nodes.b_mb)
    # The F part needs one unit and the I/B part two (DEPENDENCIES; ``Action.fused`` admits
    # no other pair): three candidates, the other slots of the lookups are always empty.
    d = np.stack([f_dep[:, 0], b_dep[:, 0], b_dep[:, 1]], axis=1)
    b = np.stack([f_bnd[:, 0], b_bnd[:, 0], b_bnd[:, 1]], axis=1)
    flat = np.stack([f_flat[:, 0], b_flat[:, 0], b_flat[:, 1]], axis=1)
    own_f = nodes.flat(nodes.stage[fz], 0, nodes.mb[fz])[:, None]
    own_i = nodes.flat(nodes.b_stage, 1, nodes.b_mb)[:, None]
    keep = (flat >= 0) & (flat != own_f) & (flat != own_i)
    dep[fz], bnd[fz] = _compact3(keep, d, len(nodes.actions), 3), _compact3(keep, b, -1, 3)


def _memory_events(nodes: _Nodes, units: np.ndarray, order: list[list[int]]):
    """``Compiled.memory_events``: F parts change memory at the start, the rest at the end,
    except in a fused pair, whose parts both change it at its start in ``memory_order``; nodes
    are numbered rank by rank, so node order is rank order."""
    n = len(nodes.actions)
    node = np.arange(n)
    at = np.where(nodes.code == 0, node, n + node)
    first = node + np.cumsum(nodes.code < 0) - (nodes.code < 0)  # each node's first change
    rank_start = np.cumsum([0] + [len(row) for row in order])
    bounds = np.append(first, n + nodes.fused.size)[rank_start].tolist()
    if not nodes.fused.size:
        return units, at, bounds
    fz = nodes.fused
    unit = np.empty(n + fz.size, dtype=np.int64)
    when = np.empty(n + fz.size, dtype=np.int64)
    unit[first], when[first] = units, at
    # planner.core.stage_costs.memory_order: the backward part frees first, then the F part
    # allocates, both at the pair's start.
    unit[first[fz]], when[first[fz]] = nodes.b_stage * 4 + nodes.b_code, fz
    unit[first[fz] + 1], when[first[fz] + 1] = nodes.stage[fz] * 4, fz
    return unit, when, bounds
