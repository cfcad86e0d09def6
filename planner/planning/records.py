"""Data the planner passes between its steps: request, trials, evaluations."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.core.costs import CostTable
from planner.core.placement import stage_ranks
from planner.core.meter import WorkMeter
from planner.core.plan_parts import ModelInfo
from planner.core.plan_records import ClusterInfo
from planner.core.schedule import Schedule
from planner.core.simulate import Compiled, SimResult, simulate, simulate_compiled
from planner.core.stage_costs import StageCosts, stage_costs
from planner.core.steady import SteadyState, steady_state
from planner.core.validate import validate
from solvers.partition.pins import StagePins, pinned_cuts
from solvers.partition.search import PartitionResult
from solvers.schedule.search.budget import DEFAULT_WORK
from solvers.schedule.engines.memory_limit import MemoryLimit

__all__ = ["BASELINES", "PlanRequest", "Evaluation", "Trial", "evaluate", "memory_limit_of", "limit_bytes_of", "rank_limits_of",
           "simulate_bounds", "pinned_of"]

BASELINES = (("uniform", "uniform"), ("flops_balanced", "flops"), ("serial_balanced", "serial"))
"""(label in ``Plan.baselines``, partition method)."""


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Everything the planner needs besides the cost table."""

    pp: int
    """Pipeline ranks."""
    vpp: int = 1
    """Stages per rank."""
    microbatches: int
    """Microbatches per step (ignored when ``search_microbatches``)."""
    microbatch_size: int = 1
    """Sequences per microbatch (the cost table's size)."""
    search_microbatches: bool = False
    """Try every count dividing ``batch_per_replica`` (``--microbatches auto``)."""
    batch_per_replica: int | None = None
    """Sequences per data-parallel replica per step; default microbatches x microbatch_size."""
    memory_limit_bytes: int | None = None
    """Per-GPU memory limit; None = unlimited."""
    schedule: str = "auto"
    """Schedule name (see ``solvers.schedule.search.search.SCHEDULES``) or auto."""
    partition: str = "overlap"
    """overlap, serial, flops or uniform."""
    pins: StagePins = field(default_factory=StagePins)
    """Decoder layers pinned on the first/last stage."""
    placement: str = "loop"
    """loop or v."""
    seed: int = 0
    """Seed for randomised solvers."""
    work_s: float = DEFAULT_WORK
    """Search effort in reference seconds ([Note: work budget] in ``solvers.schedule.search.budget``):
    every phase's deterministic budget is a share of it, so the same request and seed give
    the same plan on any machine at any load."""
    time_limit_s: float | None = None
    """Wall-clock safety cap of the whole plan, seconds (``--time-limit``); None = no cap.
    Only when it fires can the plan depend on the machine ([Note: kept budget])."""
    objective: str = "makespan"
    """makespan (one step, a global barrier between steps) or steady (the period of repeated
    steps: [Note: steady state] in ``planner.core.steady``)."""
    started_s: float | None = None
    """``time.perf_counter()`` when the budget started (the front door sets it on entry, so
    building cost tables and every ``make_plan`` of one request share the one budget);
    None = when ``make_plan`` starts. Only the wall budget reads it."""
    memory_limit_microbatches: float | None = None
    """Activation budget per rank in microbatches' worth (``--memory-limit 4microbatches``), on
    top of ``memory_limit_bytes``; None = bytes only ([Note: one memory rule] in
    ``solvers.schedule.engines.memory_limit``)."""
    deadlines: dict = field(default_factory=dict)
    """(stage, kind, microbatch) -> latest end in seconds (``--deadline``)."""
    model: ModelInfo | dict = field(default_factory=dict)
    """Plan ``model`` part (name, num_layers, layout, layer_types); empty: the cost table's name."""
    cluster: ClusterInfo = field(default_factory=ClusterInfo)
    """Plan ``cluster`` section."""
    parallel: dict = field(default_factory=dict)
    """tp, ep, dp (pp and vpp come from the fields above)."""
    peak_flops: float | None = None
    """Per-GPU peak for MFU; None = MFU not reported (0)."""
    num_gpus: int | None = None
    """GPUs in the job (MFU denominator); default pp x dp x tp."""
    rank_devices: tuple[str, ...] = ()
    """Mixed fleets: the device group of each pipeline rank (``DeviceGroup.name``); empty: one GPU type."""
    rank_memory_bytes: tuple[int, ...] = ()
    """Mixed fleets: each pipeline rank's memory limit (its group's), under ``memory_limit_bytes``."""

    @property
    def recompute(self) -> str | None:
        """The recomputation mode the cost table was computed for (the cluster section's)."""
        return ClusterInfo.from_dict(self.cluster).settings.recompute


@dataclass
class Evaluation:
    """One (partition, schedule) simulated."""

    bounds: list[tuple[int, int]]
    ranks: list[int]
    schedule: Schedule
    costs: StageCosts
    sim: SimResult
    violations: list
    microbatches: int = 0
    """Microbatches per step (for the steady-state period)."""
    _steady: SteadyState | None = None

    @property
    def steady(self) -> SteadyState:
        """Steady-state timing of the schedule, computed on first use ([Note: steady state])."""
        if self._steady is None:
            self._steady = steady_state(self.schedule, self.costs, self.microbatches, compiled=self.sim.compiled)
        return self._steady

    def time_for(self, objective: str) -> float:
        """The step time ``objective`` minimises: the makespan or the steady-state period."""
        return self.steady.period_s if objective == "steady" else self.sim.step_time


@dataclass
class Trial:
    """The best partition found for one (microbatch count, schedule)."""

    table: CostTable
    req: PlanRequest
    name: str
    schedule: Schedule
    compiled: Compiled
    part: PartitionResult
    bounds: list[tuple[int, int]]
    step: float
    baselines: dict[str, tuple[list[tuple[int, int]], bool]]
    origin: str = "screen"
    """Where the partition came from: the method's solver (screen) or a baseline's label."""
    settled: bool = False
    """Whether ``schedule`` is already the best heuristic for ``bounds`` (joint refinement
    ended on it), so the polish goes straight to CP-SAT."""


def evaluate(table: CostTable, req: PlanRequest, bounds: list[tuple[int, int]],
             schedule: Schedule, *, meter: WorkMeter | None = None) -> Evaluation:
    """Stage costs, simulation and validation of one partition under one schedule: the
    validator's verdict with the request's memory limit ([Note: one memory rule] in
    ``solvers.schedule.engines.memory_limit``) and deadlines, as ``ppplan validate`` gives it.
    Both timings are charged to ``meter`` (the plan's ``WorkMeter``)."""
    ranks = stage_ranks(req.pp * req.vpp, req.pp, req.placement)
    sc = stage_costs(table, bounds, ranks)
    sim = simulate(schedule, sc, meter=meter)
    violations = validate(schedule, sc, num_microbatches=req.microbatches,
                          memory_limit_bytes=rank_limits_of(req, sc), deadlines=req.deadlines, meter=meter)
    return Evaluation(bounds, ranks, schedule, sc, sim, violations, req.microbatches)


def memory_limit_of(req: PlanRequest) -> MemoryLimit | None:
    """The request's limits as one ``MemoryLimit`` (None when there is none)."""
    if req.memory_limit_bytes is None and req.memory_limit_microbatches is None:
        return None
    return MemoryLimit(bytes=req.memory_limit_bytes, microbatches=req.memory_limit_microbatches,
                       rank_bytes=req.rank_memory_bytes)


def limit_bytes_of(req: PlanRequest, costs: StageCosts) -> int | None:
    """The request's limit as the validator checks it for ``costs`` (None: no limit)."""
    limit = memory_limit_of(req)
    return None if limit is None else limit.per_gpu_bytes(costs)


def rank_limits_of(req: PlanRequest, costs: StageCosts) -> int | list[int] | None:
    """The limit the validator checks: ``limit_bytes_of``, or one cap per rank on a mixed fleet."""
    limit = memory_limit_of(req)
    if limit is None or not limit.rank_bytes:
        return None if limit is None else limit.per_gpu_bytes(costs)
    return limit.per_rank_bytes(costs)


def simulate_bounds(table: CostTable, comp: Compiled, bounds, ranks: list[int], limit: MemoryLimit | None, *,
                    meter: WorkMeter | None = None) -> float:
    """Simulated step time of ``bounds`` under ``comp``, charged to ``meter``; infinite when over ``limit``."""
    sc = stage_costs(table, bounds, ranks)
    sim = simulate_compiled(comp, sc, detail=False, meter=meter)
    if limit is not None and not limit.fits(sc, sim.peak_memory_bytes):
        return float("inf")
    return sim.step_time


def pinned_of(t: Trial) -> frozenset[int]:
    roles = [lc.role for lc in t.table.layers]
    return frozenset(pinned_cuts(t.req.pins, roles, len(t.bounds))) if t.req.pins.any else frozenset()


