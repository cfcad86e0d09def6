"""Virtual-stage partition (vpp > 1) with CP-SAT: chunk ranges when ranks sum their chunks.

With several stages (chunks) per rank, a rank's busy time and memory are SUMS over
non-adjacent chunks (stage s runs on ``ranks[s]``: loop or V placement), so the
chunk-sequence DP no longer applies. Every quantity involved is a difference of
prefix sums over the layers, so the model needs only the S-1 stage boundaries:

- data: per-layer prefix tables (``StepModel``): each stage's work (its schedule's
  action counts x serial F, I, W; a fused pair charged with the layer's own overlap
  ratio ``OV[l, l] / (F_l + I_l)``, exact when the chunk's layers share a type, and
  exact for every non-fused schedule), static bytes, activation bytes, the part kept
  until W, and the head/tail chain of the [Note: step estimate];
- ``end[s]``: the first layer after stage s (``end[-1] = 0``, ``end[S-1] = N``),
  strictly increasing; pinned boundaries are constants; ``add_element`` reads each
  prefix table at each boundary;
- per rank r: ``T >= head(first stage of r) + sum of its stages' work``;
- per rank r and memory point p (``solvers.partition.inflight.memory_points``):
  ``sum_s static_s + full_ps act_s + w_only_ps act_w_s + held_r <= limit`` in exact bytes,
  ``held_r`` the largest transient bytes of a layer on rank r (``_rank_work``), which
  together are exactly the simulator's peak: a solution never breaks the limit;
- objective: minimise T (integer microseconds); hint: the chunk-sequence DP.

Solved with a deterministic time budget (``max_deterministic_time``, ``WALL_PER_DET``) and
one worker, so the same inputs and seed give the same partition, stopping at ``GAP_LIMIT``;
OPTIMAL or FEASIBLE only (``TimeoutError`` when the budget ends with no solution).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.errors import InfeasibleError
from planner.core.placement import Bounds
from planner.core.stage_costs import held_bytes
from solvers.partition.model import StepModel

__all__ = ["VppResult", "vpp_partition"]

_US = 1e6  # objective unit: microseconds
WALL_PER_DET = 1.5
"""Wall seconds per deterministic second of these models, presolve included, on the
2-core reference machine (Qwen3-235B pp 8 vpp 2 screening: 0.19-0.50 deterministic s in
0.40-0.85 wall s); ``time_limit_s`` is in wall-like seconds, the solver gets
``time_limit_s / WALL_PER_DET`` deterministic seconds (reproducible)."""
GAP_LIMIT = 0.02
"""Stop once the estimate is within 2% of CP-SAT's bound; the simulator ranks the result anyway."""


@dataclass(frozen=True, kw_only=True)
class VppResult:
    """Outcome of ``vpp_partition``."""

    bounds: Bounds
    """Layer range of each stage."""
    estimate_s: float
    """Step estimate of ``bounds`` (``StepModel.estimate``, seconds)."""
    status: str
    """OPTIMAL or FEASIBLE."""
    gap: float
    """Relative gap between the objective and CP-SAT's bound (0 when optimal)."""


def _ints(values: list[float], scale: float = _US) -> list[int]:
    return [round(v * scale) for v in values]


def _build(model: StepModel, limit: tuple[int, ...] | None, cuts: dict[int, int], hint: Bounds | None):
    """Data -> boundary variables -> prefix reads -> rank time and memory -> objective -> hint."""
    from ortools.sat.python import cp_model  # imported on first use: ortools (and pandas) cost ~0.6 s

    n, S = model.num_layers, model.num_stages
    m = cp_model.CpModel()
    at = [hint[k][0] for k in range(S)] + [n] if hint is not None else None
    end = [m.new_constant(0)]
    for k in range(1, S):
        end.append(m.new_constant(cuts[k]) if k in cuts else m.new_int_var(k, n - (S - k), f"end_{k - 1}"))
        if at is not None and k not in cuts:
            m.add_hint(end[k], at[k])
    end.append(m.new_constant(n))
    for k in range(S):
        m.add(end[k + 1] >= end[k] + 1)

    def read(table: list[int], k: int, name: str):
        """``table[end[k]]`` as a variable (element constraint), hinted from the hint."""
        v = m.new_int_var(min(table), max(table), name)
        m.add_element(end[k], table, v)
        if at is not None:
            m.add_hint(v, table[at[k]])
        return v

    prefix = model.prefix_tables()
    loads = {}
    for s in range(S):
        table = _ints(model.work_prefix(s))
        loads[s] = read(table, s + 1, f"work_{s}_end") - read(table, s, f"work_{s}_start")
    heads = _ints([model.head(0, a) for a in range(n + 1)])
    p2p = round(model.p2p * _US)
    horizon = sum(_ints([model.work(s, 0, n) for s in range(S)])) + max(heads) + 2 * S * p2p
    step = m.new_int_var(0, horizon, "step_us")
    held = _rank_work(m, model, end) if limit is not None else {}
    for r, first in model.first_stage.items():
        mine = [s for s in range(S) if model.ranks[s] == r]
        m.add(step >= read(heads, first, f"head_{r}") + 2 * first * p2p + sum(loads[s] for s in mine))
        if limit is not None:
            for q, point in enumerate(model.points.get(r, [])):
                count = {st: (full, w) for st, full, w in point}
                m.add(sum(_bytes(prefix, read, s, *count.get(s, (0, 0)), f"r{r}p{q}") for s in mine)
                      + held.get(r, 0) <= limit[r])
    m.minimize(step)
    return m, end, step


def _rank_work(m, model: StepModel, end) -> dict:
    """Per rank, a variable at least the transient bytes (``work_bytes``) of every layer its
    stages hold: the largest is held while that layer's task runs (``StageCosts.static_per_rank``).
    Layer l is on stage k when ``end[k] <= l < end[k + 1]``; one literal per (boundary, layer
    with transient bytes) says which side of the boundary the layer falls on."""
    work, S = model.layer_work_bytes(), model.num_stages
    heavy = [layer for layer, w in enumerate(work) if w > 0]
    if not heavy:
        return {}
    before = {}  # (k, l) -> literal "end[k] <= l"; end[0] = 0 <= l always, end[S] = N > l never
    for k in range(1, S):
        for layer in heavy:
            lit = before[(k, layer)] = m.new_bool_var(f"end_{k - 1}_le_{layer}")
            m.add(end[k] <= layer).only_enforce_if(lit)
            m.add(end[k] >= layer + 1).only_enforce_if(~lit)
    held = {}
    for r in sorted(set(model.ranks)):
        held[r] = m.new_int_var(0, max(work), f"work_bytes_{r}")
        for k in (s for s in range(S) if model.ranks[s] == r):
            for layer in heavy:
                inside = [before[(k, layer)]] if k > 0 else []
                inside += [~before[(k + 1, layer)]] if k + 1 < S else []
                m.add(held[r] >= work[layer]).only_enforce_if(inside)
    return held


def _bytes(prefix: dict[str, list[int]], read, s: int, full: int, w: int, tag: str):
    """Stage s's bytes at a memory point: static + full x act + w_only x act_w."""
    table = [q + held_bytes(full, w, a, aw) for q, a, aw in zip(prefix["static"], prefix["act"], prefix["act_w"])]
    return read(table, s + 1, f"mem_{tag}_{s}_end") - read(table, s, f"mem_{tag}_{s}_start")


def vpp_partition(model: StepModel, *, memory_limit_bytes: int | tuple[int, ...] | None, hint: Bounds | None = None,
                  cuts: dict[int, int] | None = None, time_limit_s: float = 10.0,
                  seed: int = 0, gap_limit: float = GAP_LIMIT) -> VppResult:
    """Best chunk ranges for ``model``'s schedule and placement (see module doc).

    ``cuts`` pins boundaries (boundary k starts stage k); ``hint`` warm-starts the
    search. ``memory_limit_bytes``: one cap for every rank, or one per rank. Raises
    ``InfeasibleError`` when no partition fits.
    """
    from ortools.sat.python import cp_model  # imported here for start-up time: see _build

    if isinstance(memory_limit_bytes, int):
        memory_limit_bytes = (memory_limit_bytes,) * (max(model.ranks) + 1)
    m, end, step = _build(model, memory_limit_bytes, cuts or {}, hint)
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = seed
    solver.parameters.catch_sigint_signal = False  # Ctrl-C reaches Python ([Note: Ctrl-C], planner/cli)
    solver.parameters.num_workers = 1
    solver.parameters.linearization_level = 2  # linear relaxation of the element reads: a useful bound
    solver.parameters.cp_model_probing_level = 0  # probing the element encodings costs most of the budget
    solver.parameters.relative_gap_limit = gap_limit
    solver.parameters.max_deterministic_time = time_limit_s / WALL_PER_DET
    code = solver.solve(m)
    if code == cp_model.UNKNOWN:
        raise TimeoutError(f"CP-SAT found no chunk partition within its budget ({time_limit_s:g} reference s)")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InfeasibleError("no chunk partition fits the memory limit and pins "
                              f"(CP-SAT: {solver.status_name(code)})")
    ends = [solver.value(e) for e in end]
    bounds = [(ends[s], ends[s + 1]) for s in range(model.num_stages)]
    obj, bound = solver.objective_value, solver.best_objective_bound
    return VppResult(bounds=bounds, estimate_s=model.estimate(bounds), status=solver.status_name(code),
                     gap=max(0.0, (obj - bound) / obj) if obj > 0 else 0.0)
